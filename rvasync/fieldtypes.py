"""Field types: the wire datatypes, and the checks that turn Python values into field values.

Every value stored in a message has passed through :func:`convert` (explicit
type) or :func:`infer` (type chosen from the Python value), so the codec and
every reader can rely on one canonical Python form per type:

========================  ==============================================
type                      stored as
========================  ==============================================
MSG                       a Message (a copy-on-write copy of the one given,
                          or a new one holding a dict's items as fields)
DATETIME                  rvasync.rvdatetime.DateTime
OPAQUE, XML               bytes
STRING                    str (valid Unicode: encodable as UTF-8)
BOOL                      bool
I8 .. U64, IPPORT16       int, range checked
F32                       float holding the float32 rounding of the value
F64                       float
IPADDR32                  ipaddress.IPv4Address
numeric arrays            list of int / float, every element checked
MSGARRAY                  list of Message
STRINGARRAY               list of str
========================  ==============================================

``bool`` is deliberately refused where a number is expected (and numbers
where a bool is): ``True`` silently becoming ``1`` in an I32 field hides bugs.
Floats are never truncated into integer fields either.

A ``dict`` (any mapping) given for a MSG field, or inferred, becomes a nested
message with the mapping's items as fields, in order, each typed as
``Message(None, mapping)`` would type it (nested dicts nest again); a list of
them is a MSGARRAY. The message class is handed in by :mod:`rvasync.message`
(:func:`use_nested_message`), which is built on this module.
"""

from __future__ import annotations

import array
import datetime as _dt
import enum
import ipaddress
import math
import numbers
import struct
from collections.abc import Callable, Mapping
from typing import Any, cast

from rvasync._msgbase import MessageBase
from rvasync._wire import ARRAY_ELEMENT, INT_RANGE
from rvasync.errors import ConversionError, InvalidArgument
from rvasync.rvdatetime import DateTime

__all__ = [
    "ARRAY_TYPES",
    "NUMERIC_ARRAY_TYPES",
    "FieldType",
    "as_field_type",
    "convert",
    "field_label",
    "infer",
    "read_as",
    "values_equal",
]


class FieldType(enum.IntEnum):
    """The wire datatypes of message fields.

    The numeric values are the classic Rendezvous type tags; the rvasync wire
    format carries them as the field's type code.
    """

    MSG = 1
    DATETIME = 3
    OPAQUE = 7
    STRING = 8
    XML = 47
    BOOL = 9
    I8 = 14
    I16 = 16
    I32 = 18
    I64 = 20
    U8 = 15
    U16 = 17
    U32 = 19
    U64 = 21
    F32 = 24
    F64 = 25
    IPADDR32 = 27
    IPPORT16 = 26
    I8ARRAY = 34
    I16ARRAY = 36
    I32ARRAY = 38
    I64ARRAY = 40
    U8ARRAY = 35
    U16ARRAY = 37
    U32ARRAY = 39
    U64ARRAY = 41
    F32ARRAY = 44
    F64ARRAY = 45
    MSGARRAY = 49
    STRINGARRAY = 48


#: Types whose value is a list (``Field.count`` is its length).
ARRAY_TYPES = frozenset(t for t in FieldType if t.name.endswith("ARRAY"))
#: Array types that travel as packed little-endian numbers.
NUMERIC_ARRAY_TYPES = frozenset(FieldType(code) for code in ARRAY_ELEMENT)

_F32 = struct.Struct("<f")
_FLOAT_TYPES = frozenset((FieldType.F32, FieldType.F64))


def field_label(name: str | None, field_id: int = 0) -> str:
    """How error messages refer to a field."""
    if name is None:
        return f"field #{field_id}" if field_id else "unnamed field"
    return f"field {name!r}"


def _conversion_error(
    name: str | None, ftype: FieldType, value: object, wants: str
) -> ConversionError:
    return ConversionError(
        f"{field_label(name)}: {ftype.name} needs {wants}, got {type(value).__name__}"
    )


def _range_error(
    name: str | None, ftype: FieldType, value: object, lo: int, hi: int
) -> InvalidArgument:
    return InvalidArgument(
        f"{field_label(name)}: value {value!r} out of range for {ftype.name} ({lo}..{hi})"
    )


# -- scalar converters: (value, name, ftype) -> stored value -----------------

Converter = Callable[[Any, "str | None", FieldType], Any]


