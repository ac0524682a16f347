"""Damaged and changing capture directories, and failing daemons, under the rvasync source.

What a reader may meet on a real cluster: a torn last file, a file written
by a newer rvasync, files deleted while a stream runs, and a daemon that
goes away while executors publish. Each gives a clear error naming the
file or daemon (or, for files past the committed offset, a skip with a
warning), never wrong rows.
"""

from __future__ import annotations

import dataclasses
import socket
import threading

import pyarrow.parquet as pq
import pytest
from test_spark_support import spark_fixture, spark_skip_reason, start_id_stream  # noqa: F401

if spark_skip_reason():
    pytest.skip(spark_skip_reason(), allow_module_level=True)

from pyspark.sql import types as T

from rvasync.errors import DaemonUnavailable
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.spark import capture, publish
from rvasync.spark.capture import CaptureWriter
from rvasync.spark.options import WriteOptions
from rvasync.spark.publish import RowPublisher

# Streams start several micro-batches each: slow on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(300)


def _columns(messages: list[Message]) -> list[list]:
    return [
        [m.subject for m in messages],
        [None] * len(messages),
        [None] * len(messages),
        [None] * len(messages),
        [1_700_000_000_000_000 + i for i in range(len(messages))],
        [m.to_bytes() for m in messages],
        [capture.fields_json(m) for m in messages],
    ]


def _append_file(writer: CaptureWriter, ids: range) -> None:
    writer.append(capture.rows_to_batch(_columns([Message("FAULT.IN", {"id": i}) for i in ids])))
    writer.commit()


def _ids(spark, directory) -> list[int]:
    df = spark.read.format("rvasync").option("fields", "id:I64").load(str(directory))
    return sorted(r["id"] for r in df.select("id").collect())


def _stream(spark, source, out, checkpoint):
    query = start_id_stream(spark, source, out, checkpoint)
    assert query.awaitTermination(90), "streaming query did not finish"
    return query


def test_a_field_whose_type_changes_is_null_where_the_type_differs(spark, tmp_path):
    messages = []
    for i in range(20):
        msg = Message("FAULT.IN", {"id": i})
        if i % 2:
            msg.add("qty", f"q{i}")
        else:
            msg.add("qty", i, FieldType.I32)
        messages.append(msg)
    with CaptureWriter(tmp_path) as writer:
        writer.append(capture.rows_to_batch(_columns(messages)))
    reader = spark.read.format("rvasync")
    with pytest.raises(Exception, match=r"field 'qty' has types I32 and STRING"):
        reader.option("fields", "qty").load(str(tmp_path))
    rows = (
        reader.option("fields", "id:I64, qty:I32 as qty, qty:STRING as qty_text")
        .load(str(tmp_path))
        .select("id", "qty", "qty_text", "fields")
        .collect()
    )
    assert len(rows) == 20
    for row in rows:
        i = row["id"]
        assert (row["qty"], row["qty_text"]) == ((None, f"q{i}") if i % 2 else (i, None))
        assert ('"type":"STRING"' if i % 2 else '"type":"I32"') in row["fields"]


def test_a_torn_last_committed_file_fails_the_read_naming_it(spark, tmp_path):
    with CaptureWriter(tmp_path) as writer:
        _append_file(writer, range(0, 50))
        _append_file(writer, range(50, 100))
    assert _ids(spark, tmp_path) == list(range(100))
    last = capture.file_path(tmp_path, 2)
    last.write_bytes(last.read_bytes()[:-40])  # the footer is gone
    with pytest.raises(Exception, match=r"part-0000000002\.parquet' is damaged: it has"):
        _ids(spark, tmp_path)


def test_a_torn_file_past_the_committed_offset_is_skipped(spark, tmp_path):
    with CaptureWriter(tmp_path) as writer:
        _append_file(writer, range(0, 30))
    capture.file_path(tmp_path, 2).write_bytes(b"PAR1 half a file")
    assert _ids(spark, tmp_path) == list(range(30))


def _rewrite_with_format(path, fmt: bytes) -> None:
    """Rewrite a committed file with another format key, and its marker entry to match
    (as a newer rvasync would have written both)."""
    from pyarrow import fs as pafs

    from rvasync.spark.integrity import describe

    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    metadata[capture.FORMAT_KEY] = fmt
    pq.write_table(table.replace_schema_metadata(metadata), path)
    marker = capture.read_marker(path.parent)
    index = int(path.name[5:15])
    files = list(marker.files)
    files[index - 1] = describe(pafs.LocalFileSystem(), str(path))
    capture.write_marker(path.parent, dataclasses.replace(marker, files=tuple(files)))


