"""rv.CmQueueTransport: closing a busy worker, refusing tasks, dead letters (one process).

* Issue 34 item 3: closing a worker while its callback runs made the task run
  twice (the callback finished here, and the scheduler also gave the task to
  another worker). Now close() lets the program finish what it started, gives
  back what it did not start, and only then withdraws; past its timeout the
  callback is cancelled and the task moved.
* Issue 44 item 9: ``await listener.refuse(msg)`` gives a task back; a task
  that is moved too often (a poison task) is dead-lettered: confirmed to its
  sender, SCHEDULER.DEAD_LETTER, and published on the dead-letter subject.
"""

from __future__ import annotations

import asyncio

import pytest
from cm_driver_support import FAST, until

import rvasync as rv
from rvasync.message import Message

FAST_Q = {"scheduler_heartbeat": 0.25, "scheduler_activation": 1.5}
WAIT = 15.0


def unconfirmed(cm: rv.CmTransport) -> int:
    reviews = cm.review_ledger("JOBS.RUN")
    return reviews[0].total_messages if reviews else 0


class Program:
    """A worker's program: records what it starts and finishes; may hold or refuse tasks."""

    def __init__(self, t, name: str, *, work: float = 0.0, refuse=(), **kw) -> None:
        self.q = rv.CmQueueTransport(t, "WORK.Q", **FAST_Q, **kw)
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.messages: list[Message] = []
        self.work = work
        self.refuse = set(refuse)
        self.listener = self.q.listen("JOBS.>", callback=self.on_task)

    async def on_task(self, msg: Message) -> None:
        n = msg["n"]
        self.started.append(n)
        self.messages.append(msg)
        if n in self.refuse:
            await self.listener.refuse(msg)
            return
        try:
            await asyncio.sleep(self.work)
        except asyncio.CancelledError:
            self.cancelled.append(n)
            raise
        self.finished.append(n)


async def _queue(t, *programs: Program) -> rv.CmTransport:
    scheduler = rv.CmQueueTransport(t, "WORK.Q", scheduler_weight=9, worker_tasks=0, **FAST_Q)
    scheduler.listen("JOBS.>")
    programs[0].scheduler = scheduler  # type: ignore[attr-defined]
    await until(lambda: scheduler.is_scheduler, WAIT, "a scheduler")
    sender = rv.CmTransport(t, "SENDER", timing=FAST)
    await sender.add_listener("WORK.Q", "JOBS.RUN")
    return sender


@pytest.fixture
async def t(rv_process_transport):
    return rv_process_transport


async def test_closing_a_worker_while_its_callback_runs_runs_the_task_once(t) -> None:
    busy = Program(t, "busy", work=0.6, worker_weight=5)
    other = Program(t, "other")
    sender = await _queue(t, busy, other)
    await sender.send(Message("JOBS.RUN", {"n": 1}))
    await until(lambda: busy.started == [1], WAIT, "the heavy worker to start it")
    await busy.q.close()  # returns once the callback has finished it
    assert busy.finished == [1] and busy.cancelled == []
    await until(lambda: unconfirmed(sender) == 0, WAIT, "the task confirmed")
    await asyncio.sleep(3 * FAST_Q["scheduler_activation"])  # nothing is reassigned later
    assert other.started == []
    scheduler = busy.scheduler  # type: ignore[attr-defined]
    assert scheduler.stats.reassigned == 0
    await sender.close()
    await other.q.close()
    await scheduler.close()


async def test_close_gives_back_tasks_not_started_and_waits_for_the_started_one(t) -> None:
    busy = Program(t, "busy", work=0.6, worker_weight=5, worker_tasks=3)
    other = Program(t, "other", worker_tasks=3)
    sender = await _queue(t, busy, other)
    # A callback listener's dispatcher runs one task at a time: the other two wait in its queue.
    for n in (1, 2, 3):
        await sender.send(Message("JOBS.RUN", {"n": n}))
    await until(lambda: busy.started == [1] and busy.q.held == 3, WAIT, "three tasks held")
    closing = asyncio.create_task(busy.q.close())
    await until(lambda: sorted(other.finished) == [2, 3], WAIT, "the unstarted two elsewhere")
    assert not closing.done() or busy.finished == [1]  # they left before the first finished
    await asyncio.wait_for(closing, WAIT)
    assert busy.started == busy.finished == [1]
    await until(lambda: unconfirmed(sender) == 0, WAIT, "every task confirmed")
    scheduler = busy.scheduler  # type: ignore[attr-defined]
    assert (scheduler.stats.released, scheduler.stats.reassigned) == (2, 0)
    await sender.close()
    await other.q.close()
    await scheduler.close()


