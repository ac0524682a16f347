"""A simulated network, clock, disk and handler world for the remote-operations core.

Two endpoints, ``A`` (invoker) and ``B`` (performer), exchange PDUs through
their byte form over a network that loses, duplicates, delays and therefore
reorders every copy of every PDU, on a simulated clock. The simulator plays
the driver: after every input it writes the endpoint's snapshot to its "disk"
(the write-ahead rule) and only then releases the outputs. Either endpoint
may crash at any step: after the write (its outputs are lost), before the
write (the input is lost with them), or while a handler runs (the handler's
effect has happened, its completion has not). A crashed endpoint restarts at
once from its disk with a new incarnation. Acknowledgments the invoker holds
back are flushed a random while after the answer (as the driver does a loop
turn later), so that some ride on a next invocation and some leave alone.

The "world" records every effect a handler had, per invocation id, so the
tests can check at-most-once (and exactly-once) from outside the cores.
Everything is drawn from one seeded ``random.Random``: a run replays exactly.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rvasync.protocol.rops import (
    Completion,
    EndpointCore,
    Outcome,
    Outputs,
    Report,
    Retention,
    RetryPolicy,
    decode_pdu,
    encode_pdu,
)


@dataclass
class Node:
    name: str
    core: EndpointCore
    disk: bytes
    epoch: int = 0
    crashes: int = 0


@dataclass
class Config:
    loss: float = 0.0
    duplicate: float = 0.0
    delay: tuple[float, float] = (0.01, 0.5)
    straggle: float = 0.0
    """Probability that a copy is held up for a long time (up to ``straggle_max`` s)."""
    straggle_max: float = 60.0
    loss_until: float = float("inf")
    """After this time the network loses nothing (it "eventually delivers")."""
    crash: float = 0.0
    """Probability that an endpoint crashes at a step (after the write of that step)."""
    crash_before_write: float = 0.0
    crash_in_handler: float = 0.0
    crash_until: float = float("inf")
    handler_time: tuple[float, float] = (0.0, 1.0)
    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(1.0, 6, 1.5, 4.0, 3))
    retention: Retention = field(
        default_factory=lambda: Retention(window=1e6, ack_timeout=1.0, result_retries=3)
    )


class World:
    def __init__(self, seed: int, config: Config) -> None:
        self.rng = random.Random(seed)
        self.cfg = config
        self.now = 0.0
        self.heap: list[tuple[float, int, str, Any]] = []
        self.seq = itertools.count()
        self.incarnations = itertools.count(1)
        self.nodes = {name: self._fresh(name) for name in ("A", "B")}
        self.effects: Counter[str] = Counter()
        self.transient_left: dict[str, int] = {}
        self.issued: dict[str, bytes] = {}
        """invoke id → argument, for every invocation whose start was written to disk."""
        self.handshake_of: dict[str, int] = {}
        self.completions: dict[str, Completion] = {}
        self.reports: list[tuple[str, Report]] = []
        self.all_ids: list[str] = []
        self._armed: dict[tuple[str, int], float] = {}
        self.running: dict[str, set[str]] = {"A": set(), "B": set()}
        self.piggybacked = 0
        """PDUs that carried acknowledgments of other invocations."""
        self.cut_short: set[str] = set()
        """Invocations whose handler was running when its performer crashed."""

    # --- set-up ---

    def _fresh(self, name: str, disk: bytes | None = None) -> Node:
        core = EndpointCore(name, f"{name}{next(self.incarnations)}", self.cfg.retention)
        if disk is not None:
            core.restore(msgpack.unpackb(disk, raw=False, strict_map_key=False))
        return Node(name, core, disk if disk is not None else _write(core))

    def schedule_invoke(self, at: float, arg: bytes, handshake: int) -> None:
        self._push(at, "invoke", (arg, handshake))

    def _push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.heap, (at, next(self.seq), kind, payload))

    # --- running ---

    def run(self, until: float) -> None:
        for node in self.nodes.values():
            self._arm(node)
        while self.heap and self.heap[0][0] <= until:
            at, _, kind, payload = heapq.heappop(self.heap)
            self.now = max(self.now, at)
            if kind == "invoke":
                arg, hs = payload
                a = self.nodes["A"]
                invoke_id, out = a.core.invoker.invoke(
                    "B", "op", arg, hs, self.cfg.policy, self.now
                )
                if self._step(a, out, can_lose_input=True):
                    self.issued[invoke_id] = arg
                    self.handshake_of[invoke_id] = hs
                self.all_ids.append(invoke_id)
            elif kind == "deliver":
                dest, data = payload
                node = self.nodes[dest]
                self._step(node, node.core.receive(decode_pdu(data), self.now), can_lose_input=True)
            elif kind == "timer":
                name, epoch = payload
                node = self.nodes[name]
                if epoch != node.epoch:
                    continue
                if self._armed.get(payload) == at:
                    del self._armed[payload]
                deadline = node.core.next_deadline()
                if deadline is not None and deadline <= self.now:
                    self._step(node, node.core.handle_timer(self.now), can_lose_input=True)
            elif kind == "flush":
                name, epoch = payload
                node = self.nodes[name]
                if epoch == node.epoch and node.core.invoker.acks_pending:
                    self._step(node, node.core.invoker.flush_acks(), can_lose_input=True)
            elif kind == "handler":
                name, epoch, ex = payload
                node = self.nodes[name]
                if epoch != node.epoch:
                    continue  # the handler died with its process
                self.running[name].discard(ex.invoke_id)
                outcome = self._perform(ex.invoke_id, ex.body)
                if self._maybe(self.cfg.crash_in_handler):
                    self.cut_short.add(ex.invoke_id)
                    self._crash(node)  # the effect happened, its completion did not
                    continue
                self._step(
                    node,
                    node.core.performer.complete(ex.invoke_id, outcome, self.now),
                    can_lose_input=False,
                )
            self._arm_all()

    def _perform(self, invoke_id: str, arg: bytes) -> Outcome:
        kind, _, n = arg.decode().partition(":")
        if kind == "perm":
            return Outcome.error("refused", detail="permanent by design")
        if kind == "trans":
            left = self.transient_left.setdefault(invoke_id, int(n.split(":")[1]))
            if left > 0:
                self.transient_left[invoke_id] = left - 1
                return Outcome.error("later", transient=True)
        self.effects[invoke_id] += 1
        return Outcome.result(b"done:" + arg)

    def _maybe(self, p: float) -> bool:
        return p > 0 and self.now < self.cfg.crash_until and self.rng.random() < p

    def _step(self, node: Node, out: Outputs, *, can_lose_input: bool) -> bool:
        """Write, then maybe crash, then release ``out``; True when the step's state was written."""
        if can_lose_input and self._maybe(self.cfg.crash_before_write):
            self._crash(node)
            return False
        node.disk = _write(node.core)
        if self._maybe(self.cfg.crash):
            # Recorded as started, cut short before the handler ran: same as while it ran.
            self.cut_short.update(ex.invoke_id for ex in out.executes)
            self._crash(node)
            return True
        for send in out.sends:
            if send.pdu.acks:
                self.piggybacked += 1
            self._transmit(send.dest, encode_pdu(send.pdu))
        for ex in out.executes:
            lo, hi = self.cfg.handler_time
            self._push(self.now + self.rng.uniform(lo, hi), "handler", (node.name, node.epoch, ex))
            self.running[node.name].add(ex.invoke_id)
        for c in out.completions:
            assert c.invoke_id not in self.completions, f"{c.invoke_id} settled twice"
            self.completions[c.invoke_id] = c
        for r in out.reports:
            self.reports.append((node.name, r))
        if out.completions and node.core.invoker.acks_pending:
            # The driver flushes held-back acknowledgments a loop turn later; here a
            # random while later, so that some ride on the next invocation instead.
            self._push(self.now + self.rng.uniform(0.0, 0.5), "flush", (node.name, node.epoch))
        return True

    def _transmit(self, dest: str, data: bytes) -> None:
        copies = 1
        if self.rng.random() < self.cfg.duplicate:
            copies = 2
        for _ in range(copies):
            if self.now < self.cfg.loss_until and self.rng.random() < self.cfg.loss:
                continue
            lo, hi = self.cfg.delay
            if self.rng.random() < self.cfg.straggle:
                hi = self.cfg.straggle_max
            self._push(self.now + self.rng.uniform(lo, hi), "deliver", (dest, data))

    def _crash(self, node: Node) -> None:
        self.cut_short |= self.running[node.name]
        self.running[node.name] = set()
        fresh = self._fresh(node.name, node.disk)
        node.core = fresh.core
        node.epoch += 1
        node.crashes += 1

    def _arm_all(self) -> None:
        for node in self.nodes.values():
            self._arm(node)

    def _arm(self, node: Node) -> None:
        deadline = node.core.next_deadline()
        if deadline is None:
            return
        at = max(deadline, self.now)
        key = (node.name, node.epoch)
        armed = self._armed.get(key)
        if armed is not None and self.now <= armed <= at:
            return  # an earlier wake-up is already queued; it re-arms
        self._armed[key] = at
        self._push(at, "timer", key)


def _write(core: EndpointCore) -> bytes:
    return msgpack.packb(core.snapshot(), use_bin_type=True)
