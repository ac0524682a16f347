"""Spark calls from threads of one's own: rvasync.spark.to_thread and activate.

A fresh thread has no active Spark session on the JVM side, and the JVM finds
``format("rvasync")`` only through it: a write from such a thread fails with
DATA_SOURCE_NOT_FOUND. Each test runs its thread on an executor of its own, so
no earlier test's activation (which lasts for the thread) can hide that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest
from test_spark_support import spark_fixture, spark_skip_reason  # noqa: F401

if spark_skip_reason():
    pytest.skip(spark_skip_reason(), allow_module_level=True)

import rvasync as rv
from rvasync.queues import Queue
from rvasync.spark import activate, to_thread
from rvasync.testing import free_port

TIMEOUT = 100  # a write starts Python workers: slow on a loaded machine


@pytest.fixture
async def fresh_threads():
    """The running loop's default executor for this test only: its threads are new."""
    executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fresh")
    asyncio.get_running_loop().set_default_executor(executor)
    yield executor
    executor.shutdown(wait=True)


def _writer(spark, daemon: str, service: str, count: int):
    df = spark.createDataFrame([(f"THREAD.{i}", i) for i in range(count)], "subject string, n long")
    return (
        df.write.format("rvasync")
        .mode("append")
        .option("daemon", daemon)
        .option("service", service)
    )


async def test_a_write_from_a_fresh_thread_needs_the_session_active(spark, fresh_threads):
    """What the helper is for: the plain asyncio.to_thread write fails in the JVM."""
    writer = _writer(spark, "127.0.0.1:1", str(free_port()), 1)
    with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
        await asyncio.wait_for(asyncio.to_thread(writer.save), TIMEOUT)


async def test_to_thread_writes_from_a_fresh_thread(spark, rv_daemon, fresh_threads):
    service = str(free_port())
    async with rv.Transport(service, None, rv_daemon) as transport:
        queue = Queue()
        transport.listen("THREAD.>", queue=queue)
        await transport.link.ping()  # the daemon has the interest before anything is written
        threads: list[str] = []

        def save(writer) -> str:
            threads.append(threading.current_thread().name)
            writer.save()
            return "saved"

        result = await asyncio.wait_for(
            to_thread(spark, save, _writer(spark, rv_daemon, service, 5)), TIMEOUT
        )
        async with asyncio.timeout(TIMEOUT):
            received = sorted([(await queue.get())["n"] for _ in range(5)])
    assert result == "saved" and received == [0, 1, 2, 3, 4]
    assert threads and threads[0].startswith("fresh")


async def test_activate_in_a_thread_of_ones_own(spark, fresh_threads):
    """After activate(spark) the data source is found (the write then fails on the dead daemon)."""
    writer = _writer(spark, "127.0.0.1:1", str(free_port()), 1)

    def save() -> None:
        activate(spark)
        writer.save()

    with pytest.raises(Exception) as caught:
        await asyncio.wait_for(asyncio.to_thread(save), TIMEOUT)
    assert "DATA_SOURCE_NOT_FOUND" not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)


async def test_bad_sessions_are_refused_clearly():
    with pytest.raises(rv.InvalidArgument, match="spark must be a pyspark SparkSession, got str"):
        await to_thread("spark", print)
    with pytest.raises(rv.InvalidArgument, match="got NoneType"):
        activate(None)
