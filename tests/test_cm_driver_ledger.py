"""CmTransport with ledger files: persistent correspondents, sync, group commit, damage.

Restarts run two CmTransport instances one after the other in one event loop;
``crash`` stops the first the way kill -9 would (the file keeps what was
written, nothing else happens). Real-process kills are in
test_cm_driver_processes.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import struct

import pytest
from cm_driver_support import FAST, Advisories, crash, payloads, review, until

import rvasync as rv
from rvasync.cmdriver import CmTransport, LedgerCorrupt
from rvasync.driverkit import durable
from rvasync.message import Message
from rvasync.protocol.cm import decode_ledger

WAIT = 5.0


@pytest.fixture
async def t(rv_process_transport):
    return rv_process_transport


async def test_joe_per_and_sue_per_restart_redelivers_53_to_77(t, tmp_path):
    """The specification's example: SUE_PER crashes while processing 53, JOE_PER goes on to 77."""
    adv = Advisories(t)
    joe = CmTransport(t, "JOE_PER", ledger=tmp_path / "joe.ledger", timing=FAST)
    sue = CmTransport(t, "SUE_PER", ledger=tmp_path / "sue.ledger", require_old=True, timing=FAST)
    await joe.open()
    await sue.open()
    listener = sue.listen("REMEMBER.THIS", explicit_confirm=True)
    await joe.send(Message("REMEMBER.THIS", {"n": 1}))
    assert (await listener.get(WAIT)).cm.sequence is None  # before the agreement
    await until(lambda: review(joe, "REMEMBER.THIS").listeners)
    for n in range(2, 58):
        await joe.send(Message("REMEMBER.THIS", {"n": n}))
    for n in range(2, 54):
        msg = await listener.get(WAIT)
        assert (msg["n"], msg.cm.sequence) == (n, n)
        if n <= 52:
            await listener.confirm(msg)
    # SUE is processing 53 when its host fails.
    await until(lambda: review(joe, "REMEMBER.THIS").listeners[0].last_confirmed == 52)
    await crash(sue)
    for n in range(58, 78):
        await joe.send(Message("REMEMBER.THIS", {"n": n}))
    assert review(joe, "REMEMBER.THIS").total_messages == 25  # 53..77 kept for SUE_PER

    sue = CmTransport(t, "SUE_PER", ledger=tmp_path / "sue.ledger", require_old=True, timing=FAST)
    await sue.open()
    listener = sue.listen("REMEMBER.THIS")
    got = [await listener.get(WAIT) for _ in range(25)]
    assert [(m["n"], m.cm.sequence) for m in got] == [(n, n) for n in range(53, 78)]
    with pytest.raises(TimeoutError):
        await listener.get(0.2)  # nothing twice, nothing more
    await listener.close()
    await until(lambda: review(joe, "REMEMBER.THIS").total_messages == 0)
    await until(lambda: adv.of("REGISTRATION.MOVED"))
    assert {"name": "SUE_PER"} in adv.fields("REGISTRATION.MOVED")
    await adv.close()
    await joe.close()
    await sue.close()


async def test_without_require_old_the_restarted_listener_gets_only_new_messages(t, tmp_path):
    joe = CmTransport(t, "JOE_PER", ledger=tmp_path / "joe.ledger", timing=FAST)
    sue = CmTransport(t, "SUE_PER", ledger=tmp_path / "sue.ledger", timing=FAST)
    await joe.open()
    await sue.open()
    listener = sue.listen("FOO", explicit_confirm=True)
    await joe.send(Message("FOO", {"n": 1}))
    await until(lambda: review(joe, "FOO").listeners)
    for n in (2, 3):
        await joe.send(Message("FOO", {"n": n}))
    await crash(sue)
    sue = CmTransport(t, "SUE_PER", ledger=tmp_path / "sue.ledger", timing=FAST)
    await sue.open()
    listener = sue.listen("FOO")
    await until(lambda: review(joe, "FOO").total_messages == 0, what="2 and 3 dropped")
    await joe.send(Message("FOO", {"n": 4}))
    # A resend of 2 or 3 already on its way when the new listener started may reach
    # it before its registration settles: it arrives uncertified (no sequence), as the
    # spec says of messages from a sender without an agreement. The first certified
    # message is 4, and nothing old arrives certified.
    msg = await listener.get(WAIT)
    while msg.cm.sequence is None:
        assert msg["n"] in (2, 3), msg
        msg = await listener.get(WAIT)
    assert (msg["n"], msg.cm.sequence) == (4, 4)
    await joe.close()
    await sue.close()


