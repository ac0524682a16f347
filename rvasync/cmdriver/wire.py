"""How certified delivery travels on an ordinary rvasync transport.

Three kinds of message carry it:

* **Labeled data** goes out on the application subject as the user's own
  message (same fields, same reply subject) with its CM label in the
  message's label slot (``msg.cm``: sender name, sequence number, time
  limit). An ordinary listener on the subject therefore receives the plain
  message; it may look at ``msg.cm`` but needs nothing from it. The label
  names the sender but not the address of its instance, so a CM transport
  learns addresses from the records peers send it (and from a sender's
  announcements when it restarts), and uses the sender's any-instance
  address until it has heard one.
* **Records** (registration, confirmation, retransmitted data, ...) travel
  as messages on ``_RVCM.`` subjects whose fields are the record's flat
  mapping (``rvcm``, ``kind``, ``origin``, ``address``, ...). Point-to-point
  means "to the correspondent's address" (see
  :func:`rvasync.protocol.cm.names.instance_address`).
* **Advisories** are presented on the wrapped transport only, as messages on
  ``_RV.<class>.RVCM.<condition>.<subject or name>``
  (:meth:`rvasync.protocol.cm.advisories.Advisory.to_message`).

Internal subjects start with ``_``, which the user-facing ``send`` refuses,
so messages leave through :func:`internal_sender`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from rvasync.message import CmLabel, Message
from rvasync.protocol.cm.records import Record

if TYPE_CHECKING:
    from rvasync.transport.base import BaseTransport

__all__ = ["internal_sender", "make_label", "message_fields", "record_message"]

_new_object = object.__new__
# CmLabel is a frozen dataclass: its slots are filled through the slot
# descriptors' own setters (bound once here), which mypy cannot see on the class.
_set_sender: Callable[[CmLabel, str], None] = cast(Any, CmLabel).sender.__set__
_set_sequence: Callable[[CmLabel, int | None], None] = cast(Any, CmLabel).sequence.__set__
_set_time_limit: Callable[[CmLabel, float], None] = cast(Any, CmLabel).time_limit.__set__


def make_label(sender: str, sequence: int | None, time_limit: float) -> CmLabel:
    """A CM label from values the protocol core has already checked.

    ``CmLabel(...)`` validates every field, which costs more than the rest of
    making a delivery; labels are made once per certified message sent and
    delivered, from a correspondent name, a sequence number and a time limit
    the core validated.
    """
    made: CmLabel = _new_object(CmLabel)
    _set_sender(made, sender)
    _set_sequence(made, sequence)
    _set_time_limit(made, time_limit)
    return made


def internal_sender(transport: BaseTransport) -> Callable[[Message], Awaitable[None] | None]:
    """A function sending a message without the reserved-subject rule (driver-made subjects).

    The transport's :meth:`~rvasync.transport.base.BaseTransport.send_internal`,
    bound once: it returns an awaitable when the transport's send backlog is
    full (the caller awaits it before sending more), else None; it raises
    :class:`~rvasync.errors.TransportClosed` once the transport is closed.
    """
    return transport.send_internal


def record_message(destination: str, record: Record) -> Message:
    """The message that carries ``record`` to ``destination`` (a subject or an address)."""
    msg = Message(destination)
    add = msg.add_reserved
    for name, value in record.to_fields().items():
        add(name, value)
    return msg


def message_fields(msg: Message) -> dict[str, Any]:
    """A record message's fields as the flat mapping ``parse_record`` takes.

    Reads the message's field storage directly (``Message.field_values``): this
    runs for every record received, and the public iteration builds a ``Field``
    object per field.
    """
    # Record messages are made by record_message, whose fields all have names.
    return msg.field_values()  # type: ignore[return-value]  # no None key in a record
