"""rv.CmQueueTransport over the intra-process transport: members, a certified sender, failover.

The scheduling rules are tested on the sans-IO core (test_cmq_core*.py); these
tests check what the driver adds: tasks reach the program through CM
listeners, confirmation completes them and reaches the sender, the role moves
when the scheduler leaves, advisories are messages, bad arguments are named.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from cm_driver_support import FAST, until

import rvasync as rv
from rvasync.message import Message

FAST_Q = {"scheduler_heartbeat": 0.25, "scheduler_activation": 1.5}
WAIT = 15.0


@pytest.fixture
async def t(rv_process_transport):
    return rv_process_transport


def unconfirmed(cm: rv.CmTransport, subject: str) -> int:
    reviews = cm.review_ledger(subject)
    return reviews[0].total_messages if reviews else 0


class Worker:
    """A member whose program records every task it processes (auto or explicit confirm)."""

    def __init__(self, t, tag: str, *, explicit: bool = False, delay: float = 0.0, **kw) -> None:
        self.tag = tag
        self.q = rv.CmQueueTransport(t, "WORK.Q", **FAST_Q, **kw)
        self.done: list[int] = []
        self.delay = delay
        self.listener = self.q.listen("JOBS.>", explicit_confirm=explicit, callback=self.on_task)

    async def on_task(self, msg: Message) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.done.append(msg["n"])
        assert msg.cm is not None and msg.cm.sender == "SENDER"
        if self.listener.explicit_confirm:
            await self.listener.confirm(msg)


async def _scheduler(workers: list[Worker]) -> Worker:
    await until(lambda: sum(w.q.is_scheduler for w in workers) == 1, WAIT, "one scheduler")
    return next(w for w in workers if w.q.is_scheduler)


async def test_tasks_reach_one_worker_each_and_are_confirmed_to_the_sender(t) -> None:
    adv: list[Message] = []
    t.listen("_RV.*.RVCM.QUEUE.>", callback=adv.append)
    workers = [
        Worker(t, "a", scheduler_weight=5, worker_tasks=0),
        Worker(t, "b", worker_weight=2),
        Worker(t, "c", explicit=True, delay=0.01),
    ]
    sched = await _scheduler(workers)
    assert sched.tag == "a"
    await until(lambda: any(m.subject.endswith("SCHEDULER.ACTIVE.WORK.Q") for m in adv), WAIT)
    sender = rv.CmTransport(t, "SENDER", timing=FAST)
    await sender.add_listener("WORK.Q", "JOBS.RUN")
    for n in range(40):
        await sender.send(Message("JOBS.RUN", {"n": n}))
    await until(lambda: unconfirmed(sender, "JOBS.RUN") == 0, WAIT, "all confirmed")
    got = Counter(n for w in workers for n in w.done)
    assert got == Counter(range(40))
    assert workers[0].done == []  # a dedicated scheduler never works
    assert workers[1].done and workers[2].done
    await sender.close()
    for w in workers:
        await w.q.close()


async def test_scheduler_leaves_and_its_successor_finishes_the_work(t) -> None:
    workers = [
        Worker(t, "a", scheduler_weight=9, worker_tasks=0),
        Worker(t, "b", scheduler_weight=5, delay=0.05),
        Worker(t, "c", delay=0.05),
    ]
    first = await _scheduler(workers)
    assert first.tag == "a"
    sender = rv.CmTransport(t, "SENDER", timing=FAST)
    await sender.add_listener("WORK.Q", "JOBS.RUN")
    for n in range(20):
        await sender.send(Message("JOBS.RUN", {"n": n}))
    await until(lambda: len(workers[1].done) + len(workers[2].done) >= 3, WAIT)
    await first.q.close()
    rest = workers[1:]
    second = await _scheduler(rest)
    assert second.tag == "b"
    await until(lambda: unconfirmed(sender, "JOBS.RUN") == 0, WAIT, "all confirmed after failover")
    got = Counter(n for w in rest for n in w.done)
    assert set(got) == set(range(20))  # none lost; duplicates only from the replacement
    await sender.close()
    for w in rest:
        await w.q.close()


async def test_worker_that_leaves_has_its_tasks_reassigned(t) -> None:
    sched = Worker(t, "s", scheduler_weight=9, worker_tasks=0)
    quick = Worker(t, "quick")
    # The heavy worker's program takes tasks but never confirms them.
    slow = rv.CmQueueTransport(t, "WORK.Q", worker_weight=5, **FAST_Q)
    slow.listen("JOBS.>", explicit_confirm=True)
    await until(lambda: sched.q.is_scheduler, WAIT, "s to schedule")
    sender = rv.CmTransport(t, "SENDER", timing=FAST)
    await sender.add_listener("WORK.Q", "JOBS.RUN")
    await sender.send(Message("JOBS.RUN", {"n": 7}))
    await until(lambda: slow.held == 1, WAIT, "the heavy worker got it")
    await slow.close()
    await until(lambda: quick.done == [7], WAIT, "reassigned")
    await until(lambda: unconfirmed(sender, "JOBS.RUN") == 0, WAIT)
    # Its program never took it from the queue: given back unstarted, not counted
    # as a reassignment (the BYE says so even if it overtakes the RELEASE).
    assert (sched.q.stats.released, sched.q.stats.reassigned_exit) == (1, 0)
    await sender.close()
    for w in (sched, quick):
        await w.q.close()


async def test_members_cannot_send_and_bad_arguments_are_named(t) -> None:
    q = rv.CmQueueTransport(t, "WORK.Q", **FAST_Q)
    with pytest.raises(rv.NotPermitted, match="only listen"):
        await q.send(Message("X", {}))
    with pytest.raises(rv.NotPermitted, match="only listen"):
        await q.send_request(Message("X", {}), 1.0)
    with pytest.raises(rv.NotPermitted):
        await q.add_listener("A", "X")
    with pytest.raises(rv.InvalidArgument, match="worker_weight"):
        q.worker_weight = 0
    q.worker_tasks = 3
    q.complete_time = 2.5
    assert (q.worker_tasks, q.complete_time) == (3, 2.5)
    with pytest.raises(rv.InvalidArgument, match="complete_time"):
        q.complete_time = -1
    with pytest.raises(rv.InvalidArgument, match="explicit_confirm"):
        q.listen("X", explicit_confirm="yes")  # type: ignore[arg-type]
    await q.close()
    with pytest.raises(rv.TransportClosed):
        q.listen("X")
    for kwargs, match in (
        ({"worker_tasks": -1}, "worker_tasks"),
        ({"scheduler_weight": 0}, "weight"),
        ({"scheduler_heartbeat": 5.0}, "strictly less"),
        ({"backlog_limit": -3}, "backlog_limit"),
    ):
        with pytest.raises(rv.InvalidArgument, match=match):
            rv.CmQueueTransport(t, "WORK.Q", **kwargs)
    with pytest.raises(rv.InvalidSubject):
        rv.CmQueueTransport(t, "WORK.*")
    with pytest.raises(rv.InvalidArgument):
        rv.CmQueueTransport("not a transport", "WORK.Q")  # type: ignore[arg-type]


async def test_mismatched_heartbeat_presents_param_mismatch(t) -> None:
    seen: list[Message] = []
    t.listen("_RV.*.RVFT.PARAM_MISMATCH.>", callback=seen.append)
    a = rv.CmQueueTransport(t, "WORK.Q", scheduler_heartbeat=0.25, scheduler_activation=1.5)
    b = rv.CmQueueTransport(t, "WORK.Q", scheduler_heartbeat=0.5, scheduler_activation=1.5)
    await until(lambda: bool(seen), WAIT, "PARAM_MISMATCH")
    assert seen[0]["RVADV_DESC"] == "Heartbeat interval differs"
    await a.close()
    await b.close()


async def test_plain_sender_tasks_reach_one_worker_each(t) -> None:
    workers = [Worker(t, "a", scheduler_weight=5, worker_tasks=0), Worker(t, "b"), Worker(t, "c")]
    await _scheduler(workers)
    plain: list[int] = []

    async def on_plain(msg: Message) -> None:
        assert msg.cm is None  # no certified agreement: nothing to confirm
        plain.append(msg["n"])

    for w in workers:
        await w.listener.close()
        w.listener = w.q.listen("JOBS.>", callback=on_plain)
    for n in range(10):
        await t.send(Message("JOBS.PLAIN", {"n": n}))
    await until(lambda: sorted(plain) == list(range(10)), WAIT, "each plain task once")
    await asyncio.sleep(0.3)
    assert sorted(plain) == list(range(10))
    for w in workers:
        await w.q.close()