async def test_persistent_sender_restart_continues_numbers_and_redelivers(t, tmp_path):
    joe = CmTransport(t, "JOE_PER", ledger=tmp_path / "joe.ledger", timing=FAST)
    await joe.open()
    sue = CmTransport(t, "SUE", timing=FAST)
    listener = sue.listen("FOO", explicit_confirm=True)
    await joe.send(Message("FOO", {"n": 1}))
    await until(lambda: review(joe, "FOO").listeners)
    for n in range(2, 6):
        await joe.send(Message("FOO", {"n": n}))
    msgs = [await listener.get(WAIT) for _ in range(5)]
    for msg in msgs[1:3]:
        await listener.confirm(msg)  # 2 and 3
    await until(lambda: review(joe, "FOO").total_messages == 2)
    await crash(joe)

    joe = CmTransport(t, "JOE_PER", ledger=tmp_path / "joe.ledger", timing=FAST)
    await joe.open()
    assert review(joe, "FOO").total_messages == 2  # 4 and 5, from the file
    # After a crash the sender continues after the numbers it had reserved (a
    # crash may have lost messages it had numbered): 6 to 64 are never used.
    assert await joe.send(Message("FOO", {"n": 6})) == 65
    await listener.confirm(msgs[3])
    await listener.confirm(msgs[4])
    got = await listener.get(WAIT)
    assert (got["n"], got.cm.sequence) == (6, 65)
    await listener.confirm(got)
    await until(lambda: review(joe, "FOO").total_messages == 0)
    await joe.close()
    await sue.close()


async def test_close_and_reopen_continues_where_it_stopped(t, tmp_path):
    path = tmp_path / "jan.ledger"
    async with CmTransport(t, "JAN", ledger=path) as jan:
        assert jan.persistent and jan.ledger_path == str(path)
        await jan.add_listener("DB_PER", "STORE.THIS")
        for n in range(1, 4):
            await jan.send(Message("STORE.THIS", {"n": n}))
        await jan.send(Message("OTHER", {"n": 0}))
    async with CmTransport(t, "JAN", ledger=path, timing=FAST) as jan:
        stored = review(jan, "STORE.THIS")
        assert (stored.last_sent, stored.total_messages) == (3, 3)
        assert stored.listeners[0].name == "DB_PER" and stored.listeners[0].anticipated
        assert await jan.send(Message("OTHER")) > 1  # numbers never repeat
        db = CmTransport(t, "DB_PER", require_old=True, timing=FAST)
        listener = db.listen("STORE.THIS")
        await jan.send(Message("STORE.THIS", {"n": 4}))
        got = [await listener.get(WAIT) for _ in range(4)]
        assert payloads(got) == [1, 2, 3, 4]
        await listener.close()
        await until(lambda: review(jan, "STORE.THIS").total_messages == 0)
        await db.close()


# --- writing ---------------------------------------------------------------------------------


async def test_sync_ledger_sends_share_fsyncs(t, tmp_path, monkeypatch):
    syncs = []
    real_fsync = os.fsync

    def slow_fsync(fd):
        syncs.append(fd)
        real_fsync(fd)
        import time

        time.sleep(0.02)  # a disk that takes its time, so that sends pile up

    joe = CmTransport(t, "JOE", ledger=tmp_path / "joe.ledger", sync_ledger=True)
    await joe.open()
    await joe.add_listener("SUE", "FOO")  # every send stores a record
    monkeypatch.setattr(os, "fsync", slow_fsync)
    returned_after = []

    async def one(n):
        await joe.send(Message("FOO", {"n": n}))
        returned_after.append(len(syncs))

    await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(40))), 20)
    assert min(returned_after) >= 1  # nobody returned before a sync
    assert len(syncs) < 20, f"40 concurrent sends took {len(syncs)} fsyncs"
    assert joe._ledger.durable_lsn == joe._core.last_lsn
    monkeypatch.setattr(os, "fsync", real_fsync)
    await joe.close()
    replay = decode_ledger((tmp_path / "joe.ledger").read_bytes(), expected_name="JOE")
    assert len(replay.state.subjects["FOO"].messages) == 40


