"""Distributed queue failover: from a scheduler's kill -9 to the first task its successor hands out.

A coordinating worker starts the queue's members as programs of their own
(the adapter gives their command lines; they speak the line protocol of
:mod:`benchmarks.scenarios.failover`, plus ``task`` events): a scheduler, a
standby scheduler (both dedicated, task capacity 0, equal scheduler weight)
and ``workers`` workers. The coordinator itself sends a steady trickle of
certified tasks (one every ``interval`` seconds, numbered) and then, ``runs``
times: kills the active scheduler with SIGKILL at a random point of the
heartbeat cycle, waits for the successor's SCHEDULER.ACTIVE and for the first
task a worker starts after it, starts a replacement standby and lets the
queue settle. Times come from ``CLOCK_MONOTONIC`` in each process.

Figures per repetition (median over its runs, with the slowest):

- ``takeover_ms``: the kill to the first task a worker started after the
  successor became active (the time the queue handed out no work);
- ``active_ms``: the kill to the successor's SCHEDULER.ACTIVE.

After the last run the trickle stops and the coordinator waits until the
sender holds no unconfirmed task; every task sent must have reached a worker
(none lost). ``duplicates`` counts tasks a worker started more than once (the
spec's scheduler-replacement case: a task in a worker's hands when its
scheduler died may be handed out again).
"""

from __future__ import annotations

import abc
import asyncio
import random
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.measure import now_ns
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.scenarios.failover import MemberProcess, until
from benchmarks.stats import median
from benchmarks.worker import WorkerContext

SUBJECT = "BENCH.FAILOVER.RUN"


class QueueFailover(Adapter):
    """A distributed queue whose members run as separate programs, and a task sender."""

    @abc.abstractmethod
    def member_argv(self, name: str, queue: str, subject: str, *, scheduler: bool) -> list[str]:
        """The command line of a member: a dedicated scheduler, or a worker."""

    @abc.abstractmethod
    async def open_sender(self, queue: str, subject: str) -> None:
        """Open the certified sending end (tasks survive a scheduler's death)."""

    @abc.abstractmethod
    async def send(self, n: int) -> None:
        """Send task number ``n``."""

    @abc.abstractmethod
    async def unconfirmed(self) -> int:
        """Tasks sent and not yet confirmed."""


def _tasks(members: Sequence[MemberProcess]) -> list[tuple[int, int]]:
    """(n, t_ns) of every task event so far."""
    return [
        (int(e["n"]), int(e["t_ns"])) for m in members for e in m.events if e["event"] == "task"
    ]


def _actives(members: Sequence[MemberProcess]) -> list[MemberProcess]:
    return [m for m in members if m.active]


