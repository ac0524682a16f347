"""The recorder and the capture format, over the process transport (no Spark needed)."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json

import pytest

pa = pytest.importorskip(
    "pyarrow", reason="the recorder needs pyarrow (pip install 'rvasync[spark]')"
)
pq = pytest.importorskip("pyarrow.parquet")

import rvasync as rv  # noqa: E402
from rvasync.fieldtypes import FieldType  # noqa: E402
from rvasync.jsonform import from_jsonable  # noqa: E402
from rvasync.message import Message  # noqa: E402
from rvasync.rvdatetime import DateTime  # noqa: E402
from rvasync.spark import capture  # noqa: E402
from rvasync.spark.capture import CaptureError, CaptureWriter, committed_files, read_marker  # noqa: E402
from rvasync.spark.progress import Progress, RecorderStats  # noqa: E402
from rvasync.spark.recorder import Recorder  # noqa: E402

TIMEOUT = 10


def sample_message(i: int) -> Message:
    msg = Message(
        f"ORDERS.{'EU' if i % 2 else 'US'}.NEW", reply_subject=f"REPLY.{i}" if i % 3 == 0 else None
    )
    msg.add("id", i)
    msg.add("qty", i % 200, FieldType.U8)
    msg.add("price", 1.5 * i)
    msg.add("ratio", 0.25, FieldType.F32)
    msg.add("symbol", f"SYM{i}")
    msg.add("blob", bytes([i % 256]) * 3)
    msg.add("when", DateTime(1_700_000_000 + i, 250))
    msg.add("host", ipaddress.IPv4Address("10.0.0.1"))
    msg.add("levels", [1, 2, i], FieldType.I32ARRAY)
    msg.add("inner", Message(fields={"deep": True}))
    msg.add("tagged", "x", field_id=7)
    return msg


def read_all(directory) -> pa.Table:
    files = committed_files(directory)
    if not files:
        return capture.CAPTURE_SCHEMA.empty_table()
    return pa.concat_tables([capture.open_committed(f).read() for f in files])


async def wait_until(predicate, timeout: float = TIMEOUT) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_recorded_rows_match_what_was_sent(rv_process_transport, tmp_path):
    sent = [sample_message(i) for i in range(50)]
    async with Recorder(rv_process_transport, "ORDERS.>", tmp_path) as recorder:
        for msg in sent:
            await rv_process_transport.send(msg)
        await rv_process_transport.send(Message("OTHER.SUBJECT", {"x": 1}))
        await wait_until(lambda: recorder.stats.received == len(sent))
    table = read_all(tmp_path)
    assert table.schema.names == list(capture.CAPTURE_COLUMNS)
    assert table.num_rows == len(sent)
    rows = table.to_pylist()
    for msg, row in zip(sent, rows, strict=True):
        assert row["subject"] == msg.subject
        assert row["reply_subject"] == msg.reply_subject
        assert row["sender"] is None and row["sequence"] is None
        decoded = Message.from_bytes(row["data"])
        assert decoded == msg
        assert row["data"] == msg.to_bytes()
        rebuilt = from_jsonable(
            {
                "subject": msg.subject,
                "reply_subject": msg.reply_subject,
                "fields": json.loads(row["fields"]),
            }
        )
        assert rebuilt == msg
        assert [f.type for f in rebuilt] == [f.type for f in msg]
    times = [row["received_at"] for row in rows]
    assert times == sorted(times) and times[0].tzinfo is not None
    marker = read_marker(tmp_path)
    assert (marker.committed, marker.rows) == (1, len(sent))
    assert recorder.stats.committed_rows == len(sent)


async def test_files_roll_by_size_and_keep_order(rv_process_transport, tmp_path):
    recorder = Recorder(rv_process_transport, "ROLL.*", tmp_path, roll_bytes=2000, batch_rows=10)
    async with recorder:
        for i in range(300):
            await rv_process_transport.send(Message("ROLL.X", {"n": i, "pad": "p" * 40}))
            if i % 10 == 9:
                await asyncio.sleep(0)  # let the recorder take batches as they come
        await wait_until(lambda: recorder.stats.received == 300)
    marker = read_marker(tmp_path)
    assert marker.committed > 3 and marker.rows == 300
    table = read_all(tmp_path)
    assert [Message.from_bytes(d)["n"] for d in table.column("data").to_pylist()] == list(
        range(300)
    )
    others = {p.name for p in tmp_path.iterdir() if not p.name.startswith("part-")}
    assert others == {"_committed.json", "_lock"}  # nothing in progress, nothing torn
    assert all(capture.file_path(tmp_path, i).exists() for i in range(1, marker.committed + 1))


async def test_idle_recorder_commits_within_roll_interval(rv_process_transport, tmp_path):
    async with Recorder(rv_process_transport, "IDLE", tmp_path, roll_interval=0.2) as recorder:
        await rv_process_transport.send(Message("IDLE", {"a": 1}))
        await wait_until(lambda: recorder.stats.committed_files == 1)
        assert read_marker(tmp_path).rows == 1
        # Nothing new: no empty file is committed.
        await asyncio.sleep(0.5)
        assert read_marker(tmp_path).committed == 1


async def test_flush_commits_and_uncommitted_rows_stay_invisible(rv_process_transport, tmp_path):
    async with Recorder(rv_process_transport, "F.>", tmp_path, roll_interval=3600) as recorder:
        for i in range(5):
            await rv_process_transport.send(Message("F.A", {"i": i}))
        info = await recorder.flush()
        assert info is not None and info.rows == 5 and info.index == 1
        await rv_process_transport.send(Message("F.B", {"i": 5}))
        await wait_until(lambda: recorder.stats.received == 6)
        assert read_all(tmp_path).num_rows == 5
        assert await recorder.flush() is not None
        assert read_all(tmp_path).num_rows == 6
        assert await recorder.flush() is None


async def test_second_recorder_on_the_same_directory_is_refused(rv_process_transport, tmp_path):
    async with Recorder(rv_process_transport, "A", tmp_path):
        with pytest.raises(rv.InvalidArgument, match="in use by another recorder"):
            await Recorder(rv_process_transport, "A", tmp_path).start()


async def test_restart_continues_numbering_and_sets_crash_leftovers_aside(
    rv_process_transport, tmp_path
):
    async with Recorder(rv_process_transport, "R", tmp_path) as recorder:
        await rv_process_transport.send(Message("R", {"run": 1}))
        await wait_until(lambda: recorder.stats.received == 1)
    # What a crash leaves: a half-written in-progress file and a closed but
    # uncommitted one.
    (tmp_path / ".part-0000000002.parquet.inprogress").write_bytes(b"PAR1 half")
    capture.file_path(tmp_path, 3).write_bytes(b"not parquet either")
    assert [p.name for p in committed_files(tmp_path)] == ["part-0000000001.parquet"]
    async with Recorder(rv_process_transport, "R", tmp_path) as recorder:
        await rv_process_transport.send(Message("R", {"run": 2}))
        await wait_until(lambda: recorder.stats.received == 1)
    marker = read_marker(tmp_path)
    assert (marker.committed, marker.rows) == (2, 2)
    assert [
        Message.from_bytes(d)["run"] for d in read_all(tmp_path).column("data").to_pylist()
    ] == [1, 2]
    orphans = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".orphan-"))
    assert len(orphans) == 2


def test_past_the_offset_is_skipped_with_a_warning(tmp_path, capsys):
    with CaptureWriter(tmp_path) as writer:
        writer.append(capture.rows_to_batch([["S"], [None], [None], [None], [0], [b"x"], ["[]"]]))
    torn = capture.file_path(tmp_path, 2)
    torn.write_bytes(b"PAR1 torn")
    assert committed_files(tmp_path) == [capture.file_path(tmp_path, 1)]
    err = capsys.readouterr().err
    assert "past the committed offset" in err and torn.name in err


def test_damage_before_the_offset_is_an_error(tmp_path):
    with CaptureWriter(tmp_path) as writer:
        for _ in range(2):
            writer.append(
                capture.rows_to_batch([["S"], [None], [None], [None], [0], [b"x"], ["[]"]])
            )
            writer.commit()
    first = capture.file_path(tmp_path, 1)
    first.write_bytes(first.read_bytes()[:-20])  # torn footer
    with pytest.raises(CaptureError, match=r"part-0000000001\.parquet.*unreadable"):
        capture.open_committed(first)
    capture.file_path(tmp_path, 2).unlink()
    with pytest.raises(CaptureError, match=r"part-0000000002\.parquet.*missing"):
        committed_files(tmp_path)
    (tmp_path / "_committed.json").write_text("{not json")
    with pytest.raises(CaptureError, match=r"marker .* is corrupt"):
        read_marker(tmp_path)


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(rv.InvalidArgument, match="does not exist"):
        read_marker(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(rv.InvalidArgument, match="is not a directory"):
        committed_files(tmp_path / "file")


async def test_bad_recorder_arguments(rv_process_transport, tmp_path):
    with pytest.raises(rv.InvalidArgument, match="at least one subject"):
        Recorder(rv_process_transport, [], tmp_path)
    with pytest.raises(rv.InvalidSubject):
        Recorder(rv_process_transport, "A..B", tmp_path)
    with pytest.raises(rv.InvalidArgument, match="roll_interval"):
        Recorder(rv_process_transport, "A", tmp_path, roll_interval=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(rv.InvalidArgument, match="capture directory"):
        await Recorder(rv_process_transport, "A", tmp_path / "file").start()


async def test_a_failing_write_stops_the_recorder_with_its_error(
    rv_process_transport, tmp_path, monkeypatch
):
    recorder = await Recorder(rv_process_transport, "E", tmp_path).start()

    def broken(batch):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recorder._writer, "append", broken)
    await rv_process_transport.send(Message("E", {"a": 1}))
    with pytest.raises(OSError, match="No space left"):
        async with asyncio.timeout(TIMEOUT):
            await recorder.wait()
    with pytest.raises(OSError):
        await recorder.stop()
    # The directory was released: a new recorder can take it.
    async with Recorder(rv_process_transport, "E", tmp_path):
        pass


def test_progress_line_counts_and_rates():
    stream = io.StringIO()
    progress = Progress("recording X -> d", enabled=True, stream=stream)
    stats = RecorderStats(
        received=1234,
        committed_rows=1000,
        committed_files=2,
        written_bytes=5 * 1024 * 1024,
        started=0.0,
    )
    progress.update(stats)
    progress.close(stats)
    text = stream.getvalue()
    assert "1,234 msgs" in text and "1,000 committed in 2 files" in text and "5.0 MiB" in text
    quiet = io.StringIO()
    Progress("x", stream=quiet).update(stats)  # not a terminal: nothing drawn
    assert quiet.getvalue() == ""


def test_fields_column_is_the_jsonform_fields_for_every_type():
    from rvasync.jsonform import to_jsonable
    from rvasync.spark.capture import fields_json

    msg = sample_message(5)
    msg.add("nan", float("nan"))
    msg.add("inf", float("-inf"), FieldType.F32)
    msg.add("floats", [1.5, float("inf")], FieldType.F32ARRAY)
    msg.add("xml", b"<a/>", FieldType.XML)
    msg.add("u64", 2**64 - 1, FieldType.U64)
    msg.add("port", 8080, FieldType.IPPORT16)
    msg.add("msgs", [Message(fields={"k": 1})])
    msg.add("bools", True)
    assert json.loads(fields_json(msg)) == to_jsonable(msg)["fields"]
