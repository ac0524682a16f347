"""Messages: ordered collections of self-describing fields, plus address and CM information.

Storage is chosen for the delivery path. A message keeps its fields as one
list of ``(name, id, type, value)`` tuples (immutable, so they can be shared
freely) and, only when some field has an identifier, a dict from identifier
to tuple for constant-time lookup by id. Delivering one message to many
listeners makes one cheap ``Message`` object per listener that *shares* that
storage; whichever side first changes its fields copies the list first
(copy-on-write), so listeners never see each other's changes, nor the
sender's changes made after the send.

``Field`` objects are immutable snapshots built on demand (iteration,
:meth:`Message.field`); change a message through the message itself.
"""

from __future__ import annotations

import copy as _copy
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from rvasync import fieldtypes as _ft
from rvasync._accel import load
from rvasync._msgbase import MessageBase
from rvasync._wire import FIELD_ID_MAX, U64_MAX
from rvasync.errors import ConversionError, InvalidArgument
from rvasync.fieldtypes import ARRAY_TYPES, FieldType, field_label
from rvasync.fieldtypes import convert as _convert
from rvasync.fieldtypes import infer as _infer
from rvasync.fieldtypes import read_as as _read_as
from rvasync.textform import format_entries, parse_entries

__all__ = ["CmLabel", "Field", "Message", "Origins", "Publisher"]

_new = object.__new__


def _check_name(name: Any) -> str | None:
    """``name`` as an exact str (or None) after checking it is a usable field name."""
    if name is None:
        return None
    text: str
    if name.__class__ is str:
        text = name
    else:
        if not isinstance(name, str):
            raise ConversionError(f"field name must be a str or None, got {type(name).__name__}")
        text = str.__str__(name)
    if not text:
        raise InvalidArgument("field name must not be empty (use None for an unnamed field)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"field name {text!r} is not valid Unicode") from None
    return text


def _check_id(field_id: Any, name: str | None) -> int:
    number: int
    if field_id.__class__ is int:
        number = field_id
    else:
        if isinstance(field_id, bool) or not isinstance(field_id, numbers.Integral):
            raise ConversionError(f"field id must be an int, got {type(field_id).__name__}")
        number = int(field_id)
    if number:
        if not 0 < number <= FIELD_ID_MAX:
            raise InvalidArgument(
                f"{field_label(name)}: field id {number} out of range (0 = none, else 1..65535)"
            )
        if name is None:
            raise InvalidArgument(
                f"field id {number} needs a field name (an unnamed field has id 0)"
            )
    return number


def _check_user_name(name: Any) -> None:
    if isinstance(name, str) and name[:1] == "_":
        raise InvalidArgument(
            f"field name {name!r} is reserved: names starting with '_' belong to the library"
        )


#: One field in a message's storage: (name, id, type, value).
_Entry = tuple[str | None, int, FieldType, Any]


def _typed_value(name: str | None, value: Any, ftype: Any) -> tuple[FieldType, Any]:
    if ftype is None:
        return _ft.infer(value, name)
    ftype = _ft.as_field_type(ftype)
    return ftype, _ft.convert(ftype, value, name)


# -- Field ----------------------------------------------------------------------


class Field:
    """One field of a message: ``name``, ``id`` (0 = none), ``type`` and ``value``.

    ``Field(name, id, type, value)`` takes them in that order; ``type=None``
    infers the type from the value. Building one checks and converts the
    value exactly as :meth:`Message.add` does. Fields are immutable. ``count``
    is the number of elements of an array value, 1 for everything else.
    """

    __slots__ = ("id", "name", "type", "value")

    name: str | None
    id: int
    type: FieldType
    value: Any

    def __init__(self, name: str | None, id: int, type: FieldType | int | None, value: Any) -> None:
        name = _check_name(name)
        field_id = _check_id(id, name)
        ftype, stored = _typed_value(name, value, type)
        _set_name(self, name)
        _set_id(self, field_id)
        _set_type(self, ftype)
        _set_value(self, stored)

    @property
    def count(self) -> int:
        """Elements in an array value; 1 for every other type."""
        return len(self.value) if self.type in ARRAY_TYPES else 1

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Field is immutable; change the value through its Message")

    def __delattr__(self, key: str) -> None:
        raise AttributeError("Field is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Field):
            return NotImplemented
        return (
            self.name == other.name
            and self.id == other.id
            and self.type == other.type
            and _ft.values_equal(self.type, self.value, other.value)
        )

    __hash__ = None  # type: ignore[assignment]  # values may be lists

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.id}, FieldType.{self.type.name}, {self.value!r})"

    def __reduce__(self) -> tuple[Callable[..., Field], _Entry]:
        return (Field, (self.name, self.id, self.type, self.value))


