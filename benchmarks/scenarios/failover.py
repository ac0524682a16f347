"""Fault-tolerance failover: how long a group goes without an active member.

A coordinating worker starts ``members`` member processes (each its own
program, with its own transport and daemon) on one service, waits until
exactly one is active, then repeatedly fails the active one and times the gap
until another member's ACTIVATE:

- ``failover-kill``: SIGKILL of the active member's process (no goodbye: the
  others must notice its silence);
- ``failover-exit``: the active member withdraws and exits gracefully (its
  goodbye lets the next one take over at once).

After each failure a replacement member is started and the group is let settle,
so every run starts from the same shape; the failure then comes at a random
point of the heartbeat cycle. The failure time is read just before
the signal or the command is sent, the activation time inside the successor's
callback; both come from ``CLOCK_MONOTONIC``, which Linux keeps system-wide, so
times taken in different processes compare. One repetition makes ``runs``
failovers and reports their median, minimum and maximum.

Member programs speak a line protocol (the adapter gives their command line):
JSON lines on stdout ``{"event": "ready" | "action" | "exited", "t_ns": ...}``
(``action`` events carry ``"action": "ACTIVATE" | "DEACTIVATE" | ...``); on stdin
``exit`` (or end of input) withdraws and ends the process with status 0.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.measure import now_ns
from benchmarks.procs import _die_with_parent
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.stats import median
from benchmarks.worker import WorkerContext

ROOT = Path(__file__).resolve().parent.parent.parent


class Failover(Adapter):
    """A fault-tolerance group whose members run as separate programs."""

    @abc.abstractmethod
    def member_argv(self, name: str, group: str) -> list[str]:
        """The command line of one member program joining ``group`` (line protocol above)."""


class MemberProcess:
    """One member program: its reported events, and commands on its stdin.

    It stays in the worker's process group (so the runner's kill of the worker
    takes it too) and asks Linux to kill it if the worker dies.
    """

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, name: str, argv: Sequence[str], timeout: float) -> MemberProcess:
        """Spawn ``argv`` and wait (up to ``timeout`` s) for its ``ready`` line."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent,
        )
        member = cls(name, process)
        try:
            await member.wait_for(lambda: member.seen("ready"), "ready", timeout)
        except BaseException:
            await member.kill()
            raise
        return member

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))
                self.changed.set()
        self.changed.set()  # end of output: waiters re-check (and see the exit)

    def seen(self, event: str) -> bool:
        return any(e["event"] == event for e in self.events)

    def actions(self) -> list[tuple[str, int]]:
        """(action, t_ns) in order."""
        return [(e["action"], int(e["t_ns"])) for e in self.events if e["event"] == "action"]

    @property
    def active(self) -> bool:
        """Its last action was ACTIVATE."""
        actions = self.actions()
        return bool(actions) and actions[-1][0] == "ACTIVATE"

    async def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float) -> None:
        await until([self], predicate, f"{self.name}: {what}", timeout)

    def command(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode() + b"\n")

    def sigkill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)

    async def kill(self) -> None:
        """SIGKILL (if still running) and reap; idempotent."""
        if self.process.returncode is None:
            self.sigkill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), 10)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reader), 5)
        self._reader.cancel()