def _as_int(value: Any, name: str | None, ftype: FieldType) -> int:
    """An exact int from an int-like value (int subclass, numpy integer); never from bool/float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _conversion_error(name, ftype, value, "an int")
    return int(value)


def _int_converter(ftype: FieldType) -> Converter:
    lo, hi = INT_RANGE[ftype]

    def convert_int(value: Any, name: str | None, ftype: FieldType = ftype) -> int:
        if value.__class__ is not int:
            value = _as_int(value, name, ftype)
        if lo <= value <= hi:
            return cast(int, value)
        raise _range_error(name, ftype, value, lo, hi)

    return convert_int


def _as_float(value: Any, name: str | None, ftype: FieldType) -> float:
    if value.__class__ is float:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _conversion_error(name, ftype, value, "a float or int")
    try:
        return float(value)
    except OverflowError:
        raise InvalidArgument(
            f"{field_label(name)}: value {value!r} out of range for {ftype.name}"
        ) from None


def _convert_f64(value: Any, name: str | None, ftype: FieldType) -> float:
    return value if value.__class__ is float else _as_float(value, name, ftype)


def _convert_f32(value: Any, name: str | None, ftype: FieldType) -> float:
    value = value if value.__class__ is float else _as_float(value, name, ftype)
    try:
        return cast(float, _F32.unpack(_F32.pack(value))[0])
    except (OverflowError, struct.error):
        raise InvalidArgument(
            f"{field_label(name)}: value {value!r} out of range for F32 "
            f"(largest finite float32 is about 3.4028235e38)"
        ) from None


def _convert_bool(value: Any, name: str | None, ftype: FieldType) -> bool:
    if value.__class__ is bool:
        return value
    raise _conversion_error(name, ftype, value, "a bool")


def _checked_str(value: str, name: str | None, ftype: FieldType) -> str:
    """Reject strings UTF-8 cannot carry (lone surrogates) now rather than at send time."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                f"{field_label(name)}: {ftype.name} value is not valid Unicode "
                f"({exc.reason} at index {exc.start})"
            ) from None
    return value


def _convert_string(value: Any, name: str | None, ftype: FieldType) -> str:
    if value.__class__ is not str:
        if not isinstance(value, str):
            raise _conversion_error(name, ftype, value, "a str")
        value = str.__str__(value)
    return _checked_str(value, name, ftype)


def _convert_opaque(value: Any, name: str | None, ftype: FieldType) -> bytes:
    if value.__class__ is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _conversion_error(name, ftype, value, "bytes, bytearray or memoryview")


def _convert_xml(value: Any, name: str | None, ftype: FieldType) -> bytes:
    if isinstance(value, str):
        return _checked_str(value, name, ftype).encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _conversion_error(name, ftype, value, "bytes, bytearray, memoryview or str")


def _convert_datetime(value: Any, name: str | None, ftype: FieldType) -> DateTime:
    if isinstance(value, DateTime):
        return value
    if isinstance(value, _dt.datetime):
        return DateTime.from_datetime(value)
    raise _conversion_error(name, ftype, value, "an rvasync DateTime or datetime.datetime")


_IPV4_MAX = 2**32 - 1


