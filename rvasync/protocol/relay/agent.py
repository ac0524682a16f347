"""``RelayAgentCore``: the relay agent's protocol, without I/O.

The agent stands in for its clients on the network. For each client it
listens on the subjects the client listens to (its mirror of the client's
listening state), stores every matching message in its ledger, and pushes
stored messages to the client whenever it is connected, dropping them once
the client acknowledges them. What a client pushes, it sends to the
network on the client's behalf. It never interprets the certified
protocol: confirmations, registrations and acceptances are the clients'
own messages and simply pass through (stored while the client is away), so
a relay can never confirm for a listener.

It also does reply name substitution (:mod:`.replies`): a client's message
whose reply subject is an inbox leaves with a surrogate inbox of the agent
instead, and replies arriving there are stored for the client with the
original inbox put back as their subject.

Inputs: :meth:`receive` (a frame from a client or another agent),
:meth:`network_message` (a message arrived on one of the patterns the agent
listens to), :meth:`reply_message` (a message arrived below the agent's
address, on a surrogate), :meth:`handle_timer`, and :meth:`durable` (ledger
writes done).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rvasync.errors import InvalidArgument, MalformedMessage
from rvasync.protocol.relay.frames import (
    Accept,
    Ack,
    Bye,
    Connect,
    Frame,
    Gone,
    Here,
    Locate,
    Ping,
    Push,
    Reset,
    decode_frame,
    encode_frame,
    locate_subject,
)
from rvasync.protocol.relay.ledger import AgentLedger, ClientLedger
from rvasync.protocol.relay.outputs import (
    AppendRecord,
    Emit,
    Interest,
    RelayOutput,
    SendFrame,
    relay_conflict,
    relay_reply_lost,
)
from rvasync.protocol.relay.replies import (
    LOST_ROLE,
    REPLY_ROLE,
    Surrogate,
    SurrogateTable,
    encode_lost,
)
from rvasync.protocol.relay.stream import InStream, OutStream
from rvasync.protocol.relay.timing import RelayTiming
from rvasync.subjects import subject_matches

__all__ = ["ClientReview", "RelayAgentCore"]


@dataclass
class _Client:
    name: str
    ledger: ClientLedger
    store: OutStream
    session: int | None = None
    address: str = ""
    last_heard: float = 0.0
    epoch: int = 0
    outbound: InStream = field(default_factory=InStream)


@dataclass(frozen=True, slots=True)
class ClientReview:
    """One client as the agent sees it."""

    name: str
    connected: bool
    stored: int
    listens: frozenset[tuple[str, str]]
    surrogates: int = 0
    """Live surrogate inboxes the agent holds for the client's replies."""


