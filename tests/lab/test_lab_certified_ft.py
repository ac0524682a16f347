"""Certified delivery and fault tolerance between lab hosts, with kill -9 and lossy links.

Certified: a sender and a listener on two hosts, each a persistent correspondent
with a file ledger (tests/cmpeer.py), killed -9 at random points, alone or
together, while 10% of the datagrams each host receives are lost. Afterwards
no sequence number was handed out twice, every number is delivered or was
reported unavailable to the listener (a killed sender skips the numbers it
had reserved, some of which may belong to messages it numbered but had not
written), each listener process saw its numbers in order, and a restarted
listener saw again only what its ledger had not confirmed.

Fault tolerance: three members on three hosts (tests/ftpeer.py); the active
one is killed -9, then another is partitioned from the rest. Exactly one is
active once the activation interval has passed; during a partition each side
activates its own (the specification's behaviour: members cannot tell a dead
peer from an unreachable one), and when it heals the group converges back to
exactly one.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.conftest import long_run
from tests.lab.lab import Lab, LabProcess
from tests.test_cm_driver_processes import (
    check_nothing_lost,
    confirmed_in,
    handed_out,
    reported_gaps,
    segments,
)

pytestmark = pytest.mark.lab

TESTS = Path(__file__).resolve().parents[1]
SUBJECT = "REMEMBER.THIS"


class CmRole:
    """One certified correspondent process on a lab host, restarted as often as needed."""

    def __init__(self, lab: Lab, host_index: int, role: str, args: list[str]) -> None:
        self.lab = lab
        self.host = lab.hosts[host_index]
        self.role = role
        self.args = args
        self.proc: LabProcess | None = None

    async def start(self) -> None:
        self.proc = await self.host.spawn(
            str(TESTS / "cmpeer.py"), self.role, "--network", self.host.network(), *self.args
        )
        line = await self.proc.readline(30)
        assert line.strip() == b"ready", f"{self.role} did not start: {line!r}"

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill9()
        await self.proc.wait()

    async def read_done(self) -> int:
        assert self.proc is not None
        while True:
            line = await self.proc.readline(120)
            assert line, "the sender exited before it was done"
            if line.startswith(b"done "):
                return int(line.split()[1])


@pytest.mark.timeout(600)
async def test_certified_across_hosts_survives_kill_9_under_loss(
    lab2: Lab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    rng = random.Random(7)
    kills = 50 if long_run() else 6
    target = 6000 if long_run() else 800
    service = str(free_port())
    out = tmp_path / "deliveries.txt"
    sue_ledger = tmp_path / "sue.ledger"
    common = ["--service", service, "--subject", SUBJECT]
    listener = CmRole(
        lab2, 1, "listener",
        [*common, "--name", "SUE_PER", "--ledger", str(sue_ledger), "--out", str(out)],
    )  # fmt: skip
    sender = CmRole(
        lab2, 0, "sender",
        [*common, "--name", "JOE_PER", "--ledger", str(tmp_path / "joe.ledger"),
         "--log", str(tmp_path / "sent.txt"), "--target", str(target), "--pace", "0.002"],
    )  # fmt: skip
    for host in lab2.hosts:
        host.loss(10)
    restarts: list[tuple[int, int]] = []
    await listener.start()
    await sender.start()
    async with asyncio.timeout(30):
        while not any(segments(out)[0]):
            await asyncio.sleep(0.05)
    peers = {"sender": sender, "listener": listener}
    choices = [["sender"], ["listener"], ["sender", "listener"]]
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(0.1, 0.5))
        victims = list(rng.choice(choices))
        for name in victims:
            await peers[name].kill()
        if "listener" in victims:
            restarts.append((len(segments(out)), confirmed_in(sue_ledger)))
        rng.shuffle(victims)
        for name in victims:
            await peers[name].start()
    last = await sender.read_done()
    async with asyncio.timeout(120):
        while max((max(s) for s in segments(out) if s), default=0) < last:
            await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # a duplicate would show up now

    seen = segments(out)
    first = seen[0][0]
    for number, values in enumerate(seen):
        assert values == sorted(set(values)), f"listener process {number}: out of order or twice"
    delivered = set().union(*map(set, seen))
    # Every number a send returned delivered, or (lost with a killed sender
    # before it was written) reported unavailable; none returned twice.
    check_nothing_lost(out, tmp_path / "sent.txt", first)
    handed = handed_out(tmp_path / "sent.txt")
    missing = sorted(n for n in handed if n >= first and n not in delivered)
    for index, confirmed in restarts:
        for values in seen[index:]:
            assert all(v > confirmed for v in values), "a confirmed message came again"
    assert all(host.packets("drop") > 0 for host in lab2.hosts), "no loss was injected"
    repeated = sum(len(values) for values in seen) - len(delivered)
    certified = len([n for n in handed if n >= first])
    figures.update(
        hosts=2, loss_percent=10, kills=kills, certified_messages=certified,
        lost_and_reported=len(missing), reported_unavailable=len(reported_gaps(out)),
        listener_processes=len(seen), delivered_again_unconfirmed=repeated,
        datagrams_dropped=sum(h.packets("drop") for h in lab2.hosts),
    )  # fmt: skip


class FtRole:
    """An ftpeer.py member on a lab host; its reports are read in the background."""

    def __init__(self, proc: LabProcess, name: str) -> None:
        self.proc = proc
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while line := await self.proc.readline(3600):
            self.events.append(json.loads(line))

    @property
    def active(self) -> bool:
        actions = [e["action"] for e in self.events if e["event"] == "action"]
        return bool(actions) and actions[-1] == "ACTIVATE"

    @property
    def alive(self) -> bool:
        return self.proc.proc.returncode is None


async def until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def start_members(
    lab: Lab, group: str, weights: list[int], *, activation: float, first_active: bool = False
) -> list[FtRole]:
    """One ftpeer.py member per host (heartbeat 0.2 s), host i's with ``weights[i]``, each
    ready before the next starts (``first_active``: the first one active, too)."""
    service = str(free_port())
    members: list[FtRole] = []
    for index, (host, weight) in enumerate(zip(lab.hosts, weights, strict=True)):
        proc = await host.spawn(
            str(TESTS / "ftpeer.py"), "member", "--service", service,
            "--network", host.network(), "--group", group, "--name", f"m{index}",
            "--weight", str(weight), "--heartbeat", "0.2", "--activation", str(activation),
        )  # fmt: skip
        member = FtRole(proc, f"m{index}")
        members.append(member)
        await until(lambda m=member: any(e["event"] == "ready" for e in m.events), "ready")
        if first_active and index == 0:
            await until(lambda m=member: m.active, "m0 to activate")
    return members


async def test_fault_tolerance_across_hosts_kill_and_partition(
    lab3: Lab, figures: dict[str, Any]
) -> None:
    members = await start_members(lab3, "LABGROUP", [30, 20, 10], activation=1.0)

    def active() -> list[str]:
        return [m.name for m in members if m.alive and m.active]

    await until(lambda: active() == ["m0"], "the heaviest member to be the one active")
    # kill -9 of the active member: exactly one other takes over (the heaviest left).
    members[0].proc.kill9()
    await members[0].proc.wait()
    await until(lambda: active() == ["m1"], "m1 to take over from the killed m0")
    await asyncio.sleep(2.0)  # past the activation interval: still exactly one
    assert active() == ["m1"]
    # Partition the active member: the other side cannot tell it from a dead one.
    lab3.hosts[1].partition()
    await until(lambda: active() == ["m1", "m2"], "each side of the partition to be active")
    lab3.hosts[1].heal()
    await until(lambda: active() == ["m1"], "the group to converge back to one active member")
    await asyncio.sleep(2.0)
    assert active() == ["m1"]
    figures.update(hosts=3, members=3, kills=1, partitions=1, active_after_each_step=1)


async def test_an_active_member_busy_sending_keeps_its_standby_on_another_host_standing_by(
    lab2: Lab, figures: dict[str, Any]
) -> None:
    """The active member publishes in a plain loop of sends (ftpeer.py's ``bulk``) for
    several activation intervals, its datagrams crossing to the standby's host: its
    heartbeats still go out between the sends, so the standby never activates."""
    active, standby = await start_members(
        lab2, "LABBUSY", [50, 10], activation=0.6, first_active=True
    )
    await asyncio.sleep(1.2)  # two activation intervals: the standby has heard m0
    assert not standby.active
    await active.proc.write("bulk 3.0")
    await until(
        lambda: any(e["event"] == "bulk-done" for e in active.events), "the bulk send", 60.0
    )
    await asyncio.sleep(0.6)  # a late activation would show by now
    sent = next(e["sent"] for e in active.events if e["event"] == "bulk-done")
    actions = [e["action"] for e in standby.events if e["event"] == "action"]
    assert actions == [], f"the standby {actions} while {sent} messages were sent"
    assert active.active
    figures.update(hosts=2, members=2, bulk_seconds=3.0, sent=sent, standby_actions=0)
