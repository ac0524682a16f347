"""Frames of the client protocol between a standalone daemon and its transports (sans-IO).

A client transport and a standalone daemon talk over one TCP connection as a
stream of frames::

    u32 length (big-endian, counts the type byte and the body) | u8 type | body

Bodies are msgpack. Messages travel as the exact wire bytes of
:mod:`rvasync.codec` inside msgpack ``bin`` items: neither side re-encodes a
message it forwards, and many small messages share one PUBLISH or DELIVER
frame, which is what makes the TCP hop cheap.

This module does no I/O and knows nothing of the order of frames (that is
:class:`rvasync.protocol.clientproto.Connection`'s job): :func:`encode` turns
a frame into bytes and :class:`FrameDecoder` turns received bytes, split
anywhere, back into frames. Anything that is not a valid frame raises
:class:`ProtocolError` so the reader can drop that one connection cleanly.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rvasync._accel import load
from rvasync._wire import MAX_MESSAGE_SIZE
from rvasync.errors import MalformedMessage

__all__ = [
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "Advisory",
    "Bye",
    "Deliver",
    "Error",
    "ErrorCode",
    "Frame",
    "FrameDecoder",
    "FrameType",
    "Hello",
    "Listen",
    "Ping",
    "Pong",
    "ProtocolError",
    "Publish",
    "Unlisten",
    "Welcome",
    "encode",
    "encode_messages",
]

#: Bumped on any incompatible change; a daemon refuses a HELLO with another version.
PROTOCOL_VERSION = 1

#: Largest frame (type byte + body). One message of the 64 MiB maximum, plus
#: room for the msgpack headers around it; batches are cut to stay below it.
MAX_FRAME = MAX_MESSAGE_SIZE + 64 * 1024

_LENGTH = struct.Struct(">I")
_HEADER = struct.Struct(">IB")
_HEADER_SIZE = _HEADER.size

# Target size of one coalesced PUBLISH/DELIVER frame: big enough to amortise
# per-frame costs, small enough that a reader is never starved behind one frame.
_BATCH_TARGET = 256 * 1024

# The message-frame hot path: rvasync_native.clientframes, or its pure twin.
_clientframes = load("clientframes")
_take_message_frames = _clientframes.take_message_frames
_pack_messages = _clientframes.pack_messages


class ProtocolError(MalformedMessage):
    """The peer broke the client protocol: bytes that are not a valid frame, or a frame
    out of order (the connection is dropped).

    When raised by :meth:`FrameDecoder.feed`, ``frames`` holds the valid frames that
    preceded the garbage in the same input, so a reader can act on them first.
    """

    frames: list[Frame]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.frames = []


class FrameType(enum.IntEnum):
    """The type byte of a frame."""

    HELLO = 1
    WELCOME = 2
    ERROR = 3
    LISTEN = 4
    UNLISTEN = 5
    PUBLISH = 6
    DELIVER = 7
    ADVISORY = 8
    PING = 9
    PONG = 10
    BYE = 11
    RELIABILITY = 12


# Members read once: reading them from the class goes through EnumType.__getattr__,
# too slow for the per-message path (encode_messages).
_PUBLISH = FrameType.PUBLISH
_DELIVER = FrameType.DELIVER


class ErrorCode(enum.StrEnum):
    """Why the daemon refused a client or dropped it (the ``code`` of an ERROR frame)."""

    VERSION = "VERSION"  # unsupported protocol version
    INVALID_ARGUMENT = "INVALID_ARGUMENT"  # bad service/network/reliability ...
    NOT_PERMITTED = "NOT_PERMITTED"  # e.g. service already bound to another network
    PROTOCOL = "PROTOCOL"  # garbage or out-of-order frames
    SHUTDOWN = "SHUTDOWN"  # the daemon is stopping


@dataclass(frozen=True, slots=True)
class Hello:
    """Client -> daemon, first frame: who the transport is and what it wants."""

    version: int = PROTOCOL_VERSION
    service: str | None = None
    network: str | None = None
    description: str | None = None
    reliability: float | None = None
    #: Secure daemon: the user's name and password (sent only over TLS; never in repr).
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    #: The transport asks for the routing daemon's role (granted by the daemon, or refused).
    router: bool = False

    frame_type = FrameType.HELLO


@dataclass(frozen=True, slots=True)
class Welcome:
    """Daemon -> client: the session exists; its inbox prefix and facts about the daemon."""

    inbox_prefix: str
    daemon: dict[str, Any] = field(default_factory=dict)

    frame_type = FrameType.WELCOME


@dataclass(frozen=True, slots=True)
class Error:
    """Either direction: a refusal or the reason a connection is being dropped."""

    code: str
    text: str

    frame_type = FrameType.ERROR


@dataclass(frozen=True, slots=True)
class Listen:
    """Client -> daemon: deliver messages matching ``subject`` (wildcards allowed)."""

    subject: str

    frame_type = FrameType.LISTEN


@dataclass(frozen=True, slots=True)
class Unlisten:
    """Client -> daemon: withdraw one LISTEN of ``subject``."""

    subject: str

    frame_type = FrameType.UNLISTEN


@dataclass(frozen=True, slots=True)
class Publish:
    """Client -> daemon: messages to send, as wire bytes, in order."""

    messages: list[bytes]

    frame_type = FrameType.PUBLISH


@dataclass(frozen=True, slots=True)
class Deliver:
    """Daemon -> client: messages matching the session's interests, as wire bytes, in order."""

    messages: list[bytes]

    frame_type = FrameType.DELIVER


