"""A simulated clock and network for the fault tolerance cores, and its own checks.

The simulator plays the role the asyncio driver will play: it multicasts every
record a core returns (through ``to_fields``/``from_fields``, as a real
transport would), wakes each core at its ``next_deadline``, and records the
actions and advisories. Delivery takes a random latency (so records can be
reordered), may be lost, and respects partitions; timers may fire late, as an
event loop's do (``timer_lateness``). Everything is seeded: a failing run
replays exactly. It also checks, at every step, the contract a
driver relies on: actions alternate sensibly, a hint precedes each activation
when one was requested, and a core's deadline is always in the future after
it was served.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from rvasync.protocol.ft import (
    FtAction,
    FtAdvisory,
    FtMemberCore,
    FtMonitorCore,
    FtOutputs,
    FtRecord,
)


@dataclass
class Node:
    name: str
    process: str
    core: FtMemberCore | FtMonitorCore
    alive: bool = True
    model_active: bool = False
    prepared: bool = False
    prepared_at: float = 0.0
    actions: list[tuple[float, FtAction]] = field(default_factory=list)
    advisories: list[tuple[float, FtAdvisory]] = field(default_factory=list)
    counts: list[tuple[float, int]] = field(default_factory=list)
    sent: list[tuple[float, FtRecord]] = field(default_factory=list)
    deliveries: int = 0

    @property
    def group(self) -> str:
        return self.core.group


class SimNet:
    """Nodes (member or monitor cores) sharing one simulated network."""

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: tuple[float, float] = (0.002, 0.02),
        timer_lateness: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.now = 0.0
        self.rng = random.Random(seed)
        self.latency = latency
        self.timer_lateness = timer_lateness
        self.loss = 0.0
        self.nodes: dict[str, Node] = {}
        self._side: dict[str, int] = {}
        self._heap: list[tuple[float, int, str, str, object]] = []
        self._counter = itertools.count()
        self.sent = 0
        self.lost = 0
        self.doomed: set[str] = set()  # members that crash the moment they activate

    # -- building the group ------------------------------------------------

    def member(self, name: str, group: str = "GRP", process: str | None = None, **params) -> Node:
        core = FtMemberCore(group, member_id=name, **params)
        node = Node(name, process or name, core)
        self.nodes[name] = node
        return node

    def monitor(self, name: str, group: str = "GRP", *, lost_interval: float = 3.0) -> Node:
        node = Node(name, name, FtMonitorCore(group, lost_interval=lost_interval))
        self.nodes[name] = node
        return node

    def core(self, name: str) -> FtMemberCore:
        core = self.nodes[name].core
        assert isinstance(core, FtMemberCore)
        return core

    # -- inputs ------------------------------------------------------------

    def join(self, *names: str) -> None:
        for name in names:
            self._apply(name, self.core(name).join(self.now))

    def withdraw(self, name: str) -> None:
        self._apply(name, self.core(name).withdraw(self.now))
        self.nodes[name].alive = False

    def set_weight(self, name: str, weight: int) -> None:
        self._apply(name, self.core(name).set_weight(weight, self.now))

    def disable(self, name: str) -> None:
        self._apply(name, self.core(name).disable(self.now))

    def kill(self, process: str, *, confirm: bool = False) -> None:
        """Stop a process silently; ``confirm`` has the others' drivers learn it ended."""
        for node in self.nodes.values():
            if node.process == process and node.alive:
                node.alive = False
                if confirm:
                    for other in self.nodes.values():
                        if other.alive and other.group == node.group:
                            delay = self.rng.uniform(*self.latency)
                            self._push(self.now + delay, "gone", other.name, node.name)

    def partition(self, *sides: set[str]) -> None:
        """Split the network; processes not named form one more side."""
        self._side = {p: i + 1 for i, side in enumerate(sides) for p in side}

    def heal(self) -> None:
        self._side = {}

    # -- running -----------------------------------------------------------

    def run_for(self, duration: float) -> None:
        self.run_until(self.now + duration)

    def run_until(self, end: float) -> None:
        while self._heap and self._heap[0][0] <= end:
            when, _, kind, name, payload = heapq.heappop(self._heap)
            self.now = max(self.now, when)
            node = self.nodes[name]
            if not node.alive:
                continue
            if kind == "timer":
                deadline = node.core.next_deadline()
                if deadline is None or deadline > self.now:
                    continue  # superseded by a later deadline
                self._apply(name, node.core.handle_timer(self.now))
            elif kind == "record":
                node.deliveries += 1
                record = FtRecord.from_fields(payload)  # type: ignore[arg-type]
                self._apply(name, node.core.receive(record, self.now))
            elif kind == "gone":
                self._apply(name, node.core.peer_gone(payload, self.now))  # type: ignore[arg-type]
        self.now = max(self.now, end)

    # -- observation -------------------------------------------------------

    def active(self, group: str | None = None) -> set[str]:
        return {
            n.name
            for n in self.nodes.values()
            if n.alive
            and isinstance(n.core, FtMemberCore)
            and n.core.active
            and (group is None or n.group == group)
        }

    def actions_of(self, name: str, action: FtAction | None = None) -> list[tuple[float, FtAction]]:
        acts = self.nodes[name].actions
        return [a for a in acts if action is None or a[1] is action]

    def advisories_of(self, name: str, adv_name: str | None = None) -> list[FtAdvisory]:
        return [a for _, a in self.nodes[name].advisories if adv_name is None or a.name == adv_name]

    # -- plumbing ----------------------------------------------------------

    def _push(self, when: float, kind: str, name: str, payload: object) -> None:
        heapq.heappush(self._heap, (when, next(self._counter), kind, name, payload))

    def _apply(self, name: str, out: FtOutputs | list[int]) -> None:
        node = self.nodes[name]
        if name in self.doomed and not isinstance(out, list) and FtAction.ACTIVATE in out.actions:
            node.actions.extend((self.now, a) for a in out.actions)
            node.alive = False  # crashes as it activates, before its first heartbeat
            return
        if isinstance(out, list):
            node.counts.extend((self.now, c) for c in out)
        else:
            for record in out.records:
                node.sent.append((self.now, record))
                self._multicast(node, record)
            node.advisories.extend((self.now, a) for a in out.advisories)
            for action in out.actions:
                self._check_action(node, action)
                node.actions.append((self.now, action))
            assert isinstance(node.core, FtMemberCore)
            assert node.core.active is node.model_active or not node.alive
        deadline = node.core.next_deadline()
        if deadline is not None:
            assert deadline > self.now, f"{name}: deadline {deadline} not after now {self.now}"
            late = self.rng.uniform(*self.timer_lateness) if self.timer_lateness[1] else 0.0
            self._push(deadline + late, "timer", name, None)

    def _check_action(self, node: Node, action: FtAction) -> None:
        core = node.core
        assert isinstance(core, FtMemberCore)
        if action is FtAction.PREPARE_TO_ACTIVATE:
            assert core.preparation > 0, f"{node.name}: hint without a preparation interval"
            assert not node.model_active, f"{node.name}: hint while active"
            node.prepared = True
            node.prepared_at = self.now
        elif action is FtAction.ACTIVATE:
            assert not node.model_active, f"{node.name}: ACTIVATE while active"
            if core.preparation > 0:
                assert node.prepared, f"{node.name}: ACTIVATE without a preceding hint"
                lead = self.now - node.prepared_at
                # A late timer delays the ACTIVATE by its lateness, never the decision.
                slack = self.timer_lateness[1] + 1e-9
                assert lead <= core.activation - core.preparation + slack, (
                    f"{node.name}: hint came {lead} s before ACTIVATE"
                )
            node.model_active = True
            node.prepared = False
        else:
            assert node.model_active, f"{node.name}: DEACTIVATE while inactive"
            node.model_active = False
            node.prepared = False

    def _multicast(self, sender: Node, record: FtRecord) -> None:
        fields = record.to_fields()
        for node in self.nodes.values():
            if node is sender or not node.alive or node.group != record.group:
                continue
            self.sent += 1
            if self._side.get(node.process, 0) != self._side.get(sender.process, 0):
                continue
            if self.loss and self.rng.random() < self.loss:
                self.lost += 1
                continue
            self._push(self.now + self.rng.uniform(*self.latency), "record", node.name, fields)


# -- checks of the simulator itself -------------------------------------------


def test_records_reach_every_other_node_of_the_group_only() -> None:
    net = SimNet()
    net.member("A", "G1")
    net.member("B", "G1")
    net.member("C", "G2")
    net.join("A")
    net.run_for(0.1)
    assert net.nodes["B"].deliveries == 1  # the HELLO
    assert net.core("B").ranking() == []  # a core that has not joined ignores input
    assert net.nodes["C"].deliveries == 0


def test_partition_blocks_delivery_and_heal_restores_it() -> None:
    net = SimNet()
    mon = net.monitor("M")
    net.member("A")
    net.partition({"A"})
    net.join("A")
    net.run_for(10)
    assert mon.deliveries == 0
    net.heal()
    net.run_for(2)
    assert mon.deliveries > 0
