"""Distributed queues between lab hosts: the scheduler's host killed or cut off under loss.

Three hosts, each with its own daemon: two dedicated schedulers (weights 10
and 5) on hosts 0 and 1, one worker on every host (tests/cmqpeer.py), and a
certified task sender on host 2 (tests/cmqsender.py); every host loses 5 % of
the datagrams it receives. In the middle of the stream the active
scheduler's process is killed -9, or its whole host is cut off from the
others (and later healed). A successor takes over; afterwards the sender's
ledger is empty (every task was confirmed by the queue) and every task was
started by some worker. Tasks started twice are counted: the specification
allows them when a scheduler is replaced (a worker cut off with its scheduler
keeps working while the other side reassigns its tasks); after a kill -9 only
tasks in flight can run twice (usually none: 0 in 9 runs before the origin
stamp landed, 3 in 2 of 11 runs after it).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.lab import Lab, LabProcess

pytestmark = pytest.mark.lab

TESTS = Path(__file__).resolve().parents[1]
QUEUE = "LAB.Q"
TASKS = 300


class Reporter:
    """A process printing JSON lines, read in the background."""

    def __init__(self, proc: LabProcess, name: str) -> None:
        self.proc = proc
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while line := await self.proc.readline(3600):
            self.events.append(json.loads(line))

    def seen(self, event: str) -> bool:
        return any(e["event"] == event for e in self.events)

    @property
    def scheduler(self) -> bool:
        roles = [e["scheduler"] for e in self.events if e["event"] == "role"]
        return bool(roles) and roles[-1]

    def started(self) -> list[int]:
        return [int(e["n"]) for e in self.events if e["event"] == "start"]


async def until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def _queue(lab: Lab, service: str) -> tuple[list[Reporter], list[Reporter]]:
    async def member(host: int, name: str, *opts: str) -> Reporter:
        h = lab.hosts[host]
        proc = await h.spawn(
            str(TESTS / "cmqpeer.py"), "--service", service, "--network", h.network(),
            "--queue", QUEUE, "--name", name, "--heartbeat", "0.3", "--activation", "1.2", *opts,
        )  # fmt: skip
        reporter = Reporter(proc, name)
        await until(lambda: reporter.seen("ready"), f"{name} to be ready")
        return reporter

    first = await member(0, "sched-a", "--scheduler-weight", "10", "--worker-tasks", "0")
    await until(lambda: first.scheduler, "sched-a to be the scheduler")
    standby = await member(1, "sched-b", "--scheduler-weight", "5", "--worker-tasks", "0")
    workers = [await member(i, f"w{i}", "--worker-tasks", "4") for i in range(3)]
    return [first, standby], workers


async def _run(lab: Lab, figures: dict[str, Any], cut_off: bool) -> None:
    service = str(free_port())
    for host in lab.hosts:
        host.loss(5)
    (sched_a, sched_b), workers = await _queue(lab, service)
    h = lab.hosts[2]
    sender = Reporter(
        await h.spawn(
            str(TESTS / "cmqsender.py"), "--service", service, "--network", h.network(),
            "--queue", QUEUE, "--count", str(TASKS), "--pace", "0.02",
        ),
        "sender",
    )  # fmt: skip

    def started() -> Counter[int]:
        return Counter(n for w in workers for n in w.started())

    await until(lambda: len(started()) >= TASKS // 3, "a third of the tasks to start", 60)
    if cut_off:
        lab.hosts[0].partition()
    else:
        sched_a.proc.kill9()
        await sched_a.proc.wait()
    await until(lambda: sched_b.scheduler, "sched-b to take over", 30)
    await until(lambda: sender.seen("sent"), "the sender to send every task", 60)
    if cut_off:
        await asyncio.sleep(2.0)
        lab.hosts[0].heal()
    await until(lambda: sender.seen("confirmed"), "every task to be confirmed", 90)
    handled = started()
    missing = [n for n in range(TASKS) if n not in handled]
    assert not missing, f"{len(missing)} confirmed tasks were never started: {missing[:20]}"
    duplicates = sum(c - 1 for c in handled.values())
    if not cut_off:
        # The specification (and docs/distributed-queues.md) allows a task in flight when
        # its scheduler is replaced to run twice: one a worker completed whose report the
        # successor had not heard (lost under the 5 % loss) when the sender gave it the
        # task again. Only tasks in flight can: at most what the workers hold at once.
        in_flight = 3 * 4  # three workers, four tasks each
        assert duplicates <= in_flight, f"{duplicates} tasks were started twice after a kill -9"
    figures.update(
        hosts=3, tasks=TASKS, loss_pct=5, fault="partition" if cut_off else "kill -9",
        duplicates=duplicates, datagrams_dropped=sum(h.packets("drop") for h in lab.hosts),
    )  # fmt: skip


async def test_queue_survives_kill_9_of_the_schedulers_process_under_loss(
    lab3: Lab, figures: dict[str, Any]
) -> None:
    await _run(lab3, figures, cut_off=False)


async def test_queue_survives_the_schedulers_host_cut_off_under_loss(
    lab3: Lab, figures: dict[str, Any]
) -> None:
    await _run(lab3, figures, cut_off=True)