@dataclass(frozen=True, slots=True)
class Advisory:
    """Daemon -> client: one advisory for this transport, as wire bytes."""

    message: bytes

    frame_type = FrameType.ADVISORY


@dataclass(frozen=True, slots=True)
class Ping:
    """Either direction: ask for a PONG with the same token (liveness and round trips)."""

    token: int = 0

    frame_type = FrameType.PING


@dataclass(frozen=True, slots=True)
class Pong:
    """Answer to PING; everything sent before the PING has been processed by then."""

    token: int = 0

    frame_type = FrameType.PONG


@dataclass(frozen=True, slots=True)
class Bye:
    """Either direction: an orderly goodbye before closing the connection."""

    reason: str = ""

    frame_type = FrameType.BYE


@dataclass(frozen=True, slots=True)
class Reliability:
    """Client -> daemon: this transport now asks for ``seconds`` of reliability.

    The spec's request-reliability call on an open transport: the daemon keeps
    the largest request of its sessions on the service (within its bounds).
    """

    seconds: float

    frame_type = FrameType.RELIABILITY


Frame = (
    Hello
    | Welcome
    | Error
    | Listen
    | Unlisten
    | Publish
    | Deliver
    | Advisory
    | Ping
    | Pong
    | Bye
    | Reliability
)


# -- encoding ---------------------------------------------------------------------------------


def _frame(frame_type: int, body: bytes) -> bytes:
    if len(body) + 1 > MAX_FRAME:
        raise ProtocolError(
            f"{FrameType(frame_type).name} frame of {len(body) + 1} bytes is over the "
            f"{MAX_FRAME}-byte frame limit"
        )
    return _HEADER.pack(len(body) + 1, frame_type) + body


_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def encode(frame: Frame) -> bytes:
    """The bytes of one frame (PUBLISH/DELIVER: one frame, whatever the count)."""
    # frame.__class__ (not a local alias) so the type checker narrows each branch.
    if frame.__class__ is Publish or frame.__class__ is Deliver:
        return b"".join(_message_frame(frame.frame_type, frame.messages))
    if frame.__class__ is Hello:
        fields = {
            "version": frame.version,
            "service": frame.service,
            "network": frame.network,
            "description": frame.description,
            "reliability": frame.reliability,
        }
        # Credentials and the router role are optional keys: a HELLO without them is byte
        # for byte the old one.
        if frame.user is not None:
            fields["user"] = frame.user
        if frame.password is not None:
            fields["password"] = frame.password
        if frame.router:
            fields["router"] = True
        body = _pack(fields)
    elif frame.__class__ is Welcome:
        body = _pack({"inbox_prefix": frame.inbox_prefix, "daemon": frame.daemon})
    elif frame.__class__ is Error:
        body = _pack([frame.code, frame.text])
    elif frame.__class__ is Listen or frame.__class__ is Unlisten:
        body = _pack(frame.subject)
    elif frame.__class__ is Advisory:
        body = _pack(frame.message)
    elif frame.__class__ is Ping or frame.__class__ is Pong:
        body = _pack(frame.token)
    elif frame.__class__ is Bye:
        body = _pack(frame.reason)
    elif frame.__class__ is Reliability:
        body = _pack(float(frame.seconds))
    else:
        raise TypeError(f"not a client-protocol frame: {frame!r}")
    return _frame(frame.frame_type, body)


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _bin_header(n: int) -> bytes:
    if n < 0x100:
        return bytes((0xC4, n))
    if n < 0x10000:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def _message_frame(frame_type: int, messages: Sequence[bytes]) -> list[bytes]:
    """One PUBLISH/DELIVER frame as a list of buffers (the messages themselves not copied)."""
    parts: list[bytes] = [b"", _array_header(len(messages))]
    size = 1 + len(parts[1])
    append = parts.append
    for wire in messages:
        n = len(wire)
        header = _bin_header(n)
        append(header)
        append(wire)
        size += len(header) + n
    if size > MAX_FRAME:
        raise ProtocolError(
            f"{FrameType(frame_type).name} frame of {size} bytes is over the "
            f"{MAX_FRAME}-byte frame limit"
        )
    parts[0] = _HEADER.pack(size, frame_type)
    return parts


