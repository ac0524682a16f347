"""Distributed queues: tasks per second through one sender, a scheduler and four workers.

Layout, in start order: a ``scheduler`` process, ``workers`` worker
processes, then the ``sender``. What each does depends on the system:

- rvasync: the scheduler is a dedicated ``CmQueueTransport`` member (task
  capacity 0, the highest scheduler weight, so it is the one elected); each
  worker is a member with ``capacity`` tasks; the sender is an ordinary
  ``CmTransport`` (process ledger) that pre-registers the queue as a listener
  and sends each task certified; a task counts once the sender's ledger no
  longer holds it, i.e. once the scheduler confirmed it after a worker
  completed it.
- NATS JetStream: nats-server is the scheduler; the scheduler process only
  (re)creates the work-queue stream and the one durable pull consumer the
  workers share, then idles. Workers fetch in batches and ack each message
  explicitly; the sender publishes with ``publish_async`` (PubAcks awaited in
  a window) and a task counts once the stream no longer holds it (a
  work-queue stream drops a message when its ack arrives).
- NATS core queue group (reference, no acknowledgement at all): workers
  subscribe in one queue group; the sender publishes; a task counts once a
  worker has received it (the sender asks the workers for their counts).

The sender warms up first (short warm-up tasks until every one sent so far is
confirmed, so agreements, consumers and interest are in place), then on
``go`` sends ``tasks`` data tasks (a new message per send, ``size`` bytes),
then polls until all are confirmed. Workers handle each task by counting it.

Figures, from the first send (``CLOCK_MONOTONIC``, comparable across processes):

- ``tasks_per_s``: tasks per second until the sender knows every task is done;
- ``handled_per_s``: tasks per second until the last task reached a worker;
- ``sent_per_s``: the sender's own rate.

The combine step checks that the workers together handled exactly the tasks
sent (no loss, no duplicate) and reports how the tasks were spread.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.measure import now_ns, payload
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

SUBJECT = "BENCH.TASKS.RUN"

#: What warm-up tasks carry: shorter than any data payload (at least 16 B).
WARM_UP = b"warm-up"

#: Seconds between warm-up tasks.
WARM_UP_INTERVAL = 0.05

#: Confirmation polling spends at most 1 / POLL_SHARE of the sender's time.
POLL_SHARE = 10
MIN_POLL = 0.002


class TaskQueue(Adapter):
    """A queue whose tasks each reach one of several workers."""

    @abc.abstractmethod
    async def open_scheduler(self, subject: str) -> None:
        """Set up what schedules the tasks; on return it is in charge."""

    @abc.abstractmethod
    async def open_worker(self, subject: str) -> None:
        """Join as a worker for ``subject``; on return the scheduler may give it tasks."""

    @abc.abstractmethod
    async def work(self, sink: Callable[[bytes], None]) -> None:
        """Hand each task's payload to ``sink``, then acknowledge it; until cancelled."""

    @abc.abstractmethod
    async def open_sender(self, subject: str) -> None:
        """Open the sending end for ``subject``."""

    @abc.abstractmethod
    async def send(self, data: bytes) -> None:
        """Send one task (a new message) carrying ``data``."""

    async def flush(self) -> None:
        """Wait until every send so far is accepted (for systems that pipeline sends)."""

    @abc.abstractmethod
    async def all_done(self, sent: int) -> bool:
        """True once every one of the ``sent`` tasks sent so far is acknowledged."""


async def _until_stopped(ctx: WorkerContext, task: asyncio.Future[None] | None) -> None:
    """Report ready, then run until the runner says stop (or ``task`` fails)."""

    async def control() -> None:
        await ctx.ready()
        await ctx.go()
        await ctx.stopped()

    controlled = asyncio.ensure_future(control())
    waits: set[asyncio.Future[None]] = {controlled} if task is None else {controlled, task}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if task is not None and task.done():
            task.result()
            raise RuntimeError("the worker's loop ended before stop")
        controlled.result()
    finally:
        for pending in waits:
            pending.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def scheduler(ctx: WorkerContext) -> dict[str, Any]:
    """Set up the scheduling end and keep it until stopped."""
    client = ctx.adapter
    assert isinstance(client, TaskQueue)
    try:
        await client.open_scheduler(SUBJECT)
        await _until_stopped(ctx, None)
    finally:
        await client.close()
    return {}


async def worker(ctx: WorkerContext) -> dict[str, Any]:
    """Count the data tasks handled until the runner says stop."""
    client = ctx.adapter
    assert isinstance(client, TaskQueue)
    size = int(ctx.params["size"])
    count = 0
    t_last = 0

    def sink(data: bytes) -> None:
        nonlocal count, t_last
        if len(data) == size:
            count += 1
            t_last = now_ns()

    try:
        await client.open_worker(SUBJECT)
        # Working starts before ready: the sender's warm-up needs the workers.
        await _until_stopped(ctx, asyncio.ensure_future(client.work(sink)))
    finally:
        await client.close()
    return {"count": count, "t_last": t_last}