# Field.__setattr__ refuses every change, so its slots are filled through the
# slot descriptors' own setters (bound once here). mypy sees the annotated
# instance attributes, not the descriptors: hence cast(Any, ...).
_set_name: Callable[[Field, str | None], None] = cast(Any, Field).name.__set__
_set_id: Callable[[Field, int], None] = cast(Any, Field).id.__set__
_set_type: Callable[[Field, FieldType], None] = cast(Any, Field).type.__set__
_set_value: Callable[[Field, Any], None] = cast(Any, Field).value.__set__


def _from_tuple(entry: _Entry) -> Field:
    """The Field of one storage entry ``(name, id, type, value)``, already checked."""
    field: Field = _new(Field)
    _set_name(field, entry[0])
    _set_id(field, entry[1])
    _set_type(field, entry[2])
    _set_value(field, entry[3])
    return field


# -- CmLabel --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CmLabel:
    """Certified-delivery label of a message.

    ``sender`` is the sending CM transport's correspondent name, ``sequence``
    its sequence number (None when delivery is not certified to this
    listener), ``time_limit`` the seconds the sender keeps certifying delivery
    (0 = no limit).
    """

    sender: str
    sequence: int | None
    time_limit: float = 0.0

    def __post_init__(self) -> None:
        # The usual label (a decoder makes one per certified message received):
        # exact types, in range; nothing to convert. The checks below cover the rest.
        seq = self.sequence
        limit = self.time_limit
        if (
            self.sender.__class__ is str
            and self.sender
            and (seq is None or (seq.__class__ is int and 0 <= seq <= U64_MAX))
            and limit.__class__ is float
            and 0.0 <= limit < math.inf
        ):
            return
        if not isinstance(self.sender, str):
            raise ConversionError(f"CmLabel sender must be a str, got {type(self.sender).__name__}")
        if not self.sender:
            raise InvalidArgument("CmLabel sender must not be empty")
        if seq is not None:
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise ConversionError(
                    f"CmLabel sequence must be an int or None, got {type(seq).__name__}"
                )
            if not 0 <= seq <= U64_MAX:
                raise InvalidArgument(f"CmLabel sequence {seq} out of range 0..2**64-1")
        if isinstance(limit, bool) or not isinstance(limit, numbers.Real):
            raise ConversionError(
                f"CmLabel time_limit must be a number, got {type(limit).__name__}"
            )
        limit = float(limit)
        if not (math.isfinite(limit) and limit >= 0.0):
            raise InvalidArgument(
                f"CmLabel time_limit must be finite and >= 0 (0 = no limit), got {limit}"
            )
        object.__setattr__(self, "time_limit", limit)


# -- Publisher ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publisher:
    """Who published a message: ``msg.publisher`` (the MQ identity seed's publisher identity).

    ``publisher_id`` is the sending transport's id (``t.publisher_id``: 16
    hex digits, random per transport), ``correlation_id`` the correlation id
    it gave the publication (``rv.Transport(..., correlation_id=...)`` or
    ``send(msg, correlation_id=...)``), or None. Publishers sharing one
    transport tell their publications apart by the correlation id.
    """

    publisher_id: str | None
    correlation_id: Any = None


# -- Message --------------------------------------------------------------------


