"""Calling Spark from threads of your own (``asyncio.to_thread``) without losing the data source.

Classic PySpark keeps the *active* session per JVM thread, and each Python
thread talks to a JVM thread of its own (PySpark's pinned-thread mode). The
JVM looks ``format("rvasync")`` up among the Python data sources of the
calling thread's active session; a fresh thread has none, so a write from it
fails with ``[DATA_SOURCE_NOT_FOUND] Failed to find the data source: rvasync``
(a ``SparkClassNotFoundException`` out of the JVM) although the main thread
writes fine. PySpark has no public call that makes a session active in a
thread: ``SparkSession.setActiveSession`` exists on the JVM side only, and
reaching it means PySpark's private ``_jvm`` and ``_jsparkSession``. Its
public ``createDataFrame`` makes its session the thread's active one before
anything else, so :func:`activate` creates an empty DataFrame (lazy: no job
runs; some tens of milliseconds, most of it the thread's first JVM call), and
:func:`to_thread` is ``asyncio.to_thread`` with that done first in the worker
thread. tests/test_spark_threads.py checks that a fresh thread then finds the
data source, so a PySpark release that changes this fails there.

Spark Connect sessions are not bound to JVM threads: for them both calls
only make the session the thread's default and active one through PySpark's
public ``inheritable_thread_target``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from rvasync.errors import InvalidArgument, RvError

__all__ = ["activate", "to_thread"]

_T = TypeVar("_T")


def _classic_session(spark: Any) -> Any | None:
    """``spark`` if it is a classic (JVM) session, None for Spark Connect; refuses anything else."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise InvalidArgument(
            "rvasync.spark.activate needs PySpark: pip install 'rvasync[spark]'"
        ) from None
    if isinstance(spark, SparkSession):
        return spark
    if _is_connect_session(spark):
        return None
    raise InvalidArgument(f"spark must be a pyspark SparkSession, got {type(spark).__name__}")


def _is_connect_session(spark: Any) -> bool:
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # PySpark without the Connect client's dependencies (grpc, pandas)
        return False
    return isinstance(spark, ConnectSession)


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling thread, so ``format("rvasync")`` resolves.

    Call it first in a thread you started yourself; :func:`to_thread` does
    it for you. Raises :class:`rvasync.RvError` when the session is stopped
    and ``InvalidArgument`` when ``spark`` is not a session.
    """
    session = _classic_session(spark)
    if session is None:
        from pyspark import inheritable_thread_target

        inheritable_thread_target(spark)(lambda: None)()
        return
    from pyspark.sql.types import StructType

    try:
        session.createDataFrame([], StructType([]))  # its first step: setActiveSession
    except (AttributeError, TypeError) as exc:  # what a stopped session's JVM handles give
        raise RvError(
            f"cannot make the Spark session active in this thread: it is stopped ({exc}); "
            "create a new one (SparkSession.builder...getOrCreate())"
        ) from None


async def to_thread(spark: Any, func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``await asyncio.to_thread(func, *args, **kwargs)`` with ``spark`` active in that thread.

    Blocking Spark calls (``writer.save()``, ``query.awaitTermination()``,
    ``df.collect()``) then run off the event loop, so transports keep
    delivering, and the data source is found whatever thread the executor
    hands out. The session is checked here, before the thread starts.
    """
    _classic_session(spark)

    def run() -> _T:
        activate(spark)
        return func(*args, **kwargs)

    return await asyncio.to_thread(run)