async def test_compaction_keeps_the_live_state(t, tmp_path):
    path = tmp_path / "joe.ledger"
    joe = CmTransport(t, "JOE", ledger=path, timing=FAST)
    await joe.open()
    joe._ledger._compact_min = 4096
    joe._ledger._compact_ratio = 2.0
    sue = CmTransport(t, "SUE", timing=FAST)
    listener = sue.listen("FOO")
    await joe.send(Message("FOO", {"n": 0}))
    await until(lambda: review(joe, "FOO").listeners)
    consumed = []

    async def consume():
        async for msg in listener:
            consumed.append(msg["n"])
            if len(consumed) == 301:
                return

    task = asyncio.create_task(consume())
    for n in range(1, 301):
        await joe.send(Message("FOO", {"n": n, "pad": b"x" * 100}))
        if n % 50 == 0:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(task, WAIT)
    await listener.close()
    await until(lambda: review(joe, "FOO").total_messages == 0)
    await joe.sync()
    assert joe._ledger.compactions >= 1
    await joe.compact_ledger()
    size = os.path.getsize(path)
    assert size < 1000, f"the compacted ledger holds {size} bytes"
    await joe.close()
    async with CmTransport(t, "JOE", ledger=path) as again:
        kept = review(again, "FOO")
        assert kept.last_sent >= 300 and kept.total_messages == 0
        assert [r.name for r in kept.listeners] == ["SUE"]
    await sue.close()


async def test_a_failing_device_makes_sends_fail(t, tmp_path, monkeypatch):
    # A write error other than a full disk (which is retried: test_cm_full_disk.py)
    # stops the ledger for good.
    joe = CmTransport(t, "JOE", ledger=tmp_path / "joe.ledger", sync_ledger=True)
    await joe.open()
    await joe.add_listener("SUE", "FOO")

    def broken(fd, data):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(durable, "write_all", broken)
    with pytest.raises(OSError, match="Input/output error"):
        await joe.send(Message("FOO"))
    with pytest.raises(OSError, match="Input/output error"):
        await joe.send(Message("FOO"))
    monkeypatch.undo()
    await joe.close()


# --- opening damaged or foreign files ----------------------------------------------------------


async def write_ledger(t, path, name="JOE", count=5):
    async with CmTransport(t, name, ledger=path) as cm:
        await cm.add_listener("SUE", "FOO")
        for n in range(count):
            await cm.send(Message("FOO", {"n": n}))


async def test_a_corrupt_ledger_is_an_error_naming_file_and_offset(t, tmp_path):
    path = tmp_path / "joe.ledger"
    await write_ledger(t, path)
    data = bytearray(path.read_bytes())
    data[60] ^= 0xFF  # inside an early record, with intact records after it
    path.write_bytes(bytes(data))
    joe = CmTransport(t, "JOE", ledger=path)
    with pytest.raises(LedgerCorrupt) as caught:
        await joe.open()
    assert caught.value.path == str(path)
    assert 0 < caught.value.offset <= 60
    assert str(path) in str(caught.value) and "offset" in str(caught.value)
    with pytest.raises(LedgerCorrupt):
        await joe.send(Message("FOO"))  # it stays unusable
    await joe.close()
    assert path.read_bytes() == bytes(data)  # never rewritten


async def test_garbage_is_not_a_ledger(t, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"shopping list: eggs, milk\n")
    with pytest.raises(LedgerCorrupt, match="not a ledger file"):
        await CmTransport(t, "JOE", ledger=path).open()