def test_a_file_from_a_newer_format_version_is_refused(spark, tmp_path):
    with CaptureWriter(tmp_path) as writer:
        _append_file(writer, range(0, 20))
        _append_file(writer, range(20, 40))
    _rewrite_with_format(capture.file_path(tmp_path, 2), b"rvasync-capture/2")
    with pytest.raises(Exception, match=r"format version 2, newer than this rvasync reads"):
        _ids(spark, tmp_path)
    # Another format altogether is refused too; the same version is read.
    _rewrite_with_format(capture.file_path(tmp_path, 2), b"someone-else/1")
    with pytest.raises(Exception, match=r"has format 'someone-else/1'"):
        _ids(spark, tmp_path)
    _rewrite_with_format(capture.file_path(tmp_path, 2), b"rvasync-capture/1")
    assert _ids(spark, tmp_path) == list(range(40))


def test_a_newer_file_is_refused_by_the_plain_open_as_well(tmp_path):
    with CaptureWriter(tmp_path) as writer:
        _append_file(writer, range(5))
    _rewrite_with_format(capture.file_path(tmp_path, 1), b"rvasync-capture/9")
    with pytest.raises(capture.CaptureError, match="upgrade rvasync"):
        capture.open_committed(capture.file_path(tmp_path, 1))


def test_files_deleted_under_a_running_stream(spark, tmp_path):
    source, out, checkpoint = tmp_path / "capture", tmp_path / "out", tmp_path / "checkpoint"
    with CaptureWriter(source) as writer:
        _append_file(writer, range(0, 10))
        _append_file(writer, range(10, 20))
        assert _stream(spark, source, out, checkpoint).exception() is None
        # Files the stream already read can go: it never reads them again.
        capture.file_path(source, 1).unlink()
        _append_file(writer, range(20, 30))
        assert _stream(spark, source, out, checkpoint).exception() is None
        got = sorted(r["id"] for r in spark.read.parquet(str(out)).collect())
        assert got == list(range(30))
        # A file it has not read yet: the micro-batch fails naming it; no row is made up.
        _append_file(writer, range(30, 40))
        _append_file(writer, range(40, 50))
        capture.file_path(source, 4).unlink()
        with pytest.raises(Exception, match=r"part-0000000004\.parquet' is missing"):
            _stream(spark, source, out, checkpoint)
        got = sorted(r["id"] for r in spark.read.parquet(str(out)).collect())
        assert got == list(range(30))


# -- writing: one transport per partition, a failing daemon fails the task ---------------

SCHEMA = T.StructType([T.StructField("id", T.LongType())])


def _publisher(daemon: str) -> RowPublisher:
    return RowPublisher(
        WriteOptions.parse({"daemon": daemon, "service": "7500", "subject": "OUT"}), SCHEMA
    )


def test_a_partition_is_written_through_one_transport(rv_daemon, monkeypatch):
    made = []
    real = publish.network_transport()

    def counting(*args, **kwargs):
        transport = real(*args, **kwargs)
        made.append(transport)
        return transport

    monkeypatch.setattr(publish, "network_transport", lambda: counting)
    assert _publisher(rv_daemon).publish(iter([(i,) for i in range(2000)])) == 2000
    assert len(made) == 1