def _codec_not_loaded(_arg: Any) -> Any:
    raise RuntimeError("the wire codec is not loaded: import rvasync (or rvasync.codec) first")


# The wire codec is built on this module (it makes Messages), so it is not
# imported here: rvasync.codec hands over the implementation it selected
# (native or pure) when it is imported, which ``import rvasync`` does first.
_encode: Callable[[Any], bytes] = _codec_not_loaded
_decode: Callable[[Any], Any] = _codec_not_loaded


def _use_codec(encode: Callable[[Any], bytes], decode: Callable[[Any], Any]) -> None:
    """Make :meth:`Message.to_bytes` / :meth:`Message.from_bytes` use this codec."""
    global _encode, _decode
    _encode = encode
    _decode = decode


def _value_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Message(MessageBase):
    """A Rendezvous message: subject, optional reply subject and an ordered list of fields.

    ``fields`` may be a mapping of name to value (types inferred) or an
    iterable of :class:`Field`. Subjects are plain attributes here; transports
    check them when sending. ``listener`` and ``closure`` are set on the copy
    each listener receives; ``cm`` holds the certified-delivery label, if any.
    ``origin`` is the identity of the publication the message came from: an
    int below ``2**128``, the publishing transport's random 64-bit id in the
    high half and its send sequence in the low half. A network transport
    stamps it on the message it sends (each send is a new publication, so
    after ``send`` it names the one just made); it travels on the wire but is
    not part of equality: two sends of one message are equal messages and
    different publications. None on a message never sent by a network
    transport. docs/retained.md tells what it is for.
    """

    __slots__ = (
        "_fields",
        "_ids",
        "_shared",
        "closure",
        "cm",
        "listener",
        "origin",
        "publisher_correlation",
        "reply_subject",
        "subject",
    )

    subject: str | None
    reply_subject: str | None
    listener: Any
    closure: Any
    cm: CmLabel | None
    origin: int | None
    publisher_correlation: Any
    _fields: list[_Entry]
    _ids: dict[int, _Entry] | None
    _shared: bool

    if TYPE_CHECKING:
        # The bodies are the selected ``msgbuild`` hot path's ``init`` and ``add``,
        # installed below the class (native when built; rvasync.fallback.msgbuild
        # holds the pure twin). These declarations give the type checker the signatures.

        def __init__(
            self,
            subject: str | None = None,
            fields: Mapping[str, Any] | Iterable[Field] | None = None,
            *,
            reply_subject: str | None = None,
        ) -> None: ...

        def add(
            self,
            name: str | None,
            value: Any,
            type: FieldType | int | None = None,
            field_id: int = 0,
        ) -> None:
            """Append a field (see :meth:`_add_checked`)."""

    def _extend(self, fields: Mapping[str, Any] | Iterable[Field]) -> None:
        if fields.__class__ is dict or isinstance(fields, Mapping):  # dict: no ABC check
            for name, value in fields.items():
                self.add(name, value)
            return
        try:
            items = iter(fields)
        except TypeError:
            raise ConversionError(
                f"fields must be a mapping or an iterable of Field, got {type(fields).__name__}"
            ) from None
        for item in items:
            if not isinstance(item, Field):
                raise ConversionError(
                    f"fields must be a mapping or an iterable of Field; got a {type(item).__name__}"
                )
            _check_user_name(item.name)
            self._append((item.name, item.id, item.type, item.value))

    # -- internal storage helpers --------------------------------------------

    def _own(self) -> None:
        """Copy shared storage before the first change (the copy-on-write step)."""
        self._fields = self._fields.copy()
        if self._ids:
            self._ids = self._ids.copy()
        self._shared = False

    def _append(self, entry: _Entry) -> None:
        field_id = entry[1]
        if field_id and self._ids is not None and field_id in self._ids:
            raise InvalidArgument(
                f"{field_label(entry[0])}: field id {field_id} is already used in this message "
                f"(by field {self._ids[field_id][0]!r})"
            )
        if self._shared:
            self._own()
        self._fields.append(entry)
        if field_id:
            if self._ids is None:
                self._ids = {}
            self._ids[field_id] = entry

    def _index(self, name: str) -> int:
        for index, entry in enumerate(self._fields):
            if entry[0] == name:
                return index
        return -1

    def _pop(self, index: int) -> _Entry:
        if self._shared:
            self._own()
        entry = self._fields.pop(index)
        if entry[1]:
            del self._ids[entry[1]]  # type: ignore[union-attr]  # an entry with an id is in _ids
        return entry

    # -- adding and changing -------------------------------------------------

    def _add_checked(
        self,
        name: str | None,
        value: Any,
        type: FieldType | int | None = None,
        field_id: int = 0,
    ) -> None:
        """Append a field (``Message.add``; the hot path calls this for all but the usual field).

        Several fields may share a name. ``type=None`` infers the type from
        the value; an explicit type converts and range-checks it. A non-zero
        ``field_id`` (1..65535) must be unique in this message and needs a
        name. Names starting with ``_`` are reserved.
        """
        # Fast path for the usual plain ASCII name; everything else is checked in full.
        if name.__class__ is not str or not name or name[0] == "_" or not name.isascii():
            _check_user_name(name)
            name = _check_name(name)
        self._insert(name, value, type, field_id)

    def _add_reserved(
        self,
        name: str | None,
        value: Any,
        type: FieldType | int | None = None,
        field_id: int = 0,
    ) -> None:
        """Like :meth:`add` but allows names starting with ``_`` (library use only)."""
        self._insert(_check_name(name), value, type, field_id)

    def _insert(self, name: str | None, value: Any, ftype: Any, field_id: Any) -> None:
        """Append a field whose name has been checked."""
        if field_id or field_id.__class__ is not int:
            field_id = _check_id(field_id, name)
        if ftype is None:
            ftype, value = _infer(value, name)
        else:
            if ftype.__class__ is not FieldType:
                ftype = _ft.as_field_type(ftype)
            value = _convert(ftype, value, name)
        if field_id:
            self._append((name, field_id, ftype, value))
            return
        if self._shared:
            self._own()
        self._fields.append((name, 0, ftype, value))

    def __setitem__(self, name: str, value: Any) -> None:
        """Update the first field called ``name`` (keeping its type and id), or add one."""
        _check_user_name(name)
        index = self._index(name)
        if index < 0:
            self._insert(_check_name(name), value, None, 0)
            return
        _, field_id, ftype, _ = self._fields[index]
        entry = (name, field_id, ftype, _convert(ftype, value, name))
        if self._shared:
            self._own()
        self._fields[index] = entry
        if field_id:
            self._ids[field_id] = entry  # type: ignore[index]  # an entry with an id is in _ids

    def __delitem__(self, name: str) -> None:
        index = self._index(name)
        if index < 0:
            raise KeyError(name)
        self._pop(index)

    def remove(self, name: str) -> Field | None:
        """Remove the first field called ``name``; return it, or None if there is none."""
        index = self._index(name)
        return _from_tuple(self._pop(index)) if index >= 0 else None

    def remove_by_id(self, field_id: int) -> Field | None:
        """Remove the field with identifier ``field_id``; return it, or None if there is none."""
        entry = self._ids.get(field_id) if self._ids else None
        if entry is None:
            return None
        for index, candidate in enumerate(self._fields):
            if candidate is entry:
                return _from_tuple(self._pop(index))
        raise AssertionError("field id index out of step with the field list")

    # -- reading ------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        """Value of the first field called ``name`` (KeyError if none)."""
        for entry in self._fields:
            if entry[0] == name:
                return entry[3]
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        """Value of the first field called ``name``, or ``default``."""
        for entry in self._fields:
            if entry[0] == name:
                return entry[3]
        return default

    def get_all(self, name: str) -> list[Any]:
        """Values of every field called ``name``, in order."""
        return [entry[3] for entry in self._fields if entry[0] == name]

    def field(self, name: str) -> Field:
        """The first field called ``name`` (KeyError if none)."""
        for entry in self._fields:
            if entry[0] == name:
                return _from_tuple(entry)
        raise KeyError(name)

    def field_by_id(self, field_id: int) -> Field:
        """The field with identifier ``field_id``, in constant time (KeyError if none)."""
        return _from_tuple(self._entry_by_id(field_id))

    def _entry_by_id(self, field_id: int) -> _Entry:
        entry = self._ids.get(field_id) if self._ids else None
        if entry is None:
            if isinstance(field_id, bool) or not isinstance(field_id, int):
                raise ConversionError(f"field id must be an int, got {type(field_id).__name__}")
            raise KeyError(field_id)
        return entry

    def field_at(self, index: int) -> Field:
        """The field at position ``index`` (``IndexError`` outside ``0 .. len(msg) - 1``).

        Positions count fields in order, as iteration yields them; negative
        positions are refused (Rendezvous programs walk ``0 .. count - 1``).
        """
        if isinstance(index, bool) or not isinstance(index, int):
            raise ConversionError(f"field index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(self._fields):
            raise IndexError(
                f"field index {index} out of range: this message has {len(self._fields)} "
                f"field{'' if len(self._fields) == 1 else 's'}"
            )
        return _from_tuple(self._fields[index])

    def get_as(self, name: str | None, type: FieldType | int, *, field_id: int = 0) -> Any:
        """The first field called ``name``, its value read as ``type`` (a :class:`FieldType`).

        The value is converted only where ``type`` holds it exactly: an I8
        read as I64, a U16 as I32, an F32 as F64, an integer as a float, a
        whole float as an integer, an I8ARRAY as an I64ARRAY. ``KeyError``
        when there is no such field; :class:`~rvasync.errors.ConversionError`
        naming the field and both types when the value cannot be represented
        (a negative value as U32, 300 as I8, a string as an integer).

        With a non-zero ``field_id`` the field is found by its identifier (in
        constant time) instead; ``name``, if not None, must then be that
        field's name (``InvalidArgument`` otherwise), as in Rendezvous.
        """
        if field_id:
            entry = self._entry_by_id(field_id)
            if name is not None and entry[0] != name:
                raise InvalidArgument(
                    f"field id {field_id} belongs to field {entry[0]!r}, not {name!r}"
                )
        else:
            for entry in self._fields:
                if entry[0] == name:
                    break
            else:
                raise KeyError(name)
        return _read_as(entry[2], entry[3], type, entry[0])

    def __contains__(self, name: object) -> bool:
        return any(entry[0] == name for entry in self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __bool__(self) -> bool:
        # A message is a message even with no fields: ``if msg:`` after
        # ``queue.poll()`` must not mistake an empty message for None.
        return True

    def __iter__(self) -> Iterator[Field]:
        return map(_from_tuple, self._fields.copy())

    # -- comparison, copies, representation ------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        if self.subject != other.subject or self.reply_subject != other.reply_subject:
            return False
        mine, theirs = self._fields, other._fields
        if mine is theirs or mine == theirs:
            return True
        if len(mine) != len(theirs):
            return False
        for a, b in zip(mine, theirs, strict=True):
            if a[0] != b[0] or a[1] != b[1] or a[2] != b[2]:
                return False
            if not _ft.values_equal(a[2], a[3], b[3]):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable

    def copy(self) -> Message:
        """An independent copy (subject, reply subject, cm, origin, listener, closure and fields).

        The field storage is shared copy-on-write, so this is cheap; values
        that are themselves mutable (nested messages, array lists) are shared,
        not copied: use ``copy.deepcopy`` for a fully separate tree.
        """
        return self.delivery_copy(self.listener, self.closure)

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> Message:
        clone = _new(Message)
        clone.subject = self.subject
        clone.reply_subject = self.reply_subject
        clone.listener = self.listener
        clone.closure = self.closure
        clone.cm = self.cm
        clone.origin = self.origin
        clone.publisher_correlation = self.publisher_correlation
        clone._fields = [
            entry
            if entry[3].__class__ in _IMMUTABLE_VALUES
            else (entry[0], entry[1], entry[2], _copy.deepcopy(entry[3], memo))
            for entry in self._fields
        ]
        clone._ids = {entry[1]: entry for entry in clone._fields if entry[1]} or None
        clone._shared = False
        return clone

    def _share(self) -> None:
        """Mark the field storage shared so the next change copies it first.

        The transport calls this when it keeps a reference to a sent message,
        so the sender changing its message afterwards cannot alter what
        listeners receive. Only the field list is protected: nested values and
        the subject attributes are the caller's business.
        """
        self._shared = True

    #: ``msg.share()``: :meth:`_share` for transports and drivers, which keep a
    #: reference to a message they were given to send (once per message sent:
    #: the same function, no extra call layer).
    share = _share

    # -- driver API (certified delivery, fault tolerance and the drivers to come) --

    if TYPE_CHECKING:

        def delivery_copy(self, listener: Any, closure: Any) -> Message:
            """A new Message for one delivery, sharing this one's field storage copy-on-write.

            Both sides are marked shared; whichever changes its fields first
            copies them. Nested values (sub-messages, array lists) are not
            copied. Drivers deliver to their own listeners with it, and copy a
            caller's message cheaply before labelling it. The body is the
            ``msgbuild`` hot path's ``delivery_copy`` (installed below the
            class): it runs once per listener of every delivered message.
            """
            ...

    #: ``msg.add_reserved(name, value, type=None, field_id=0)``: :meth:`add`
    #: allowing names that start with ``_``, for drivers encoding their own
    #: records (the names are the driver's, not the user's).
    add_reserved = _add_reserved

    def adopt_messages(self, name: str, msgs: list[Message]) -> None:
        """Append a MSGARRAY field ``name`` holding ``msgs`` themselves, not copies (driver API).

        For a driver packing messages it was given to send into one record (a
        virtual circuit's DATA frame). The caller hands over a list of Messages
        that nobody else holds, typically the :meth:`delivery_copy` it took of
        each when it was sent (a snapshot: later changes to the sender's
        message copy its fields first and cannot reach it), so the checks and
        the copy :meth:`add` makes of every nested message, which cost more
        than encoding it, are not needed.
        """
        if msgs.__class__ is not list:
            raise ConversionError(f"{field_label(name)}: adopt_messages takes a list")
        if self._shared:
            self._own()
        self._fields.append((_check_name(name), 0, FieldType.MSGARRAY, msgs))

    @property
    def correlation_id(self) -> Any:
        """The correlation id of the listener that delivered this message (None if none did).

        Read from ``msg.listener`` (every listener kind has one: see
        rvasync.correlation), so deliveries pay nothing for it; listeners
        sharing a queue tell their messages apart by it.
        """
        listener = self.listener
        return None if listener is None else getattr(listener, "correlation_id", None)

    @property
    def publisher(self) -> Publisher | None:
        """Who published this message (a :class:`Publisher`), or None if nobody did.

        Read from the publication's origin (whose high half is the sending
        transport's id) and the correlation id it travelled with
        (``publisher_correlation``); None for a message no network transport
        sent. docs/retained.md, "Publisher identity".
        """
        origin = self.origin
        correlation = self.publisher_correlation
        if origin is None and correlation is None:
            return None
        return Publisher(None if origin is None else f"{origin >> 64:016x}", correlation)

    @property
    def subscription(self) -> str | None:
        """The name of the named subscription that delivered this message, or None.

        ``t.listen(subject, subscription="NAME")``; read from ``msg.listener``.
        """
        listener = self.listener
        return None if listener is None else getattr(listener, "subscription", None)

    def field_values(self) -> dict[str | None, Any]:
        """Every field's value by name (the last field of a repeated name wins) (driver API).

        For drivers decoding their records: it reads the field storage
        directly, without the :class:`Field` object per field that iteration
        builds.
        """
        return {entry[0]: entry[3] for entry in self._fields}

    def shares_fields(self, other: Message) -> bool:
        """True if ``other`` shares this message's field storage (driver API).

        Copies made by :meth:`delivery_copy` (one per listener of a message)
        share it until either side changes its fields, so a driver receiving
        the same message through several of its listeners can tell the
        deliveries of one message from different messages.
        """
        return self._fields is other._fields

    def __str__(self) -> str:
        """The Rendezvous text form of the fields: ``{DATA="hello" N=1 SUB={X=2.5}}``.

        Strings are quoted (with backslash escapes, so the text never holds a
        control character), numbers plain, nested messages in braces, arrays
        in brackets, opaque and XML data as their size. ``repr(msg)`` is the
        Python debugging form; :meth:`from_text` reads this form back.
        """
        return format_entries(self._fields)

    @classmethod
    def from_text(cls, text: str) -> Message:
        """The message whose text form (``str(msg)``) is ``text``; no subject.

        The text form names no types, so each value gets the type its text
        implies: integers I64 (U64 beyond I64's range), other numbers F64,
        quoted text STRING, ``TRUE``/``FALSE`` BOOL, dotted quads IPADDR32,
        ``YYYY-MM-DD hh:mm:ss.fffffffffZ`` DATETIME, braces MSG, brackets the
        array of their elements' type (an empty one I64ARRAY). Opaque and XML
        placeholders cannot be read back. Bad text raises InvalidArgument
        naming the column.
        """
        msg: Message = parse_entries(text, _message_of_entries)
        return msg

    def __repr__(self) -> str:
        parts = [f"subject={self.subject!r}"]
        if self.reply_subject is not None:
            parts.append(f"reply_subject={self.reply_subject!r}")
        if self.cm is not None:
            parts.append(f"cm={self.cm!r}")
        shown = []
        for name, field_id, ftype, value in self._fields[:20]:
            label = "" if name is None else name
            if field_id:
                label += f"#{field_id}"
            shown.append(f"{label}:{ftype.name}={_value_repr(value)}")
        if len(self._fields) > 20:
            shown.append(f"... {len(self._fields) - 20} more")
        return f"<Message {' '.join(parts)} fields=[{', '.join(shown)}]>"

    # -- wire form ------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The self-describing wire form (see docs/messages.md)."""
        return _encode(self)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Message:
        """Decode a wire form made by :meth:`to_bytes`; any bad input raises MalformedMessage."""
        msg: Message = _decode(data)
        return msg

    def __reduce__(self) -> tuple[Callable[[bytes], Message], tuple[bytes]]:
        return (_message_from_bytes, (self.to_bytes(),))


# ``Message(...)`` and ``msg.add(...)`` run for every message an application
# builds: their bodies come from the ``msgbuild`` hot path (see its modules).
_build = load("msgbuild")
if not TYPE_CHECKING:
    Message.__init__ = _build.init
    Message.add = _build.add
    Message.delivery_copy = _build.delivery_copy
    #: A transport's publication origins: ``Origins(publisher_id)``, whose ``stamp(msg)``
    #: marks a message being sent shared and writes its next origin (the selected
    #: ``msgbuild`` twin's class; see rvasync.fallback.msgbuild.Origins).
    Origins = _build.Origins
else:
    from rvasync.fallback.msgbuild import Origins


def _message_from_bytes(data: bytes) -> Message:
    return Message.from_bytes(data)


def _message_of_entries(entries: list[tuple[str | None, FieldType, Any]]) -> Message:
    """A message with these (name, type, value) fields, names checked as ``add`` checks them."""
    msg = Message()
    for name, ftype, value in entries:
        msg.add_reserved(name, value, ftype)
    return msg


_IMMUTABLE_VALUES = frozenset((str, bytes, int, float, bool, type(None)))


def _nested(fields: Mapping[str, Any]) -> Message:
    """The message a dict given as a MSG field value becomes (see rvasync.fieldtypes)."""
    return Message(None, fields)


_ft.use_nested_message(_nested)
