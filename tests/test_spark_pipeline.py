"""What a data engineer meets reading captures in Spark: paths, identity, bad records, types.

The shared local[2] session (test_spark_support); captures are written with
the CaptureWriter directly, so each test says exactly what is in them.
"""

from __future__ import annotations

import shutil

import pytest
from test_spark_support import spark_fixture, spark_skip_reason, start_id_stream  # noqa: F401

if spark_skip_reason():
    pytest.skip(spark_skip_reason(), allow_module_level=True)

from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.rvdatetime import DateTime
from rvasync.spark import capture
from rvasync.spark.capture import CaptureWriter

pytestmark = pytest.mark.timeout(300)


def _columns(messages: list[Message | bytes]) -> list[list]:
    data = [m if isinstance(m, bytes) else m.to_bytes() for m in messages]
    return [
        ["IN.X"] * len(messages),
        [None] * len(messages),
        [None] * len(messages),
        [None] * len(messages),
        [1_700_000_000_000_000 + i for i in range(len(messages))],
        data,
        ["[]"] * len(messages),
    ]


def _write(directory, *files: list[Message | bytes]) -> None:
    with CaptureWriter(directory) as writer:
        for messages in files:
            writer.append(capture.rows_to_batch(_columns(messages)))
            writer.commit()


def _ids(n: int, start: int = 0) -> list[Message]:
    return [Message("IN.X", {"id": i}) for i in range(start, start + n)]


def _text(excinfo) -> str:
    return str(excinfo.value)


def test_lists_globs_and_file_urls_of_captures(spark, tmp_path):
    _write(tmp_path / "day-1", _ids(10))
    _write(tmp_path / "day-2", _ids(5, 10), _ids(5, 15))
    reader = spark.read.format("rvasync").option("fields", "id:I64")
    both = [str(tmp_path / "day-1"), f"file://{tmp_path}/day-2"]
    for df in (reader.load(both), reader.load(f"file://{tmp_path}/day-*")):
        assert [r["id"] for r in df.select("id").collect()] == list(range(20))
    with pytest.raises(Exception) as excinfo:
        reader.load(f"{tmp_path}/week-*").count()
    assert "matches no directory" in _text(excinfo)


def _stream(spark, source, out, checkpoint):
    query = start_id_stream(spark, source, out, checkpoint)
    try:
        query.awaitTermination(120)
    except Exception:  # a failed query raises here; its exception() tells why
        pass
    return query


def test_a_replaced_capture_behind_a_checkpoint_is_an_error_not_a_skip(spark, tmp_path):
    source, out, checkpoint = tmp_path / "capture", tmp_path / "out", tmp_path / "checkpoint"
    _write(source, _ids(10), _ids(10, 10))
    assert _stream(spark, source, out, checkpoint).exception() is None
    # Another capture in the same place, with more files than the checkpoint has read.
    shutil.rmtree(source)
    _write(source, _ids(10, 100), _ids(10, 110), _ids(10, 120))
    query = _stream(spark, source, out, checkpoint)
    assert query.exception() is not None
    assert "now holds capture" in str(query.exception())
    assert sorted(r["id"] for r in spark.read.parquet(str(out)).collect()) == list(range(20))
    # A fresh checkpoint reads the new capture from its first file.
    assert _stream(spark, source, tmp_path / "out2", tmp_path / "cp2").exception() is None
    got = sorted(r["id"] for r in spark.read.parquet(str(tmp_path / "out2")).collect())
    assert got == list(range(100, 130))


def _qty(i: int) -> Message:
    msg = Message("IN.X", {"id": i, "amount": i / 4, "symbol": f"S{i % 3}"})
    msg.add("qty", i, FieldType.U16 if i % 2 else FieldType.I32)
    return msg


