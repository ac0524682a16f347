"""The durable file kit (rvasync.driverkit.durable) and the one replay rule, for every file kind.

Part one: the kit itself (lock first, atomic replacement, appends cut back
after a partial write, rewrites abandoned cleanly), on a small file system
that fills (tests/smallfs.py, root only) where the disk matters.

Part two: every ledger and state file the package writes (certified
ledger, relay agent ledger, value cache store, remote-operations state)
keeps the same rule: a frame cut short at the end is a torn tail, dropped
on open; a complete frame that fails its checksum is LedgerCorrupt, the
last frame included.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import textwrap

import pytest
from smallfs import fill, free, small_filesystem

import rvasync as rv
from rvasync.cache.storefile import StoreFile
from rvasync.cmdriver.ledgerfile import LedgerFile
from rvasync.driverkit.durable import AppendLog, FileLock, atomic_replace
from rvasync.framing import FRAME_HEADER_SIZE
from rvasync.protocol.cm.ledger import StoredMessage, SubjectMark
from rvasync.protocol.cvc.storefile import Op
from rvasync.protocol.relay.ledger import MAGIC_V1, decode_relay_ledger
from rvasync.relaydriver.ledgerfile import RelayLedgerFile
from rvasync.ropsdriver.statefile import StateFile

MAGIC = b"TESTLOG1"


def _open_log(path, refusal="in use"):
    def replay(pieces) -> int:
        return sum(len(piece) for piece in pieces)

    return AppendLog.open(str(path), refusal=refusal, replay=replay, new_file=lambda: MAGIC)


# --- the kit -------------------------------------------------------------------------------------


def test_a_second_open_is_refused_before_it_touches_anything(tmp_path):
    """Issue 44 item 1: the refused opener deleted the holder's half-written side file."""
    path = tmp_path / "x.log"
    log = _open_log(path)
    side = tmp_path / "x.log.compact"
    side.write_bytes(b"half of a rewrite")
    with pytest.raises(rv.NotPermitted, match="in use"):
        _open_log(path)
    assert side.read_bytes() == b"half of a rewrite"
    log.close()
    again = _open_log(path)  # the next holder clears the leftover
    assert not side.exists()
    again.close()


def test_the_lock_outlives_a_rewrite_of_the_file(tmp_path):
    # A lock on the data file would stay on the old inode once a rewrite is
    # renamed over it; the lock file is never replaced.
    path = tmp_path / "x.log"
    log = _open_log(path)
    log.replace([MAGIC, b"frames"])
    with pytest.raises(rv.NotPermitted):
        _open_log(path)
    assert FileLock.held(str(path))
    log.close()
    assert not FileLock.held(str(path))


def test_a_lock_file_of_a_directory_path_is_a_clear_error(tmp_path):
    with pytest.raises(rv.InvalidArgument, match="directory"):
        _open_log(tmp_path / "missing" / "x.log")


def test_an_append_that_does_not_fit_is_cut_back_and_the_next_one_lands_whole(tmp_path):
    with small_filesystem(tmp_path, "1m") as disk:
        path = disk / "x.log"
        log = _open_log(path)
        log.append(b"a" * 1000)
        fill(disk, keep=8192)
        with pytest.raises(OSError) as caught:
            log.append(b"b" * 65536)  # half of it fits
        assert caught.value.errno == errno.ENOSPC
        assert os.path.getsize(path) == len(MAGIC) + 1000  # no half frame left behind
        free(disk)
        log.append(b"c" * 100)
        log.close()
        assert path.read_bytes() == MAGIC + b"a" * 1000 + b"c" * 100


def test_a_replacement_that_does_not_fit_leaves_the_file_as_it_was(tmp_path):
    with small_filesystem(tmp_path, "1m") as disk:
        path = disk / "state"
        atomic_replace(str(path), [b"old state"])
        fill(disk, keep=4096)
        with pytest.raises(OSError) as caught:
            atomic_replace(str(path), [b"x" * 100_000])
        assert caught.value.errno == errno.ENOSPC
        assert path.read_bytes() == b"old state"
        assert sorted(p.name for p in disk.iterdir()) == ["filler.bin", "state"]
        log = _open_log(disk / "x.log")
        with pytest.raises(OSError):
            log.replace([MAGIC, b"y" * 100_000])
        assert not (disk / "x.log.compact").exists()
        free(disk)
        log.append(b"z")
        log.close()
        assert (disk / "x.log").read_bytes() == MAGIC + b"z"


def test_a_second_process_is_refused_without_disturbing_the_first(tmp_path):
    """Issue 44 item 1, across processes: a CM ledger in use, its compaction's side file."""
    path = tmp_path / "joe.ledger"
    side = tmp_path / "joe.ledger.compact"

    async def hold_then_check():
        ledger, _ = await LedgerFile.open(str(path), "JOE")
        side.write_bytes(b"what the live compaction has written so far")
        script = textwrap.dedent(
            f"""
            import asyncio, sys
            from rvasync.cmdriver.ledgerfile import LedgerFile
            from rvasync.errors import NotPermitted
            async def main():
                try:
                    await LedgerFile.open({str(path)!r}, "JOE")
                except NotPermitted as exc:
                    print("refused:", exc)
                    return
                print("opened")
            asyncio.run(main())
            """
        )
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        assert done.stdout.startswith("refused: ledger file"), done.stdout + done.stderr
        assert side.read_bytes() == b"what the live compaction has written so far"
        side.unlink()
        await ledger.close()

    asyncio.run(hold_then_check())


# --- one rule for every file kind ----------------------------------------------------------------


