"""A simulated network and clock for certified correspondents behind relay agents.

Each :class:`Client` is a certified core (``CmCorrespondent``) whose every
record goes through a ``RelayClient`` to its :class:`Agent` (a
``RelayAgentCore`` with a ledger kept as bytes in the real file format).
Agents forward to a subject-routed bus and store what matches their
clients' listening. Relay frames suffer seeded loss, duplication and random
delay (which reorders); messages on the bus are duplicated and reordered but
not lost (the employed transport's reliable multicast sees to that between
live parties: losses above it come from disconnections and restarts); the
clock jumps from event to event, so minutes of protocol time take
milliseconds and a seed is a replayable run.
Records travel as tokens (an index into a table) instead of encoded
messages: the relay never looks inside what it carries.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
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
from rvasync.protocol.cm.names import hello_subject, instance_route
from rvasync.protocol.cm.records import ConfirmRequest, Record
from rvasync.protocol.relay import (
    AppendRecord,
    Emit,
    Inbound,
    Interest,
    RelayAgentCore,
    RelayClient,
    RelayTiming,
    SendFrame,
    decode_relay_ledger,
    encode_relay_record,
    new_relay_ledger,
)
from rvasync.subjects import subject_matches

CM_TIMING = CmTiming(
    confirm_request_interval=2.0, register_retry_interval=1.0, register_attempts=1000
)
RELAY_TIMING = RelayTiming()


@dataclass
class Agent:
    sim: Sim
    name: str
    core: RelayAgentCore
    ledger: bytearray
    generation: int = 0

    def process(self) -> None:
        sim = self.sim
        for out in self.core.drain():
            if isinstance(out, SendFrame):
                sim.frame(out.subject, out.data, reply=self.core.address)
            elif isinstance(out, Emit):
                destination, _record = sim.tokens[int(out.data)]
                sim.publish(destination, out.data)
            elif isinstance(out, AppendRecord):
                self.ledger += encode_relay_record(out.record)
                self.core.durable(out.lsn, sim.now)
            elif isinstance(out, Interest):
                pass  # the bus asks core.patterns directly
            elif isinstance(out, Advisory):
                sim.agent_advisories.append(out)


@dataclass
class Client:
    sim: Sim
    core: CmCorrespondent
    relay: RelayClient
    deliveries: list[tuple[str, int | None, float]] = field(default_factory=list)
    advisories: list[Advisory] = field(default_factory=list)
    ledger: bytearray = field(default_factory=bytearray)
    generation: int = 0
    instances: list[int] = field(default_factory=lambda: [0])
    """Where each process's deliveries start in ``deliveries``."""

    @property
    def name(self) -> str:
        return self.core.name

    def process(self) -> None:
        sim = self.sim
        core, relay = self.core, self.relay
        busy = True
        while busy:
            busy = False
            # As the driver does: a sender away from its agent asks nobody.
            core.hold_confirm_requests(not relay.connected, sim.now)
            for out in core.drain():
                busy = True
                if isinstance(out, Transmit):
                    token = sim.token(out.destination, out.record)
                    relay.emit(token, sim.now, droppable=isinstance(out.record, ConfirmRequest))
                elif isinstance(out, Deliver):
                    self.deliveries.append((out.sender or "", out.sequence, sim.now))
                    if out.sequence is not None and out.sender is not None:
                        core.confirm(out.listener_id, out.sender, out.subject, out.sequence)
                elif isinstance(out, Advisory):
                    self.advisories.append(out)
                elif isinstance(out, AppendLedger):
                    self.ledger += encode_record(out.record)
                    core.durable(out.lsn)
            for rout in relay.drain():
                busy = True
                if isinstance(rout, SendFrame):
                    sim.frame(rout.subject, rout.data, reply=relay.address)
                elif isinstance(rout, Inbound):
                    _dest, record = sim.tokens[int(rout.data)]
                    core.receive(record, sim.now)
                elif isinstance(rout, Advisory):
                    self.advisories.append(rout)

    def of(self, condition: str) -> list[Advisory]:
        return [a for a in self.advisories if a.condition == condition]


