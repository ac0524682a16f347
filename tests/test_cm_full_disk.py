"""Certified delivery on a disk that fills: nothing handed out twice, nothing lost unreported.

Issue 44 items 4, 5 and 7. The ledger files live on a small tmpfs the test
mounts and fills (tests/smallfs.py; root only, skipped otherwise), so the
disk is full exactly when the test says. What the default
(``sync_ledger=False``) promises, and what these tests hold it to:

* a sequence number a send returned is never returned again, after a crash
  included (numbers are reserved ahead; a restarted sender skips what was
  reserved and listeners are told those numbers are unavailable);
* while the disk is full nothing already sent is dropped: it is kept and
  written (then transmitted) once there is room; new sends raise; the
  program is told (LEDGER.WRITE_FAILED, then LEDGER.WRITE_RESUMED);
* closing while the disk is still full reports each message that never
  reached the file with DELIVERY.FAILED (none of them was transmitted);
* a compaction that does not fit is abandoned (side file removed, appends
  go on, LEDGER.COMPACTION_FAILED) and works once there is room;
* a listener whose ledger is full is told, confirms nothing it cannot
  record, makes no new agreement (new senders' messages arrive uncertified)
  and catches up once there is room.
"""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
from cm_driver_support import FAST, Advisories, crash, review, until
from smallfs import fill, free, small_filesystem

from rvasync.cmdriver import CmTransport
from rvasync.message import Message

WAIT = 10.0
PAD = b"p" * 2000  # a few records fill a tmpfs page: the full disk shows at once


async def test_a_restarted_sender_never_hands_out_a_number_twice(rv_process_transport, tmp_path):
    """Sends returned, records still queued, then kill -9: the numbers are not reused."""
    t = rv_process_transport
    adv = Advisories(t)
    path = tmp_path / "joe.ledger"
    joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
    await joe.open()
    await joe.add_listener("SUE_PER", "FOO")
    sue = CmTransport(t, "SUE_PER", require_old=True, timing=FAST)
    listener = sue.listen("FOO")
    assert await joe.send(Message("FOO", {"n": 0})) == 1
    assert (await listener.get(WAIT))["n"] == 0
    numbers = [await joe.send(Message("FOO", {"n": n})) for n in range(1, 11)]
    assert numbers == list(range(2, 12))
    await crash(joe)  # the ten were numbered, never written, never sent
    joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
    await joe.open()
    after = await joe.send(Message("FOO", {"n": 11}))
    assert after > max(numbers), f"number {after} handed out again"
    got = await listener.get(WAIT)
    assert (got["n"], got.cm.sequence) == (11, after)
    await until(lambda: adv.of("DELIVERY.UNAVAILABLE"), WAIT)
    [gap] = adv.fields("DELIVERY.UNAVAILABLE")
    assert gap["seqno_begin"] <= min(numbers) and gap["seqno_end"] >= max(numbers)
    await joe.close()
    await sue.close()
    await adv.close()


async def _send_until_refused(cm, handed: list[int], adv: Advisories) -> None:
    """Send padded messages until the disk is full: a send raises, or blocks until there
    is room again (its number is not safe yet), or LEDGER.WRITE_FAILED was presented."""
    try:
        for n in range(1000):
            handed.append(await cm.send(Message("FOO", {"n": n, "pad": PAD})))
            if adv.of("LEDGER.WRITE_FAILED"):
                return
            await asyncio.sleep(0)
    except OSError:
        pass


async def test_a_full_disk_keeps_what_was_sent_and_refuses_new_sends(
    rv_process_transport, tmp_path
):
    t = rv_process_transport
    adv = Advisories(t)
    with small_filesystem(tmp_path) as disk:
        joe = CmTransport(t, "JOE_PER", ledger=disk / "joe.ledger", timing=FAST)
        await joe.open()
        joe._ledger.retry_interval = 0.05
        await joe.add_listener("SUE_PER", "FOO")
        sue = CmTransport(t, "SUE_PER", require_old=True, timing=FAST)
        listener = sue.listen("FOO", explicit_confirm=True)
        fill(disk)
        handed: list[int] = []
        sending = asyncio.ensure_future(_send_until_refused(joe, handed, adv))
        await until(lambda: adv.of("LEDGER.WRITE_FAILED"), WAIT)
        [failed] = adv.fields("LEDGER.WRITE_FAILED")
        assert failed["name"] == "JOE_PER" and failed["retrying"] == 1
        with pytest.raises(OSError) as refused:
            await joe.send(Message("FOO", {"n": "refused"}))
        assert refused.value.errno == errno.ENOSPC
        assert "cannot be written" in str(refused.value)
        assert handed, "the disk was full before the first send"
        assert review(joe, "FOO").total_messages >= len(handed)  # kept, not dropped
        free(disk)
        await asyncio.wait_for(sending, WAIT)  # a send waiting for its number returned
        await until(lambda: adv.of("LEDGER.WRITE_RESUMED"), WAIT)
        got = [await listener.get(WAIT) for _ in handed]
        assert [m.cm.sequence for m in got] == handed
        assert [m["n"] for m in got] == list(range(len(handed)))
        for msg in got:
            await listener.confirm(msg)
        await until(lambda: review(joe, "FOO").total_messages == 0, WAIT)
        assert await joe.send(Message("FOO", {"n": -1})) > handed[-1]
        await joe.close()
        await sue.close()
    await adv.close()


