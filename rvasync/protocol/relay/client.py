"""``RelayClient``: the client end of the relay link, without I/O.

A CM transport that names a relay agent sends everything through it: its
certified core's outbound messages go into this object with :meth:`emit`,
the subjects it listens to with :meth:`listen`, and what the agent pushes
back comes out as :class:`~rvasync.protocol.relay.outputs.Inbound` outputs
for the certified core. The client is the master of the protocol state:
every connection starts by sending the agent the whole listening state,
and the certified core (sender and listener both) keeps the confirmation
and acceptance state in its own ledger, so nothing here confirms, accepts
or registers anything itself.

While disconnected, outbound events are kept here (in order) and go out on
the next connection; periodic confirmation requests (``droppable``) are not
kept, because the certified core repeats them once connected. Inputs take
``now``; after each the driver calls :meth:`drain`.

Reply name substitution: a message emitted with an inbox as its reply
subject is marked so (``reply=``) and the agent substitutes a surrogate
inbox of its own; replies come back as :class:`Inbound` items with role
:data:`~rvasync.protocol.relay.replies.REPLY_ROLE` (subject already set
back to the inbox), for the driver to deliver on its transport. A reply
the agent could not relay arrives as a notice and becomes a
RELAY.REPLY_LOST advisory.
"""

from __future__ import annotations

from rvasync.errors import InvalidArgument, MalformedMessage, TransportClosed
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
from rvasync.protocol.relay.outputs import (
    Inbound,
    RelayOutput,
    SendFrame,
    relay_connected,
    relay_disconnected,
    relay_no_response,
    relay_reply_lost,
)
from rvasync.protocol.relay.replies import LOST_ROLE, decode_lost
from rvasync.protocol.relay.stream import InStream, OutStream
from rvasync.protocol.relay.timing import RelayTiming
from rvasync.subjects import is_inbox

__all__ = ["ClientState", "RelayClient"]


class ClientState:
    """Names of the client's states (plain strings, for logs and tests)."""

    DISCONNECTED = "disconnected"
    LOCATING = "locating"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    DISCONNECTING = "disconnecting"
    CLOSED = "closed"