def _packed_frame(frame_type: int, messages: list[bytes]) -> list[bytes]:
    """One frame of small messages in one buffer (one copy, but fast)."""
    return [_pack_messages(frame_type, messages)]


def encode_messages(
    frame_type: FrameType, messages: Iterable[bytes], *, target: int = _BATCH_TARGET
) -> list[bytes]:
    """PUBLISH or DELIVER frames carrying ``messages`` in order, as buffers to write.

    Consecutive messages share a frame until it reaches about ``target``
    bytes. Small batches are packed in C (copying a few hundred KiB costs
    less than framing each message in Python); a message bigger than
    ``target`` gets a frame of its own and is not copied here (the result
    lists it as it is), so a 64 MiB message costs no extra copy on its way to
    the socket.
    """
    if frame_type is not _PUBLISH and frame_type is not _DELIVER:
        raise ValueError(f"encode_messages makes PUBLISH or DELIVER frames, not {frame_type!r}")
    if not isinstance(messages, list):
        messages = list(messages)
    if sum(map(len, messages)) <= target:  # the common case: one small batch
        return [_pack_messages(frame_type, messages)] if messages else []
    out: list[bytes] = []
    batch: list[bytes] = []
    size = 0
    for wire in messages:
        n = len(wire)
        if n > target:
            if n > MAX_MESSAGE_SIZE:
                raise ProtocolError(
                    f"a message of {n} bytes is over the {MAX_MESSAGE_SIZE}-byte message limit"
                )
            if batch:
                out += _packed_frame(frame_type, batch)
                batch = []
                size = 0
            out += _message_frame(frame_type, [wire])
            continue
        if size + n > target:
            out += _packed_frame(frame_type, batch)
            batch = []
            size = 0
        batch.append(wire)
        size += n + 5
    if batch:
        out += _packed_frame(frame_type, batch)
    return out


# -- decoding ---------------------------------------------------------------------------------


def _unpack(body: memoryview, what: str) -> Any:
    try:
        return msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_bin_len=MAX_MESSAGE_SIZE,
            max_str_len=1 << 20,
            max_array_len=MAX_FRAME,
            max_map_len=1024,
            max_ext_len=0,
        )
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        raise ProtocolError(f"{what} frame body is not valid msgpack") from None
    except Exception as exc:  # msgpack raises a few more on hostile input (e.g. ext types)
        raise ProtocolError(f"{what} frame body is not valid msgpack: {exc}") from None