async def test_a_torn_last_record_is_discarded_on_open(t, tmp_path):
    path = tmp_path / "joe.ledger"
    await write_ledger(t, path, count=5)
    intact = path.read_bytes()
    # A crash mid-append leaves a prefix of the frame being written (here: the first
    # half of a copy of the header frame, its length intact), not bytes from anywhere.
    (length,) = struct.unpack_from("<I", intact, 8)
    frame = intact[8 : 8 + 12 + length]
    path.write_bytes(intact + frame[: len(frame) // 2])
    async with CmTransport(t, "JOE", ledger=path) as joe:
        assert review(joe, "FOO").total_messages == 5
        await joe.send(Message("FOO", {"n": 5}))
    async with CmTransport(t, "JOE", ledger=path) as joe:
        assert review(joe, "FOO").total_messages == 6


@pytest.mark.parametrize("tail", ["garbage", "zeros-after-a-torn-length"])
async def test_garbage_after_the_magic_is_corruption_not_a_crash(t, tmp_path, tail):
    """Issue #24 item 8: 4 KiB of garbage after intact magic used to be taken for a torn
    append and the ledger silently reset; only a prefix (and zeros) is a torn append."""
    path = tmp_path / "joe.ledger"
    await write_ledger(t, path, count=3)
    intact = path.read_bytes()
    if tail == "garbage":
        path.write_bytes(intact[:8] + bytes((i * 131 + 7) % 251 for i in range(4096)))
        with pytest.raises(rv.LedgerCorrupt, match="frame length fails its check"):
            await CmTransport(t, "JOE", ledger=path).open()
    else:
        # The write stopped inside the next frame's length: a torn append, discarded.
        path.write_bytes(intact + b"\x07\x01" + bytes(300))
        async with CmTransport(t, "JOE", ledger=path) as joe:
            assert review(joe, "FOO").total_messages == 3


async def test_a_ledger_of_another_correspondent_is_refused(t, tmp_path):
    path = tmp_path / "joe.ledger"
    await write_ledger(t, path)
    with pytest.raises(rv.InvalidArgument, match="belongs to correspondent 'JOE'"):
        await CmTransport(t, "SUE", ledger=path).open()
    with pytest.raises(rv.InvalidArgument, match="belongs to correspondent 'JOE'"):
        await CmTransport(t, ledger=path).open()  # a new transient name is another name


async def test_two_transports_cannot_share_a_ledger_file(t, tmp_path):
    path = tmp_path / "joe.ledger"
    async with CmTransport(t, "JOE", ledger=path):
        with pytest.raises(rv.NotPermitted, match="in use by another CM transport"):
            await CmTransport(t, "JOE", ledger=path).open()
    with pytest.raises(rv.InvalidArgument, match="directory"):
        await CmTransport(t, "JOE", ledger=tmp_path).open()


async def test_a_file_ledger_transport_must_be_opened_before_listening(t, tmp_path):
    joe = CmTransport(t, "JOE", ledger=tmp_path / "joe.ledger")
    assert not joe.opened
    with pytest.raises(rv.NotPermitted, match="not open yet"):
        joe.listen("FOO")
    assert await joe.send(Message("FOO")) == 1  # coroutine methods open it
    assert joe.opened
    joe.listen("FOO")
    await joe.close()
    await joe.close()


async def test_transient_correspondent_with_a_ledger_file(t, tmp_path):
    path = tmp_path / "t.ledger"
    async with CmTransport(t, ledger=path) as cm:
        assert not cm.persistent
        await cm.send(Message("FOO"))
    assert path.stat().st_size > 0


async def test_what_is_appended_during_a_compaction_reaches_the_new_file(t, tmp_path, monkeypatch):
    """The new file is written on a thread while the loop goes on; appends meanwhile are kept."""
    import threading

    from rvasync.cmdriver import ledgerfile

    path = tmp_path / "joe.ledger"
    joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
    await joe.open()
    sue = CmTransport(t, "SUE_PER", require_old=True, timing=FAST)
    listener = sue.listen("FOO", explicit_confirm=True)
    await joe.add_listener("SUE_PER", "FOO")
    for n in range(50):
        await joe.send(Message("FOO", {"n": n}))
    first = [await listener.get(WAIT) for _ in range(50)]
    assert [m.cm.sequence for m in first] == list(range(1, 51))
    started, release = threading.Event(), threading.Event()
    build = ledgerfile._build_replacement

    def slow_build(*args):
        started.set()
        assert release.wait(10)
        return build(*args)

    monkeypatch.setattr(ledgerfile, "_build_replacement", slow_build)
    compaction = asyncio.ensure_future(joe.compact_ledger())
    await until(started.is_set, WAIT)
    # The loop goes on while the new file is being written: sends, deliveries,
    # confirmations, an agreement, all recorded in the old file meanwhile.
    for msg in first[:30]:
        await listener.confirm(msg)
    later = [await joe.send(Message("FOO", {"n": n})) for n in range(50, 60)]
    await joe.add_listener("LOG", "FOO")
    await joe.send(Message("FOO", {"n": 60}))
    await until(lambda: review(joe, "FOO").listeners[-1].last_confirmed == 30, WAIT)
    await joe.sync()
    assert not compaction.done()
    release.set()
    await asyncio.wait_for(compaction, WAIT)
    assert joe._ledger.compactions == 1
    await joe.close()  # (the close records the exact last number: compare after it)
    live = joe._core.ledger
    replay = decode_ledger(path.read_bytes(), expected_name="JOE_PER")
    assert replay.state == live
    entry = replay.state.subjects["FOO"]
    assert sorted(entry.messages) == list(range(31, max(later) + 2))
    assert entry.registrations["SUE_PER"].confirmed == 30 and "LOG" in entry.registrations
    await sue.close()
