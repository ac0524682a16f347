"""Distributed queues between real processes: kill -9 of workers and of the scheduler under load.

Three members, each a process of its own (``tests/cmqpeer.py``) with its
in-process daemon, meet on a free loopback service; the certified sender runs
in the test's process. Killed members get no goodbye: the others must notice
by silence. The properties: every task is processed and confirmed (none
lost); a task runs twice only if a killed member had it (worker exit) or the
scheduler was replaced.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import rvasync as rv

PEER = str(Path(__file__).with_name("cmqpeer.py"))
QUEUE = "TEST.CMQ.PROC"
WAIT = 60.0
TASKS = 60


class Member:
    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.events.append(json.loads(line))

    def of(self, event: str) -> list[int]:
        return [e["n"] for e in self.events if e["event"] == event]

    @property
    def scheduler(self) -> bool:
        roles = [e["scheduler"] for e in self.events if e["event"] == "role"]
        return bool(roles) and roles[-1]

    def holding(self) -> set[int]:
        return set(self.of("start")) - set(self.of("done"))

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()
        await asyncio.wait({self._reader}, timeout=5)


async def until(
    predicate: Callable[[], bool],
    what: str,
    timeout: float = WAIT,
    on_timeout: Callable[[], object] = lambda: "",
) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what} {on_timeout()}"
        ) from None


@pytest.fixture
async def spawn(rv_service) -> AsyncIterator[Callable[..., Any]]:
    service, network = rv_service
    members: list[Member] = []

    async def start(name: str, **options: Any) -> Member:
        args = [PEER, "--service", service, "--network", network, "--queue", QUEUE, "--name", name]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-u",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        member = Member(name, process)
        members.append(member)
        await until(lambda: any(e["event"] == "ready" for e in member.events), f"{name} ready")
        return member

    start.service = service  # type: ignore[attr-defined]
    start.network = network  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        for member in members:
            await member.stop()


def unconfirmed(cm: rv.CmTransport) -> int:
    reviews = cm.review_ledger("JOBS.RUN")
    return reviews[0].total_messages if reviews else 0


async def test_kill_9_of_a_busy_worker_and_of_the_scheduler_loses_no_task(spawn) -> None:
    members = [
        await spawn("s", scheduler_weight=9, worker_weight=1, work=0.2),
        await spawn("b", scheduler_weight=5, worker_weight=3, work=0.2),
        await spawn("c", worker_weight=2, work=0.2),
        await spawn("d", worker_weight=1, work=0.2),
    ]
    await until(lambda: [m.name for m in members if m.scheduler] == ["s"], "s to schedule")
    async with rv.Transport(spawn.service, network=spawn.network) as transport:
        sender = rv.CmTransport(transport, "SENDER")
        await sender.add_listener(QUEUE, "JOBS.RUN")
        for n in range(TASKS):
            await sender.send(rv.Message("JOBS.RUN", {"n": n}))
        # kill -9 the heaviest worker while it holds a task.
        heavy = members[1]
        await until(
            lambda: bool(heavy.holding()) and len(heavy.of("done")) >= 3,
            "b busy",
            on_timeout=lambda: [(m.name, m.of("done"), m.scheduler) for m in members],
        )
        in_hand = heavy.holding()
        heavy.process.kill()
        # Then the scheduler, under load.
        sched = members[0]
        await until(lambda: sum(len(m.of("done")) for m in members) >= TASKS // 3, "progress")
        sched_held = sched.holding()
        sched.process.kill()
        survivors = members[2:]
        await until(lambda: any(m.scheduler for m in survivors), "a new scheduler")
        await until(lambda: unconfirmed(sender) == 0, "every task confirmed")
        # A worker reports "done" before it confirms, but the report travels on its
        # stdout and the confirmation on the network: the last report may still be
        # on its way to this process when the sender's ledger empties.
        await until(
            lambda: {n for m in members for n in m.of("done")} >= set(range(TASKS)),
            "every confirmed task reported done",
            on_timeout=lambda: set(range(TASKS)) - {n for m in members for n in m.of("done")},
        )
        done = Counter(n for m in members for n in m.of("done"))
        assert set(done) == set(range(TASKS)), f"lost: {set(range(TASKS)) - set(done)}"
        # Duplicates: only tasks a killed member had, or in flight at the replacement.
        twice = {n for n, k in done.items() if k > 1}
        assert len(twice) <= len(in_hand | sched_held) + 4, (twice, in_hand, sched_held)
        await sender.close()


async def test_a_worker_closed_while_its_task_runs_finishes_it_and_nobody_else_runs_it(
    spawn,
) -> None:
    """Issue 34 item 3: close() used to withdraw at once, the callback was cut short and the
    scheduler gave the task to another worker. Now the worker finishes what it started,
    hands back what it had not started, and only then leaves."""
    members = [
        await spawn("s", scheduler_weight=9, worker_tasks=0),
        await spawn("b", worker_weight=5, worker_tasks=2, work=1.0),
        await spawn("c", worker_weight=1, work=0.05),
    ]
    await until(lambda: members[0].scheduler, "s to schedule")
    busy, other = members[1], members[2]
    async with rv.Transport(spawn.service, network=spawn.network) as transport:
        sender = rv.CmTransport(transport, "SENDER")
        await sender.add_listener(QUEUE, "JOBS.RUN")
        for n in range(3):
            await sender.send(rv.Message("JOBS.RUN", {"n": n}))
        await until(lambda: len(busy.holding()) == 1, "b busy with a task")
        (running,) = busy.holding()
        assert busy.process.stdin is not None
        busy.process.stdin.close()  # cmqpeer then closes its member and exits
        assert await asyncio.wait_for(busy.process.wait(), WAIT) == 0
        await until(lambda: unconfirmed(sender) == 0, "every task confirmed")
        await until(
            lambda: {n for m in members for n in m.of("done")} >= {0, 1, 2}, "all reported done"
        )
        assert running in busy.of("done")
        started = Counter(n for m in members for n in m.of("start"))
        assert started == {0: 1, 1: 1, 2: 1}, (started, busy.of("start"), other.of("start"))
        await sender.close()