async def test_closing_on_a_full_disk_reports_every_message_never_written(
    rv_process_transport, tmp_path
):
    t = rv_process_transport
    adv = Advisories(t)
    with small_filesystem(tmp_path) as disk:
        path = disk / "joe.ledger"
        joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
        await joe.open()
        await joe.add_listener("SUE_PER", "FOO")
        await joe.send(Message("FOO", {"n": 0}))
        await joe.sync()
        fill(disk)
        handed: list[int] = []
        sending = asyncio.ensure_future(_send_until_refused(joe, handed, adv))
        await until(lambda: adv.of("LEDGER.WRITE_FAILED"), WAIT)
        await joe.close()  # still full: what was not written is lost, and said so
        await asyncio.wait_for(sending, WAIT)  # a send still waiting raised
        failed = {f["seqno"]: f for f in adv.fields("DELIVERY.FAILED")}
        assert failed, "nothing was reported"
        assert all(f["listener"] == "SUE_PER" for f in failed.values())
        free(disk)
        again = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
        await again.open()
        stored = set(again._core.ledger.subjects["FOO"].messages)
        assert not stored & set(failed)  # reported failed: never written
        assert set(handed) <= stored | set(failed)  # every number returned: kept or reported
        assert await again.send(Message("FOO", {"n": -1})) > max([*handed, *failed])
        await again.close()
    await adv.close()


async def test_a_compaction_that_does_not_fit_is_abandoned_and_retried(
    rv_process_transport, tmp_path
):
    t = rv_process_transport
    adv = Advisories(t)
    with small_filesystem(tmp_path, "4m") as disk:
        path = disk / "joe.ledger"
        joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
        await joe.open()
        await joe.add_listener("ABSENT", "FOO")  # nothing is ever confirmed
        for n in range(600):
            await joe.send(Message("FOO", {"n": n, "pad": PAD}))
        await joe.sync()
        size = os.path.getsize(path)
        fill(disk, keep=size // 4)  # room to append, not to rewrite
        with pytest.raises(OSError) as failed:
            await joe.compact_ledger()
        assert failed.value.errno == errno.ENOSPC
        assert not (disk / "joe.ledger.compact").exists()
        await until(lambda: adv.of("LEDGER.COMPACTION_FAILED"), WAIT)
        assert adv.fields("LEDGER.COMPACTION_FAILED")[0]["name"] == "JOE_PER"
        more = [await joe.send(Message("FOO", {"n": n})) for n in range(600, 620)]
        await joe.sync()  # appends go on
        assert review(joe, "FOO").total_messages == 620
        free(disk)
        await joe.compact_ledger()
        assert joe._ledger.compactions >= 1
        await joe.close()
        async with CmTransport(t, "JOE_PER", ledger=path) as again:
            kept = review(again, "FOO")
            assert kept.total_messages == 620 and kept.last_sent >= max(more)
    await adv.close()


async def test_a_listener_whose_ledger_is_full_is_told_and_catches_up(
    rv_process_transport, tmp_path
):
    t = rv_process_transport
    adv = Advisories(t)
    with small_filesystem(tmp_path) as disk:
        joe = CmTransport(t, "JOE", timing=FAST)
        sue = CmTransport(t, "SUE_PER", ledger=disk / "sue.ledger", timing=FAST)
        await sue.open()
        sue._ledger.retry_interval = 0.05
        listener = sue.listen("FOO.>")
        await joe.send(Message("FOO.A", {"n": 0}))
        await until(lambda: review(joe, "FOO.A") and review(joe, "FOO.A").listeners, WAIT)
        assert (await listener.get(WAIT))["n"] == 0
        fill(disk)
        got = []
        for n in range(1, 500):  # until the listener's confirmations fill the last page
            await joe.send(Message("FOO.A", {"n": n}))
            got.append(await listener.get(WAIT))  # still delivered
            await asyncio.sleep(0)
            if adv.of("LEDGER.WRITE_FAILED"):
                break
        await until(lambda: adv.of("LEDGER.WRITE_FAILED"), WAIT)
        assert adv.fields("LEDGER.WRITE_FAILED")[0]["name"] == "SUE_PER"
        # Nothing it could not record is confirmed to the sender.
        assert review(joe, "FOO.A").total_messages > 0
        # A new sender: no agreement the ledger cannot hold, but the message arrives.
        ann = CmTransport(t, "ANN", timing=FAST)
        await ann.send(Message("FOO.B", {"n": "new"}))
        fresh = await listener.get(WAIT)
        assert fresh["n"] == "new" and fresh.cm.sequence is None
        free(disk)
        await until(lambda: adv.of("LEDGER.WRITE_RESUMED"), WAIT)
        await until(lambda: review(joe, "FOO.A").total_messages == 0, WAIT)
        assert [m["n"] for m in got] == list(range(1, len(got) + 1))
        await ann.close()
        await joe.close()
        await sue.close()
    await adv.close()


async def test_a_synced_send_on_a_full_disk_returns_once_it_is_on_disk(
    rv_process_transport, tmp_path
):
    t = rv_process_transport
    with small_filesystem(tmp_path) as disk:
        joe = CmTransport(t, "JOE_PER", ledger=disk / "joe.ledger", sync_ledger=True)
        await joe.open()
        joe._ledger.retry_interval = 0.05
        await joe.add_listener("SUE_PER", "FOO")
        fill(disk)
        sends = [asyncio.ensure_future(joe.send(Message("FOO", {"pad": PAD}))) for _ in range(4)]
        await asyncio.sleep(0.3)
        assert not any(s.done() for s in sends)  # not on disk: not returned
        free(disk)
        numbers = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
        assert sorted(numbers) == [1, 2, 3, 4]
        await joe.close()
