"""A simulated network and clock for driving certified-delivery cores in tests.

Each :class:`Node` plays the driver for one ``CmCorrespondent``: it carries
out the core's outputs, keeps the file ledger as bytes (encoded with the real
ledger format) and, like the real driver, confirms a certified delivery as
soon as the consumer takes it (unless the node confirms explicitly). The
:class:`SimNet` moves records between nodes with seeded loss, duplication and
random delay (which reorders), and advances a virtual clock from event to
event, so minutes of protocol time run in milliseconds and every run with the
same seed is the same run.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from rvasync.protocol.cm import (
    Advisory,
    AppendLedger,
    CmCorrespondent,
    CmTiming,
    Deliver,
    Transmit,
    decode_ledger,
    encode_record,
    new_ledger,
)
from rvasync.protocol.cm.records import DataRecord, Hello, Record, parse_record


@dataclass
class Delivery:
    listener_id: int
    subject: str
    sender: str | None
    sequence: int | None
    payload: bytes
    time: float


@dataclass
class Node:
    net: SimNet
    core: CmCorrespondent
    file_ledger: bool
    explicit: bool = False
    ledger_bytes: bytearray = field(default_factory=bytearray)
    deliveries: list[Delivery] = field(default_factory=list)
    advisories: list[Advisory] = field(default_factory=list)
    events: list[object] = field(default_factory=list)
    """Deliveries and advisories interleaved, in the order the core produced them."""
    alive: bool = True
    durable_lag: bool = False
    _unsynced: int = 0

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def address(self) -> str:
        return self.core.address

    def pump(self) -> bool:
        """Carry out the core's outputs (and what they cause); True if there were any."""
        did = False
        while self.alive:
            outputs = self.core.drain()
            if not outputs:
                break
            did = True
            for out in outputs:
                if isinstance(out, Transmit):
                    # Records really travel as flat mappings: round-trip them.
                    record = parse_record(out.record.to_fields())
                    self.net.transmit(self, out.destination, record, out.point_to_point)
                elif isinstance(out, Deliver):
                    d = Delivery(
                        out.listener_id,
                        out.subject,
                        out.sender,
                        out.sequence,
                        out.payload,
                        self.net.now,
                    )
                    self.deliveries.append(d)
                    self.events.append(d)
                    if out.sequence is not None and not self.explicit:
                        self.core.confirm(out.listener_id, out.sender, out.subject, out.sequence)
                elif isinstance(out, Advisory):
                    self.advisories.append(out)
                    self.events.append(out)
                elif isinstance(out, AppendLedger):
                    self.ledger_bytes += encode_record(out.record)
                    self._unsynced = out.lsn
            if self._unsynced and not self.durable_lag:
                self.core.durable(self._unsynced)
                self._unsynced = 0
        return did

    def sync(self) -> None:
        """Report every ledger append durable (for nodes with ``durable_lag``)."""
        if self._unsynced:
            self.core.durable(self._unsynced)
            self._unsynced = 0

    def advisories_of(self, condition: str) -> list[Advisory]:
        return [a for a in self.advisories if a.condition == condition]

    def certified(self, listener_id: int | None = None) -> list[tuple[str, str, int]]:
        return [
            (d.sender or "", d.subject, d.sequence)
            for d in self.deliveries
            if d.sequence is not None and (listener_id is None or d.listener_id == listener_id)
        ]