class RelayAgentCore:
    """Relay agent ``name`` reached at ``address``; ``instance`` tells its processes apart.

    ``ledger`` is the replayed ledger (None for a new one); ``file_ledger``
    makes the core emit :class:`AppendRecord` outputs and push stored items
    only once their record is durable.
    """

    def __init__(
        self,
        name: str,
        address: str,
        instance: str,
        *,
        ledger: AgentLedger | None = None,
        file_ledger: bool = False,
        timing: RelayTiming | None = None,
    ) -> None:
        for what, value in (("name", name), ("address", address), ("instance", instance)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{what} must be a non-empty str, got {value!r}")
        if ledger is None:
            ledger = AgentLedger(name)
        elif ledger.name != name:
            raise InvalidArgument(
                f"the ledger belongs to relay agent {ledger.name!r}, not {name!r}"
            )
        self.name = name
        self.address = address
        self.instance = instance
        self.ledger = ledger
        self._file = bool(file_ledger)
        self._timing = timing or RelayTiming()
        self._outputs: list[RelayOutput] = []
        self._lsn = 0
        self._durable = 0
        self._clients: dict[str, _Client] = {}
        self._sessions: dict[int, _Client] = {}
        self._interest: dict[str, int] = {}
        self._due: dict[str, _Client] = {}
        self._now = 0.0
        self.conflict: str | None = None
        """Instance id of another live agent with this name, once one was heard."""
        self.malformed = 0
        self.replies_lost = 0
        """Replies this process could not relay (late ones, and those its restart cut off)."""
        self._replies = SurrogateTable(address, instance)
        self._held: deque[tuple[int, Emit]] = deque()
        for client_name, state in ledger.clients.items():
            client = self._client(client_name, state)
            for seq in sorted(state.items):
                client.store.restore(seq, state.items[seq])
            client.store.advance(state.next_seq)
            for pattern, _role in state.listens:
                self._watch(pattern, 1)
        restored = [
            Surrogate(subject, name, inbox, expires)
            for name, state in ledger.clients.items()
            for subject, (inbox, expires) in state.replies.items()
        ]
        for entry in sorted(restored, key=lambda e: e.expires):
            if self._replies.owns(entry.subject):
                self._replies.restore(entry)
            else:
                # The surrogate named an inbox of an earlier agent process: replies
                # to it can no longer reach this one. Tell the client instead.
                self._cut_off(
                    self._clients[entry.client],
                    entry,
                    "the relay agent restarted: replies sent after that cannot be relayed",
                )

    # --- observation -------------------------------------------------------------------

    @property
    def last_lsn(self) -> int:
        return self._lsn

    def review(self) -> list[ClientReview]:
        return [
            ClientReview(
                c.name,
                c.session is not None,
                len(c.store),
                frozenset(c.ledger.listens),
                self._replies.for_client(c.name),
            )
            for c in self._clients.values()
        ]

    @property
    def surrogates(self) -> int:
        """Live surrogate inboxes (reply name substitution), all clients together."""
        return len(self._replies)

    def stored(self, client: str) -> int:
        c = self._clients.get(client)
        return 0 if c is None else len(c.store)

    @property
    def patterns(self) -> frozenset[str]:
        """Subject patterns the agent listens to on the network."""
        return frozenset(self._interest)

    def drain(self) -> list[RelayOutput]:
        """Every output since the last drain, in order (pending pushes are made now)."""
        if self._due:
            due = list(self._due.values())
            self._due.clear()
            for client in due:
                self._flush(client, self._now)
        out = self._outputs
        self._outputs = []
        return out

    def probe(self) -> SendFrame:
        """The frame a starting agent publishes to find another live agent of its name."""
        return SendFrame(
            locate_subject(self.name),
            encode_frame(Locate(self.name, "", self.address, self.instance)),
        )

    def durable(self, lsn: int, now: float) -> None:
        """Ledger records up to ``lsn`` are written: stored items up to there may be pushed."""
        if isinstance(lsn, bool) or not isinstance(lsn, int) or lsn < 0:
            raise InvalidArgument(f"lsn must be an int >= 0, got {lsn!r}")
        if lsn > self._durable:
            self._durable = min(lsn, self._lsn)
        held = self._held
        while held and held[0][0] <= self._durable:
            self._outputs.append(held.popleft()[1])
        for client in self._sessions.values():
            self._pump(client, now)

    # --- inputs ------------------------------------------------------------------------------

    def network_message(self, subject: str, data: bytes, now: float) -> int:
        """A message on ``subject`` arrived from the network; store it for whoever listens.

        One item per client and role whose patterns match; returns how many.
        """
        count = 0
        for client in self._clients.values():
            roles: set[str] = set()
            for pattern, role in client.ledger.listens:
                if role not in roles and subject_matches(pattern, subject):
                    roles.add(role)
            for role in sorted(roles):
                lsn = self._record(("s", client.name, client.store.next_seq, role, data))
                client.store.append((role, data), lsn)
                count += 1
            if roles and client.session is not None:
                self._pump(client, now)
        return count

    def reply_for(self, subject: str) -> str | None:
        """The client's own inbox that surrogate ``subject`` stands for (None: not a live one).

        The driver puts it in place of the reply's subject before
        :meth:`reply_message`, so the client gets the reply as it was addressed.
        """
        entry = self._replies.lookup(subject)
        return None if entry is None else entry.inbox

    def reply_message(self, subject: str, data: bytes, now: float) -> bool:
        """A reply arrived on surrogate ``subject``: store it for its client (False if late).

        ``data`` is the reply with its subject already set back to the
        client's inbox (:meth:`reply_for`). A reply to a surrogate that has
        expired (or never existed) cannot be placed: the agent presents
        RELAY.REPLY_LOST counting it.
        """
        entry = self._replies.lookup(subject)
        if entry is None:
            self.replies_lost += 1
            self._outputs.append(
                relay_reply_lost(
                    self.name,
                    "the reply came after its surrogate inbox expired",
                    self.replies_lost,
                    subject=subject,
                )
            )
            return False
        self._store(self._clients[entry.client], REPLY_ROLE, data, now)
        return True

    def receive(self, data: bytes, source: str | None, now: float) -> None:
        """A frame arrived at the agent's address (or on its locate subject).

        ``source`` is where the sender said replies go (the frame message's
        reply subject), used to reset a session the agent does not know.
        """
        try:
            frame = decode_frame(data)
        except MalformedMessage:
            self.malformed += 1
            return
        self._on_frame(frame, source, now)

    def _on_frame(self, frame: Frame, source: str | None, now: float) -> None:
        if isinstance(frame, Locate):
            if frame.agent != self.name:
                return
            if frame.instance and frame.instance != self.instance:
                self._note_conflict(frame.instance)
            if frame.instance != self.instance:
                here = Here(self.name, self.address, self.instance)
                self._outputs.append(SendFrame(frame.reply, encode_frame(here)))
            return
        if isinstance(frame, Here):
            if frame.agent == self.name and frame.instance != self.instance:
                self._note_conflict(frame.instance)
            return
        if isinstance(frame, Connect):
            self._on_connect(frame, now)
            return
        session = getattr(frame, "session", None)
        client = self._sessions.get(session) if isinstance(session, int) else None
        if client is None:
            if source and isinstance(frame, (Push, Ack, Ping, Bye)):
                self._outputs.append(SendFrame(source, encode_frame(Reset(frame.session))))
            return
        client.last_heard = now
        if isinstance(frame, Push):
            for item in client.outbound.accept(frame.first, frame.items):
                self._on_item(client, item, now)
            self._send(client, Ack(frame.session, client.outbound.received))
        elif isinstance(frame, Ack):
            store = client.store
            before = store.acked
            store.ack(frame.seq, now)
            if store.acked > before:
                self._record(("a", client.name, store.acked))
            self._pump(client, now)
        elif isinstance(frame, Ping):
            self._send(client, Ack(frame.session, client.outbound.received))
        elif isinstance(frame, Bye):
            self._send(client, Gone(frame.session))
            self._end_session(client)

    def _on_connect(self, frame: Connect, now: float) -> None:
        client = self._clients.get(frame.client)
        if client is None:
            client = self._client(frame.client, ClientLedger())
            self.ledger.clients[frame.client] = client.ledger
        if client.session != frame.session:
            self._end_session(client)
            client.session = frame.session
            self._sessions[frame.session] = client
            client.address = frame.address
            if frame.epoch != client.epoch:
                client.epoch = frame.epoch
                client.outbound = InStream()
            if client.outbound.received < frame.first - 1:
                # Items before ``first`` were acknowledged to the client (by an
                # earlier instance of this agent, maybe): take up from there.
                client.outbound.start(frame.first)
            store = client.store
            if frame.received >= store.acked:
                before = store.acked
                store.ack(frame.received, now)
                if store.acked > before:
                    self._record(("a", client.name, store.acked))
            store.rewind(now)
            # The client is the master of the listening state: whatever it
            # listens to, the agent listens to. What the agent listens to
            # beyond that stays: a program that restarts connects before it
            # opens its CM listeners again, and messages arriving meanwhile
            # must be stored. Listening ends only when the client closes a
            # listener (an "u" item in its stream).
            for pattern, role in sorted(set(frame.listens) - client.ledger.listens):
                self._listen(client, pattern, role)
        client.last_heard = now
        self._send(client, Accept(frame.session, client.outbound.received, client.store.first))
        self._pump(client, now)

    def _on_item(self, client: _Client, item: tuple[object, ...], now: float) -> None:
        kind = item[0]
        if kind == "m" and len(item) == 2 and isinstance(item[1], bytes):
            emit = Emit(client.name, item[1])
            if self._held:
                self._held.append((0, emit))  # behind a request waiting for its record
            else:
                self._outputs.append(emit)
        elif (
            kind == "q"
            and len(item) == 3
            and isinstance(item[1], str)
            and isinstance(item[2], bytes)
        ):
            self._request(client, item[1], item[2], now)
        elif kind in ("l", "u") and len(item) == 3:
            pattern, role = item[1], item[2]
            if isinstance(pattern, str) and isinstance(role, str):
                if kind == "l":
                    self._listen(client, pattern, role)
                else:
                    self._unlisten(client, pattern, role)
        else:
            self.malformed += 1

    # --- time ----------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        times: list[float] = []
        timing = self._timing
        for client in self._sessions.values():
            times.append(client.last_heard + timing.session_timeout)
            retry = client.store.retry_at(timing.retry)
            if retry is not None:
                times.append(retry)
        expiry = self._replies.next_expiry()
        if expiry is not None:
            times.append(expiry)
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        timing = self._timing
        for entry in self._replies.expire(now):
            self._record(("x", entry.client, entry.subject))
        for client in list(self._sessions.values()):
            if now >= client.last_heard + timing.session_timeout:
                self._end_session(client)  # gone quiet: store for it from now on
                continue
            if client.store.check_retry(now, timing.retry):
                self._pump(client, now)

    # --- internals ------------------------------------------------------------------------

    def _client(self, name: str, state: ClientLedger) -> _Client:
        client = _Client(name, state, OutStream(state.next_seq))
        self._clients[name] = client
        return client

    def _record(self, record: tuple[object, ...]) -> int:
        self.ledger.apply(record)
        if not self._file:
            return 0
        self._lsn += 1
        self._outputs.append(AppendRecord(self._lsn, record))
        return self._lsn

    def _store(self, client: _Client, role: str, data: bytes, now: float) -> None:
        """Keep an inbound item for ``client`` and push it if it is connected."""
        lsn = self._record(("s", client.name, client.store.next_seq, role, data))
        client.store.append((role, data), lsn)
        if client.session is not None:
            self._pump(client, now)

    def _request(self, client: _Client, inbox: str, data: bytes, now: float) -> None:
        """Send ``data`` on with a surrogate inbox of the agent as its reply subject.

        With a file ledger the message leaves only once the surrogate's record
        is written: a reply must never reach a surrogate that a crash could
        make the agent forget (later messages wait behind it, keeping order).
        """
        entry = self._replies.use(client.name, inbox, now + self._timing.reply_lifetime)
        lsn = self._record(("r", client.name, entry.subject, inbox, float(entry.expires)))
        emit = Emit(client.name, data, entry.subject)
        if self._file and (self._held or lsn > self._durable):
            self._held.append((lsn, emit))
        else:
            self._outputs.append(emit)

    def _cut_off(self, client: _Client, entry: Surrogate, reason: str) -> None:
        """Replies to ``entry`` can no longer reach the agent: end it and tell both sides."""
        self._record(("x", client.name, entry.subject))
        self.replies_lost += 1
        self._outputs.append(
            relay_reply_lost(self.name, reason, self.replies_lost, subject=entry.subject)
        )
        self._store(client, LOST_ROLE, encode_lost(entry.inbox, reason), self._now)

    def _listen(self, client: _Client, pattern: str, role: str) -> None:
        if (pattern, role) not in client.ledger.listens:
            self._record(("l", client.name, pattern, role))
            self._watch(pattern, 1)

    def _unlisten(self, client: _Client, pattern: str, role: str) -> None:
        if (pattern, role) in client.ledger.listens:
            self._record(("u", client.name, pattern, role))
            self._watch(pattern, -1)

    def _watch(self, pattern: str, delta: int) -> None:
        count = self._interest.get(pattern, 0) + delta
        if count <= 0:
            if self._interest.pop(pattern, None) is not None:
                self._outputs.append(Interest(pattern, False))
        else:
            if pattern not in self._interest:
                self._outputs.append(Interest(pattern, True))
            self._interest[pattern] = count

    def _end_session(self, client: _Client) -> None:
        if client.session is not None:
            self._sessions.pop(client.session, None)
            client.session = None

    def _send(self, client: _Client, frame: Frame) -> None:
        self._outputs.append(SendFrame(client.address, encode_frame(frame)))

    def _pump(self, client: _Client, now: float) -> None:
        """Push what can go to ``client`` once the current input is handled (at :meth:`drain`).

        A burst of inbound messages then leaves in a few large frames.
        """
        self._due[client.name] = client
        self._now = now

    def _flush(self, client: _Client, now: float) -> None:
        session = client.session
        if session is None:
            return
        durable = self._durable if self._file else None
        store = client.store
        while True:
            taken = store.take(now, durable)
            if taken is None:
                return
            first, items = taken
            self._send(client, Push(session, first, tuple(items)))

    def _note_conflict(self, other: str) -> None:
        if self.conflict is None:
            self.conflict = other
            self._outputs.append(relay_conflict(self.name, other))
