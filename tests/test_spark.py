"""The rvasync Spark data source: batch and streaming reads of captures, UDFs, bad input.

Spark runs in local[2] with one session for the whole test run (starting a
JVM costs seconds); the tests skip with the reason when PySpark or Java is
missing. Captures are recorded through the real Recorder over the process
transport, so what Spark reads is what a recorder writes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import shutil
from decimal import Decimal

import pytest
from test_spark_support import spark_fixture, spark_skip_reason  # noqa: F401

if spark_skip_reason():
    pytest.skip(spark_skip_reason(), allow_module_level=True)

from pyspark.sql import types as T

from rvasync.fieldtypes import FieldType
from rvasync.jsonform import from_jsonable
from rvasync.message import Message
from rvasync.rvdatetime import DateTime
from rvasync.spark import capture, decode_fields_udf, field_udf
from rvasync.spark.capture import CaptureWriter, committed_files
from rvasync.spark.recorder import Recorder
from rvasync.transport.process import process_transport

COUNT = 120


def order(i: int) -> Message:
    msg = Message(f"ORDERS.{('EU', 'US', 'ASIA')[i % 3]}.NEW")
    if i % 4 == 0:
        msg.reply_subject = f"_INBOX.client.{i}"
    msg.add("id", i)
    msg.add("qty", i % 250, FieldType.U8)
    msg.add("lot", i * 7, FieldType.I16)
    msg.add("account", 2**40 + i, FieldType.U64)
    msg.add("price", 10.0 + i / 8)
    msg.add("weight", 0.5, FieldType.F32)
    msg.add("symbol", f"SYM{i % 5}")
    msg.add("urgent", i % 2 == 0)
    msg.add("raw", bytes([i % 256, 0, 255]))
    msg.add("placed", DateTime(1_700_000_000 + i, 123_456))
    msg.add("gateway", ipaddress.IPv4Address(f"10.0.0.{i % 200}"))
    msg.add("levels", [i, -i, 3], FieldType.I32ARRAY)
    msg.add("tags", ["a", f"t{i}"])
    msg.add("detail", Message(fields={"note": "nested"}))
    return msg


async def _record(directory, messages, **kwargs) -> None:
    transport = process_transport()
    try:
        async with Recorder(transport, "ORDERS.>", directory, **kwargs) as recorder:
            for msg in messages:
                await transport.send(msg)
            async with asyncio.timeout(10):
                while recorder.stats.received < len(messages):
                    await asyncio.sleep(0.01)
    finally:
        transport._shutdown()


@pytest.fixture(scope="module")
def orders_capture(tmp_path_factory):
    directory = tmp_path_factory.mktemp("orders")
    sent = [order(i) for i in range(COUNT)]
    # Several files so reads span files and partitions.
    asyncio.run(_record(directory, sent, roll_bytes=8000, batch_rows=16))
    assert capture.read_marker(directory).committed > 1
    return directory, sent


PROJECTED = (
    "id, qty, lot, account, price, weight, symbol, urgent, raw, placed, gateway, levels, tags"
)
EXPECTED_TYPES = {
    "id": T.LongType(),
    "qty": T.ShortType(),
    "lot": T.ShortType(),
    "account": T.DecimalType(20, 0),
    "price": T.DoubleType(),
    "weight": T.FloatType(),
    "symbol": T.StringType(),
    "urgent": T.BooleanType(),
    "raw": T.BinaryType(),
    "placed": T.TimestampType(),
    "gateway": T.StringType(),
    "levels": T.ArrayType(T.IntegerType(), False),
    "tags": T.ArrayType(T.StringType(), False),
}


def _column_value(msg: Message, name: str):
    field = msg.field(name)
    value = field.value
    if field.type is FieldType.U64:
        return Decimal(value)
    if field.type is FieldType.DATETIME:
        return value.to_datetime()
    if field.type is FieldType.IPADDR32:
        return str(value)
    return value


def test_batch_read_matches_what_was_published(spark, orders_capture):
    directory, sent = orders_capture
    df = spark.read.format("rvasync").option("fields", PROJECTED).load(str(directory))
    schema = {f.name: f for f in df.schema.fields}
    assert list(schema)[:7] == list(capture.CAPTURE_COLUMNS)
    assert schema["sequence"].dataType == T.LongType()
    assert schema["received_at"].dataType == T.TimestampType()
    assert schema["data"].dataType == T.BinaryType()
    for name, dtype in EXPECTED_TYPES.items():
        assert schema[name].dataType == dtype, name
        assert schema[name].metadata["rvasync.type"] == order(0).field(name).type.name
    rows = df.collect()
    assert len(rows) == COUNT
    by_id = {row["id"]: row for row in rows}
    assert sorted(by_id) == list(range(COUNT))
    for msg in sent:
        row = by_id[msg["id"]]
        assert row["subject"] == msg.subject
        assert row["reply_subject"] == msg.reply_subject
        assert row["sender"] is None and row["sequence"] is None
        decoded = Message.from_bytes(bytes(row["data"]))
        assert decoded == msg
        assert [f.type for f in decoded] == [f.type for f in msg]
        form = {"subject": msg.subject, "fields": json.loads(row["fields"])}
        rebuilt = from_jsonable(form)
        rebuilt.reply_subject = msg.reply_subject
        assert rebuilt == msg
        for name in EXPECTED_TYPES:
            expected = _column_value(msg, name)
            got = row[name]
            if name == "placed":
                assert got.replace(tzinfo=None) == _local_naive(expected), name
            elif name == "raw":
                assert bytes(got) == expected
            else:
                assert got == expected, name


def _local_naive(value):
    # PySpark collects timestamps as naive local time.
    return value.astimezone().replace(tzinfo=None)


def test_projection_with_explicit_types_and_aliases(spark, orders_capture):
    directory, _ = orders_capture
    df = (
        spark.read.format("rvasync")
        .option("fields", "price:F64 as px, qty:U8, missing:I32, symbol:I64 as wrong_type")
        .load(str(directory))
    )
    assert df.schema["px"].dataType == T.DoubleType()
    assert df.schema["missing"].dataType == T.IntegerType()
    totals = df.selectExpr(
        "count(*) AS n", "sum(px) AS px", "count(missing) AS missing", "count(wrong_type) AS wt"
    ).first()
    assert totals["n"] == COUNT
    assert totals["px"] == pytest.approx(sum(10.0 + i / 8 for i in range(COUNT)))
    # Absent fields, and fields of another type, are null.
    assert totals["missing"] == 0 and totals["wt"] == 0


def _error_text(excinfo) -> str:
    return str(excinfo.value)


@pytest.mark.parametrize(
    ("options", "path_kind", "expected"),
    [
        ({"feilds": "id"}, "capture", "unknown option 'feilds'"),
        ({}, "missing", "does not exist"),
        ({}, "file", "is not a directory"),
        ({"fields": "detail"}, "capture", "type MSG has no Spark column type"),
        ({"fields": "id:NUMBER"}, "capture", "'NUMBER' is not a field type"),
        ({"fields": "nowhere"}, "capture", "field 'nowhere' does not occur"),
        ({"fields": "subject:STRING"}, "capture", "would hide the capture column"),
        ({"startingOffsets": "middle"}, "capture", "option startingOffsets"),
        ({"sampleRows": "0"}, "capture", "option sampleRows"),
        ({"columns": "data, payload"}, "capture", "'payload' is not a capture column"),
        ({"columns": " , "}, "capture", "option columns is empty"),
        ({"columns": "data,data"}, "capture", "option columns names data twice"),
    ],
)
def test_bad_read_input_fails_when_the_dataframe_is_defined(
    spark, orders_capture, tmp_path, options, path_kind, expected
):
    directory, _ = orders_capture
    path = {
        "capture": directory,
        "missing": tmp_path / "no-such-dir",
        "file": tmp_path / "plain-file",
    }[path_kind]
    if path_kind == "file":
        path.write_text("x")
    reader = spark.read.format("rvasync")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as excinfo:
        reader.load(str(path))
    assert expected in _error_text(excinfo)


def test_columns_option_keeps_only_the_named_capture_columns(spark, orders_capture):
    directory, sent = orders_capture
    df = (
        spark.read.format("rvasync")
        .option("columns", "received_at, subject")
        .option("fields", "id, price")
        .load(str(directory))
    )
    assert df.columns == ["received_at", "subject", "id", "price"]
    full = spark.read.format("rvasync").option("fields", "id").load(str(directory))
    expected = {row["id"]: row for row in full.select("id", "received_at", "subject").collect()}
    rows = df.collect()
    assert len(rows) == COUNT
    for row in rows:
        msg = sent[row["id"]]
        assert row["subject"] == msg.subject
        assert row["price"] == msg["price"]
        assert row["received_at"] == expected[row["id"]]["received_at"]
    # Fields alone: the data column is decoded but not returned.
    only_fields = spark.read.format("rvasync").option("columns", "sequence")
    only_fields = only_fields.option("fields", "qty").load(str(directory))
    assert only_fields.columns == ["sequence", "qty"]
    assert sorted(r["qty"] for r in only_fields.collect()) == sorted(m["qty"] for m in sent)


def test_pruned_read_filters_on_columns_it_does_not_return(orders_capture):
    """A pushed-down predicate on a column left out of the read still selects rows."""
    from rvasync.spark.pushdown import Predicate
    from rvasync.spark.scan import FilePart, read_part

    directory, sent = orders_capture
    schema = T.StructType([T.StructField("data", T.BinaryType())])
    predicate = Predicate("subject", "eq", "ORDERS.US.NEW")
    got = []
    for ref in capture.snapshot(directory):
        with ref.open() as opened:
            groups = tuple(range(opened.metadata.num_row_groups))
        part = FilePart(ref, groups, (predicate,))
        for batch in read_part(part, schema):
            assert batch.schema.names == ["data"]
            got.extend(Message.from_bytes(data) for data in batch.column(0).to_pylist())
    assert sorted(m["id"] for m in got) == [m["id"] for m in sent if m.subject == "ORDERS.US.NEW"]


def test_a_schema_with_a_capture_column_of_another_type_is_refused(spark, orders_capture):
    directory, _ = orders_capture
    df = spark.read.format("rvasync").schema("subject string, data string").load(str(directory))
    with pytest.raises(Exception) as excinfo:
        df.count()
    assert "column 'data' has type string" in _error_text(excinfo)


def test_damaged_files_before_and_after_the_committed_offset(spark, orders_capture, tmp_path):
    source, _ = orders_capture
    directory = tmp_path / "copy"
    shutil.copytree(source, directory)
    committed = capture.read_marker(directory).committed
    # Past the offset: a torn file is skipped (with a warning), the read succeeds.
    capture.file_path(directory, committed + 1).write_bytes(b"PAR1 torn")
    (directory / f".part-{committed + 2:010d}.parquet.inprogress").write_bytes(b"PAR1")
    assert spark.read.format("rvasync").load(str(directory)).count() == COUNT
    # Before it: the job fails at its start, naming the file.
    damaged = capture.file_path(directory, 1)
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    df = spark.read.format("rvasync").load(str(directory))
    with pytest.raises(Exception) as excinfo:
        df.count()
    assert "part-0000000001.parquet" in _error_text(excinfo)
    assert "is damaged: it has" in _error_text(excinfo)


def test_empty_capture_reads_as_an_empty_dataframe(spark, tmp_path):
    with CaptureWriter(tmp_path):
        pass
    df = spark.read.format("rvasync").load(str(tmp_path))
    assert df.count() == 0
    assert df.columns == list(capture.CAPTURE_COLUMNS)


def test_udfs_decode_a_capture_read_without_the_rvasync_source(spark, orders_capture):
    directory, sent = orders_capture
    # Spark's own Parquet reader: what a cluster without rvasync on the driver would do.
    raw = spark.read.parquet(*[str(p) for p in committed_files(directory)])
    decoded = raw.select(
        "fields",
        decode_fields_udf()("data").alias("plain"),
        decode_fields_udf(vectorized=True)("data").alias("vectorized"),
        field_udf("price", "F64")("data").alias("price"),
        field_udf("account", "U64")("data").alias("account"),
        field_udf("placed", "DATETIME")("data").alias("placed"),
    ).collect()
    assert len(decoded) == COUNT
    for row in decoded:
        assert row["plain"] == row["fields"] == row["vectorized"]
    by_price = {row["price"]: row for row in decoded}
    for msg in sent:
        row = by_price[msg["price"]]
        assert row["account"] == Decimal(msg["account"])
        assert row["placed"] == _local_naive(msg["placed"].to_datetime())


# -- streaming ------------------------------------------------------------------------------


def _append_file(writer: CaptureWriter, ids: range) -> None:
    messages = [Message("STREAM.IN", {"id": i, "amount": float(i)}) for i in ids]
    writer.append(
        capture.rows_to_batch(
            [
                [m.subject for m in messages],
                [None] * len(messages),
                [None] * len(messages),
                [None] * len(messages),
                [1_700_000_000_000_000 + i for i in ids],
                [m.to_bytes() for m in messages],
                [capture.fields_json(m) for m in messages],
            ]
        )
    )
    writer.commit()


def _run_available_now(spark, source, out, checkpoint, **options):
    reader = spark.readStream.format("rvasync").option("fields", "id:I64, amount:F64")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(str(source))
        .select("subject", "id", "amount")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90), "streaming query did not finish"
    assert query.exception() is None
    return query


def test_streaming_sees_every_message_exactly_once_across_a_restart(spark, tmp_path):
    source, out, checkpoint = tmp_path / "capture", tmp_path / "out", tmp_path / "checkpoint"
    writer = CaptureWriter(source).open()
    try:
        _append_file(writer, range(0, 40))
        _append_file(writer, range(40, 90))
        _run_available_now(spark, source, out, checkpoint)
        first = sorted(r["id"] for r in spark.read.parquet(str(out)).collect())
        assert first == list(range(90))
        # The capture grows while the query is down; an in-progress file is never read.
        _append_file(writer, range(90, 100))
        _append_file(writer, range(100, 160))
        writer.append(capture.rows_to_batch([["X"], [None], [None], [None], [0], [b""], ["[]"]]))
        query = _run_available_now(spark, source, out, checkpoint, maxFilesPerTrigger="1")
        ids = [r["id"] for r in spark.read.parquet(str(out)).collect()]
        assert sorted(ids) == list(range(160)), "a message was lost or read twice"
        # maxFilesPerTrigger=1: the two new files came as two micro-batches.
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert [p["numInputRows"] for p in batches] == [10, 60]
    finally:
        writer.close()


def test_projection_takes_the_first_field_of_a_name_and_converts_only_exactly():
    """As Message.field: the first field called the name decides; repeats are ignored. A
    number of another type converts when the column holds it exactly; anything else is a
    bad record, with the reason (strictTypes: any other type is)."""
    import pyarrow as pa

    from rvasync.spark.project import Projection

    twice = Message("A")
    twice.add("x", 7, FieldType.I32)
    twice.add("x", 2.5, FieldType.F64)
    twice.add("when", DateTime(1_700_000_000, 5))
    twice.add("levels", [1, 2], FieldType.I32ARRAY)
    other = Message("B")
    other.add("x", 1.5, FieldType.F64)
    data = pa.array([twice.to_bytes(), other.to_bytes(), b"garbage"], pa.binary())
    fields = [
        ("x", FieldType.I32),
        ("x", FieldType.F64),
        ("when", FieldType.DATETIME),
        ("levels", FieldType.I64ARRAY),
        ("none", FieldType.STRING),
    ]
    types = [
        pa.int32(),
        pa.float64(),
        pa.timestamp("us", tz="UTC"),
        pa.list_(pa.int64()),
        pa.string(),
    ]
    arrays, bad = Projection(fields, types)(data)
    columns = [column.to_pylist() for column in arrays]
    assert columns[0] == [7, None, None]
    assert columns[1] == [7.0, 1.5, None]
    assert [v and v.timestamp() for v in columns[2]] == [1_700_000_000.000005, None, None]
    assert columns[3] == [[1, 2], None, None]
    assert columns[4] == [None, None, None]
    assert sorted(bad) == [1, 2]
    assert bad[1] == "field 'x' is F64, its column is I32"
    assert bad[2].startswith("undecodable message")
    strict_arrays, strict_bad = Projection(fields, types, strict=True)(data)
    assert strict_arrays[1].to_pylist() == [None, 1.5, None]
    assert strict_arrays[3].to_pylist() == [None, None, None]
    assert "field 'x' is I32, its column is F64" in strict_bad[0]
