"""A simulated network and clock for request/reply through a relay agent.

One requester (a bare ``RelayClient``: reply name substitution needs no
certified core) behind relay agent ``RA`` (a ``RelayAgentCore`` with its
ledger kept as bytes in the real file format), and one replier on the
network that answers each request once. Relay frames are lost, duplicated
and reordered at random; messages on the network are reordered but not
lost (the transport's reliable protocols see to that), and a message to an
inbox of a process that is gone goes nowhere, as on a real network.

Messages are opaque to the relay, so they are plain bytes here: a request
is ``req:<k>``, its reply ``rep:<k>``; the agent driver's rewrite of a
reply's subject is modelled by prefixing the inbox (``<inbox>|rep:<k>``).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable

from rvasync.protocol.cm import Advisory
from rvasync.protocol.relay import (
    REPLY_ROLE,
    AppendRecord,
    Emit,
    Inbound,
    RelayAgentCore,
    RelayClient,
    RelayTiming,
    SendFrame,
    decode_relay_ledger,
    encode_relay_record,
    new_relay_ledger,
)

TIMING = RelayTiming(reply_lifetime=10_000.0)
LOCATE = "_RVRELAY.LOCATE.RA"


def inbox_of(k: int) -> str:
    return f"_INBOX.req.{k}"


class ReplySim:
    def __init__(
        self,
        seed: int,
        *,
        loss: float = 0.0,
        dup: float = 0.0,
        timing: RelayTiming = TIMING,
        file_ledger: bool = True,
    ) -> None:
        self.rng = random.Random(seed)
        self.loss, self.dup = loss, dup
        self.timing = timing
        self.file_ledger = file_ledger
        self.now = 1000.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._count = itertools.count()
        self.generation = 0
        self.ledger = bytearray(new_relay_ledger("RA"))
        self.agent = self._agent(None, "_INBOX.ra0")
        self.client = RelayClient("REQ", "RA", "_INBOX.reqlink", epoch=1, timing=timing)
        self.got: dict[int, int] = {}
        """Replies the requester program received, by request number."""
        self.emitted: list[Emit] = []
        self.answered: set[int] = set()
        self.client_advisories: list[Advisory] = []
        self.agent_advisories: list[Advisory] = []
        self.wrong: list[bytes] = []
        self.client.connect(self.now)
        self.process()

    def _agent(self, state, address: str) -> RelayAgentCore:
        return RelayAgentCore(
            "RA",
            address,
            f"i{self.generation}",
            ledger=state,
            file_ledger=self.file_ledger,
            timing=self.timing,
        )

    # --- parties ---------------------------------------------------------------------

    def restart_agent(self, *, same_address: bool = False) -> None:
        """The agent process dies; a new one replays the ledger (a new address, normally)."""
        self.generation += 1
        replay = decode_relay_ledger(bytes(self.ledger), "sim", "RA")
        address = self.agent.address if same_address else f"_INBOX.ra{self.generation}"
        self.ledger = bytearray(self.ledger[: replay.valid_length])
        self.agent = self._agent(replay.state, address)
        self.process()

    def request(self, k: int) -> None:
        self.client.emit(f"req:{k}".encode(), self.now, reply=inbox_of(k))
        self.process()

    def toggle(self, connect: bool) -> None:
        if connect:
            self.client.connect(self.now)
        else:
            self.client.disconnect(self.now)
        self.process()

    def process(self) -> None:
        busy = True
        while busy:
            busy = False
            agent = self.agent
            for out in agent.drain():
                busy = True
                if isinstance(out, SendFrame):
                    self._frame(out.subject, out.data, agent.address)
                elif isinstance(out, Emit):
                    self.emitted.append(out)
                    self._network(lambda out=out: self._replier(out))
                elif isinstance(out, AppendRecord):
                    if self.file_ledger:
                        self.ledger += encode_relay_record(out.record)
                        agent.durable(out.lsn, self.now)
                elif isinstance(out, Advisory):
                    self.agent_advisories.append(out)
            client = self.client
            for rout in client.drain():
                busy = True
                if isinstance(rout, SendFrame):
                    self._frame(rout.subject, rout.data, client.address)
                elif isinstance(rout, Inbound):
                    self._program(rout)
                elif isinstance(rout, Advisory):
                    self.client_advisories.append(rout)

    def _program(self, out: Inbound) -> None:
        """What the requester's link driver does with a relayed reply."""
        if out.role != REPLY_ROLE:
            self.wrong.append(out.data)
            return
        inbox, _bar, payload = out.data.decode().partition("|")
        k = int(payload.split(":")[1])
        if inbox != inbox_of(k) or not payload.startswith("rep:"):
            self.wrong.append(out.data)
            return
        self.got[k] = self.got.get(k, 0) + 1

    def _replier(self, out: Emit) -> None:
        """The replier answers each request once (a repeated request is recognised)."""
        k = int(out.data.decode().split(":")[1])
        if k in self.answered or out.reply is None:
            return
        self.answered.add(k)
        reply = f"rep:{k}".encode()
        surrogate = out.reply
        self._network(lambda: self._reply_arrives(surrogate, reply))

    def _reply_arrives(self, surrogate: str, payload: bytes) -> None:
        agent = self.agent
        if not surrogate.startswith(agent.address + "."):
            return  # an inbox of an agent process that is gone: nobody receives it
        inbox = agent.reply_for(surrogate)
        data = b"" if inbox is None else inbox.encode() + b"|" + payload
        agent.reply_message(surrogate, data, self.now)
        self.process()

    # --- network and clock ---------------------------------------------------------------

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now + delay, next(self._count), action))

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._count), action))

    def _network(self, action: Callable[[], None]) -> None:
        self._later(self.rng.uniform(0.001, 3.0), action)

    def _frame(self, subject: str, data: bytes, reply: str) -> None:
        def arrive() -> None:
            if subject in (LOCATE, self.agent.address):
                self.agent.receive(data, reply, self.now)
            elif subject == self.client.address:
                self.client.receive(data, self.now)
            self.process()

        if self.rng.random() < self.loss:
            return
        for _ in range(2 if self.rng.random() < self.dup else 1):
            self._later(self.rng.uniform(0.0005, 0.05), arrive)

    def run_until(self, end: float) -> None:
        for _ in range(2_000_000):
            timers = [
                (d, h)
                for d, h in (
                    (self.agent.next_deadline(), self.agent.handle_timer),
                    (self.client.next_deadline(), self.client.handle_timer),
                )
                if d is not None
            ]
            timer = min(timers, key=lambda t: t[0]) if timers else None
            event = self._events[0] if self._events else None
            if event is not None and (timer is None or event[0] <= timer[0]):
                if event[0] > end:
                    break
                heapq.heappop(self._events)
                self.now = max(self.now, event[0])
                event[2]()
            elif timer is not None:
                if timer[0] > end:
                    break
                self.now = max(self.now, timer[0])
                timer[1](self.now)
                self.process()
            else:
                break
        else:
            raise AssertionError("simulation does not settle")
        self.now = max(self.now, end)

    def lost(self) -> list[Advisory]:
        return [a for a in self.client_advisories if a.condition == "RELAY.REPLY_LOST"]
