"""The frames of the circuit protocol, and their form as rvasync messages.

Every frame names the terminal it is for by that terminal's *token* (16
random bytes it drew and gave only to its partner) and the sender by its own
token: a frame whose ``to`` token is not the receiver's is not the partner's
and is dropped, which is what keeps third transports out of a circuit's
stream even when they learn a terminal's inbox. CONNECT is the one frame
sent before the acceptor's token is known; it carries the connector's token
and inbox (where everything for the connector goes).

On a transport a frame is a message on the partner's inbox: one packed
``vc`` field (kind, both tokens, ``seq``, ``ack``), the connector's ``inbox``
or an ABORT's ``text`` where needed and, for DATA, the run of user messages
it carries: their wire forms end to end in one opaque field ``run`` and
their lengths (big-endian 32-bit) in another, ``lens``. The sending terminal
encodes each message when it is sent, so what waits for a frame, and for
its acknowledgement, is bytes: a stream of new messages leaves no objects
behind for the garbage collector to trace (a Message snapshot per message
cost the publisher more in collections than everything else it did), and
framing a run is one join.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

from rvasync.codec import decode as _decode
from rvasync.errors import MalformedMessage
from rvasync.message import Message

__all__ = ["TOKEN_SIZE", "Frame", "FrameKind", "frame_from_message", "frame_to_message"]

TOKEN_SIZE = 16


class FrameKind(enum.IntEnum):
    """What a frame does."""

    CONNECT = 1  #: connector -> connect subject: "I want this circuit" (token, inbox)
    ACCEPT = 2  #: acceptor -> connector: "the circuit is yours" (its own token)
    DATA = 3  #: a run of user messages (``seq``: the first one's number, from 1) and an ack
    ACK = 4  #: cumulative ack alone; also the heartbeat when nothing else was sent
    CLOSE = 5  #: the sender closed its terminal after data up to ``seq``
    ABORT = 6  #: the sender's terminal found the circuit broken (``text`` says why)


# Module aliases of the members, read on every message: on Python 3.11 reading
# ``FrameKind.CONNECT`` costs about 0.2 us (EnumType defines __getattr__, which puts every
# attribute look-up on the class on a slow path); a module global costs about 15 ns.
_CONNECT, _ACCEPT, _DATA, _ACK, _CLOSE, _ABORT = (
    FrameKind.CONNECT,
    FrameKind.ACCEPT,
    FrameKind.DATA,
    FrameKind.ACK,
    FrameKind.CLOSE,
    FrameKind.ABORT,
)
#: A header's kind code to its member (``FrameKind(code)`` costs about 0.9 us on 3.11).
_KIND_BY_CODE: dict[int, FrameKind] = {kind.value: kind for kind in FrameKind}


@dataclass(slots=True, frozen=True)
class Frame:
    """One protocol frame. ``payload`` (DATA only) is the sequence of user payloads the
    frame carries, numbered ``seq``, ``seq + 1`` ...; each is opaque to the circuit core
    (on the way out, wire forms of messages; on the way in, the decoded messages)."""

    kind: FrameKind
    to_token: bytes
    from_token: bytes
    seq: int = 0
    ack: int = 0
    inbox: str = ""
    payload: Any = None
    text: str = ""


_HEADER = struct.Struct(">B16s16sQQ")


def frame_to_message(frame: Frame, subject: str) -> Message:
    """The message that carries ``frame`` to ``subject`` (the partner's inbox).

    The fixed part (kind, tokens, seq, ack) is one packed ``vc`` field, so a
    frame costs one field to build and one to read; a DATA frame's payloads
    must be the wire forms (``bytes``) of messages with subjects (the
    terminal encodes each message, checked, when it is sent).
    """
    header = _HEADER.pack(
        frame.kind, frame.to_token.ljust(TOKEN_SIZE, b"\0"), frame.from_token, frame.seq, frame.ack
    )
    fields: dict[str, Any] = {"vc": header}
    if frame.inbox:
        fields["inbox"] = frame.inbox
    if frame.text:
        fields["text"] = frame.text
    if frame.kind is _DATA:
        payloads = frame.payload
        if not payloads:
            raise MalformedMessage("a circuit DATA frame carries at least one message")
        try:
            run = b"".join(payloads)
        except TypeError:
            raise MalformedMessage(
                "a circuit DATA frame carries the wire forms (bytes) of messages"
            ) from None
        fields["lens"] = struct.pack(f">{len(payloads)}I", *map(len, payloads))
        fields["run"] = run
    return Message(subject, fields)


def _text(msg: Message, name: str) -> str:
    value = msg.get(name, "")
    if not isinstance(value, str):
        raise MalformedMessage(f"circuit frame field {name!r} is a {type(value).__name__}")
    return value


def _messages(lens: object, run: object) -> list[Message]:
    """The messages of a DATA frame's run, decoded; MalformedMessage unless every length
    fits, the lengths cover the run exactly and each is a message with a subject."""
    if not isinstance(lens, bytes) or not isinstance(run, bytes):
        raise MalformedMessage("circuit DATA frame without its messages ('lens' and 'run')")
    count, rest = divmod(len(lens), 4)
    if not count or rest:
        raise MalformedMessage("circuit DATA frame without messages")
    sizes = struct.unpack(f">{count}I", lens)
    if sum(sizes) != len(run):
        raise MalformedMessage("circuit DATA frame whose lengths do not match its run")
    view = memoryview(run)
    out: list[Message] = []
    append = out.append
    start = 0
    for size in sizes:
        end = start + size
        inner = _decode(view[start:end])  # MalformedMessage for anything else
        if inner.subject is None:
            raise MalformedMessage("circuit DATA frame with a message without a subject")
        append(inner)
        start = end
    return out


def frame_from_message(msg: Message) -> Frame:
    """The frame ``msg`` carries; :class:`MalformedMessage` if it is not a circuit frame.

    A DATA frame's payload is the list of the user messages it carries,
    decoded, each with its subject and reply subject.
    """
    header = msg.get("vc")
    if not isinstance(header, bytes) or len(header) != _HEADER.size:
        raise MalformedMessage("not a circuit frame (no valid 'vc' header)")
    raw_kind, to_token, from_token, seq, ack = _HEADER.unpack(header)
    kind = _KIND_BY_CODE.get(raw_kind)  # an int from the header: always hashable
    if kind is None:
        raise MalformedMessage(f"not a circuit frame (kind {raw_kind})")
    if kind is _CONNECT:
        to_token = b""
    payload: list[Message] | None = None
    inbox = ""
    if kind is _DATA:
        if seq < 1:
            raise MalformedMessage("circuit DATA frame without a sequence number")
        payload = _messages(msg.get("lens"), msg.get("run"))
    else:
        inbox = _text(msg, "inbox")
        if kind is _CONNECT and not inbox:
            raise MalformedMessage("circuit CONNECT frame without the connector's inbox")
    text = _text(msg, "text") if kind is _ABORT else ""
    return Frame(kind, to_token, from_token, seq, ack, inbox, payload, text)
