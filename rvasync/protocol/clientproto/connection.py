"""One end of a client-protocol conversation: the legal order of frames (sans-IO).

A :class:`Connection` is to the client protocol what h11's connection object
is to HTTP/1.1: both the client transport (``Role.CLIENT``) and the daemon's
client port (``Role.DAEMON``) hold one per TCP connection, feed it the bytes
they receive and get frames back, and hand it the frames they want to send and
get bytes back. It does no I/O, keeps no clock, and owns the rules of the
conversation, which each side tracks in a :class:`State`:

=====================  ================================================  =========================
side and state         may send                                          moves on with
=====================  ================================================  =========================
client ``START``       HELLO, PING, PONG, BYE                            HELLO: ``OPEN``
client ``OPEN``        LISTEN, UNLISTEN, PUBLISH, RELIABILITY, PING, PONG, BYE
daemon ``START``       WELCOME (once the client's HELLO is in), ERROR,   WELCOME: ``OPEN``
                       PING, PONG, BYE
daemon ``OPEN``        DELIVER, ADVISORY, ERROR, PING, PONG, BYE
either, any state                                                        BYE: ``CLOSED``
=====================  ================================================  =========================

A client need not wait for WELCOME before it LISTENs or PUBLISHes: a daemon
answers HELLO before it looks at the next frame, and drops the connection if
it refuses. Nothing may follow a side's BYE.

Errors:

* a frame the *local* side may not send now raises :class:`LocalProtocolError`
  (a bug in the caller; nothing is encoded and the state does not change);
* bytes from the *peer* that are not a valid frame, or a frame the peer may
  not send now, raise :class:`~rvasync.protocol.clientproto.frames.ProtocolError`
  from :meth:`Connection.receive_data`, carrying in ``frames`` the legal frames
  that came before the bad one so the caller can act on them first. The peer's
  side is then ``BROKEN`` and every later call of ``receive_data`` raises the
  same error: a stream that broke the rules is not trusted again. The local
  side may still send (an ERROR and a BYE, typically);
* whatever the peer sends after its BYE (bytes, garbage) is ignored.

Nothing else is ever raised by ``receive_data``, whatever the input.

The message path has a batch form: :meth:`Connection.send_messages` turns any
number of messages into PUBLISH (client) or DELIVER (daemon) frames with one
state check, and ``receive_data`` checks the order of a whole read's frames in
one pass (one set lookup per frame, none per message).
"""

from __future__ import annotations

import enum

from rvasync.errors import NotPermitted
from rvasync.protocol.clientproto.frames import (
    MAX_FRAME,
    Advisory,
    Bye,
    Deliver,
    Error,
    Frame,
    FrameDecoder,
    FrameType,
    Hello,
    Listen,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    Reliability,
    Unlisten,
    Welcome,
    encode,
    encode_messages,
)

__all__ = ["Connection", "LocalProtocolError", "Role", "State"]


class Role(enum.Enum):
    """Which end of the connection this object speaks for."""

    CLIENT = "client"
    DAEMON = "daemon"


class State(enum.Enum):
    """Where one side of a conversation is (see the module's table)."""

    START = "START"  # client: before its HELLO; daemon: before its WELCOME
    OPEN = "OPEN"  # client: HELLO sent; daemon: WELCOME sent
    CLOSED = "CLOSED"  # said BYE
    BROKEN = "BROKEN"  # (the peer only) sent garbage or a frame out of order


class LocalProtocolError(NotPermitted):
    """This end tried to send a frame the client protocol does not allow now."""


_FRAMES_OF = {
    Role.CLIENT: frozenset({Hello, Listen, Unlisten, Publish, Ping, Pong, Bye, Reliability}),
    Role.DAEMON: frozenset({Welcome, Error, Deliver, Advisory, Ping, Pong, Bye}),
}
_MAY_SEND = {
    Role.CLIENT: {
        State.START: frozenset({Hello, Ping, Pong, Bye}),
        State.OPEN: frozenset({Listen, Unlisten, Publish, Ping, Pong, Bye, Reliability}),
    },
    Role.DAEMON: {
        State.START: frozenset({Welcome, Error, Ping, Pong, Bye}),
        State.OPEN: frozenset({Deliver, Advisory, Error, Ping, Pong, Bye}),
    },
}
_MOVES: dict[type, State] = {Hello: State.OPEN, Welcome: State.OPEN, Bye: State.CLOSED}
# Frames that never change their sender's state: the fast path of receive_data.
_STEADY = {
    (role, state): frames - _MOVES.keys()
    for role, by_state in _MAY_SEND.items()
    for state, frames in by_state.items()
}
# An enum's members read from its class go through EnumType.__getattr__ (slow): the
# per-message path compares with this module constant instead.
_OPEN = State.OPEN

_FIRST = {Role.CLIENT: "HELLO", Role.DAEMON: "WELCOME"}
_OTHER = {Role.CLIENT: Role.DAEMON, Role.DAEMON: Role.CLIENT}
_NOTHING: frozenset[type] = frozenset()