def _convert_ipaddr(value: Any, name: str | None, ftype: FieldType) -> ipaddress.IPv4Address:
    if isinstance(value, ipaddress.IPv4Address):
        return value
    if isinstance(value, str):
        try:
            return ipaddress.IPv4Address(value)
        except ValueError as exc:
            raise InvalidArgument(
                f"{field_label(name)}: {value!r} is not an IPv4 address ({exc})"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= _IPV4_MAX:
            return ipaddress.IPv4Address(int(value))
        raise _range_error(name, ftype, value, 0, _IPV4_MAX)
    raise _conversion_error(name, ftype, value, "an IPv4Address, a dotted-quad str or an int")


def _message_not_loaded(fields: Mapping[Any, Any]) -> Any:
    raise RuntimeError("rvasync.message is not loaded: import rvasync first")


#: ``Message(None, mapping)``, set by rvasync.message (see the module docstring).
_nested_message: Callable[[Mapping[Any, Any]], Any] = _message_not_loaded


def use_nested_message(build: Callable[[Mapping[Any, Any]], Any]) -> None:
    """Make MSG fields given a mapping hold ``build(mapping)`` (rvasync.message's ``Message``)."""
    global _nested_message
    _nested_message = build


def _convert_msg(value: Any, name: str | None, ftype: FieldType) -> Any:
    if isinstance(value, MessageBase):
        # A copy-on-write copy: later changes to the caller's message do not
        # reach into this field (and a message can never end up inside itself).
        return value.copy()
    if isinstance(value, Mapping):
        return _message_of_mapping(value, name)
    raise _conversion_error(name, ftype, value, "a Message or a dict of fields")


class _NestedTooDeeply(InvalidArgument):
    """A dict that nests past the interpreter's recursion limit (one that contains itself)."""


def _message_of_mapping(value: Mapping[Any, Any], name: str | None) -> Any:
    """A new nested message holding ``value``'s items; errors name the enclosing fields too."""
    try:
        return _nested_message(value)
    except RecursionError:
        raise _NestedTooDeeply(
            f"{field_label(name)}: a dict nested too deeply to become a message "
            "(does it contain itself?)"
        ) from None
    except _NestedTooDeeply:
        raise
    except (ConversionError, InvalidArgument) as exc:
        raise type(exc)(f"{field_label(name)}: {exc}") from None


# -- array converters ---------------------------------------------------------

_SEQUENCE_TYPES = (list, tuple, range)


def _as_list(value: Any, name: str | None, ftype: FieldType, wants: str) -> list[Any]:
    """A fresh list of the elements (never the caller's list: it could change later)."""
    if value.__class__ is list or isinstance(value, _SEQUENCE_TYPES):
        return list(value)
    if isinstance(value, array.array):
        return value.tolist()
    raise _conversion_error(name, ftype, value, f"a list or tuple of {wants}")


def _element_error(
    exc: Exception, name: str | None, ftype: FieldType, index: int
) -> ConversionError | InvalidArgument:
    """Re-raise a scalar conversion error with the element position in it."""
    detail = str(exc).split(": ", 1)[-1]
    cls = InvalidArgument if isinstance(exc, InvalidArgument) else ConversionError
    return cls(f"{field_label(name)}: element {index} of {ftype.name}: {detail}")


def _convert_each(
    items: list[Any], name: str | None, ftype: FieldType, scalar: Converter, stype: FieldType
) -> list[Any]:
    for index, item in enumerate(items):
        try:
            items[index] = scalar(item, name, stype)
        except (ConversionError, InvalidArgument) as exc:
            raise _element_error(exc, name, ftype, index) from None
    return items


def _int_array_converter(ftype: FieldType) -> Converter:
    _, _, scalar_code = ARRAY_ELEMENT[ftype]
    stype = FieldType(scalar_code)
    lo, hi = INT_RANGE[scalar_code]
    scalar = _int_converter(stype)

    def convert_int_array(value: Any, name: str | None, ftype: FieldType = ftype) -> list[Any]:
        items = _as_list(value, name, ftype, "int")
        if not items:
            return items
        if set(map(type, items)) == {int} and lo <= min(items) and max(items) <= hi:
            return items  # the common case, checked at C speed
        return _convert_each(items, name, ftype, scalar, stype)

    return convert_int_array


def _convert_f64_array(value: Any, name: str | None, ftype: FieldType) -> list[Any]:
    items = _as_list(value, name, ftype, "float")
    if set(map(type, items)) <= {float}:
        return items
    return _convert_each(items, name, ftype, _convert_f64, FieldType.F64)


def _convert_f32_array(value: Any, name: str | None, ftype: FieldType) -> list[Any]:
    items = _as_list(value, name, ftype, "float")
    if not set(map(type, items)) <= {float}:
        _convert_each(items, name, ftype, _convert_f64, FieldType.F32)
    fmt = f"<{len(items)}f"
    try:
        return list(struct.unpack(fmt, struct.pack(fmt, *items)))
    except (OverflowError, struct.error):
        # Find the culprit for the error message.
        return _convert_each(items, name, ftype, _convert_f32, FieldType.F32)


def _convert_string_array(value: Any, name: str | None, ftype: FieldType) -> list[Any]:
    items = _as_list(value, name, ftype, "str")
    return _convert_each(items, name, ftype, _convert_string, FieldType.STRING)


def _convert_msg_array(value: Any, name: str | None, ftype: FieldType) -> list[Any]:
    items = _as_list(value, name, ftype, "Message")
    return _convert_each(items, name, ftype, _convert_msg, FieldType.MSG)


_CONVERTERS: dict[FieldType, Converter] = {
    FieldType.MSG: _convert_msg,
    FieldType.DATETIME: _convert_datetime,
    FieldType.OPAQUE: _convert_opaque,
    FieldType.STRING: _convert_string,
    FieldType.XML: _convert_xml,
    FieldType.BOOL: _convert_bool,
    FieldType.F32: _convert_f32,
    FieldType.F64: _convert_f64,
    FieldType.IPADDR32: _convert_ipaddr,
    FieldType.F32ARRAY: _convert_f32_array,
    FieldType.F64ARRAY: _convert_f64_array,
    FieldType.MSGARRAY: _convert_msg_array,
    FieldType.STRINGARRAY: _convert_string_array,
}
for _code in INT_RANGE:
    _CONVERTERS[FieldType(_code)] = _int_converter(FieldType(_code))
for _array_code, _element in ARRAY_ELEMENT.items():
    if FieldType(_element[2]) not in _FLOAT_TYPES:
        _CONVERTERS[FieldType(_array_code)] = _int_array_converter(FieldType(_array_code))
del _code, _array_code, _element
assert set(_CONVERTERS) == set(FieldType)


def as_field_type(ftype: Any) -> FieldType:
    """``ftype`` as a FieldType member (it may be given as its integer code)."""
    if ftype.__class__ is FieldType:
        return ftype
    if isinstance(ftype, int) and not isinstance(ftype, bool):
        try:
            return FieldType(ftype)
        except ValueError:
            raise InvalidArgument(f"{ftype} is not a FieldType code") from None
    raise ConversionError(f"field type must be a FieldType, got {type(ftype).__name__}")


def convert(ftype: FieldType, value: Any, name: str | None = None) -> Any:
    """``value`` converted to the stored form of ``ftype``.

    Raises ConversionError when the Python type does not fit, InvalidArgument
    when the value is out of the type's range; both name the field.
    """
    return _CONVERTERS[ftype](value, name, ftype)


# -- inference ----------------------------------------------------------------

_EXACT: dict[type, FieldType] = {
    str: FieldType.STRING,
    bool: FieldType.BOOL,
    int: FieldType.I64,
    float: FieldType.F64,
    bytes: FieldType.OPAQUE,
    bytearray: FieldType.OPAQUE,
    memoryview: FieldType.OPAQUE,
    DateTime: FieldType.DATETIME,
    _dt.datetime: FieldType.DATETIME,
    ipaddress.IPv4Address: FieldType.IPADDR32,
}


def _infer_array(value: list[Any] | tuple[Any, ...], name: str | None) -> FieldType:
    if not value:
        raise ConversionError(
            f"{field_label(name)}: cannot infer the element type of an empty "
            f"{type(value).__name__}; pass type= (for example FieldType.I64ARRAY)"
        )
    kinds = set(map(type, value))
    if kinds == {int}:
        return FieldType.I64ARRAY
    if kinds <= {float, int}:
        return FieldType.F64ARRAY
    if kinds == {str}:
        return FieldType.STRINGARRAY
    if all(isinstance(v, MessageBase | Mapping) for v in value):
        return FieldType.MSGARRAY
    if all(isinstance(v, str) for v in value):
        return FieldType.STRINGARRAY
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
        return FieldType.I64ARRAY
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
        return FieldType.F64ARRAY
    names = ", ".join(sorted(k.__name__ for k in kinds))
    raise ConversionError(
        f"{field_label(name)}: cannot infer an array type for elements of types {names}; "
        f"arrays hold only str, Message, int or float (pass type= to choose one)"
    )


def _infer_type(value: Any, name: str | None) -> FieldType:
    ftype = _EXACT.get(value.__class__)
    if ftype is not None:
        return ftype
    if isinstance(value, MessageBase):
        return FieldType.MSG
    if value.__class__ is list or isinstance(value, (list, tuple)):
        return _infer_array(value, name)
    if isinstance(value, bool):
        return FieldType.BOOL
    if isinstance(value, numbers.Integral):
        return FieldType.I64
    if isinstance(value, numbers.Real):
        return FieldType.F64
    if isinstance(value, str):
        return FieldType.STRING
    if isinstance(value, (bytes, bytearray, memoryview)):
        return FieldType.OPAQUE
    if isinstance(value, (DateTime, _dt.datetime)):
        return FieldType.DATETIME
    if isinstance(value, ipaddress.IPv4Address):
        return FieldType.IPADDR32
    if isinstance(value, Mapping):
        return FieldType.MSG
    raise ConversionError(
        f"{field_label(name)}: no field type for a {type(value).__name__} value; "
        f"pass type= or convert it to a supported Python type"
    )


def infer(value: Any, name: str | None = None) -> tuple[FieldType, Any]:
    """The field type chosen for ``value`` and the value converted to it.

    bool->BOOL, int->I64, float->F64, str->STRING, bytes-like->OPAQUE,
    DateTime/datetime->DATETIME, IPv4Address->IPADDR32, Message or dict->MSG,
    and a non-empty list or tuple of str/Message or dict/int/float (ints and
    floats mixed give F64ARRAY) -> STRINGARRAY/MSGARRAY/I64ARRAY/F64ARRAY.
    """
    cls = value.__class__
    if cls is str:
        if value.isascii():
            return FieldType.STRING, value
    elif cls is int:
        if -(2**63) <= value < 2**63:
            return FieldType.I64, value
    elif cls is float:
        return FieldType.F64, value
    elif cls is bytes:
        return FieldType.OPAQUE, value  # what _convert_opaque returns for bytes
    ftype = _infer_type(value, name)
    if ftype is FieldType.I64 and value.__class__ is int and not -(2**63) <= value < 2**63:
        raise InvalidArgument(
            f"{field_label(name)}: value {value} out of range for I64, the type inferred "
            f"for int; pass type=FieldType.U64 for values up to 2**64-1"
        )
    return ftype, _CONVERTERS[ftype](value, name, ftype)


def values_equal(ftype: int, a: Any, b: Any) -> bool:
    """Field value equality where NaN equals NaN (so a decoded copy equals its original)."""
    if a == b:
        return True
    if ftype in _FLOAT_TYPES:
        return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    if ftype == FieldType.F32ARRAY or ftype == FieldType.F64ARRAY:
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))
        )
    return False