async def _wait_done(client: TaskQueue, sent: int, timeout: float) -> None:
    """Poll until all ``sent`` tasks are done, spending at most 1/POLL_SHARE on the checks."""
    async with asyncio.timeout(timeout):
        while True:
            t0 = time.perf_counter()
            if await client.all_done(sent):
                return
            took = time.perf_counter() - t0
            await asyncio.sleep(max(MIN_POLL, (POLL_SHARE - 1) * took))


async def sender(ctx: WorkerContext) -> dict[str, Any]:
    """Warm up, then send the tasks and wait until every one is done."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, TaskQueue)
    count = int(p["tasks"])
    sent = 0
    try:
        await client.open_sender(SUBJECT)
        try:
            async with asyncio.timeout(float(p["ready_timeout"]) - 10):
                while True:
                    await client.send(WARM_UP)
                    sent += 1
                    await client.flush()
                    await asyncio.sleep(WARM_UP_INTERVAL)
                    if await client.all_done(sent):
                        break
        except TimeoutError:
            raise TimeoutError(f"the {sent} warm-up tasks were not all done in time") from None
        data = payload(int(p["size"]))
        await ctx.ready()
        await ctx.go()
        t_start = now_ns()
        send = client.send
        for i in range(count):
            await send(data)
            if i % 1000 == 999:
                await asyncio.sleep(0)
        await client.flush()
        t_sent = now_ns()
        await _wait_done(client, sent + count, float(p["timeout"]) - 10)
        t_done = now_ns()
    finally:
        await client.close()
    return {"sent": count, "t_start": t_start, "t_sent": t_sent, "t_done": t_done}


def layout(p: Params) -> Sequence[RoleGroup]:
    """The scheduler, then the workers (both passive), then the sender."""
    return (
        RoleGroup("scheduler", 1, passive=True),
        RoleGroup("worker", int(p["workers"]), passive=True),
        RoleGroup("sender", 1),
    )


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Done, handled and sent per second from the first send; exactly-once checked."""
    (s,) = results["sender"]
    got = [int(r["count"]) for r in results["worker"]]
    sent = int(s["sent"])
    if sum(got) != sent:
        raise RuntimeError(f"workers handled {got} (sum {sum(got)}) data tasks, {sent} were sent")
    t0 = int(s["t_start"])
    t_handled = max(int(r["t_last"]) for r in results["worker"])
    return {
        "tasks_per_s": sent / ((int(s["t_done"]) - t0) / 1e9),
        "handled_per_s": sent / ((t_handled - t0) / 1e9),
        "sent_per_s": sent / ((int(s["t_sent"]) - t0) / 1e9),
        "busiest_share": max(got) / sent,
    }


QUEUE_TASKS = scenario(
    Scenario(
        name="queue-tasks",
        title="Distributed queue: trivial tasks through a scheduler to 4 workers",
        description=(
            "One sender, one scheduler and 4 worker processes; each task (16 B) is handled "
            "by counting it. rvasync: CmTransport sender (process ledger) to a CmQueueTransport "
            "queue (dedicated scheduler, worker capacity 32), each task confirmed to the sender "
            "after a worker completed it. JetStream: work-queue stream (file or memory), one "
            "durable pull consumer shared by the workers, batch fetches and explicit acks, "
            "publish_async. NATS core queue group: no acknowledgement (reference). 'done': tasks "
            "per second until the sender knows every task is done (confirmed / acked / received); "
            "'handled': until the last task reached a worker. Exactly-once checked. Target: "
            "ahead of JetStream's work queue."
        ),
        capability="queue",
        primary=Metric("tasks_per_s", "done", "tasks/s", "higher"),
        extras=(
            Metric("handled_per_s", "handled", "tasks/s", "higher"),
            Metric("sent_per_s", "send rate", "tasks/s", "higher"),
            Metric("busiest_share", "busiest worker's share", "fraction", "lower"),
        ),
        chart=("tasks_per_s", "handled_per_s"),
        roles={"scheduler": scheduler, "worker": worker, "sender": sender},
        layout=layout,
        combine=combine,
        params={
            "size": 16,
            "workers": 4,
            "tasks": 20_000,
            "capacity": 32,
            "heartbeat": 0.3,
            "activation": 1.0,
            "ready_timeout": 90.0,
        },
        quick={"tasks": 2_000},
        timeout=180.0,
        quick_timeout=90.0,
        order=47,
    )
)
