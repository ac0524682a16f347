"""A simulated clock and lossy network for two (or more) virtual circuit terminals.

Frames travel as Python objects between addresses (inboxes); each copy is
lost, duplicated and delayed (so copies overtake each other) by one seeded
random generator. Time jumps to the next arrival or terminal deadline, so
minutes of protocol time run in milliseconds. Each terminal's outputs are
recorded: deliveries in order, the connected instant, the disconnect reason.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from rvasync.protocol.vc import Circuit, CircuitParams, Frame, Outputs


@dataclass
class Record:
    delivered: list[Any] = field(default_factory=list)
    sent: list[Any] = field(default_factory=list)
    connected_at: float | None = None
    disconnected_at: float | None = None
    disconnected: tuple[bool, str] | None = None


class VcSim:
    def __init__(
        self,
        *,
        seed: int = 0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        delay: tuple[float, float] = (0.0005, 0.005),
        params: CircuitParams | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.duplicate = duplicate
        self.delay = delay
        self.now = 0.0
        self.params = params or CircuitParams()
        self.terminals: dict[str, Circuit] = {}
        self.records: dict[str, Record] = {}
        self.dead: set[str] = set()
        self._queue: list[tuple[float, int, str, Frame]] = []
        self._count = 0

    def token(self) -> bytes:
        return self.rng.randbytes(16)

    def add(self, inbox: str, connect_subject: str | None = None) -> Circuit:
        circuit = Circuit(
            token=self.token(), inbox=inbox, connect_subject=connect_subject, params=self.params
        )
        self.terminals[inbox] = circuit
        self.records[inbox] = Record()
        self.apply(inbox, circuit.start(self.now))
        return circuit

    def pair(self) -> tuple[Circuit, Circuit]:
        """An acceptor at "A" and a connector at "B" connecting to it."""
        return self.add("A"), self.add("B", connect_subject="A")

    def apply(self, name: str, out: Outputs) -> None:
        rec = self.records[name]
        rec.delivered.extend(out.deliver)
        if out.connected:
            assert rec.connected_at is None, "connected twice"
            rec.connected_at = self.now
        if out.disconnected is not None:
            assert rec.disconnected is None, "disconnected twice"
            rec.disconnected = out.disconnected
            rec.disconnected_at = self.now
        if name in self.dead:
            return
        for address, frame in out.transmit:
            self.inject(address, frame)

    def inject(self, address: str, frame: Frame) -> None:
        copies = 0 if self.rng.random() < self.loss else 1
        if copies and self.rng.random() < self.duplicate:
            copies = 2
        for _ in range(copies):
            at = self.now + self.rng.uniform(*self.delay)
            self._count += 1
            heapq.heappush(self._queue, (at, self._count, address, frame))

    def send(self, name: str, payload: Any) -> None:
        self.records[name].sent.append(payload)
        self.apply(name, self.terminals[name].send(payload, self.now))

    def queue(self, name: str, payload: Any) -> None:
        """Queue ``payload`` for ``name``'s next DATA frame (sent by :meth:`flush`)."""
        self.terminals[name].queue(payload)
        self.records[name].sent.append(payload)

    def flush(self, name: str) -> None:
        self.apply(name, self.terminals[name].flush(self.now))

    def close(self, name: str) -> None:
        self.apply(name, self.terminals[name].close(self.now))

    def run_until(self, until: float) -> None:
        while True:
            deadlines = [
                (d, name)
                for name, c in self.terminals.items()
                if name not in self.dead and (d := c.next_deadline()) is not None
            ]
            next_timer = min(deadlines) if deadlines else None
            next_frame = self._queue[0][0] if self._queue else None
            candidates = [t for t in (next_timer and next_timer[0], next_frame) if t is not None]
            if not candidates or min(candidates) > until:
                self.now = max(self.now, until)
                return
            at = min(candidates)
            self.now = max(self.now, at)
            if next_frame is not None and next_frame == at:
                _, _, address, frame = heapq.heappop(self._queue)
                circuit = self.terminals.get(address)
                if circuit is not None and address not in self.dead:
                    self.apply(address, circuit.receive(frame, self.now))
            else:
                assert next_timer is not None
                name = next_timer[1]
                self.apply(name, self.terminals[name].timer(self.now))
