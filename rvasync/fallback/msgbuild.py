"""Building a message: the bodies of ``Message.__init__`` and ``Message.add`` (pure twin).

The compiled twin is ``rvasync_native.msgbuild``.

Applications build a new message for every send, so constructing one and
adding its fields is as hot as encoding it. The two functions here *are*
the methods: ``rvasync.message`` installs the selected implementation's
``init`` and ``add`` on the class (a compiled function binds like a Python
one), which is why their first parameter is the message itself, ``self``.

The native twin stores the usual fields (a plain ASCII name, a str, int in
the I64 range, float, bool or bytes value, no type, no id) straight into the
field list and hands every other case to the checks below; this twin always
runs them. Both give the same fields, types, values and errors.
"""

from __future__ import annotations

import itertools
from typing import Any

from rvasync.errors import InvalidArgument
from rvasync.fieldtypes import FieldType

__all__ = ["Origins", "add", "delivery_copy", "init"]


def init(
    self: Any,
    subject: str | None = None,
    fields: Any = None,
    *,
    reply_subject: str | None = None,
) -> None:
    """``Message(subject=None, fields=None, *, reply_subject=None)``: see the class docstring."""
    # Exact-type checks first: a str costs one comparison each, nothing more.
    if subject is not None and subject.__class__ is not str and not isinstance(subject, str):
        raise InvalidArgument(f"subject must be a str or None, got {type(subject).__name__}")
    if (
        reply_subject is not None
        and reply_subject.__class__ is not str
        and not isinstance(reply_subject, str)
    ):
        raise InvalidArgument(
            f"reply_subject must be a str or None, got {type(reply_subject).__name__}"
        )
    self.subject = subject
    self.reply_subject = reply_subject
    self.listener = None
    self.closure = None
    self.cm = None
    self.origin = None
    self.publisher_correlation = None
    self._fields = []
    self._ids = None
    self._shared = False
    if fields is not None:
        if fields.__class__ is dict:
            for name, value in fields.items():
                add(self, name, value)
        else:
            self._extend(fields)


def add(
    self: Any,
    name: str | None,
    value: Any,
    type: FieldType | int | None = None,
    field_id: int = 0,
) -> None:
    """Append a field.

    Several fields may share a name. ``type=None`` infers the type from the
    value; an explicit type converts and range-checks it. A non-zero
    ``field_id`` (1..65535) must be unique in this message and needs a name.
    Names starting with ``_`` are reserved.
    """
    self._add_checked(name, value, type, field_id)


def delivery_copy(self: Any, listener: Any, closure: Any) -> Any:
    """A new Message for one delivery, sharing this one's field storage copy-on-write.

    Both sides are marked shared; whichever changes its fields first copies
    them. Nested values (sub-messages, array lists) are not copied.
    """
    clone = object.__new__(self.__class__)
    clone.subject = self.subject
    clone.reply_subject = self.reply_subject
    clone.listener = listener
    clone.closure = closure
    clone.cm = self.cm
    clone.origin = self.origin
    clone.publisher_correlation = self.publisher_correlation
    clone._fields = self._fields
    clone._ids = self._ids
    clone._shared = True
    self._shared = True
    return clone


class Origins:
    """A transport's publication origins (``Message.origin``).

    ``Origins(publisher_id, sequence=1, tick=0, *, correlation=None)``:
    ``publisher_id`` (an int in [0, 2**64)) is the high half of every origin;
    the low half counts from ``sequence``. ``stamp(msg)`` is what a network
    send does to the message it is given: mark its fields shared (the
    transport keeps a reference, see ``Message.share``), write the next origin
    in place, and the publisher's ``correlation`` id (checked by the caller;
    None for none) as ``msg.publisher_correlation``, so a message sent again
    carries its new publisher's identity, never an earlier one's. It returns
    True when the low half of the origin it wrote is a multiple of ``tick`` (a
    power of two; 0: never), else False: the send pacer's tick
    (rvasync.sendpace), counted where the send already counts. ``next()``
    returns the next origin without touching a message. After 2**64 origins
    the count carries into the id (after 2**128 - 1 there is none:
    InvalidArgument).
    The native twin builds each origin straight from the two 64-bit halves.
    """

    __slots__ = ("_count", "_tick_mask", "_ticking", "correlation")

    def __init__(
        self, publisher_id: int, sequence: int = 1, tick: int = 0, *, correlation: Any = None
    ) -> None:
        if publisher_id.__class__ is not int or not 0 <= publisher_id < 2**64:
            raise InvalidArgument(
                f"publisher id must be an int in [0, 2**64), got {publisher_id!r}"
            )
        if sequence.__class__ is not int or not 0 <= sequence < 2**64:
            raise InvalidArgument(f"sequence must be an int in [0, 2**64), got {sequence!r}")
        if tick.__class__ is not int or not 0 <= tick < 2**63 or tick & (tick - 1):
            raise InvalidArgument(f"tick must be 0 or a power of two, got {tick!r}")
        self._count = itertools.count((publisher_id << 64) | sequence)
        self._ticking = tick != 0
        self._tick_mask = tick - 1 if tick else 0
        #: The correlation id every stamped message carries (None: none).
        self.correlation = correlation

    def next(self) -> int:
        """The next origin (an int): a new publication's identity."""
        origin: int = next(self._count)
        if origin >> 128:
            raise InvalidArgument("no origin left: 2**128 - 1 was the last")
        return origin

    def stamp(self, msg: Any) -> bool:
        """Mark ``msg`` shared and give it the next origin, in place; True on a tick."""
        origin = self.next()
        msg.share()
        msg.origin = origin
        msg.publisher_correlation = self.correlation
        return self._ticking and not origin & self._tick_mask

    def __repr__(self) -> str:
        # The next origin, without taking it (the repr of a count shows its value).
        following = int(repr(self._count)[6:-1])
        if following >> 128:
            return "<Origins spent>"
        return f"<Origins id={following >> 64:016x} next={following & (2**64 - 1)}>"
