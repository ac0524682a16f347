"""Writing DataFrames with format('rvasync'): rows become messages through a standalone daemon."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
from decimal import Decimal

import pytest
from test_spark_support import spark_fixture, spark_skip_reason  # noqa: F401

if spark_skip_reason():
    pytest.skip(spark_skip_reason(), allow_module_level=True)

from pyspark.sql import types as T

from rvasync.fieldtypes import FieldType
from rvasync.queues import Queue
from rvasync.rvdatetime import DateTime
from rvasync.spark import to_thread
from rvasync.testing import free_port

TIMEOUT = 60

SCHEMA = T.StructType(
    [
        T.StructField("subject", T.StringType()),
        T.StructField("id", T.LongType()),
        T.StructField("qty", T.ShortType(), True, {"rvasync.type": "U8"}),
        T.StructField("lot", T.IntegerType()),
        T.StructField("price", T.DoubleType()),
        T.StructField("weight", T.FloatType()),
        T.StructField("symbol", T.StringType()),
        T.StructField("urgent", T.BooleanType()),
        T.StructField("raw", T.BinaryType()),
        T.StructField("placed", T.TimestampType()),
        T.StructField("day", T.DateType()),
        T.StructField("account", T.DecimalType(20, 0)),
        T.StructField("gateway", T.StringType()),
        T.StructField("levels", T.ArrayType(T.IntegerType())),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField(
            "detail",
            T.StructType([T.StructField("note", T.StringType()), T.StructField("n", T.LongType())]),
        ),
    ]
)
PLACED = dt.datetime(2024, 5, 17, 9, 30, 15, 123456, tzinfo=dt.UTC)


def _rows(count: int) -> list[tuple]:
    return [
        (
            f"OUT.{('EU', 'US')[i % 2]}",
            i,
            i % 250,
            -i,
            i / 4,
            0.5,
            None if i == 3 else f"S{i}",  # a null column: no field at all
            i % 2 == 0,
            bytes([i % 256, 1]),
            PLACED,
            dt.date(2024, 5, 17),
            Decimal(2**64 - 1 - i),
            "10.1.2.3",
            [i, 2],
            ["x", f"y{i}"],
            ("nested", i),
        )
        for i in range(count)
    ]


async def _listening(service: str, daemon: str, subject: str):
    from rvasync.transport.network import Transport

    transport = await Transport(service, None, daemon).open()
    queue = Queue()
    transport.listen(subject, queue=queue)
    await transport.link.ping()  # the daemon has the interest before anything is written
    return transport, queue


async def _in_thread(spark, call, *args):
    """Run a blocking Spark call off the event loop (the listener keeps receiving)."""
    return await to_thread(spark, call, *args)


async def _collect(queue: Queue, count: int) -> list:
    received = []
    async with asyncio.timeout(TIMEOUT):
        while len(received) < count:
            received.append(await queue.get())
    return received


async def test_a_dataframe_write_is_received_with_subjects_fields_and_types(spark, rv_daemon):
    service = str(free_port())
    transport, queue = await _listening(service, rv_daemon, "OUT.>")
    try:
        rows = _rows(20)
        df = spark.createDataFrame(rows, SCHEMA).repartition(2)
        writer = (
            df.write.format("rvasync")
            .mode("append")
            .option("daemon", rv_daemon)
            .option("service", service)
            .option("fieldTypes", "gateway:IPADDR32, lot:I16")
        )
        await _in_thread(spark, writer.save)
        received = await _collect(queue, len(rows))
    finally:
        await transport.close()
    by_id = {msg["id"]: msg for msg in received}
    assert sorted(by_id) == list(range(len(rows)))
    assert len({msg["rvasync_row"] for msg in received}) == len(rows)
    for i, msg in by_id.items():
        assert msg.subject == f"OUT.{('EU', 'US')[i % 2]}"
        types = {field.name: field.type for field in msg}
        assert types == {
            "id": FieldType.I64,
            "qty": FieldType.U8,  # from the column metadata
            "lot": FieldType.I16,  # from option fieldTypes
            "price": FieldType.F64,
            "weight": FieldType.F32,
            **({} if i == 3 else {"symbol": FieldType.STRING}),
            "urgent": FieldType.BOOL,
            "raw": FieldType.OPAQUE,
            "placed": FieldType.DATETIME,
            "day": FieldType.DATETIME,
            "account": FieldType.U64,
            "gateway": FieldType.IPADDR32,
            "levels": FieldType.I32ARRAY,
            "tags": FieldType.STRINGARRAY,
            "detail": FieldType.MSG,
            "rvasync_row": FieldType.STRING,  # names the row, the same in a retried task
        }
        assert "subject" not in msg
        assert msg["qty"] == i % 250 and msg["lot"] == -i and msg["price"] == i / 4
        assert msg["weight"] == 0.5 and msg["urgent"] is (i % 2 == 0)
        assert msg["raw"] == bytes([i % 256, 1])
        assert msg["placed"] == DateTime.from_datetime(PLACED)
        assert msg["day"] == DateTime.from_datetime(dt.datetime(2024, 5, 17, tzinfo=dt.UTC))
        assert msg["account"] == 2**64 - 1 - i
        assert msg["gateway"] == ipaddress.IPv4Address("10.1.2.3")
        assert msg["levels"] == [i, 2] and msg["tags"] == ["x", f"y{i}"]
        assert msg["detail"]["note"] == "nested" and msg["detail"]["n"] == i


async def test_a_streaming_write_publishes_each_micro_batch(spark, rv_daemon, tmp_path):
    service = str(free_port())
    transport, queue = await _listening(service, rv_daemon, "TOTALS")
    try:
        source = tmp_path / "in"
        spark.createDataFrame(
            [(i, float(i)) for i in range(30)], "n long, amount double"
        ).write.json(str(source))
        stream = (
            spark.readStream.schema("n long, amount double")
            .json(str(source))
            .writeStream.format("rvasync")
            .option("daemon", rv_daemon)
            .option("service", service)
            .option("subject", "TOTALS")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        finished = await _in_thread(spark, stream.awaitTermination, TIMEOUT)
        assert finished and stream.exception() is None
        received = await _collect(queue, 30)
    finally:
        await transport.close()
    assert sorted(msg["n"] for msg in received) == list(range(30))
    assert all(
        msg.subject == "TOTALS" and msg.field("amount").type is FieldType.F64 for msg in received
    )


@pytest.mark.parametrize(
    ("options", "schema", "expected"),
    [
        ({"subjet": "X"}, "subject string, a long", "unknown option 'subjet'"),
        ({}, "subject string, a long", "option daemon is required"),
        ({"daemon": "nohost"}, "subject string, a long", "option daemon must be"),
        ({"daemon": "DAEMON"}, "a long", "no subject"),
        ({"daemon": "DAEMON", "subject": "A"}, "subject string, a long", "both option subject"),
        ({"daemon": "DAEMON", "subject": "_RV.X"}, "a long", "option subject"),
        ({"daemon": "DAEMON", "subject": "A"}, "m map<string,int>", "column 'm'"),
        ({"daemon": "DAEMON", "subject": "A"}, "_hidden long", "reserved"),
        ({"daemon": "DAEMON", "subject": "A"}, "d decimal(10,2)", "decimal(10,2)"),
        ({"daemon": "DAEMON", "subject": "A", "fieldTypes": "a:STRING"}, "a long", "cannot carry"),
        ({"daemon": "DAEMON", "subject": "A", "fieldTypes": "b:I8"}, "a long", "fieldTypes names"),
        ({"daemon": "UNREACHABLE", "subject": "A"}, "a long", "no rvasync daemon reachable"),
        ({"daemon": "DAEMON", "subject": "A", "cm_timeout": "5"}, "a long", "needs option cm_name"),
        ({"daemon": "DAEMON", "subject": "A", "cm_name": "a..b"}, "a long", "option cm_name"),
    ],
)
def test_bad_write_input_fails_at_job_start(spark, options, schema, expected):
    unreachable = f"127.0.0.1:{free_port()}"
    writer = spark.createDataFrame([], schema).write.format("rvasync").mode("append")
    for key, value in options.items():
        value = {"DAEMON": "127.0.0.1:1", "UNREACHABLE": unreachable}.get(value, value)
        writer = writer.option(key, value)
    with pytest.raises(Exception) as excinfo:
        writer.save()
    assert expected in str(excinfo.value)


def test_overwrite_is_refused(spark):
    writer = spark.createDataFrame([(1,)], "a long").write.format("rvasync").mode("overwrite")
    with pytest.raises(Exception, match="cannot overwrite"):
        writer.option("daemon", "127.0.0.1:1").option("subject", "A").save()


async def test_a_certified_write_returns_once_listeners_confirmed(spark, rv_daemon):
    from rvasync.cmdriver import CmTransport
    from rvasync.transport.network import Transport

    service = str(free_port())
    async with (
        Transport(service, None, rv_daemon) as transport,
        CmTransport(transport, "STATS.SINK", require_old=True) as cm,
    ):
        listener = cm.listen("CERT.OUT")
        await transport.link.ping()
        df = spark.createDataFrame([(i,) for i in range(12)], "n long").repartition(2)
        writer = (
            df.write.format("rvasync")
            .mode("append")
            .option("daemon", rv_daemon)
            .option("service", service)
            .option("subject", "CERT.OUT")
            .option("cm_name", "SPARK.OUT")
            .option("cm_listeners", "STATS.SINK")
            .option("cm_timeout", "10")
        )
        write = asyncio.ensure_future(_in_thread(spark, writer.save))
        received = []
        async with asyncio.timeout(90):
            async for msg in listener:  # taking a message confirms it
                received.append(msg)
                if len(received) == 12:
                    break
            await write  # returns only after the confirmations
    assert sorted(msg["n"] for msg in received) == list(range(12))
    for msg in received:
        assert msg.cm is not None and msg.cm.sequence is not None
        assert msg.cm.sender.startswith("SPARK.OUT.")
    assert len({msg.cm.sender for msg in received}) == 2  # one correspondent per task


def test_a_certified_write_fails_when_a_listener_never_confirms(spark, rv_daemon):
    writer = (
        spark.createDataFrame([(1,)], "n long")
        .write.format("rvasync")
        .mode("append")
        .option("daemon", rv_daemon)
        .option("service", str(free_port()))
        .option("subject", "CERT.NOBODY")
        .option("cm_name", "SPARK.OUT")
        .option("cm_listeners", "NOT.RUNNING")
        .option("cm_timeout", "1")
    )
    with pytest.raises(Exception, match="not confirmed within cm_timeout=1"):
        writer.save()


# -- a retried task: the same row identities, and certified rows exactly once ----------------

RETRIED = 40


def _failing_attempt(count: int, fail_at: int):
    for i in range(count):
        if i == fail_at:
            raise RuntimeError("the attempt's executor died")
        yield (i,)


def _retry_publisher(daemon: str, service: str, subject: str, **options: str):
    from rvasync.spark.options import WriteOptions
    from rvasync.spark.publish import RowPublisher

    parsed = WriteOptions.parse(
        {"daemon": daemon, "service": service, "subject": subject, **options}
    )
    return RowPublisher(parsed, T.StructType([T.StructField("n", T.LongType())]))


async def _attempts(publisher, count: int, fail_at: int) -> None:
    """Attempt 0 fails at row ``fail_at``; attempt 1 publishes the whole partition."""
    from rvasync.spark.publish import TaskIdentity

    task = TaskIdentity(publisher.write_id, 3)
    with pytest.raises(RuntimeError, match="executor died"):
        attempt = _failing_attempt(count, fail_at)
        await asyncio.to_thread(publisher.publish, attempt, task)
    await asyncio.to_thread(publisher.publish, [(i,) for i in range(count)], task)


async def test_a_retried_task_names_its_rows_as_the_failed_attempt_did(rv_daemon):
    service = str(free_port())
    transport, queue = await _listening(service, rv_daemon, "RETRY.PLAIN")
    try:
        # Rows go out 256 at a time: the failed attempt sent its first 256.
        await _attempts(_retry_publisher(rv_daemon, service, "RETRY.PLAIN"), 300, 280)
        received = await _collect(queue, 300 + 256)
    finally:
        await transport.close()
    # At least once: the failed attempt's rows arrived twice, under the same identity.
    by_row: dict[str, set[int]] = {}
    for msg in received:
        by_row.setdefault(msg["rvasync_row"], set()).add(msg["n"])
    assert len(by_row) == 300
    assert all(len(ns) == 1 for ns in by_row.values())
    assert sorted(n for ns in by_row.values() for n in ns) == list(range(300))


async def _certified_attempts(publisher) -> None:
    """Attempt 0 publishes 25 rows, which are confirmed, and then its executor dies
    before Spark hears of its success; attempt 1 publishes the whole partition."""
    from rvasync.spark.publish import TaskIdentity

    task = TaskIdentity(publisher.write_id, 3)
    await asyncio.to_thread(publisher.publish, [(i,) for i in range(25)], task)
    await asyncio.to_thread(publisher.publish, [(i,) for i in range(RETRIED)], task)


async def test_a_retried_certified_task_delivers_each_row_once(rv_daemon):
    from rvasync.cmdriver import CmTransport
    from rvasync.transport.network import Transport

    service = str(free_port())
    async with (
        Transport(service, None, rv_daemon) as transport,
        CmTransport(transport, "RETRY.SINK", require_old=True) as cm,
    ):
        messages = aiter(cm.listen("RETRY.CERT"))
        await transport.link.ping()
        publisher = _retry_publisher(
            rv_daemon, service, "RETRY.CERT",
            cm_name="SPARK.OUT", cm_listeners="RETRY.SINK", cm_timeout="20",
        )  # fmt: skip
        attempts = asyncio.ensure_future(_certified_attempts(publisher))
        received = []
        extra = None
        try:
            async with asyncio.timeout(TIMEOUT):
                while len(received) < RETRIED:
                    received.append(await anext(messages))  # taking one confirms the last
                # Waiting for one more confirms the last; a row delivered twice would come.
                extra = asyncio.ensure_future(anext(messages))
                await attempts  # the retry returns once its messages are confirmed
            done, _ = await asyncio.wait([extra], timeout=1.0)
            assert not done, f"a row was delivered twice: {extra.result()}"
        finally:
            attempts.cancel()
            if extra is not None:
                extra.cancel()
    assert [msg["n"] for msg in received] == list(range(RETRIED))
    # The first 25 came from the failed attempt, the rest from the retry: one name.
    assert {msg.cm.sender for msg in received} == {f"SPARK.OUT.{publisher.write_id}.p3"}
