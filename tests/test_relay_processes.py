"""Kill -9 of real processes behind a relay agent: nothing is lost.

A sender and a listener (tests/cmpeer.py with ``--relay RA``) and the relay
agent RA (tests/relaypeer.py), each a process with its own file ledger on
a loopback service. The test kills the agent, the sender, the listener or
several of them with SIGKILL at random moments and starts them again.
Afterwards every number a send returned reached the listener (numbers a
killed sender had reserved are reported to it as unavailable), no number
was returned twice, and each listener process saw them in increasing order
without duplicates.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path

import pytest
from test_cm_driver_processes import SUBJECT, Peer, check_nothing_lost, segments, wait_for

RELAY_PEER = str(Path(__file__).with_name("relaypeer.py"))


class Agent(Peer):
    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, RELAY_PEER, *self.args, stdout=asyncio.subprocess.PIPE
        )
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        assert line.strip() == b"ready", f"relay agent did not start: {line!r}"


SEEDS = [int(s) for s in os.environ.get("RVASYNC_RELAY_KILL_SEEDS", "3").split(",")]


def _rounds_any(rng: random.Random) -> list[list[str]]:
    rounds = [["agent"], ["sender"], ["listener"], ["agent", "listener"], ["agent", "sender"]]
    rng.shuffle(rounds)
    return rounds


def _rounds_listener(rng: random.Random) -> list[list[str]]:
    """The listener killed again and again, each life short.

    Each restart leaves records addressed to the dead process (answers to
    its registration requests among them) waiting at the agent, which hands
    them to the next process: the case that once made a listener wait
    forever (see test_cm_stale_answers.py).
    """
    return [["listener"] for _ in range(6)]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("plan", [_rounds_any, _rounds_listener], ids=["any", "listener"])
async def test_kill_9_agent_and_clients_loses_nothing(rv_service, tmp_path, seed, plan):
    rng = random.Random(seed)
    service, network = rv_service
    out = tmp_path / "deliveries.txt"
    net = ["--service", service, "--network", network]
    common = [*net, "--subject", SUBJECT, "--relay", "RA"]
    agent = Agent("agent", ["RA", "--ledger", str(tmp_path / "ra.ledger"), *net])
    listener = Peer(
        "listener",
        [*common, "--name", "SUE_REL", "--ledger", str(tmp_path / "sue.ledger"), "--out", str(out)],
    )
    sender = Peer(
        "sender",
        [
            *common,
            "--name",
            "JOE_REL",
            "--ledger",
            str(tmp_path / "joe.ledger"),
            "--log",
            str(tmp_path / "sent.txt"),
            "--target",
            "1500",
            "--pace",
            "0.004",
        ],
    )
    try:
        await agent.start()
        await listener.start()
        await asyncio.sleep(1.0)  # the listener reaches the agent before the first message
        await sender.start()
        await wait_for(lambda: out.exists() and any(segments(out)[0]), 30, "a first delivery")
        quick = plan is _rounds_listener
        peers = {"agent": agent, "sender": sender, "listener": listener}
        for victims in plan(rng):
            await asyncio.sleep(rng.uniform(0.05, 0.4) if quick else rng.uniform(0.2, 1.0))
            for name in victims:
                await peers[name].kill()
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            rng.shuffle(victims)
            for name in victims:
                await peers[name].start()
        last = await sender.read_done()
        await wait_for(
            lambda: max((max(s) for s in segments(out) if s), default=0) >= last,
            90,
            f"the listener to receive up to {last}",
        )
        await asyncio.sleep(0.5)
    finally:
        for peer in (sender, listener, agent):
            if peer.proc and peer.proc.returncode is None:
                await peer.stop()
    seen = segments(out)
    first = min(values[0] for values in seen if values)
    for number, values in enumerate(seen):
        assert values == sorted(set(values)), f"listener process {number} saw numbers out of order"
    check_nothing_lost(out, tmp_path / "sent.txt", first)