class Sim:
    def __init__(self, seed: int, *, loss: float = 0.0, dup: float = 0.0, delay: float = 0.05):
        self.rng = random.Random(seed)
        self.loss, self.dup, self.delay = loss, dup, delay
        self.now = 1000.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._count = itertools.count()
        self.tokens: list[tuple[str, Record]] = []
        self.agents: dict[str, Agent] = {}
        self.clients: dict[str, Client] = {}
        self.agent_advisories: list[Advisory] = []
        self.handed: list[int] = []
        """Every sequence number a client's send returned (a restart skips reserved ones)."""

    # --- topology ------------------------------------------------------------------

    def add_agent(self, name: str) -> Agent:
        ledger = bytearray(new_relay_ledger(name))
        agent = Agent(
            self,
            name,
            RelayAgentCore(name, f"agent:{name}:0", "i0", file_ledger=True, timing=RELAY_TIMING),
            ledger,
        )
        self.agents[name] = agent
        return agent

    def restart_agent(self, name: str) -> None:
        """The agent process dies and a new one replays its ledger (new address)."""
        old = self.agents[name]
        replay = decode_relay_ledger(bytes(old.ledger), "sim", name)
        gen = old.generation + 1
        core = RelayAgentCore(
            name,
            f"agent:{name}:{gen}",
            f"i{gen}",
            ledger=replay.state,
            file_ledger=True,
            timing=RELAY_TIMING,
        )
        agent = Agent(self, name, core, bytearray(old.ledger[: replay.valid_length]), gen)
        self.agents[name] = agent
        agent.process()

    def add_client(
        self,
        name: str,
        agent: str,
        *,
        require_old: bool = False,
        ledger: bytes | None = None,
        generation: int = 0,
    ) -> Client:
        """A persistent correspondent (file ledger) behind relay agent ``agent``."""
        state = None
        if ledger:
            replay = decode_ledger(ledger, expected_name=name)
            state = replay.state
            ledger = ledger[: replay.valid_length]
        core = CmCorrespondent(
            name,
            f"_RVCM.P2P.x{name}g{generation}.{name}",
            now=self.now,
            ledger=state,
            file_ledger=True,
            require_old=require_old,
            timing=CM_TIMING,
        )
        relay = RelayClient(
            name, agent, f"client:{name}", epoch=next(self._count) + 1, timing=RELAY_TIMING
        )
        relay.listen(instance_route(name), "p2p", self.now)
        relay.listen(hello_subject(name), "hello", self.now)
        client = Client(self, core, relay, generation=generation)
        client.ledger += ledger or new_ledger(name, self.now)
        self.clients[name] = client
        relay.connect(self.now)
        client.process()
        return client

    def restart_client(self, name: str, agent: str, setup: Callable[[Client], None]) -> Client:
        """The client process is killed and started again from its ledger (new instance)."""
        old = self.clients[name]
        client = self.add_client(
            name,
            agent,
            require_old=True,
            ledger=bytes(old.ledger),
            generation=old.generation + 1,
        )
        client.deliveries = old.deliveries  # one log across the correspondent's processes
        client.advisories = old.advisories
        client.instances = [*old.instances, len(old.deliveries)]
        setup(client)
        client.process()
        return client

    # --- network -------------------------------------------------------------------------

    def token(self, destination: str, record: Record) -> bytes:
        self.tokens.append((destination, record))
        return str(len(self.tokens) - 1).encode()

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now + delay, next(self._count), action))

    def _lossy(self, action: Callable[[], None], *, lossless: bool = False) -> None:
        if not lossless and self.rng.random() < self.loss:
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            self._later(self.rng.uniform(0.0005, self.delay), action)

    def frame(self, subject: str, data: bytes, *, reply: str) -> None:
        def arrive() -> None:
            if subject.startswith("_RVRELAY.LOCATE."):
                agent = self.agents.get(subject.rsplit(".", 1)[1])
                if agent is not None:
                    agent.core.receive(data, reply, self.now)
                    agent.process()
            elif subject.startswith("agent:"):
                for agent in self.agents.values():
                    if agent.core.address == subject:
                        agent.core.receive(data, reply, self.now)
                        agent.process()
            elif subject.startswith("client:"):
                client = self.clients.get(subject[len("client:") :])
                if client is not None:
                    client.relay.receive(data, self.now)
                    client.process()

        self._lossy(arrive)

    def publish(self, subject: str, token: bytes) -> None:
        for agent in list(self.agents.values()):
            if any(subject_matches(p, subject) for p in agent.core.patterns):

                def arrive(agent_name: str = agent.name) -> None:
                    target = self.agents[agent_name]
                    target.core.network_message(subject, token, self.now)
                    target.process()

                # The employed transport's reliable multicast loses nothing
                # between live parties; it may still repeat and reorder.
                self._lossy(arrive, lossless=True)

    # --- clock ----------------------------------------------------------------------------

    def _deadlines(self) -> list[tuple[float, Callable[[], None]]]:
        out: list[tuple[float, Callable[[], None]]] = []
        for client in self.clients.values():
            for deadline, handle in (
                (client.core.next_deadline(), client.core.handle_timer),
                (client.relay.next_deadline(), client.relay.handle_timer),
            ):
                if deadline is not None:

                    def fire(h: Callable[[float], None] = handle, c: Client = client) -> None:
                        h(self.now)
                        c.process()

                    out.append((deadline, fire))
        for agent in self.agents.values():
            deadline = agent.core.next_deadline()
            if deadline is not None:

                def fire_agent(a: Agent = agent) -> None:
                    a.core.handle_timer(self.now)
                    a.process()

                out.append((deadline, fire_agent))
        return out

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._count), action))

    def run_until(self, end: float) -> None:
        steps = 0
        while True:
            steps += 1
            assert steps < 2_000_000, "simulation does not settle"
            timers = self._deadlines()
            first_timer = min(timers, key=lambda t: t[0]) if timers else None
            first_event = self._events[0] if self._events else None
            if first_event is not None and (
                first_timer is None or first_event[0] <= first_timer[0]
            ):
                when, _n, action = first_event
                if when > end:
                    break
                heapq.heappop(self._events)
                self.now = max(self.now, when)
                action()
            elif first_timer is not None:
                when, fire = first_timer
                if when > end:
                    break
                self.now = max(self.now, when)
                fire()
            else:
                break
        self.now = max(self.now, end)