class SimNet:
    """Virtual clock plus a lossy, duplicating, reordering network between nodes."""

    def __init__(
        self,
        seed: int = 0,
        *,
        loss: float = 0.0,
        duplicate: float = 0.0,
        min_delay: float = 0.001,
        max_delay: float = 0.005,
        timing: CmTiming | None = None,
        start: float = 1_000_000.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.duplicate = duplicate
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.timing = timing or CmTiming()
        self.now = start
        self.nodes: list[Node] = []
        self._queue: list[tuple[float, int, Node, Record]] = []
        self._counter = itertools.count()
        self._addresses = itertools.count(1)
        self.sent = 0
        self.drop = None
        """Optional ``drop(src, dst, record) -> bool`` to lose chosen records on purpose."""
        self.log: list[tuple[float, str, str, Record]] = []
        """Every record handed to the network: (time, from name, to address/subject, record)."""

    # --- nodes ------------------------------------------------------------------------

    def add(
        self,
        name: str | None,
        *,
        file_ledger: bool = False,
        require_old: bool = False,
        explicit: bool = False,
        ledger_bytes: bytes | None = None,
        default_time_limit: float = 0.0,
    ) -> Node:
        state = None
        if ledger_bytes:
            replay = decode_ledger(ledger_bytes, expected_name=name)
            state = replay.state
            ledger_bytes = ledger_bytes[: replay.valid_length]
        address = f"_INBOX.SIM.{next(self._addresses)}"
        core = CmCorrespondent(
            name,
            address,
            now=self.now,
            ledger=state,
            file_ledger=file_ledger,
            require_old=require_old,
            default_time_limit=default_time_limit,
            timing=self.timing,
        )
        node = Node(self, core, file_ledger, explicit)
        if file_ledger:
            node.ledger_bytes += ledger_bytes or new_ledger(core.name)
        self.nodes.append(node)
        node.pump()
        return node

    def crash(self, node: Node) -> bytes:
        """Stop a node abruptly; returns what its ledger file holds."""
        node.alive = False
        self.nodes.remove(node)
        return bytes(node.ledger_bytes)

    # --- network ----------------------------------------------------------------------

    def transmit(self, src: Node, destination: str, record: Record, p2p: bool) -> None:
        self.sent += 1
        self.log.append((self.now, src.name, destination, record))
        if p2p:
            targets = [n for n in self.nodes if n.address == destination]
        else:
            # Labeled messages and announcements (Hello) reach every node: as
            # the driver does, a node listens to the announcements of the
            # correspondents it knows (its core ignores the others).
            targets = [
                n
                for n in self.nodes
                if isinstance(record, DataRecord | Hello) or destination in n.core.control_subjects
            ]
        for node in targets:
            copies = 1
            dropped = self.drop is not None and self.drop(src, node, record)
            if dropped or self.rng.random() < self.loss:
                copies = 0
            elif self.rng.random() < self.duplicate:
                copies = 2
            for _ in range(copies):
                delay = self.rng.uniform(self.min_delay, self.max_delay)
                heapq.heappush(self._queue, (self.now + delay, next(self._counter), node, record))

    def pump(self) -> None:
        while any([node.pump() for node in list(self.nodes)]):
            pass

    def _next_time(self) -> float | None:
        times = [n.core.next_deadline() for n in self.nodes]
        candidates = [t for t in times if t is not None]
        if self._queue:
            candidates.append(self._queue[0][0])
        return min(candidates) if candidates else None

    def run(self, duration: float, *, until=None) -> bool:
        """Advance up to ``duration`` seconds; stop early when ``until()`` becomes true."""
        end = self.now + duration
        self.pump()
        while True:
            if until is not None and until():
                return True
            when = self._next_time()
            if when is None or when > end:
                self.now = max(self.now, end)
                return until() if until is not None else True
            self.now = max(self.now, when)
            while self._queue and self._queue[0][0] <= self.now:
                _, _, node, record = heapq.heappop(self._queue)
                if node.alive:
                    node.core.receive(record, self.now)
                    self.pump()
            for node in list(self.nodes):
                deadline = node.core.next_deadline()
                if deadline is not None and deadline <= self.now:
                    node.core.handle_timer(self.now)
            self.pump()

    def send(self, node: Node, subject: str, payload: bytes, time_limit: float | None = None):
        result = node.core.send(subject, payload, self.now, time_limit)
        self.pump()
        return result