# -- reading a value as another type (Message.get_as) ----------------------------------

#: Types whose value is a Python int (the integer types and IPPORT16).
_INT_VALUED = frozenset(FieldType(code) for code in INT_RANGE)
_BYTES_TYPES = frozenset((FieldType.OPAQUE, FieldType.XML))
#: Element type of each numeric array type.
_ELEMENT = {FieldType(code): FieldType(element[2]) for code, element in ARRAY_ELEMENT.items()}


class _NotExact(Exception):
    """A value that the requested type cannot hold exactly (the reason is the message)."""


def _scalar_as(ftype: FieldType, value: Any, target: FieldType) -> Any:
    """``value`` (stored for ``ftype``) as ``target``'s stored form, or _NotExact."""
    if ftype in _INT_VALUED:
        return _int_as(value, target)
    if ftype in _FLOAT_TYPES:
        return _float_as(value, target)
    if ftype in _BYTES_TYPES and target in _BYTES_TYPES:
        return value
    raise _NotExact("the types do not convert")


def _int_as(value: int, target: FieldType) -> Any:
    if target in _INT_VALUED:
        lo, hi = INT_RANGE[target]
        if lo <= value <= hi:
            return value
        raise _NotExact(f"outside {target.name}'s range {lo}..{hi}")
    if target in _FLOAT_TYPES:
        as_float = float(value) if target is FieldType.F64 else _f32_or_none(float(value))
        if as_float is not None and int(as_float) == value:
            return as_float
        raise _NotExact(f"no {target.name} holds it exactly")
    raise _NotExact("the types do not convert")