async def _cm_file(path):
    ledger, _ = await LedgerFile.open(str(path), "JOE")
    ledger.start(lambda lsn: None, lambda: None)  # type: ignore[arg-type,return-value]
    ledger.append(1, SubjectMark("FOO", 64))
    ledger.append(2, StoredMessage("FOO", 1, 0.0, 0.0, b"payload one"))
    await ledger.flush()
    ledger.append(3, StoredMessage("FOO", 2, 0.0, 0.0, b"payload two"))
    await ledger.flush()
    await ledger.close()


async def _cm_open(path):
    ledger, replay = await LedgerFile.open(str(path), "JOE")
    await ledger.close()
    return sorted(replay.state.subjects["FOO"].messages)


async def _relay_file(path):
    ledger = RelayLedgerFile.open(str(path), "RA")
    ledger.append(1, ("l", "LIS", "foo", "data"))
    ledger.append(2, ("s", "LIS", 1, "data", b"m1"))
    ledger.flush()
    ledger.append(3, ("s", "LIS", 2, "data", b"m2"))
    ledger.flush()
    ledger.close()


async def _relay_open(path):
    ledger = RelayLedgerFile.open(str(path), "RA")
    ledger.close()
    return sorted(ledger.state.clients["LIS"].items)


async def _cache_file(path):
    store = StoreFile(path)
    store.open()
    store.append(Op.PUT, "S.1", 1.0, b"one")
    store.flush()
    store.append(Op.PUT, "S.2", 2.0, b"two")
    store.close()


async def _cache_open(path):
    store = StoreFile(path)
    try:
        return [r.subject for r in store.open()]
    finally:
        store.close()


KINDS = {
    "certified ledger": (_cm_file, _cm_open, [1, 2], [1]),
    "relay agent ledger": (_relay_file, _relay_open, [1, 2], [1]),
    "value cache store": (_cache_file, _cache_open, ["S.1", "S.2"], ["S.1"]),
}


def _last_frame(data: bytes, first: int) -> int:
    offset = first
    last = first
    while offset < len(data):
        last = offset
        offset += FRAME_HEADER_SIZE + int.from_bytes(data[offset : offset + 4], "little")
    return last


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_frame_cut_short_at_the_end_is_a_torn_tail(tmp_path, kind):
    write, read, whole, without_last = KINDS[kind]
    path = tmp_path / "file"
    await write(path)
    assert await read(path) == whole
    data = path.read_bytes()
    last = _last_frame(data, 8)
    for cut in (last + 3, last + FRAME_HEADER_SIZE + 1, len(data) - 1):
        path.write_bytes(data[:cut])
        assert await read(path) == without_last, cut
        assert os.path.getsize(path) == last  # cut back to the last whole frame


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_complete_last_frame_with_a_flipped_bit_is_corruption(tmp_path, kind):
    """Issue 34 item 5: the relay ledger opened as if that frame never existed."""
    write, read, _whole, _ = KINDS[kind]
    path = tmp_path / "file"
    await write(path)
    data = path.read_bytes()
    last = _last_frame(data, 8)
    for position in (last, last + 5, last + 9, len(data) - 1):
        damaged = bytearray(data)
        damaged[position] ^= 0x04
        path.write_bytes(bytes(damaged))
        with pytest.raises(rv.LedgerCorrupt) as caught:
            await read(path)
        assert caught.value.offset == last and caught.value.path == str(path), position
        assert path.read_bytes() == bytes(damaged)  # never rewritten


async def test_a_remote_operations_state_file_is_whole_or_corrupt(tmp_path):
    # One snapshot replaced atomically: neither a cut nor a flipped bit comes from a crash.
    path = tmp_path / "ops.state"
    state, _ = await StateFile.open(str(path))
    state.start(lambda: (1, {"performed": ["a", "b"]}))
    await state.wait_durable(1)
    await state.close()
    data = path.read_bytes()
    for damaged in (data[:-1], data[:-1] + bytes([data[-1] ^ 1])):
        path.write_bytes(damaged)
        with pytest.raises(rv.LedgerCorrupt):
            await StateFile.open(str(path))
    (tmp_path / "ops.state.new").write_bytes(b"half a save")
    path.write_bytes(data)
    state, snapshot = await StateFile.open(str(path))
    assert snapshot == {"performed": ["a", "b"]}
    assert not (tmp_path / "ops.state.new").exists()
    with pytest.raises(rv.NotPermitted, match="in use"):
        await StateFile.open(str(path))
    await state.close()


def test_a_version_1_relay_ledger_still_opens_and_is_rewritten_as_version_2(tmp_path):
    import struct
    import zlib

    import msgpack

    def v1(record):
        body = msgpack.packb(record, use_bin_type=True)
        return struct.pack(">II", len(body), zlib.crc32(body)) + body

    path = tmp_path / "ra.ledger"
    records = [("agent", "RA"), ("l", "LIS", "foo", "data"), ("s", "LIS", 1, "data", b"m1")]
    data = MAGIC_V1 + b"".join(v1(r) for r in records)
    path.write_bytes(data + v1(("s", "LIS", 2, "data", b"m2"))[:-3])  # and a torn tail
    ledger = RelayLedgerFile.open(str(path), "RA")
    assert ledger.state.clients["LIS"].items == {1: ("data", b"m1")}
    ledger.close()
    rewritten = path.read_bytes()
    assert rewritten.startswith(b"RVRELAY2")
    assert decode_relay_ledger(rewritten, str(path), "RA").state == ledger.state
    # A damaged length in the middle of a version 1 file is corruption, not a tail.
    damaged = bytearray(data + v1(("a", "LIS", 1)))
    damaged[len(MAGIC_V1) + len(v1(records[0]))] ^= 0x40
    with pytest.raises(rv.LedgerCorrupt, match="intact record follows"):
        decode_relay_ledger(bytes(damaged), "p", "RA")