async def test_past_its_timeout_close_cancels_the_callback_and_the_task_moves(t) -> None:
    stuck = Program(t, "stuck", work=60.0, worker_weight=5)
    other = Program(t, "other")
    sender = await _queue(t, stuck, other)
    await sender.send(Message("JOBS.RUN", {"n": 1}))
    await until(lambda: stuck.started == [1], WAIT, "the heavy worker to start it")
    await stuck.q.close(timeout=0.2)
    await until(lambda: stuck.cancelled == [1], WAIT, "the callback cancelled")
    await until(lambda: other.finished == [1], WAIT, "moved to the other worker")
    await until(lambda: unconfirmed(sender) == 0, WAIT, "confirmed")
    scheduler = stuck.scheduler  # type: ignore[attr-defined]
    assert scheduler.stats.reassigned_exit == 1
    with pytest.raises(rv.InvalidArgument, match="timeout"):
        await other.q.close(timeout=-1)
    await sender.close()
    await other.q.close()
    await scheduler.close()


async def test_a_refused_task_goes_to_another_worker(t) -> None:
    picky = Program(t, "picky", worker_weight=5, refuse={1})
    other = Program(t, "other")
    sender = await _queue(t, picky, other)
    await sender.send(Message("JOBS.RUN", {"n": 1}))
    await sender.send(Message("JOBS.RUN", {"n": 2}))
    await until(lambda: unconfirmed(sender) == 0, WAIT, "both confirmed")
    assert 1 in other.finished and picky.started.count(1) == 1 and 1 not in picky.finished
    scheduler = picky.scheduler  # type: ignore[attr-defined]
    assert scheduler.stats.refused == 1
    await sender.close()
    for member in (picky.q, other.q, scheduler):
        await member.close()


async def test_refuse_is_only_for_tasks_a_queue_worker_holds(t) -> None:
    cm = rv.CmTransport(t, "PLAIN.LISTENER", timing=FAST)
    got: list[Message] = []
    cm_listener = cm.listen("OTHER.X", callback=got.append)
    await t.send(Message("OTHER.X", {"n": 0}))
    await until(lambda: bool(got), WAIT)
    with pytest.raises(rv.NotPermitted, match="only the workers of a distributed queue"):
        await cm_listener.refuse(got[0])
    await cm.close()
    worker = Program(t, "w")
    sender = await _queue(t, worker)
    await t.send(Message("JOBS.PLAIN", {"n": 1}))  # uncertified: complete once delivered
    await until(lambda: worker.finished == [1], WAIT, "the plain task")
    with pytest.raises(rv.NotPermitted, match="uncertified"):
        await worker.listener.refuse(worker.messages[0])
    await sender.send(Message("JOBS.RUN", {"n": 2}))
    await until(lambda: unconfirmed(sender) == 0, WAIT, "the certified task done")
    with pytest.raises(rv.NotPermitted, match="no longer held"):
        await worker.listener.refuse(worker.messages[1])  # confirmed already
    await sender.close()
    scheduler = worker.scheduler  # type: ignore[attr-defined]
    await worker.q.close()
    await scheduler.close()


async def test_a_task_that_never_finishes_is_dead_lettered(t) -> None:
    advisories: list[Message] = []
    t.listen("_RV.WARN.RVCM.QUEUE.SCHEDULER.DEAD_LETTER.>", callback=advisories.append)
    dead: list[Message] = []
    t.listen("JOBS.DEAD", callback=dead.append)
    hung = [Program(t, f"h{i}", work=60.0, complete_time=0.3) for i in range(2)]
    scheduler = rv.CmQueueTransport(
        t,
        "WORK.Q",
        scheduler_weight=9,
        worker_tasks=0,
        complete_time=0.3,
        reassign_limit=2,
        dead_letter_subject="JOBS.DEAD",
        **FAST_Q,
    )
    scheduler.listen("JOBS.>")
    assert (scheduler.reassign_limit, scheduler.dead_letter_subject) == (2, "JOBS.DEAD")
    await until(lambda: scheduler.is_scheduler, WAIT, "the scheduler")
    sender = rv.CmTransport(t, "SENDER", timing=FAST)
    await sender.add_listener("WORK.Q", "JOBS.RUN")
    await sender.send(Message("JOBS.RUN", {"n": 41}))
    await until(lambda: bool(dead) and bool(advisories), WAIT, "the dead letter")
    await until(lambda: unconfirmed(sender) == 0, WAIT, "confirmed to its sender")
    (letter,) = dead
    assert (letter["name"], letter["subject"], letter["sender"]) == ("WORK.Q", "JOBS.RUN", "SENDER")
    assert letter["moves"] == 3 and letter["message"]["n"] == 41
    (advisory,) = advisories
    assert advisory["seqno"] == letter["seqno"] and advisory["moves"] == 3
    assert "reassignment limit" in advisory["reason"]
    assert scheduler.stats.dead_lettered == 1
    with pytest.raises(rv.InvalidArgument, match="reassign_limit"):
        scheduler.reassign_limit = -1
    with pytest.raises(rv.InvalidSubject):
        rv.CmQueueTransport(t, "WORK.Q", dead_letter_subject="JOBS.*")
    with pytest.raises(rv.NotPermitted):
        rv.CmQueueTransport(t, "WORK.Q", dead_letter_subject="_RV.X")
    await sender.close()
    for member in (*[h.q for h in hung], scheduler):
        await member.close(timeout=0)