async def until(
    members: Sequence[MemberProcess], predicate: Callable[[], bool], what: str, timeout: float
) -> None:
    """Wait until ``predicate()`` holds, re-checking whenever a member reports something."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                for m in members:
                    m.changed.clear()
                waits = [asyncio.ensure_future(m.changed.wait()) for m in members]
                try:
                    await asyncio.wait(waits, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
    except TimeoutError:
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}") from None


def _actives(members: Sequence[MemberProcess]) -> list[MemberProcess]:
    return [m for m in members if m.active]


async def _settle(members: Sequence[MemberProcess], activation: float, timeout: float) -> None:
    """Exactly one active member, and still exactly one after two activation intervals
    (a newcomer has heard the group by then and must not have taken over)."""
    await until(members, lambda: len(_actives(members)) == 1, "exactly one active member", timeout)
    await asyncio.sleep(2 * activation)
    actives = [m.name for m in _actives(members)]
    if len(actives) != 1:
        raise RuntimeError(f"after settling, the active members are {actives}, expected one")


async def _successor(others: Sequence[MemberProcess], timeout: float) -> None:
    await until(others, lambda: bool(_actives(others)), "a successor's ACTIVATE", timeout)


async def run(ctx: WorkerContext) -> dict[str, Any]:
    """Start the group, then fail its active member ``runs`` times."""
    p = ctx.params
    bench = ctx.adapter
    assert isinstance(bench, Failover)
    graceful = p["how"] == "exit"
    activation = float(p["activation"])
    wait = float(p["wait"])
    group = f"BENCH.FT.{secrets.token_hex(4).upper()}"
    serial = 0
    members: list[MemberProcess] = []

    async def spawn() -> MemberProcess:
        nonlocal serial
        serial += 1
        name = f"m{serial}"
        member = await MemberProcess.start(name, bench.member_argv(name, group), wait)
        members.append(member)
        return member

    gaps: list[float] = []
    try:
        for _ in range(int(p["members"])):
            await spawn()
        await _settle(members, activation, wait)
        await ctx.ready()
        await ctx.go()
        for _ in range(int(p["runs"])):
            # A random point of the heartbeat cycle: otherwise the settling time fixes
            # where in the cycle the failure falls, and every run measures the same case.
            await asyncio.sleep(random.uniform(0.0, float(p["heartbeat"])))
            (victim,) = _actives(members)
            others = tuple(m for m in members if m is not victim)
            failed_at = now_ns()
            if graceful:
                victim.command("exit")
            else:
                victim.sigkill()
            await _successor(others, wait)
            successor = _actives(others)[0]
            activated_at = successor.actions()[-1][1]
            gaps.append((activated_at - failed_at) / 1e6)
            code = await asyncio.wait_for(victim.process.wait(), wait)
            if graceful and code != 0:
                raise RuntimeError(f"{victim.name} exited with status {code} after 'exit'")
            await victim.kill()  # reaps its output reader
            members.remove(victim)
            await spawn()
            await _settle(members, activation, wait)
    finally:
        await asyncio.gather(*(m.kill() for m in members), return_exceptions=True)
    return {"gaps_ms": gaps}


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Median, minimum and maximum failover time over the repetition's runs."""
    (r,) = results["run"]
    gaps = [float(g) for g in r["gaps_ms"]]
    if not gaps:
        raise RuntimeError("no failover was measured")
    return {"failover_ms": median(gaps), "min_ms": min(gaps), "max_ms": max(gaps)}


def _failover(name: str, how: str, title: str, what: str, order: int) -> Scenario:
    return scenario(
        Scenario(
            name=name,
            title=title,
            description=(
                "Three fault-tolerance member processes of one group (heartbeat 0.3 s, "
                f"activation 1.0 s), each with its own transport and daemon; {what} the active "
                "member and time until another member's ACTIVATE callback (CLOCK_MONOTONIC in "
                "both processes). A replacement joins and the group settles before the next run. "
                "Median of the runs of a repetition (10; 3 with --quick), with their min and max."
            ),
            capability="failover",
            primary=Metric("failover_ms", "failover (median)", "ms", "lower"),
            extras=(
                Metric("min_ms", "fastest", "ms", "lower"),
                Metric("max_ms", "slowest", "ms", "lower"),
            ),
            chart=("failover_ms", "min_ms", "max_ms"),
            roles={"run": run},
            layout=lambda p: (RoleGroup("run", 1),),
            combine=combine,
            params={
                "how": how,
                "members": 3,
                "runs": 10,
                "heartbeat": 0.3,
                "activation": 1.0,
                "wait": 30.0,
                "ready_timeout": 120.0,
            },
            quick={"runs": 3},
            timeout=300.0,
            quick_timeout=150.0,
            order=order,
        )
    )


_failover(
    "failover-kill",
    "kill",
    "Fault tolerance: kill -9 of the active member to ACTIVATE",
    "SIGKILL",
    70,
)
_failover(
    "failover-exit",
    "exit",
    "Fault tolerance: graceful exit of the active member to ACTIVATE",
    "gracefully stop",
    71,
)