class Connection:
    """One end of one client-protocol connection (see the module docstring).

    ``Connection(Role.CLIENT)`` for a transport's link, ``Connection(Role.DAEMON)``
    for one accepted client on the daemon's port.
    """

    __slots__ = (
        "_broken",
        "_decoder",
        "_halted",
        "_hello",
        "_message_type",
        "_their_steady",
        "our_state",
        "role",
        "their_role",
        "their_state",
    )

    def __init__(self, role: Role, *, max_frame: int = MAX_FRAME) -> None:
        if not isinstance(role, Role):
            raise TypeError(f"role must be a Role, got {role!r}")
        self.role = role
        self.their_role = _OTHER[role]
        #: This end's state, moved by what it sends.
        self.our_state = State.START
        #: The peer's state, moved by what it sends.
        self.their_state = State.START
        self._hello = False  # the client's HELLO was sent (client) or received (daemon)
        self._broken: ProtocolError | None = None
        self._halted = False  # the peer broke the protocol or said BYE: no more frames
        self._decoder = FrameDecoder(max_frame)
        self._their_steady = _STEADY[self.their_role, State.START]
        self._message_type = FrameType.PUBLISH if role is Role.CLIENT else FrameType.DELIVER

    # -- inbound --------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame (non-zero: a frame is cut)."""
        return self._decoder.buffered

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """The frames completed by ``data``, each legal in its place (possibly none).

        Raises :class:`ProtocolError` (with ``frames``: the legal frames before
        the bad one) on garbage or a frame out of order, and on every call after that.
        """
        if self._halted:
            if self._broken is not None:
                raise self._broken
            return []  # the peer said BYE: whatever follows is ignored
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            return self._check_frames(exc.frames, exc)
        # The usual read (messages, pings) moves no state: one set lookup per frame.
        steady = self._their_steady
        for frame in frames:
            if type(frame) not in steady:
                return self._check_frames(frames, None)
        return frames

    def _check_frames(self, frames: list[Frame], garbage: ProtocolError | None) -> list[Frame]:
        for index, frame in enumerate(frames):
            if type(frame) in self._their_steady:
                continue
            problem = self._check(self.their_role, self.their_state, frame)
            if problem is not None:
                self._break(ProtocolError(problem), frames[:index])
            self._move(self.their_role, frame)
            if self.their_state is State.CLOSED:
                self._halted = True
                del frames[index + 1 :]  # the peer is done: the rest is ignored
                return frames
        if garbage is not None:
            self._break(garbage, frames)
        return frames

    def _break(self, exc: ProtocolError, frames: list[Frame]) -> None:
        exc.frames = frames
        self._broken = exc
        self._halted = True
        self.their_state = State.BROKEN
        self._their_steady = _NOTHING
        raise exc

    # -- outbound -------------------------------------------------------------------------------

    def send(self, frame: Frame) -> bytes:
        """The bytes of ``frame``, if this end may send it now (else LocalProtocolError)."""
        problem = self._check(self.role, self.our_state, frame)
        if problem is not None:
            raise LocalProtocolError(f"the {self.role.value} may not send this now: {problem}")
        data = encode(frame)
        self._move(self.role, frame)
        return data

    def send_messages(self, messages: list[bytes]) -> list[bytes]:
        """PUBLISH (client) or DELIVER (daemon) frames carrying ``messages`` in order.

        The buffers to write, as :func:`~rvasync.protocol.clientproto.frames.encode_messages`
        makes them (many messages to a frame, big ones not copied); empty for no messages.
        """
        if self.our_state is not _OPEN:
            name = self._message_type.name
            raise LocalProtocolError(
                f"the {self.role.value} may not send this now: "
                + (
                    f"{name} before {_FIRST[self.role]}"
                    if self.our_state is State.START
                    else f"{name} after BYE"
                )
            )
        return encode_messages(self._message_type, messages)

    # -- the rules ------------------------------------------------------------------------------

    def _check(self, sender: Role, state: State, frame: Frame) -> str | None:
        """Why ``sender`` in ``state`` may not send ``frame`` (None: it may)."""
        kind = type(frame)
        if kind not in _FRAMES_OF[sender]:
            if kind not in _FRAMES_OF[_OTHER[sender]]:
                raise TypeError(f"not a client-protocol frame: {frame!r}")
            return f"{frame.frame_type.name} is not a frame a {sender.value} may send"
        name = frame.frame_type.name
        if state is State.CLOSED:
            return f"{name} after BYE"
        if state is State.BROKEN:
            return f"{name} after a protocol error"
        if kind in _MAY_SEND[sender][state]:
            if kind is Welcome and not self._hello:
                return "WELCOME before HELLO"
            return None
        if state is State.START:
            return f"{name} before {_FIRST[sender]}"
        return f"a second {name} on one connection"

    def _move(self, sender: Role, frame: Frame) -> None:
        state = _MOVES.get(type(frame))
        if state is None:
            return
        if type(frame) is Hello:
            self._hello = True
        if sender is self.role:
            self.our_state = state
        else:
            self.their_state = state
            self._their_steady = _STEADY.get((sender, state), _NOTHING)

    def __repr__(self) -> str:
        return (
            f"<Connection {self.role.value} ours={self.our_state.value} "
            f"theirs={self.their_state.value}>"
        )
