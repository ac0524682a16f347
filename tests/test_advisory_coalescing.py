"""Overload does not flood the advisories or the log (issue 43 item 2).

A queue with limit 10 given 100,000 messages presented 99,990
QUEUE.LIMIT_EXCEEDED advisories, and with nobody listening logged 99,990 WARN
lines in under two seconds. Every advisory that can fire per message now
comes at most once a second per cause, carrying the count of what it stands
for, and an unheard one is logged at most once a second with the count of the
lines suppressed.
"""

from __future__ import annotations

import asyncio
import socket

import rvasync as rv
from rvasync.advisories import build_advisory, log_unheard
from rvasync.advlimit import Coalescer, UnheardLimiter
from rvasync.daemon.udp import address_hex

WAIT = 10.0
TOTAL = 100_000


async def _flood(t, queue: rv.Queue) -> None:
    t.listen("FLOODED", queue=queue)
    msg = rv.Message("FLOODED", {"n": 1})
    for n in range(TOTAL):
        await t.send(msg)
        if n % 10_000 == 9_999:
            await asyncio.sleep(0)


async def test_a_flooded_queue_presents_a_few_advisories_carrying_the_count(
    rv_process_transport,
):
    t = rv_process_transport
    advisories = t.listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED")
    queue = rv.Queue(limit=10, policy=rv.LimitPolicy.DISCARD_NEW, name="flooded")
    await _flood(t, queue)
    assert queue.discarded == TOTAL - 10
    got = []
    async with asyncio.timeout(WAIT):
        while sum(a["count"] for a in got) < queue.discarded:
            got.append(await advisories.get())
    assert sum(a["count"] for a in got) == TOTAL - 10  # every discard, in a few advisories
    assert len(got) <= 4, len(got)  # was one per discard
    assert got[-1]["discarded"] == TOTAL - 10


async def test_unheard_it_is_logged_a_few_times_with_the_count(rv_process_transport, capsys):
    t = rv_process_transport
    queue = rv.Queue(limit=10, policy=rv.LimitPolicy.DISCARD_NEW, name="unheard-flood")
    await _flood(t, queue)
    await asyncio.sleep(1.3)  # the rest of the second's discards, as one line
    lines = [line for line in capsys.readouterr().err.splitlines() if "unheard-flood" in line]
    assert 1 <= len(lines) <= 4, lines  # was 99,990 lines
    assert str(TOTAL - 10) in lines[-1]  # the latest line carries the total


async def test_sends_to_an_unknown_daemon_are_reported_once_a_second(rv_service):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as nobody:
        nobody.bind(("127.0.0.1", 0))
        crafted = f"_INBOX.{address_hex(nobody.getsockname())}.X1.1"
        async with rv.Transport(rv_service[0]) as t:
            lost = t.listen("_RV.ERROR.SYSTEM.DATALOSS.OUTBOUND.PTP")
            for _ in range(1000):
                await t.send(rv.Message(crafted, {}))
            got = []
            async with asyncio.timeout(WAIT):
                while sum(a["messages"] for a in got) < 1000:
                    got.append(await lost.get())
            assert len(got) <= 3 and sum(a["messages"] for a in got) == 1000


async def test_the_coalescer_presents_the_first_at_once_and_the_rest_summed():
    shown: list[int] = []
    coalescer = Coalescer(interval=0.05)
    for _ in range(5):
        coalescer.report("k", 2, shown.append)
    assert shown == [2] and coalescer.pending("k") == 8
    async with asyncio.timeout(WAIT):
        while sum(shown) < 10:
            await asyncio.sleep(0.01)
    assert shown == [2, 8]
    await asyncio.sleep(0.15)  # a quiet interval: the next event is shown at once again
    coalescer.report("k", 1, shown.append)
    assert shown == [2, 8, 1]


async def test_the_unheard_limiter_counts_what_it_suppresses():
    flushed: list[tuple[str, int]] = []
    limiter = UnheardLimiter(lambda s, n: flushed.append((s, n)), interval=0.05)
    assert limiter.allow("A") == (True, 0)
    assert [limiter.allow("A") for _ in range(3)] == [(False, 0)] * 3
    assert limiter.allow("B") == (True, 0)  # another subject is not held back
    async with asyncio.timeout(WAIT):
        while not flushed:
            await asyncio.sleep(0.01)
    assert flushed == [("A", 3)]


def test_log_unheard_still_logs_errors(capsys):
    log_unheard(build_advisory("ERROR", "COALESCE.TEST", {"lost": 3}))
    assert "_RV.ERROR.SYSTEM.COALESCE.TEST" in capsys.readouterr().err
