"""One circuit terminal as a state machine: handshake, ordered delivery, monitoring.

The core never touches a socket, a transport or a clock: the driver feeds it
frames (:meth:`Circuit.receive`), program calls (:meth:`~Circuit.send`,
:meth:`~Circuit.close`) and timer expiries (:meth:`~Circuit.timer`), each
with ``now`` in seconds, and carries out the :class:`Outputs` it returns.

Why each piece exists:

* Handshake. The connector sends CONNECT (its token and inbox) to the
  acceptor's connect subject until ACCEPT comes back; the acceptor takes the
  first CONNECT only, and answers repeats of *that* CONNECT again (its
  ACCEPT may have been lost). A connector that hears nothing for
  ``silence`` seconds fails.
* Exclusivity. Every later frame must name the receiver's token and come
  from the partner's token; anything else is counted in ``foreign`` and
  dropped.
* Order without gaps. Every user message is numbered (from 1); a DATA frame
  carries a run of consecutive messages (its ``seq`` is the first one's
  number), so a burst costs a few frames, not one frame per message: the
  driver queues the messages of an event-loop turn (:meth:`Circuit.queue`)
  and frames them together (:meth:`Circuit.flush`, at most
  ``CircuitParams.batch`` per frame). The receiver delivers in number order,
  drops duplicates and holds early messages. The sender keeps every frame
  until a cumulative ack covers its last message and retransmits the
  unacknowledged ones when acks stop advancing (backing off to the
  heartbeat interval; a retransmission timer that comes a whole interval
  late, because this side was busy, first waits one more interval for the
  acks that may be waiting unread); acks are cumulative and delayed (``ack_delay``) or
  ride on the receiver's own DATA, so a stream costs few of them. A frame
  unacknowledged for ``silence`` seconds, or a hole the receiver has waited
  ``silence`` seconds to fill, breaks the circuit: delivery stops *before*
  the hole, with an error, never after it.
* Monitoring. A terminal that has sent nothing for ``heartbeat`` seconds
  sends an ACK (the heartbeat); one that has heard nothing from its partner
  for ``silence`` seconds breaks the circuit. So a partner that dies
  silently is noticed within ``silence`` seconds plus one timer delay. A
  terminal whose own timer comes more than ``silence / 2`` late (its process
  was starved or stopped) first gives the partner half a silence period, since
  the partner's frames may be waiting unread: a stall of this side alone does
  not break the circuit.
* Ending. CLOSE carries the number of the last DATA sent; the receiver ends
  the circuit gracefully once everything up to it is delivered. A terminal
  that finds the circuit broken tells its partner with ABORT (best effort),
  so both sides report the failure.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from rvasync.errors import InvalidArgument, NotPermitted, TransportClosed
from rvasync.protocol.vc.frames import TOKEN_SIZE, Frame, FrameKind

__all__ = ["Circuit", "CircuitParams", "CircuitState", "Outputs"]

_MISSING: Any = object()  # no early payload held for a number (payloads may be None)


class CircuitState(enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"


# Module aliases of the members, read on every message: on Python 3.11 reading
# ``CircuitState.CONNECTING`` costs about 0.2 us (EnumType defines __getattr__, which puts every
# attribute look-up on the class on a slow path); a module global costs about 15 ns.
_CONNECTING, _CONNECTED, _DISCONNECTED = (
    CircuitState.CONNECTING,
    CircuitState.CONNECTED,
    CircuitState.DISCONNECTED,
)
_K_CONNECT, _K_ACCEPT, _K_DATA, _K_ACK, _K_CLOSE, _K_ABORT = (
    FrameKind.CONNECT,
    FrameKind.ACCEPT,
    FrameKind.DATA,
    FrameKind.ACK,
    FrameKind.CLOSE,
    FrameKind.ABORT,
)


@dataclass(slots=True, frozen=True)
class CircuitParams:
    """Timing of a circuit, in seconds (both terminals should use the same values).

    ``silence`` is the documented disconnect time: a partner silent that
    long, or data unacknowledged that long, breaks the circuit. Six
    heartbeats fit in it by default, so only a long run of lost heartbeats
    (not one or two) is taken for a dead partner. ``batch`` is the most user
    messages one DATA frame carries; ``burst`` the most frames one
    retransmission round resends.
    """

    heartbeat: float = 0.5
    silence: float = 3.0
    retransmit: float = 0.2
    ack_delay: float = 0.02
    max_early: int = 65536
    burst: int = 256
    batch: int = 256

    def __post_init__(self) -> None:
        for name in ("heartbeat", "silence", "retransmit", "ack_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidArgument(f"circuit {name} must be a positive number, got {value!r}")
            if value == float("inf"):
                raise InvalidArgument(f"circuit {name} must be finite")
        if self.silence <= self.heartbeat:
            raise InvalidArgument(
                f"circuit silence ({self.silence}) must exceed the heartbeat ({self.heartbeat}):"
                " a partner needs time to send at least one heartbeat"
            )
        for name in ("max_early", "burst", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"circuit {name} must be a positive int, got {value!r}")


@dataclass(slots=True)
class Outputs:
    """What one input produced: frames to transmit (address, frame), payloads to
    deliver in order, and at most one state change (``connected``, or
    ``disconnected`` = (graceful, reason))."""

    transmit: list[tuple[str, Frame]] = field(default_factory=list)
    deliver: list[Any] = field(default_factory=list)
    connected: bool = False
    disconnected: tuple[bool, str] | None = None


class Circuit:
    """One terminal. ``connect_subject`` given: the connecting terminal; None: accepting.

    ``token`` is this terminal's secret (16 random bytes, drawn by the
    driver); ``inbox`` is where the partner sends to (the acceptor's is its
    connect subject).
    """

    def __init__(
        self,
        *,
        token: bytes,
        inbox: str,
        connect_subject: str | None = None,
        params: CircuitParams | None = None,
    ) -> None:
        if len(token) != TOKEN_SIZE:
            raise InvalidArgument(f"a circuit token is {TOKEN_SIZE} bytes")
        self.params = params if params is not None else CircuitParams()
        self.token = bytes(token)
        self.inbox = inbox
        self.connecting = connect_subject is not None
        self.state = _CONNECTING
        self.peer_token: bytes | None = None
        self.peer_address: str | None = connect_subject
        #: frames dropped because they were not the partner's (forged, stale, strays)
        self.foreign = 0
        self.reason = ""
        # sending side: messages queued for the next frame, then frames (by the
        # number of their first message) until acknowledged
        self._pending: list[Any] = []
        self._next_send = 1  # the number the next framed message gets
        self._acked_upto = 0
        self._unacked: OrderedDict[int, tuple[Frame, float]] = OrderedDict()
        self._rto = self.params.retransmit
        self._rtx_at: float | None = None
        self._rtx_deferred = False  # a late retransmission timer was put off once
        self._last_sent = 0.0
        # receiving side
        self._delivered = 0
        self._early: dict[int, Any] = {}
        self._gap_since: float | None = None
        self._ack_at: float | None = None
        self._last_heard = 0.0
        self._close_after: int | None = None
        # handshake
        self._started: float | None = None
        self._connect_at: float | None = None
        self._last_tick: float | None = None  # the previous timer call while connected

    # -- introspection -------------------------------------------------------

    @property
    def unacked(self) -> int:
        """User messages queued or sent and not yet acknowledged."""
        return self._next_send - 1 - self._acked_upto + len(self._pending)

    @property
    def pending(self) -> int:
        """User messages queued and not yet framed (see :meth:`flush`)."""
        return len(self._pending)

    @property
    def delivered(self) -> int:
        """User messages delivered in order so far."""
        return self._delivered

    def next_deadline(self) -> float | None:
        """When :meth:`timer` should next be called (None: only on other input)."""
        p = self.params
        if self.state is _DISCONNECTED:
            return None
        if self.state is _CONNECTING:
            if not self.connecting or self._started is None or self._connect_at is None:
                return None
            return min(self._connect_at, self._started + p.silence)
        times = [self._last_heard + p.silence, self._last_sent + p.heartbeat]
        if self._unacked:
            times.append(next(iter(self._unacked.values()))[1] + p.silence)
        if self._rtx_at is not None:
            times.append(self._rtx_at)
        if self._ack_at is not None:
            times.append(self._ack_at)
        if self._gap_since is not None:
            times.append(self._gap_since + p.silence)
        return min(times)

    # -- inputs ----------------------------------------------------------------

    def start(self, now: float) -> Outputs:
        """Begin: the connector sends its first CONNECT; the acceptor starts waiting."""
        out = Outputs()
        if self._started is not None:
            return out
        self._started = now
        if self.connecting:
            self._send_connect(out, now)
        return out

    def queue(self, payload: Any) -> int:
        """Queue one user payload for the next DATA frame; returns how many wait now.

        Nothing leaves until :meth:`flush` (the driver calls it at the end of
        the event-loop turn, or at once for the turn's first message, or when
        ``batch`` messages wait).
        """
        state = self.state
        if state is not _CONNECTED:
            if state is _DISCONNECTED:
                raise TransportClosed(f"the virtual circuit is disconnected ({self.reason})")
            raise NotPermitted("the virtual circuit is not connected yet: await wait_connected()")
        pending = self._pending
        pending.append(payload)
        return len(pending)

    def flush(self, now: float) -> Outputs:
        """Frame the queued payloads (``batch`` per frame at most) and transmit them."""
        out = Outputs()
        pending = self._pending
        if not pending or self.state is not _CONNECTED:
            return out
        batch = self.params.batch
        if len(pending) <= batch:
            self._data_frame(out, tuple(pending), now)
        else:
            for start in range(0, len(pending), batch):
                self._data_frame(out, tuple(pending[start : start + batch]), now)
        pending.clear()
        return out

    def send(self, payload: Any, now: float) -> Outputs:
        """Send one user payload to the partner now (:meth:`queue` and :meth:`flush`)."""
        self.queue(payload)
        return self.flush(now)

    def close(self, now: float) -> Outputs:
        """Close this terminal on purpose (the partner ends gracefully); once only.

        Payloads still queued are framed first: the CLOSE frame names the last.
        """
        if self.state is _DISCONNECTED:
            raise TransportClosed(f"the virtual circuit is already disconnected ({self.reason})")
        out = self.flush(now)
        if self.state is _CONNECTED:
            # The ack rides along: the partner need not wait for a last ACK from a closed end.
            close = self._frame(_K_CLOSE, seq=self._next_send - 1, ack=self._delivered)
            self._transmit(out, close, now)
        self._end(out, True, "closed by this terminal")
        return out

    def fail(self, reason: str, now: float) -> Outputs:
        """The driver found the circuit broken (its transport closed ...): end with an error."""
        out = Outputs()
        if self.state is not _DISCONNECTED:
            self._abort(out, reason, now)
        return out

    def receive(self, frame: Frame, now: float) -> Outputs:
        """One frame arrived on this terminal's inbox."""
        out = Outputs()
        if self.state is _DISCONNECTED:
            return out
        if frame.kind is _K_CONNECT:
            self._on_connect(frame, out, now)
            return out
        if frame.to_token != self.token or (
            self.peer_token is not None and frame.from_token != self.peer_token
        ):
            self.foreign += 1
            return out
        if self.state is _CONNECTING:
            # Only a connector can get here (an acceptor's token is unknown before
            # CONNECT): any frame naming its token completes the handshake.
            self.peer_token = frame.from_token
            self.state = _CONNECTED
            self._connect_at = None
            out.connected = True
            self._transmit(out, self._frame(_K_ACK, ack=self._delivered), now)
        self._last_heard = now
        kind = frame.kind
        if kind is _K_ABORT:
            self._end(out, False, f"the other terminal found the circuit broken: {frame.text}")
            return out
        if frame.ack and not self._acked(frame.ack, out, now):
            return out
        if kind is _K_DATA:
            self._on_data(frame, out, now)
        elif kind is _K_CLOSE:
            self._close_after = frame.seq
        if self._close_after is not None and self._delivered >= self._close_after:
            self._end(out, True, "closed by the other terminal")
        return out

    def timer(self, now: float) -> Outputs:
        """Time passed: retransmit, acknowledge, heartbeat, or find the partner gone."""
        out = Outputs()
        p = self.params
        if self.state is _CONNECTING:
            if self.connecting and self._started is not None:
                if now >= self._started + p.silence:
                    self._abort(
                        out, f"no answer from the connect subject within {p.silence} s", now
                    )
                elif self._connect_at is not None and now >= self._connect_at:
                    self._send_connect(out, now)
            return out
        if self.state is _DISCONNECTED:
            return out
        stalled = self._last_tick is not None and now - self._last_tick > p.silence / 2
        self._last_tick = now
        if stalled:
            # This terminal was not run for a long while (its process starved or
            # stopped): what the partner sent meanwhile may still wait unread, so
            # the partner gets half a silence period from now, not a verdict.
            self._last_heard = max(self._last_heard, now - p.silence / 2)
        if now >= self._last_heard + p.silence:
            self._abort(out, f"no heartbeat from the other terminal for {p.silence} s", now)
            return out
        if self._unacked:
            seq, (_, first) = next(iter(self._unacked.items()))
            if now >= first + p.silence:
                self._abort(out, f"data loss: message {seq} not acknowledged in {p.silence} s", now)
                return out
        if self._gap_since is not None and now >= self._gap_since + p.silence:
            self._abort(
                out, f"data loss: message {self._delivered + 1} never arrived ({p.silence} s)", now
            )
            return out
        rtx_at = self._rtx_at
        if rtx_at is not None and now >= rtx_at:
            if now - rtx_at > self._rto and not self._rtx_deferred:
                # This timer came more than a whole interval late: this side was busy,
                # and the partner's acks may be waiting unread. Give them one interval
                # before resending everything (once: then resend whatever happens).
                self._rtx_deferred = True
                self._rtx_at = now + self._rto
            else:
                self._rtx_deferred = False
                self._retransmit(out, now)
        if (
            self._ack_at is not None and now >= self._ack_at
        ) or now >= self._last_sent + p.heartbeat:
            self._transmit(out, self._frame(_K_ACK, ack=self._delivered), now)
        return out

    # -- pieces ------------------------------------------------------------------

    def _frame(self, kind: FrameKind, **values: Any) -> Frame:
        return Frame(kind, self.peer_token or b"", self.token, **values)

    def _data_frame(self, out: Outputs, payloads: tuple[Any, ...], now: float) -> None:
        seq = self._next_send
        self._next_send = seq + len(payloads)
        frame = self._frame(_K_DATA, seq=seq, ack=self._delivered, payload=payloads)
        self._unacked[seq] = (frame, now)
        if self._rtx_at is None:
            self._rtx_at = now + self._rto
        self._transmit(out, frame, now)  # the ack rides on this frame

    def _transmit(self, out: Outputs, frame: Frame, now: float) -> None:
        if self.peer_address is None:
            return
        out.transmit.append((self.peer_address, frame))
        self._last_sent = now
        if frame.kind is not _K_CONNECT:
            self._ack_at = None

    def _send_connect(self, out: Outputs, now: float) -> None:
        self._transmit(out, Frame(_K_CONNECT, b"", self.token, inbox=self.inbox), now)
        # Repeat with backoff up to the heartbeat until an answer or the silence limit.
        delay = self._rto
        self._rto = min(self._rto * 2, self.params.heartbeat)
        self._connect_at = now + delay

    def _on_connect(self, frame: Frame, out: Outputs, now: float) -> None:
        if self.connecting:
            self.foreign += 1
            return
        if self.peer_token is None and self.state is _CONNECTING:
            self.peer_token = frame.from_token
            self.peer_address = frame.inbox
            self.state = _CONNECTED
            self._last_heard = now
            out.connected = True
        elif frame.from_token != self.peer_token:
            self.foreign += 1  # another would-be connector: a circuit has two ends only
            return
        # First CONNECT, or a repeat because our ACCEPT was lost: (re)send ACCEPT.
        self._transmit(out, self._frame(_K_ACCEPT, inbox=self.inbox), now)

    def _acked(self, ack: int, out: Outputs, now: float) -> bool:
        if ack >= self._next_send:
            self._abort(out, f"protocol error: ack {ack} for messages never sent", now)
            return False
        if ack <= self._acked_upto:
            return True  # nothing new (an old or repeated ack)
        self._acked_upto = ack
        unacked = self._unacked
        while unacked:
            seq, (frame, _) = next(iter(unacked.items()))
            if seq + len(frame.payload) - 1 > ack:
                break  # a frame goes once its last message is acknowledged
            del unacked[seq]
        self._rto = self.params.retransmit
        self._rtx_at = now + self._rto if unacked else None
        self._rtx_deferred = False
        return True

    def _on_data(self, frame: Frame, out: Outputs, now: float) -> None:
        first = frame.seq
        payloads = frame.payload
        last = first + len(payloads) - 1
        p = self.params
        delivered = self._delivered
        if last <= delivered:
            self._ack_at = now  # a repeat: the partner missed our ack; answer at once
            return
        early = self._early
        if first > delivered + 1:
            # Early: hold each message until the hole before it is filled.
            fresh = False
            for seq in range(first, last + 1):
                if seq not in early:
                    early[seq] = payloads[seq - first]
                    fresh = True
            if not fresh:
                self._ack_at = now  # a repeat of an early frame: answer at once
                return
            if self._ack_at is None:
                self._ack_at = now + p.ack_delay
            if self._gap_since is None:
                self._gap_since = now
            if len(early) > p.max_early:
                self._abort(out, f"data loss: {len(early)} messages wait behind a gap", now)
            return
        if self._ack_at is None:
            self._ack_at = now + p.ack_delay
        # In order (or overlapping what was delivered): deliver the new part.
        out.deliver.extend(payloads[delivered + 1 - first :] if first <= delivered else payloads)
        delivered = last
        if early:
            for seq in range(first, last + 1):
                early.pop(seq, None)  # held copies of what was just delivered
            while early:
                payload = early.pop(delivered + 1, _MISSING)
                if payload is _MISSING:
                    break
                delivered += 1
                out.deliver.append(payload)
        self._delivered = delivered
        self._gap_since = now if early else None  # a later hole starts its own wait

    def _retransmit(self, out: Outputs, now: float) -> None:
        p = self.params
        for sent, (frame, _) in enumerate(self._unacked.values()):
            if sent >= p.burst:
                break
            self._transmit(out, replace(frame, ack=self._delivered), now)
        self._rto = min(self._rto * 2, p.heartbeat)
        self._rtx_at = now + self._rto

    def _abort(self, out: Outputs, reason: str, now: float) -> None:
        if self.peer_token is not None:
            self._transmit(out, self._frame(_K_ABORT, text=reason), now)
        self._end(out, False, reason)

    def _end(self, out: Outputs, graceful: bool, reason: str) -> None:
        self.state = _DISCONNECTED
        self.reason = reason
        self._pending.clear()
        self._unacked.clear()
        self._early.clear()
        self._rtx_at = self._ack_at = self._gap_since = self._connect_at = None
        out.disconnected = (graceful, reason)
