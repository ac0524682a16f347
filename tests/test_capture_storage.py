"""Capture storage: URLs, lists and globs, other file systems, uploads, identity, checksums.

No Spark here: the file-system layer (rvasync.spark.storage), the checked
reading of committed files (capture.OpenFile, rvasync.spark.integrity) and
uploads (rvasync.spark.upload) are exercised directly, the non-local file
system being fsspec's in-memory one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import shutil
import uuid

import pytest

pytest.importorskip("pyarrow", reason="captures need pyarrow (pip install 'rvasync[spark]')")
pytest.importorskip("fsspec", reason="the in-memory file system is fsspec's")

import rvasync as rv
from rvasync.message import Message
from rvasync.spark import capture, storage
from rvasync.spark.capture import CaptureError, CaptureWriter
from rvasync.spark.recorder import Recorder
from rvasync.spark.upload import upload


def _columns(ids) -> list[list]:
    messages = [Message(f"S.{i % 3}", {"id": i, "pad": "x" * (i % 7)}) for i in ids]
    return [
        [m.subject for m in messages],
        [None if i % 4 else f"R.{i}" for i in ids],
        [None] * len(messages),
        [None] * len(messages),
        [1_700_000_000_000_000 + i for i in ids],
        [m.to_bytes() for m in messages],
        [capture.fields_json(m) for m in messages],
    ]


def _write(directory, files: int = 3, rows: int = 120, group_rows: int = 50) -> None:
    with CaptureWriter(directory, row_group_rows=group_rows) as writer:
        for k in range(files):
            writer.append(capture.rows_to_batch(_columns(range(k * rows, (k + 1) * rows))))
            writer.commit()


def _rows(location) -> list[dict]:
    """Every committed row, every column, through the checked reader Spark tasks use."""
    rows = []
    for ref in capture.snapshot(location, warn=False):
        with ref.open() as opened:
            groups = range(opened.metadata.num_row_groups)
            for batch in opened.batches(groups, list(capture.CAPTURE_COLUMNS)):
                rows.extend(batch.to_pylist())
    return rows


def _memory_url() -> str:
    return f"memory://captures-{uuid.uuid4().hex}"


def test_paths_file_urls_lists_and_globs_name_capture_directories(tmp_path):
    for name in ("orders-1", "orders-2", "trades-1"):
        _write(tmp_path / name, files=1)
    (tmp_path / "orders-notes.txt").write_text("a file, not a directory")
    urls = [loc.url for loc in storage.expand([f"file://{tmp_path}/orders-*"])]
    assert urls == [f"file://{tmp_path}/orders-1", f"file://{tmp_path}/orders-2"]
    braces = storage.expand(f"{tmp_path}/{{trades,orders}}-1")
    assert [loc.root for loc in braces] == [f"{tmp_path}/orders-1", f"{tmp_path}/trades-1"]
    # file:/dir (as Hadoop writes it), file:///dir and a plain path are one directory.
    for text in (f"file:{tmp_path}/orders-1", f"file://{tmp_path}/orders-1"):
        assert storage.locate(text).root == str(tmp_path / "orders-1")
        assert capture.read_marker(text).rows == 120
    with pytest.raises(rv.InvalidArgument, match="matches no directory"):
        storage.expand(f"{tmp_path}/nothing-*")
    with pytest.raises(rv.InvalidArgument, match="named twice"):
        storage.expand([str(tmp_path / "orders-1"), f"file://{tmp_path}/orders-1"])
    with pytest.raises(rv.InvalidArgument, match="file URLs name this machine"):
        storage.locate("file://elsewhere/data")


def test_the_load_paths_option_is_a_list_of_paths(tmp_path):
    pytest.importorskip("pyspark")
    from rvasync.spark.options import ReadOptions

    options = ReadOptions.parse({"paths": json.dumps([str(tmp_path / "a"), "s3a://b/c"])})
    assert options.paths == (str(tmp_path / "a"), "s3a://b/c")
    with pytest.raises(rv.InvalidArgument, match="not a list of paths"):
        ReadOptions.parse({"paths": "[1, 2]"})


def test_a_capture_uploaded_to_another_file_system_reads_back_the_same(tmp_path):
    _write(tmp_path / "local")
    target = _memory_url()
    assert upload(tmp_path / "local", target) == 3
    assert upload(tmp_path / "local", target) == 0  # nothing new: nothing copied
    remote = storage.locate(target)
    assert not remote.local
    assert _rows(remote) == _rows(tmp_path / "local")
    assert capture.read_marker(remote) == capture.read_marker(tmp_path / "local")
    assert capture.committed_urls(target) == [f"{target}/part-{i:010d}.parquet" for i in (1, 2, 3)]
    # Another capture is never uploaded over this one.
    _write(tmp_path / "other", files=1)
    with pytest.raises(CaptureError, match="upload each capture to a place of its own"):
        upload(tmp_path / "other", target)


def test_a_torn_upload_past_the_remote_marker_is_skipped(tmp_path, capsys):
    _write(tmp_path / "local", files=2)
    target = _memory_url()
    upload(tmp_path / "local", target)
    remote = storage.locate(target)
    with remote.fs.open_output_stream(remote.path(capture.file_name(3))) as stream:
        stream.write(b"PAR1 half an upload")
    assert len(_rows(remote)) == 240
    assert len(capture.snapshot(remote)) == 2
    assert "past the committed offset" in capsys.readouterr().err


async def test_the_recorder_uploads_what_it_commits(rv_process_transport, tmp_path):
    target = _memory_url()
    recorder = Recorder(rv_process_transport, "UP.>", tmp_path / "local", upload=target)
    async with recorder:
        for i in range(30):
            await rv_process_transport.send(Message("UP.X", {"i": i}))
        async with asyncio.timeout(10):
            while recorder.stats.received < 30:
                await asyncio.sleep(0.01)
        await recorder.flush()
        await rv_process_transport.send(Message("UP.X", {"i": 30}))
        async with asyncio.timeout(10):
            while recorder.stats.received < 31:
                await asyncio.sleep(0.01)
    # Stopping commits the last message and waits for its upload.
    rows = _rows(storage.locate(target))
    assert [Message.from_bytes(r["data"])["i"] for r in rows] == list(range(31))
    assert recorder.stats.uploaded_files == 2 and recorder.stats.upload_errors == 0


def test_every_capture_has_an_identity_a_replaced_directory_a_new_one(tmp_path):
    _write(tmp_path / "c", files=1)
    first = capture.read_marker(tmp_path / "c").capture
    assert first and len(first) == 32
    shutil.rmtree(tmp_path / "c")
    with CaptureWriter(tmp_path / "c"):  # no file yet: the identity is already there
        pass
    second = capture.read_marker(tmp_path / "c").capture
    assert second and second != first
    # A marker of version 1 (no identity, no file entries) reads as before, and the
    # next recorder gives the capture an identity.
    legacy = tmp_path / "legacy"
    _write(legacy, files=1)
    (legacy / capture.MARKER_NAME).write_text(
        '{"format": "rvasync-capture", "version": 1, "committed": 1, "rows": 120}'
    )
    marker = capture.read_marker(legacy)
    assert (marker.capture, marker.files, marker.rows) == (None, None, 120)
    assert len(_rows(legacy)) == 120
    with CaptureWriter(legacy):
        pass
    upgraded = capture.read_marker(legacy)
    assert upgraded.capture is not None and upgraded.files == (None,)


def test_swapped_files_and_wrong_counts_are_errors(tmp_path):
    _write(tmp_path)
    one, two = capture.file_path(tmp_path, 1), capture.file_path(tmp_path, 2)
    data_one, data_two = one.read_bytes(), two.read_bytes()
    one.write_bytes(data_two)
    two.write_bytes(data_one)
    with pytest.raises(CaptureError, match=r"part-0000000001.*it is file 2 of its capture"):
        _rows(tmp_path)
    one.write_bytes(data_one)
    two.write_bytes(data_two)
    marker = capture.read_marker(tmp_path)
    # A marker edited by hand, its checksum recomputed: the counts no longer add up.
    capture.write_marker(tmp_path, dataclasses.replace(marker, rows=5))
    with pytest.raises(CaptureError, match="file entries hold 360 rows, not 5"):
        capture.read_marker(tmp_path)
    # The same edit without the checksum: refused as corrupt.
    capture.write_marker(tmp_path, marker)
    text = (tmp_path / capture.MARKER_NAME).read_text()
    (tmp_path / capture.MARKER_NAME).write_text(text.replace('"rows": 360', '"rows": 350'))
    with pytest.raises(CaptureError, match="checksum does not match"):
        capture.read_marker(tmp_path)
    # A file of another capture put in the place of this one's.
    capture.write_marker(tmp_path, marker)
    _write(tmp_path / "other", files=1)
    shutil.copy(capture.file_path(tmp_path / "other", 1), one)
    with pytest.raises(CaptureError, match="it belongs to capture"):
        _rows(tmp_path)


def test_no_single_flipped_byte_of_a_committed_capture_gives_other_rows(tmp_path):
    """Every flip of one random bit in a committed file or the marker either leaves the
    rows exactly as they were (a byte nobody reads) or fails the read with a
    CaptureError naming the damage; never other rows, never fewer."""
    source = tmp_path / "source"
    _write(source)
    expected = _rows(source)
    names = [capture.file_name(i) for i in (1, 2, 3)] + [capture.MARKER_NAME]
    rng = random.Random(45)
    outcomes = {"error": 0, "same": 0}
    for _ in range(400):
        copy = tmp_path / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(source, copy)
        target = copy / rng.choice(names)
        data = bytearray(target.read_bytes())
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        target.write_bytes(bytes(data))
        try:
            got = _rows(copy)
        except CaptureError:
            outcomes["error"] += 1
            continue
        assert got == expected, f"a flip in {target.name} gave other rows"
        outcomes["same"] += 1
    assert outcomes["error"] > 350, outcomes


def test_a_torn_tail_is_dropped_and_a_damaged_committed_file_is_an_error(tmp_path, capsys):
    """The rule for every file rvasync writes: a write cut short (the in-progress file a
    crash left) is skipped with a warning; a complete, committed file that fails its
    checksum is damage."""
    _write(tmp_path, files=2)
    (tmp_path / ".part-0000000003.parquet.inprogress").write_bytes(b"PAR1 cut short")
    assert len(_rows(capture.check_directory(tmp_path))) == 240
    capture.warn_uncommitted(tmp_path, 2)
    assert "half-written" in capsys.readouterr().err
    last = capture.file_path(tmp_path, 2)
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside a column chunk
    last.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match=r"part-0000000002.*fails its checksum"):
        _rows(tmp_path)
