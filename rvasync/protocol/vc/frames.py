"""The frames of the circuit protocol, and their form as rvasync messages.

Every frame names the terminal it is for by that terminal's *token* (16
random bytes it drew and gave only to its partner) and the sender by its own
token: a frame whose ``to`` token is not the receiver's is not the partner's
and is dropped, which is what keeps third transports out of a circuit's
stream even when they learn a terminal's inbox. CONNECT is the one frame
sent before the acceptor's token is known; it carries the connector's token
and inbox (where everything for the connector goes).

On a transport a frame is a message on the partner's inbox with small
fields (``vc`` kind, ``to``, ``from``, ``seq``, ``ack``) and, for DATA, the
user's message nested whole with its subject and reply subject beside it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from rvasync.errors import MalformedMessage
from rvasync.fieldtypes import FieldType
from rvasync.message import Message

__all__ = ["TOKEN_SIZE", "Frame", "FrameKind", "frame_from_message", "frame_to_message"]

TOKEN_SIZE = 16


class FrameKind(enum.IntEnum):
    """What a frame does."""

    CONNECT = 1  #: connector -> connect subject: "I want this circuit" (token, inbox)
    ACCEPT = 2  #: acceptor -> connector: "the circuit is yours" (its own token)
    DATA = 3  #: one user message, numbered from 1, with the sender's cumulative ack
    ACK = 4  #: cumulative ack alone; also the heartbeat when nothing else was sent
    CLOSE = 5  #: the sender closed its terminal after data up to ``seq``
    ABORT = 6  #: the sender's terminal found the circuit broken (``text`` says why)


@dataclass(slots=True, frozen=True)
class Frame:
    """One protocol frame; ``payload`` (DATA only) is opaque to the circuit core."""

    kind: FrameKind
    to_token: bytes
    from_token: bytes
    seq: int = 0
    ack: int = 0
    inbox: str = ""
    payload: Any = None
    text: str = ""


def frame_to_message(frame: Frame, subject: str) -> Message:
    """The message that carries ``frame`` to ``subject`` (the partner's inbox).

    A DATA payload must be a :class:`Message`; it travels nested, its
    subject and reply subject beside it.
    """
    msg = Message(subject)
    msg.add("vc", int(frame.kind), FieldType.U8)
    msg.add("to", frame.to_token, FieldType.OPAQUE)
    msg.add("from", frame.from_token, FieldType.OPAQUE)
    if frame.seq:
        msg.add("seq", frame.seq, FieldType.U64)
    if frame.ack:
        msg.add("ack", frame.ack, FieldType.U64)
    if frame.inbox:
        msg.add("inbox", frame.inbox, FieldType.STRING)
    if frame.text:
        msg.add("text", frame.text, FieldType.STRING)
    payload = frame.payload
    if frame.kind is FrameKind.DATA:
        if not isinstance(payload, Message) or payload.subject is None:
            raise MalformedMessage("a circuit DATA frame carries a Message with a subject")
        msg.add("subj", payload.subject, FieldType.STRING)
        if payload.reply_subject is not None:
            msg.add("rply", payload.reply_subject, FieldType.STRING)
        msg.add("msg", payload, FieldType.MSG)
    return msg


def _field(msg: Message, name: str, kind: type, default: Any = None) -> Any:
    value = msg.get(name, default)
    if value is default:
        return value
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MalformedMessage(f"circuit frame field {name!r} is a {type(value).__name__}")
    return value


def frame_from_message(msg: Message) -> Frame:
    """The frame ``msg`` carries; :class:`MalformedMessage` if it is not a circuit frame.

    A DATA frame's payload is the nested user message with its subject and
    reply subject restored.
    """
    raw_kind = _field(msg, "vc", int)
    try:
        kind = FrameKind(raw_kind)
    except ValueError:
        raise MalformedMessage(f"not a circuit frame (vc={raw_kind!r})") from None
    to_token = _field(msg, "to", bytes, b"")
    from_token = _field(msg, "from", bytes, b"")
    if len(from_token) != TOKEN_SIZE or (
        kind is not FrameKind.CONNECT and len(to_token) != TOKEN_SIZE
    ):
        raise MalformedMessage("circuit frame without valid tokens")
    seq = _field(msg, "seq", int, 0)
    ack = _field(msg, "ack", int, 0)
    inbox = _field(msg, "inbox", str, "")
    text = _field(msg, "text", str, "")
    payload: Message | None = None
    if kind is FrameKind.DATA:
        subject = _field(msg, "subj", str)
        inner = _field(msg, "msg", Message)
        if subject is None or inner is None or seq < 1:
            raise MalformedMessage("circuit DATA frame without subject, message or sequence")
        payload = inner.copy()
        payload.subject = subject
        payload.reply_subject = _field(msg, "rply", str)
    elif kind is FrameKind.CONNECT and not inbox:
        raise MalformedMessage("circuit CONNECT frame without the connector's inbox")
    return Frame(kind, bytes(to_token), bytes(from_token), seq, ack, inbox, payload, text)