class RelayClient:
    """The relay link of correspondent ``client`` to relay agent ``agent``.

    ``address`` is where the agent reaches this client (an inbox of its
    transport). ``epoch`` must differ between processes of the same
    correspondent (the driver draws it at random): it numbers this process's
    outbound stream and sessions. The client starts disconnected; the
    driver calls :meth:`connect` at once for the implicit connect.
    """

    def __init__(
        self,
        client: str,
        agent: str,
        address: str,
        *,
        epoch: int,
        timing: RelayTiming | None = None,
    ) -> None:
        for what, value in (("client", client), ("agent", agent), ("address", address)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{what} must be a non-empty str, got {value!r}")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 < epoch < 2**40:
            raise InvalidArgument(f"epoch must be an int in 1..2**40-1, got {epoch!r}")
        self.client = client
        self.agent = agent
        self.address = address
        self._epoch = epoch
        self._timing = timing or RelayTiming()
        self._outputs: list[RelayOutput] = []
        self._outbox = OutStream()
        self._inbox = InStream()
        self._listens: set[tuple[str, str]] = set()
        self.state = ClientState.DISCONNECTED
        self._sessions = 0
        self._session = 0
        self._agent_address: str | None = None
        self._next_locate: float | None = None
        self._locates = 0
        self._no_response_advised = False
        self._last_heard = 0.0
        self._next_ping = 0.0
        self._bye_mark = 0  # outbound items up to this one go out before the Bye
        self._bye_sent = False
        self._bye_deadline: float | None = None
        self._advise_disconnect = True
        self._due: float | None = None
        self.dropped = 0
        """Droppable outbound events discarded while disconnected."""
        self.malformed = 0
        """Frames dropped because they did not decode."""
        self.replies_lost = 0
        """Replies to this client's inboxes that were lost (each one advised)."""

    # --- observation -------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.state == ClientState.CONNECTED

    @property
    def stored(self) -> int:
        """Outbound events not yet acknowledged by the agent."""
        return len(self._outbox)

    @property
    def listens(self) -> frozenset[tuple[str, str]]:
        """The listening state (pattern, role) the agent mirrors."""
        return frozenset(self._listens)

    def drain(self) -> list[RelayOutput]:
        """Every output since the last drain, in order (pending frames are made now)."""
        due = self._due
        if due is not None:
            self._due = None
            self._flush(due)
        out = self._outputs
        self._outputs = []
        return out

    # --- application calls ---------------------------------------------------------------

    def connect(self, now: float) -> None:
        """Start (or keep) trying to reach the agent; returns at once (non-blocking)."""
        self._check_open()
        if self.state in (ClientState.DISCONNECTED, ClientState.DISCONNECTING):
            self._bye_deadline = None  # a disconnect under way is called off
            self._no_response_advised = False
            self._locates = 0
            self._locate(now)

    def disconnect(self, now: float) -> None:
        """Disconnect once the events stored so far reached the agent (non-blocking).

        RELAY.DISCONNECTED is presented when done (the agent confirmed, or
        ``bye_timeout`` passed), telling the program it may sever the network.
        """
        self._check_open()
        self._begin_disconnect(now, advise=True)

    def close(self, now: float) -> None:
        """The implicit disconnect of a transport being destroyed: no advisory."""
        if self.state == ClientState.CLOSED:
            return
        self._begin_disconnect(now, advise=False)

    @property
    def finished(self) -> bool:
        """A disconnect or close completed (nothing more will be sent)."""
        return self.state in (ClientState.DISCONNECTED, ClientState.CLOSED)

    def emit(
        self, data: bytes, now: float, *, droppable: bool = False, reply: str | None = None
    ) -> bool:
        """An outbound message for the network; False if it was dropped (``droppable``).

        Kept until the agent acknowledges it, across disconnections. ``reply``
        is the message's reply subject: an inbox is replaced by a surrogate
        inbox of the agent, which relays the replies (stored while this
        client is away); any other reply subject needs no substitution.
        """
        self._check_open()
        if not isinstance(data, bytes):
            raise InvalidArgument(f"data must be bytes, not {type(data).__name__}")
        if droppable and self.state != ClientState.CONNECTED:
            self.dropped += 1
            return False
        if reply is not None and is_inbox(reply):
            self._outbox.append(("q", reply, data))
        else:
            self._outbox.append(("m", data))
        self._pump(now)
        return True

    def reply_unclaimed(self, inbox: str) -> None:
        """The driver had a relayed reply for ``inbox`` but nothing listens there any more."""
        self._reply_lost(inbox, "nothing listens on the inbox any more")

    def _reply_lost(self, inbox: str, reason: str) -> None:
        self.replies_lost += 1
        self._outputs.append(relay_reply_lost(self.agent, reason, self.replies_lost, inbox=inbox))

    def listen(self, pattern: str, role: str, now: float) -> None:
        """The agent must listen on ``pattern`` for this client, tagging matches ``role``."""
        self._check_open()
        key = (pattern, role)
        if key not in self._listens:
            self._listens.add(key)
            self._outbox.append(("l", pattern, role))
            self._pump(now)

    def unlisten(self, pattern: str, role: str, now: float) -> None:
        self._check_open()
        key = (pattern, role)
        if key in self._listens:
            self._listens.discard(key)
            self._outbox.append(("u", pattern, role))
            self._pump(now)

    def _check_open(self) -> None:
        if self.state == ClientState.CLOSED or (
            self.state == ClientState.DISCONNECTING and not self._advise_disconnect
        ):
            raise TransportClosed(f"relay link of {self.client!r} is closed")

    # --- frames ----------------------------------------------------------------------------

    def receive(self, data: bytes, now: float) -> None:
        """A frame arrived at this client's address."""
        try:
            frame = decode_frame(data)
        except MalformedMessage:
            self.malformed += 1
            return
        self._on_frame(frame, now)
        self._pump(now)

    def _on_frame(self, frame: Frame, now: float) -> None:
        state = self.state
        if isinstance(frame, Here):
            if frame.agent == self.agent and state == ClientState.LOCATING:
                self._agent_address = frame.address
                self._sessions += 1
                self._session = (self._epoch << 20) | (self._sessions & 0xFFFFF)
                self.state = ClientState.CONNECTING
                self._last_heard = now
                self._send_connect(now)
            return
        session = getattr(frame, "session", None)
        if session != self._session or state not in (
            ClientState.CONNECTING,
            ClientState.CONNECTED,
            ClientState.DISCONNECTING,
        ):
            return
        self._last_heard = now
        if isinstance(frame, Accept):
            if state == ClientState.CONNECTING:
                self._outbox.ack(frame.received, now)
                self._outbox.rewind(now)
                self._inbox.start(frame.first)
                self.state = ClientState.CONNECTED
                self._next_ping = now + self._timing.keepalive
                self._outputs.append(relay_connected(self.agent))
        elif isinstance(frame, Ack):
            self._outbox.ack(frame.seq, now)
        elif isinstance(frame, Push):
            if state == ClientState.CONNECTING:
                return  # the Accept was lost or is late; the agent pushes again
            append = self._outputs.append
            for item in self._inbox.accept(frame.first, frame.items):
                if len(item) == 2 and item[0].__class__ is str and item[1].__class__ is bytes:
                    if item[0] == LOST_ROLE:
                        self._lost_notice(item[1])
                    else:
                        append(Inbound(item[0], item[1]))
                else:
                    self.malformed += 1
            self._send(Ack(self._session, self._inbox.received))
        elif isinstance(frame, Gone):
            if state == ClientState.DISCONNECTING and self._bye_sent:
                self._finish_disconnect()
        elif isinstance(frame, Reset):
            if state == ClientState.DISCONNECTING:
                self._finish_disconnect()
            else:
                self._locates = 0
                self._locate(now)

    def _lost_notice(self, data: bytes) -> None:
        try:
            inbox, reason = decode_lost(data)
        except MalformedMessage:
            self.malformed += 1
            return
        self._reply_lost(inbox, reason)

    # --- time ----------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        state = self.state
        times: list[float] = []
        if state == ClientState.LOCATING and self._next_locate is not None:
            times.append(self._next_locate)
        elif state in (ClientState.CONNECTING, ClientState.CONNECTED, ClientState.DISCONNECTING):
            times.append(self._last_heard + self._timing.agent_timeout)
            if state == ClientState.CONNECTING:
                if self._next_locate is not None:
                    times.append(self._next_locate)
            else:
                retry = self._outbox.retry_at(self._timing.retry)
                if retry is not None:
                    times.append(retry)
                times.append(self._next_ping)
        if self._bye_deadline is not None:
            times.append(self._bye_deadline)
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        state = self.state
        timing = self._timing
        if self._bye_deadline is not None and now >= self._bye_deadline:
            self._finish_disconnect()
            return
        if state == ClientState.LOCATING:
            if self._next_locate is not None and now >= self._next_locate:
                self._locate(now)
            return
        if state not in (ClientState.CONNECTING, ClientState.CONNECTED, ClientState.DISCONNECTING):
            return
        if now >= self._last_heard + timing.agent_timeout:
            if state == ClientState.DISCONNECTING:
                self._finish_disconnect()
            else:
                self._locates = 0
                self._locate(now)  # the agent went away: find it again
            return
        if state == ClientState.CONNECTING:
            if self._next_locate is not None and now >= self._next_locate:
                self._send_connect(now)
            return
        if now >= self._next_ping:
            self._next_ping = now + timing.keepalive
            self._send(Ping(self._session))
        self._outbox.check_retry(now, timing.retry)
        self._pump(now)

    # --- internals ------------------------------------------------------------------------

    def _locate(self, now: float) -> None:
        self.state = ClientState.LOCATING
        self._locates += 1
        if self._locates > self._timing.locate_attempts and not self._no_response_advised:
            self._no_response_advised = True
            self._outputs.append(relay_no_response(self.agent))
        self._next_locate = now + self._timing.locate_interval
        self._outputs.append(
            SendFrame(
                locate_subject(self.agent),
                encode_frame(Locate(self.agent, self.client, self.address, "")),
            )
        )

    def _send_connect(self, now: float) -> None:
        self._next_locate = now + self._timing.retry  # repeat the Connect until accepted
        self._send(
            Connect(
                self.client,
                self._session,
                self.address,
                self._epoch,
                self._outbox.first,
                self._inbox.received,
                tuple(sorted(self._listens)),
            )
        )

    def _send(self, frame: Frame) -> None:
        address = self._agent_address
        if address is not None:
            self._outputs.append(SendFrame(address, encode_frame(frame)))

    def _pump(self, now: float) -> None:
        """Send what can go, once the current input is handled (see :meth:`drain`).

        Deferring lets a burst of events (a program sending in a loop) leave
        in a few large frames rather than one frame each.
        """
        self._due = now

    def _flush(self, now: float) -> None:
        state = self.state
        if state == ClientState.CONNECTED:
            upto = None
        elif state == ClientState.DISCONNECTING and not self._bye_sent:
            upto = self._bye_mark  # later events are stored for the next connection
        else:
            return
        outbox = self._outbox
        while True:
            taken = outbox.take(now, upto=upto)
            if taken is None:
                break
            first, items = taken
            self._send(Push(self._session, first, tuple(items)))
        if upto is not None and outbox.acked >= upto:
            self._bye_sent = True
            self._send(Bye(self._session))

    def _begin_disconnect(self, now: float, *, advise: bool) -> None:
        state = self.state
        self._advise_disconnect = advise
        if state in (ClientState.CONNECTED, ClientState.DISCONNECTING):
            if state == ClientState.CONNECTED:
                self._bye_mark = self._outbox.next_seq - 1
                self._bye_sent = False
                self.state = ClientState.DISCONNECTING
            self._bye_deadline = now + self._timing.bye_timeout
            self._pump(now)
        else:
            self._finish_disconnect()

    def _finish_disconnect(self) -> None:
        advise = self._advise_disconnect
        self._bye_deadline = None
        self._next_locate = None
        self._outbox.rewind(0.0)
        self.state = ClientState.DISCONNECTED if advise else ClientState.CLOSED
        if advise:
            self._outputs.append(relay_disconnected(self.agent))
