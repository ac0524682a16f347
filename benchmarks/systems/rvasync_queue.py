"""rvasync distributed queues for the queue scenarios: ``rv.CmQueueTransport`` members.

Every process opens ``rv.Transport(service=<the row's UDP port>, network=None)``
(its in-process daemon; the daemons meet on the service over loopback). The
scheduler process is a dedicated member (``worker_tasks=0``, scheduler weight
100, so it wins the election against the workers' weight 1) and reports ready
once it is the active scheduler; workers are members with the scenario's task
capacity, consuming with ``async for`` (automatic confirmation, which
completes the task). The sender is an ordinary ``CmTransport`` with a process
ledger that pre-registers the queue as a certified listener
(``add_listener``), so no task sent before the scheduler registers is
dropped; a task is done when the sender's ledger no longer holds it.

For ``queue-failover`` the members are programs of their own
(:mod:`benchmarks.systems.rvasync_cmq_member`): the schedulers with weight
100 and capacity 0, the workers with weight 1; the coordinator's sender is
the same kind of certified sender.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.environments import UdpPort
from benchmarks.registry import adapter
from benchmarks.scenarios.queue import TaskQueue
from benchmarks.scenarios.queue_failover import QueueFailover
from benchmarks.systems.rvasync_api import missing

QUEUE = "BENCH.TASKS"

#: Scheduler weight of the dedicated scheduler (workers keep 1).
SCHEDULER_WEIGHT = 100

#: Task capacity of each worker in the failover scenario (its trickle never fills it).
FAILOVER_CAPACITY = 8


@adapter
class RvTaskQueue(TaskQueue):
    """``CmTransport.send`` into a ``CmQueueTransport`` queue."""

    system = "rvasync"
    capability = "queue"
    environment = UdpPort

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message", "FieldType", "CmTransport", "CmQueueTransport")

    async def _transport(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.transport = rv.Transport(service=str(self.env["ports"][0]), network=None)
        await asyncio.wait_for(self.transport.open(), 30)

    def _member(self, *, tasks: int, weight: int) -> Any:
        p = self.params
        return self.rv.CmQueueTransport(
            self.transport,
            QUEUE,
            worker_tasks=tasks,
            scheduler_weight=weight,
            scheduler_heartbeat=float(p["heartbeat"]),
            scheduler_activation=float(p["activation"]),
        )

    # --- scheduler --------------------------------------------------------------------

    async def open_scheduler(self, subject: str) -> None:
        await self._transport()
        self.member = self._member(tasks=0, weight=SCHEDULER_WEIGHT)
        self.listener = self.member.listen(subject)  # the subjects it is correspondent for
        async with asyncio.timeout(30):
            while not self.member.is_scheduler:
                await asyncio.sleep(0.02)

    # --- worker -----------------------------------------------------------------------

    async def open_worker(self, subject: str) -> None:
        await self._transport()
        self.member = self._member(tasks=int(self.params["capacity"]), weight=1)
        self.listener = self.member.listen(subject)

    async def work(self, sink: Callable[[bytes], None]) -> None:
        async for msg in self.listener:
            sink(msg["data"])

    # --- sender -----------------------------------------------------------------------

    async def open_sender(self, subject: str) -> None:
        await self._transport()
        self.subject = subject
        self.cm = self.rv.CmTransport(self.transport, f"BENCH_S_{secrets.token_hex(4).upper()}")
        await asyncio.wait_for(self.cm.open(), 30)
        await asyncio.wait_for(self.cm.add_listener(QUEUE, subject), 30)

    async def send(self, data: bytes) -> None:
        msg = self.rv.Message(self.subject)
        msg.add("data", data, type=self.rv.FieldType.OPAQUE)
        await self.cm.send(msg)

    async def all_done(self, sent: int) -> bool:
        reviews = self.cm.review_ledger(self.subject)
        return not reviews or reviews[0].total_messages == 0

    async def close(self) -> None:
        listener = getattr(self, "listener", None)
        if listener is not None:
            await asyncio.wait_for(listener.close(), 10)
        for name in ("member", "cm", "transport"):
            obj = getattr(self, name, None)
            if obj is not None:
                await asyncio.wait_for(obj.close(), 30)


@adapter
class RvQueueFailover(QueueFailover):
    """Members are ``python -m benchmarks.systems.rvasync_cmq_member`` processes."""

    system = "rvasync"
    capability = "queue-failover"
    environment = UdpPort

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message", "CmTransport", "CmQueueTransport")

    def member_argv(self, name: str, queue: str, subject: str, *, scheduler: bool) -> list[str]:
        p = self.params
        return [
            sys.executable,
            "-m",
            "benchmarks.systems.rvasync_cmq_member",
            "--service",
            str(self.env["ports"][0]),
            "--queue",
            queue,
            "--subject",
            subject,
            "--name",
            name,
            "--worker-tasks",
            "0" if scheduler else str(FAILOVER_CAPACITY),
            "--scheduler-weight",
            str(SCHEDULER_WEIGHT if scheduler else 1),
            "--heartbeat",
            str(p["heartbeat"]),
            "--activation",
            str(p["activation"]),
        ]

    async def open_sender(self, queue: str, subject: str) -> None:
        import rvasync as rv

        self.rv = rv
        self.subject = subject
        self.transport = rv.Transport(service=str(self.env["ports"][0]), network=None)
        await asyncio.wait_for(self.transport.open(), 30)
        self.cm = rv.CmTransport(self.transport, f"BENCH_FS_{secrets.token_hex(4).upper()}")
        await asyncio.wait_for(self.cm.open(), 30)
        await asyncio.wait_for(self.cm.add_listener(queue, subject), 30)

    async def send(self, n: int) -> None:
        await self.cm.send(self.rv.Message(self.subject, {"n": n}))

    async def unconfirmed(self) -> int:
        reviews = self.cm.review_ledger(self.subject)
        return reviews[0].total_messages if reviews else 0

    async def close(self) -> None:
        for name in ("cm", "transport"):
            obj = getattr(self, name, None)
            if obj is not None:
                await asyncio.wait_for(obj.close(), 30)
