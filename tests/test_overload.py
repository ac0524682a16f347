"""Overload: a publisher faster than its slowest listener never costs unbounded memory,
and never a silent loss.

For every limit policy a network transport's listener queue holds at most its
limit while a burst arrives faster than it is read; every discard is reported
by QUEUE.LIMIT_EXCEEDED, whose ``discarded`` count accounts for exactly what
the reader did not get. The policies differ only in which messages they keep,
and that is checked too. (A standalone daemon's client link, the other place a
slow consumer costs memory, is covered by test_standalone_server.py: the
daemon drops the oldest waiting messages past ``max_consumer_buffer`` and
CLIENT.SLOWCONSUMER counts each one.)
"""

from __future__ import annotations

import asyncio

import pytest

import rvasync as rv
from rvasync.queues import LimitPolicy, Queue

WAIT = 10.0
TOTAL = 2000
LIMIT = 50


async def drain(queue: Queue) -> list[int]:
    got = []
    while (msg := queue.poll()) is not None:
        got.append(msg["n"])
    return got


@pytest.mark.parametrize(
    "policy",
    [LimitPolicy.DISCARD_FIRST, LimitPolicy.DISCARD_LAST, LimitPolicy.DISCARD_NEW],
    ids=lambda policy: policy.name,
)
@pytest.mark.parametrize("amount", [1, 10])
async def test_every_policy_bounds_the_queue_and_counts_every_discard(
    rv_transport, policy: LimitPolicy, amount: int
) -> None:
    t = rv_transport
    advisories = Queue(name="limit.advisories")  # unbounded: it must not discard itself
    adv_listener = rv.process_transport().listen(
        "_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED", queue=advisories
    )
    queue = Queue(limit=LIMIT, policy=policy, discard_amount=amount, name=f"slow.{policy.name}")
    t.listen("OVERLOAD", queue=queue)
    await t.send(rv.Message("OVERLOAD.WARMUP", {"n": -1}))  # the interest is in place
    largest = 0
    got: list[int] = []
    for n in range(TOTAL):
        await t.send(rv.Message("OVERLOAD", {"n": n}))
        largest = max(largest, len(queue))
        if n % 400 == 399:  # the reader wakes now and then, and takes what is there
            await asyncio.sleep(0)
            got += await drain(queue)
    async with asyncio.timeout(WAIT):
        while len(got) + queue.discarded < TOTAL:
            await asyncio.sleep(0.01)
            largest = max(largest, len(queue))
            got += await drain(queue)
    assert largest <= LIMIT, f"queue held {largest} > limit {LIMIT}"
    assert queue.discarded > 0, "the burst never overflowed: the test proves nothing"
    assert len(got) + queue.discarded == TOTAL, "a message neither delivered nor counted"
    assert got == sorted(got) and len(set(got)) == len(got)
    # The advisories say so: one at the first discard, then at most one a second for
    # the rest, their counts adding up to every discard, the latest with the total.
    reports = []
    async with asyncio.timeout(WAIT):
        while sum(r["count"] for r in reports) < queue.discarded:
            reports.append(await advisories.get())
    assert sum(r["count"] for r in reports) == queue.discarded
    assert len(reports) <= 3, "one advisory per discard again"
    assert {r["ADV_DESC"] for r in reports} == {queue.name}
    assert reports[-1]["discarded"] == queue.discarded
    assert all(r["limit"] == LIMIT for r in reports)
    # What each policy keeps: DISCARD_NEW and DISCARD_LAST keep the oldest of a
    # burst, DISCARD_FIRST the newest (the last message sent always arrives).
    if policy is LimitPolicy.DISCARD_FIRST:
        assert got[-1] == TOTAL - 1
    else:
        assert got[0] == 0
    await adv_listener.close()


async def test_an_overflowing_advisory_listener_is_still_counted(rv_transport) -> None:
    """Even the advisories' own bounded queue loses nothing silently: its count grows too."""
    t = rv_transport
    adv_queue = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="advisories")
    rv.process_transport().listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED", queue=adv_queue)
    data = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="data")
    t.listen("FLOOD", queue=data)
    for n in range(20):
        await t.send(rv.Message("FLOOD", {"n": n}))
    async with asyncio.timeout(WAIT):
        while len(data) + data.discarded < 20:
            await asyncio.sleep(0.01)
    assert len(data) == 1 and data.discarded == 19
    first = adv_queue.poll()
    assert first is not None and first["ADV_DESC"] == "data"
    await t.send(rv.Message("FLOOD", {"n": 20}))  # fills data again: one more discard
    async with asyncio.timeout(WAIT):  # the rest of the second comes as one advisory
        while len(adv_queue) + adv_queue.discarded == 0:
            await asyncio.sleep(0.05)
    assert adv_queue.poll()["count"] == data.discarded - first["count"]