def _float_as(value: float, target: FieldType) -> Any:
    if target is FieldType.F64:
        return value
    if target is FieldType.F32:
        narrow = _f32_or_none(value)
        if narrow is not None and (narrow == value or math.isnan(value)):
            return narrow
        raise _NotExact("no F32 holds it exactly")
    if target in _INT_VALUED:
        if not math.isfinite(value) or not value.is_integer():
            raise _NotExact("it is not a whole number")
        return _int_as(int(value), target)
    raise _NotExact("the types do not convert")


def _f32_or_none(value: float) -> float | None:
    try:
        return cast(float, _F32.unpack(_F32.pack(value))[0])
    except (OverflowError, struct.error):
        return None


def read_as(ftype: FieldType, value: Any, target: FieldType | int, name: str | None = None) -> Any:
    """A stored ``ftype`` value as the stored form of ``target``, when ``target`` holds it exactly.

    Integers read as any integer type whose range holds them and as floats
    that hold them exactly; floats read as F64, as F32 when no precision is
    lost, and as integers when they are whole numbers in range; OPAQUE and
    XML read as each other; a numeric array reads as another numeric array
    type when every element does. Anything else, or a value the target
    cannot hold (300 as I8, -1 as U32, 2.5 as I32, a string as a number),
    raises ConversionError naming the field and both types.
    """
    target = as_field_type(target)
    if target is ftype:
        return value
    try:
        if ftype in _ELEMENT and target in _ELEMENT:
            source, wanted = _ELEMENT[ftype], _ELEMENT[target]
            return [_scalar_as(source, item, wanted) for item in value]
        return _scalar_as(ftype, value, target)
    except _NotExact as why:
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        raise ConversionError(
            f"{field_label(name)}: its {ftype.name} value {shown} cannot be read as "
            f"{target.name} ({why})"
        ) from None