async def run(ctx: WorkerContext) -> dict[str, Any]:
    """Start the queue and the trickle, then kill the active scheduler ``runs`` times."""
    p = ctx.params
    bench = ctx.adapter
    assert isinstance(bench, QueueFailover)
    wait = float(p["wait"])
    activation = float(p["activation"])
    queue = f"BENCH.Q{secrets.token_hex(3).upper()}"
    schedulers: list[MemberProcess] = []
    workers: list[MemberProcess] = []
    serial = 0

    async def spawn(scheduler: bool) -> MemberProcess:
        nonlocal serial
        serial += 1
        name = f"{'s' if scheduler else 'w'}{serial}"
        argv = bench.member_argv(name, queue, SUBJECT, scheduler=scheduler)
        member = await MemberProcess.start(name, argv, wait)
        (schedulers if scheduler else workers).append(member)
        return member

    sent = 0

    async def trickle() -> None:
        nonlocal sent
        while True:
            await bench.send(sent)
            sent += 1
            await asyncio.sleep(float(p["interval"]))

    takeovers: list[float] = []
    actives: list[float] = []
    sending: asyncio.Task[None] | None = None
    try:
        first = await spawn(True)
        await first.wait_for(lambda: first.active, "the first scheduler's ACTIVATE", wait)
        await spawn(True)
        for _ in range(int(p["workers"])):
            await spawn(False)
        await bench.open_sender(queue, SUBJECT)
        sending = asyncio.ensure_future(trickle())
        await until(workers, lambda: len(_tasks(workers)) >= 10, "the first tasks", wait)
        await ctx.ready()
        await ctx.go()
        for _ in range(int(p["runs"])):
            await asyncio.sleep(random.uniform(0.0, float(p["heartbeat"])))
            (victim,) = _actives(schedulers)
            others = [m for m in schedulers if m is not victim]
            killed_at = now_ns()
            victim.sigkill()
            await until(others, lambda o=others: bool(_actives(o)), "a successor's ACTIVATE", wait)
            active_at = _actives(others)[0].actions()[-1][1]
            await until(
                workers,
                lambda after=active_at: any(t > after for _, t in _tasks(workers)),
                "a task after the successor's ACTIVATE",
                wait,
            )
            first_task = min(t for _, t in _tasks(workers) if t > active_at)
            actives.append((active_at - killed_at) / 1e6)
            takeovers.append((first_task - killed_at) / 1e6)
            await victim.kill()
            schedulers.remove(victim)
            await spawn(True)
            await asyncio.sleep(2 * activation)
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        sending = None
        async with asyncio.timeout(wait):
            while await bench.unconfirmed():
                await asyncio.sleep(0.05)
        handled = Counter(n for n, _ in _tasks(workers))
        missing = [n for n in range(sent) if n not in handled]
        if missing:
            raise RuntimeError(
                f"{len(missing)} of {sent} tasks never reached a worker: {missing[:10]}"
            )
        duplicates = sum(c - 1 for c in handled.values())
    finally:
        if sending is not None:
            sending.cancel()
        await asyncio.gather(*(m.kill() for m in schedulers + workers), return_exceptions=True)
        await bench.close()
    return {"takeover_ms": takeovers, "active_ms": actives, "sent": sent, "dups": duplicates}


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Medians and the slowest takeover of the repetition's runs."""
    (r,) = results["run"]
    takeovers = [float(x) for x in r["takeover_ms"]]
    if not takeovers:
        raise RuntimeError("no failover was measured")
    return {
        "takeover_ms": median(takeovers),
        "max_ms": max(takeovers),
        "active_ms": median([float(x) for x in r["active_ms"]]),
        "duplicates": float(r["dups"]),
    }


QUEUE_FAILOVER = scenario(
    Scenario(
        name="queue-failover",
        title="Distributed queue: kill -9 of the scheduler to the first task from its successor",
        description=(
            "A scheduler, a standby scheduler (both dedicated) and 4 worker processes of one "
            "queue (heartbeat 0.3 s, activation 1.0 s), each with its own transport and daemon; "
            "a certified sender trickles 100 tasks/s. SIGKILL of the active scheduler, then the "
            "time until a worker starts the first task after the successor's SCHEDULER.ACTIVE "
            "('takeover'), and until that advisory ('active'). Median of the runs (5; 1 with "
            "--quick). Afterwards every task sent must have been confirmed and reached a worker; "
            "'duplicates' counts tasks started twice. Target: takeover within activation + one "
            "heartbeat (1.3 s)."
        ),
        capability="queue-failover",
        primary=Metric("takeover_ms", "kill -9 to first task (median)", "ms", "lower"),
        extras=(
            Metric("max_ms", "slowest takeover", "ms", "lower"),
            Metric("active_ms", "kill -9 to SCHEDULER.ACTIVE (median)", "ms", "lower"),
            Metric("duplicates", "tasks started twice", "tasks", "lower"),
        ),
        chart=("takeover_ms", "active_ms", "max_ms"),
        roles={"run": run},
        layout=lambda p: (RoleGroup("run", 1),),
        combine=combine,
        params={
            "workers": 4,
            "runs": 5,
            "interval": 0.01,
            "heartbeat": 0.3,
            "activation": 1.0,
            "wait": 30.0,
            "ready_timeout": 120.0,
        },
        quick={"runs": 1},
        timeout=240.0,
        quick_timeout=120.0,
        order=48,
    )
)
