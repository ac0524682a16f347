"""Removing a retained value: the deletion message (a tombstone, as in a compacted log).

A deletion is published on the subject like any update; every cache that
retains the subject drops it, and listeners receive it like any message.
"""

from __future__ import annotations

from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.cvc.names import DELETE_FIELD

__all__ = ["is_retained_deletion", "retained_deletion"]


def retained_deletion(subject: str) -> Message:
    """The message that removes ``subject``'s retained value from every cache (send it)."""
    msg = Message(subject)
    msg.add_reserved(DELETE_FIELD, True, FieldType.BOOL)
    return msg


def is_retained_deletion(msg: Message) -> bool:
    """True if ``msg`` is a deletion made by :func:`retained_deletion`."""
    return msg.get(DELETE_FIELD) is True