def _text(value: Any, what: str, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _decode_hello(body: memoryview) -> Hello:
    data = _unpack(body, "HELLO")
    if not isinstance(data, dict):
        raise ProtocolError("HELLO body must be a map")
    version = data.get("version")
    if type(version) is not int:
        raise ProtocolError("HELLO version must be an integer")
    reliability = data.get("reliability")
    if reliability is not None and (
        isinstance(reliability, bool) or not isinstance(reliability, (int, float))
    ):
        raise ProtocolError("HELLO reliability must be a number or nil")
    router = data.get("router", False)
    if not isinstance(router, bool):
        raise ProtocolError("HELLO router must be true or false")
    return Hello(
        version=version,
        service=_text(data.get("service"), "HELLO service", optional=True),
        network=_text(data.get("network"), "HELLO network", optional=True),
        description=_text(data.get("description"), "HELLO description", optional=True),
        reliability=None if reliability is None else float(reliability),
        user=_text(data.get("user"), "HELLO user", optional=True),
        password=_text(data.get("password"), "HELLO password", optional=True),
        router=router,
    )


def _decode_welcome(body: memoryview) -> Welcome:
    data = _unpack(body, "WELCOME")
    if not isinstance(data, dict) or not isinstance(data.get("daemon", {}), dict):
        raise ProtocolError("WELCOME body must be a map with a 'daemon' map")
    return Welcome(_text(data.get("inbox_prefix"), "WELCOME inbox_prefix"), data.get("daemon", {}))


def _decode_error(body: memoryview) -> Error:
    data = _unpack(body, "ERROR")
    if not isinstance(data, list) or len(data) != 2:
        raise ProtocolError("ERROR body must be [code, text]")
    return Error(_text(data[0], "ERROR code"), _text(data[1], "ERROR text"))


def _decode_messages(body: memoryview, what: str) -> list[bytes]:
    data = _unpack(body, what)
    if type(data) is not list:
        raise ProtocolError(f"{what} body must be an array of messages")
    for wire in data:
        if type(wire) is not bytes:
            raise ProtocolError(f"{what} messages must be binary, got {type(wire).__name__}")
    return data


def _decode_token(body: memoryview, what: str) -> int:
    token = _unpack(body, what)
    if type(token) is not int:
        raise ProtocolError(f"{what} token must be an integer")
    return token


def _decode(frame_type: int, body: memoryview) -> Frame:
    if frame_type == FrameType.DELIVER:
        return Deliver(_decode_messages(body, "DELIVER"))
    if frame_type == FrameType.PUBLISH:
        return Publish(_decode_messages(body, "PUBLISH"))
    if frame_type == FrameType.LISTEN:
        return Listen(_text(_unpack(body, "LISTEN"), "LISTEN subject"))
    if frame_type == FrameType.UNLISTEN:
        return Unlisten(_text(_unpack(body, "UNLISTEN"), "UNLISTEN subject"))
    if frame_type == FrameType.ADVISORY:
        message = _unpack(body, "ADVISORY")
        if type(message) is not bytes:
            raise ProtocolError("ADVISORY body must be binary")
        return Advisory(message)
    if frame_type == FrameType.PING:
        return Ping(_decode_token(body, "PING"))
    if frame_type == FrameType.PONG:
        return Pong(_decode_token(body, "PONG"))
    if frame_type == FrameType.HELLO:
        return _decode_hello(body)
    if frame_type == FrameType.WELCOME:
        return _decode_welcome(body)
    if frame_type == FrameType.ERROR:
        return _decode_error(body)
    if frame_type == FrameType.BYE:
        return Bye(_text(_unpack(body, "BYE"), "BYE reason"))
    if frame_type == FrameType.RELIABILITY:
        seconds = _unpack(body, "RELIABILITY")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ProtocolError("RELIABILITY body must be a number of seconds")
        return Reliability(float(seconds))
    raise ProtocolError(f"unknown frame type {frame_type}")


_FRAME_TYPES = frozenset(int(t) for t in FrameType)


class FrameDecoder:
    """Turns a byte stream, received in pieces of any size, into frames.

    ``feed(data)`` returns the frames completed by ``data`` (possibly none).
    A length over ``max_frame`` or a frame that does not parse raises
    :class:`ProtocolError` (carrying the frames completed before it); after
    that the decoder refuses further input,
    because a stream that lost frame alignment cannot be trusted again.
    """

    __slots__ = ("_broken", "_buffer", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()
        self._broken: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame (non-zero: a frame is cut)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._broken is not None:
            raise self._broken
        buffer = self._buffer
        # The usual read ends on a frame boundary with nothing left from the last one:
        # then frames are read from ``data`` itself, and the buffer is not touched.
        frames: list[Frame]
        if buffer:
            buffer += data
            source: bytes | bytearray | memoryview = buffer
            frames, offset = [], 0
        else:
            source = data
            # The usual read of all: whole PUBLISH/DELIVER frames and nothing else, in
            # one call. Whatever follows them (another frame, a cut one) is read below.
            frames, offset = _take_message_frames(
                data, 0, self.max_frame, MAX_MESSAGE_SIZE, Publish, Deliver
            )
            if offset == len(data):
                return frames
        try:
            frames, offset = self._frames(source, frames, offset)
        except ProtocolError as exc:
            self._broken = exc
            self._buffer = bytearray()
            raise
        if source is buffer:
            if offset:
                del buffer[:offset]
        elif offset < len(source):
            buffer += source[offset:]
        return frames

    def _frames(
        self, source: bytes | bytearray | memoryview, frames: list[Frame], offset: int
    ) -> tuple[list[Frame], int]:
        """``frames`` and the complete frames of ``source`` from ``offset`` on (appended to
        it), and the offset after them."""
        total = len(source)
        max_frame = self.max_frame
        try:
            while total - offset >= _HEADER_SIZE:
                # Runs of PUBLISH or DELIVER frames go through the fast path; it stops,
                # without raising, at anything else, which the lines below take.
                taken, offset = _take_message_frames(
                    source, offset, max_frame, MAX_MESSAGE_SIZE, Publish, Deliver
                )
                frames += taken
                if total - offset < _HEADER_SIZE:
                    break
                length, frame_type = _HEADER.unpack_from(source, offset)
                if length == 0 or length > max_frame:
                    raise ProtocolError(f"frame length {length} is outside 1..{max_frame} bytes")
                if frame_type not in _FRAME_TYPES:
                    raise ProtocolError(f"unknown frame type {frame_type}")
                end = offset + 4 + length
                if end > total:
                    break
                # A view, released before the caller may resize the buffer it looks into.
                with memoryview(source) as view:
                    frames.append(_decode(frame_type, view[offset + _HEADER_SIZE : end]))
                offset = end
        except ProtocolError as exc:
            exc.frames = frames
            raise
        return frames, offset