class _HangUpDaemon:
    """A TCP listener that accepts and hangs up at once: a daemon that dies on us."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def test_a_daemon_failure_fails_the_task_with_a_clear_error():
    fake = _HangUpDaemon()
    try:
        with pytest.raises(DaemonUnavailable, match=r"rvasync write to daemon .* failed") as info:
            _publisher(fake.address).publish(iter([(1,)]))
        assert "Spark retries" in str(info.value)
    finally:
        fake.close()


def test_a_spark_write_to_a_failing_daemon_fails_the_job(spark):
    fake = _HangUpDaemon()  # reachable, so the driver's check passes; the tasks fail
    try:
        df = spark.createDataFrame([(i,) for i in range(10)], SCHEMA)
        writer = (
            df.write.format("rvasync")
            .mode("append")
            .option("daemon", fake.address)
            .option("service", "7500")
            .option("subject", "OUT")
        )
        with pytest.raises(Exception, match=r"rvasync write to daemon .* failed"):
            writer.save()
    finally:
        fake.close()


# -- partitioning and predicate pushdown ---------------------------------------------------


def _timed_capture(directory) -> list[tuple[int, str, str | None, int]]:
    """Three files, each its own time range; (id, subject, sender, micros) per row."""
    rows = []
    with CaptureWriter(directory, row_group_rows=10) as writer:
        for file in range(3):
            messages, subjects, senders, times = [], [], [], []
            for j in range(30):
                i = file * 30 + j
                subject = f"ORDERS.{('EU', 'US', 'ASIA')[i % 3]}.NEW"
                sender = None if i % 5 == 0 else f"S{i % 4}"
                micros = 1_700_000_000_000_000 + i * 1_000_000
                messages.append(Message(subject, {"id": i}))
                subjects.append(subject)
                senders.append(sender)
                times.append(micros)
                rows.append((i, subject, sender, micros))
            for at in range(0, 30, 10):  # row groups of 10 rows
                part = slice(at, at + 10)
                writer.append(
                    capture.rows_to_batch(
                        [
                            subjects[part],
                            [None] * 10,
                            senders[part],
                            [None] * 10,
                            times[part],
                            [m.to_bytes() for m in messages[part]],
                            [capture.fields_json(m) for m in messages[part]],
                        ]
                    )
                )
            writer.commit()
    return rows


def test_pushdown_reads_less_and_returns_exactly_what_spark_filters(spark, tmp_path):
    import datetime as dt

    rows = _timed_capture(tmp_path)
    start = dt.datetime.fromtimestamp(1_700_000_000 + 25, dt.UTC)
    end = dt.datetime.fromtimestamp(1_700_000_000 + 70, dt.UTC)
    expected = sorted(
        i
        for i, subject, sender, micros in rows
        if subject == "ORDERS.US.NEW"
        and sender in ("S1", "S2")
        and 1_700_000_025_000_000 <= micros < 1_700_000_070_000_000
    )
    assert expected  # the filter keeps some rows and drops others
    query = (
        "subject = 'ORDERS.US.NEW' AND sender IN ('S1', 'S2') "
        f"AND received_at >= '{start.isoformat()}' AND received_at < '{end.isoformat()}'"
    )
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        for pushdown in ("false", "true"):
            df = (
                spark.read.format("rvasync")
                .option("fields", "id:I64")
                .option("pushdown", pushdown)
                .option("rowsPerPartition", "10")
                .load(str(tmp_path))
                .where(query)
            )
            assert sorted(r["id"] for r in df.select("id").collect()) == expected
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    # Without the session setting PySpark refuses a pushdown reader, naming the setting.
    with pytest.raises(Exception, match=r"spark\.sql\.python\.filterPushdown\.enabled"):
        spark.read.format("rvasync").option("pushdown", "true").load(str(tmp_path)).where(
            "subject = 'ORDERS.US.NEW'"
        ).count()


def _pieces(parts) -> list[list[tuple[str, tuple[int, ...]]]]:
    return [[(piece.path, piece.groups) for piece in part.pieces] for part in parts]


def test_partitions_spanning_files_read_every_row_once_in_order(tmp_path):
    from rvasync.spark.scan import BASE_SCHEMA, plan, read_part

    rows = _timed_capture(tmp_path)
    files = capture.snapshot(tmp_path)
    schema = T.StructType([BASE_SCHEMA["received_at"], BASE_SCHEMA["subject"]])
    for per_part in (7, 25, 45, 1000):
        seen = []
        for part in plan(files, rows_per_part=per_part):
            for batch in read_part(part, schema):
                seen.extend(batch.column(1).to_pylist())
        assert seen == [subject for _, subject, _, _ in rows], per_part


def test_planning_prunes_row_groups_by_time_and_splits_by_rows(tmp_path):
    import datetime as dt

    from rvasync.spark.pushdown import Predicate
    from rvasync.spark.scan import plan

    _timed_capture(tmp_path)
    files = capture.snapshot(tmp_path)
    everything = plan(files, rows_per_part=10)
    assert len(everything) == 9  # 3 files x 3 row groups of 10 rows
    # Partitions span files: as many as the row count asks for, as even as row groups allow.
    assert _pieces(plan(files, rows_per_part=1000)) == [
        [(files[0].url, (0, 1, 2)), (files[1].url, (0, 1, 2)), (files[2].url, (0, 1, 2))]
    ]
    assert _pieces(plan(files, rows_per_part=45)) == [
        [(files[0].url, (0, 1, 2)), (files[1].url, (0, 1))],
        [(files[1].url, (2,)), (files[2].url, (0, 1, 2))],
    ]
    assert _pieces(plan(files, rows_per_part=40)) == [[(f.url, (0, 1, 2))] for f in files]
    late = Predicate("received_at", "ge", dt.datetime.fromtimestamp(1_700_000_000 + 65, dt.UTC))
    pruned = plan(files, rows_per_part=10, predicates=[late])
    # Rows 60..89 live in the last file's three row groups; 65 is in its first.
    assert _pieces(pruned) == [
        [(files[2].url, (0,))],
        [(files[2].url, (1,))],
        [(files[2].url, (2,))],
    ]
    assert all(piece.predicates == (late,) for part in pruned for piece in part.pieces)
    nobody = Predicate("subject", "eq", "NOT.THERE")
    assert plan(files, predicates=[nobody]) == []