def test_a_number_of_another_type_is_read_when_the_column_holds_it(spark, tmp_path):
    _write(tmp_path, [_qty(i) for i in range(30)])
    # docs/spark.md's first snippet.
    orders = spark.read.format("rvasync").option("fields", "id:I64, amount:F64, qty:I64, symbol")
    rows = orders.load(str(tmp_path)).select("id", "qty").collect()
    assert [(r["id"], r["qty"]) for r in rows] == [(i, i) for i in range(30)]
    # Without a type, U16 and I32 in the sample make the narrowest type holding both.
    inferred = spark.read.format("rvasync").option("fields", "qty").load(str(tmp_path))
    assert inferred.schema["qty"].metadata["rvasync.type"] == "I32"
    assert [r["qty"] for r in inferred.collect()] == list(range(30))
    # strictTypes: another type is a bad record; FAILFAST makes it fail the read.
    strict = (
        spark.read.format("rvasync")
        .option("fields", "qty:I64")
        .option("strictTypes", "true")
        .option("mode", "FAILFAST")
        .load(str(tmp_path))
    )
    with pytest.raises(Exception) as excinfo:
        strict.collect()
    assert "field 'qty' is I32, its column is I64" in _text(excinfo)


def _bad_capture(directory) -> None:
    good = Message("IN.X", {"id": 1})
    good.add("qty", 5, FieldType.I32)
    text = Message("IN.X", {"id": 2, "qty": "five"})
    year_minus_one = Message("IN.X", {"id": 3})
    year_minus_one.add("when", DateTime(-62_198_755_200, 0))
    _write(directory, [good, text, b"not a message", year_minus_one])


def test_bad_records_are_counted_shown_dropped_or_fatal_by_mode(spark, tmp_path):
    _bad_capture(tmp_path)
    reader = spark.read.format("rvasync").option("fields", "id:I64, qty:I32, when:DATETIME")
    permissive = reader.option("columnNameOfCorruptRecord", "_corrupt").load(str(tmp_path))
    rows = permissive.select("id", "qty", "when", "_corrupt").collect()  # year -1: no failure
    assert [(r["id"], r["qty"], r["when"]) for r in rows] == [
        (1, 5, None),
        (2, None, None),
        (None, None, None),
        (3, None, None),
    ]
    reasons = [r["_corrupt"] for r in rows]
    assert reasons[0] is None
    assert reasons[1] == "field 'qty' is STRING, its column is I32"
    assert reasons[2].startswith("undecodable message")
    assert "outside years 1..9999" in reasons[3]
    assert permissive.where("_corrupt IS NOT NULL").count() == 3
    dropped = reader.option("mode", "DROPMALFORMED").load(str(tmp_path))
    assert [r["id"] for r in dropped.collect()] == [1]
    with pytest.raises(Exception) as excinfo:
        reader.option("mode", "FAILFAST").load(str(tmp_path)).collect()
    assert "bad record in" in _text(excinfo) and "mode FAILFAST" in _text(excinfo)
    # Without fields, the corrupt-record column still finds what is not a message.
    plain = spark.read.format("rvasync").option("columns", "subject")
    flagged = plain.option("columnNameOfCorruptRecord", "bad").load(str(tmp_path))
    assert [r["bad"] is not None for r in flagged.collect()] == [False, False, True, False]


def test_a_batch_read_refuses_streaming_options(spark, tmp_path):
    _write(tmp_path, _ids(3))
    for option, value in (("startingOffsets", "latest"), ("maxFilesPerTrigger", "1")):
        with pytest.raises(Exception) as excinfo:
            spark.read.format("rvasync").option(option, value).load(str(tmp_path)).count()
        assert f"{option} only apply to streaming reads" in _text(excinfo)


def test_explain_shows_the_filters_the_source_took(spark, tmp_path):
    _write(tmp_path, _ids(3))
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = (
            spark.read.format("rvasync")
            .option("pushdown", "true")
            .load(str(tmp_path))
            .where("subject = 'IN.X' AND length(data) > 0")
        )
        # What df.explain("formatted") prints.
        jvm = spark.sparkContext._jvm
        plan = jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted")
        assert df.count() == 3
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    pushed = next(line for line in plan.splitlines() if "PushedFilters" in line)
    assert "EqualTo(subject,IN.X)" in pushed, plan


def test_a_fields_entry_is_a_name_a_type_and_a_column_or_refused():
    import rvasync as rv
    from rvasync.spark.options import FieldSpec, parse_fields

    assert parse_fields("qty:I32 AS q, amount") == [
        FieldSpec("qty", FieldType.I32, "q"),
        FieldSpec("amount", None, "amount"),
    ]
    for bad in ("amount as", "amount as x y", "my field", "qty:"):
        with pytest.raises(rv.InvalidArgument, match="option fields: entry"):
            parse_fields(bad)
