"""How relay frames travel: one opaque field in a message on an internal subject."""

from __future__ import annotations

from rvasync.message import Message

__all__ = ["FRAME_FIELD", "frame_message"]

FRAME_FIELD = "relay"


def frame_message(subject: str, data: bytes, reply: str | None) -> Message:
    """The message carrying frame ``data`` to ``subject``; ``reply`` is the sender's address."""
    msg = Message(subject)
    msg.add(FRAME_FIELD, data)
    if reply is not None:
        msg.reply_subject = reply
    return msg
