"""Field types <-> Spark types, and the value conversions both ways.

Reading projects a message field into a typed column; writing turns a column
back into a field. The mapping is chosen so that nothing is lost:

==================  ======================  =========================================
field type          Spark column            note
==================  ======================  =========================================
STRING              string
OPAQUE, XML         binary                  XML is bytes on the wire
BOOL                boolean
I8, I16, I32, I64   byte, short, int, long
U8, U16, U32        short, int, long        the next wider signed type
U64                 decimal(20,0)           the only exact Spark type for 0..2**64-1
F32, F64            float, double
DATETIME            timestamp               microseconds, UTC
IPADDR32            string                  dotted quad
IPPORT16            int
numeric arrays      array<element type>     elements mapped as above
STRINGARRAY         array<string>
MSG, MSGARRAY       (none)                  read them from ``fields`` or ``data``
==================  ======================  =========================================

Every projected column carries its field type in the column metadata
(``rvasync.type``); a writer that sees it sends the field with that exact type,
so read -> transform -> write keeps U8 a U8. Without metadata, a column's
Spark type chooses the field type (the reverse of the table, plus struct ->
MSG, array<struct> -> MSGARRAY, date -> DATETIME), and the ``fieldTypes``
option overrides it per column.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import ipaddress
import math
import struct
from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

from rvasync._wire import INT_RANGE
from rvasync.errors import ConversionError, InvalidArgument
from rvasync.fieldtypes import FieldType, convert
from rvasync.message import Message
from rvasync.rvdatetime import DateTime

__all__ = [
    "METADATA_KEY",
    "field_to_spark",
    "parse_field_type",
    "projector",
    "spark_to_field",
]

METADATA_KEY = "rvasync.type"

_U64 = T.DecimalType(20, 0)

_SCALARS: dict[FieldType, T.DataType] = {
    FieldType.STRING: T.StringType(),
    FieldType.OPAQUE: T.BinaryType(),
    FieldType.XML: T.BinaryType(),
    FieldType.BOOL: T.BooleanType(),
    FieldType.I8: T.ByteType(),
    FieldType.I16: T.ShortType(),
    FieldType.I32: T.IntegerType(),
    FieldType.I64: T.LongType(),
    FieldType.U8: T.ShortType(),
    FieldType.U16: T.IntegerType(),
    FieldType.U32: T.LongType(),
    FieldType.U64: _U64,
    FieldType.F32: T.FloatType(),
    FieldType.F64: T.DoubleType(),
    FieldType.DATETIME: T.TimestampType(),
    FieldType.IPADDR32: T.StringType(),
    FieldType.IPPORT16: T.IntegerType(),
}
_ARRAYS: dict[FieldType, FieldType] = {
    FieldType.I8ARRAY: FieldType.I8,
    FieldType.I16ARRAY: FieldType.I16,
    FieldType.I32ARRAY: FieldType.I32,
    FieldType.I64ARRAY: FieldType.I64,
    FieldType.U8ARRAY: FieldType.U8,
    FieldType.U16ARRAY: FieldType.U16,
    FieldType.U32ARRAY: FieldType.U32,
    FieldType.U64ARRAY: FieldType.U64,
    FieldType.F32ARRAY: FieldType.F32,
    FieldType.F64ARRAY: FieldType.F64,
    FieldType.STRINGARRAY: FieldType.STRING,
}
_UNMAPPABLE = {FieldType.MSG, FieldType.MSGARRAY}


def parse_field_type(text: str, where: str) -> FieldType:
    """A FieldType from its name (case-insensitive); ``where`` names the option for errors."""
    try:
        return FieldType[text.strip().upper()]
    except KeyError:
        names = ", ".join(t.name for t in FieldType)
        raise InvalidArgument(f"{where}: {text.strip()!r} is not a field type ({names})") from None


def field_to_spark(ftype: FieldType, where: str) -> T.DataType:
    """The Spark type of a column projected from fields of ``ftype``."""
    if ftype in _SCALARS:
        return _SCALARS[ftype]
    if ftype in _ARRAYS:
        return T.ArrayType(_SCALARS[_ARRAYS[ftype]], containsNull=False)
    assert ftype in _UNMAPPABLE
    raise InvalidArgument(
        f"{where}: type {ftype.name} has no Spark column type (nested messages cannot be "
        f"projected); read it from the 'fields' JSON column or decode the 'data' column"
    )


# -- reading: field value -> column value ---------------------------------------------


#: The DATETIME seconds Python's datetime holds (years 1..9999): PySpark turns a timestamp
#: column's values into datetimes, so a value outside would make collect() fail.
DATETIME_SECONDS = (-62_135_596_800, 253_402_300_799)


def _datetime_micros(value: Any) -> int:
    if not DATETIME_SECONDS[0] <= value.seconds <= DATETIME_SECONDS[1]:
        raise ValueError(
            f"DATETIME {value.seconds} s from the epoch is outside years 1..9999, which a "
            f"Spark timestamp read through Python cannot hold"
        )
    return int(value.seconds * 1_000_000 + value.microseconds)


def _scalar_to_column(ftype: FieldType) -> Callable[[Any], Any] | None:
    if ftype is FieldType.DATETIME:
        return _datetime_micros
    if ftype is FieldType.IPADDR32:
        return str
    if ftype is FieldType.U64:
        return decimal.Decimal
    return None


def column_converter(ftype: FieldType) -> Callable[[Any], Any] | None:
    """What turns a field value of ``ftype`` into its column value (None: it already is)."""
    element = _ARRAYS.get(ftype, ftype)
    scalar = _scalar_to_column(element)
    if scalar is None:
        return None
    if ftype in _ARRAYS:
        return lambda value: [scalar(v) for v in value]
    return scalar


# -- reading a field of another type: exact conversions only -----------------------------

_INTS = {FieldType(code): bounds for code, bounds in INT_RANGE.items()}
del _INTS[FieldType.IPPORT16]  # a port is not a number to widen
_FLOAT_TYPES = (FieldType.F32, FieldType.F64)
_F32 = struct.Struct("<f")


def _exact_f32(value: float) -> float:
    try:
        narrowed = float(_F32.unpack(_F32.pack(value))[0])
    except OverflowError:
        narrowed = math.nan
    if narrowed != value and not (math.isnan(value) and math.isnan(narrowed)):
        raise ValueError(f"{value!r} has no exact F32 value")
    return narrowed


def _scalar_converter(source: FieldType, column: FieldType) -> Callable[[Any], Any] | None:
    """Value of a ``source`` field -> the value a ``column`` column holds, when both are
    numbers; the function raises ValueError for a value the column cannot hold exactly."""
    if source in _INTS and column in _INTS:
        low, high = _INTS[column]
        to_column = _scalar_to_column(column) or (lambda v: v)

        def integer(value: int) -> Any:
            if not low <= value <= high:
                raise ValueError(f"{value} does not fit {column.name}")
            return to_column(value)

        return integer
    if source in _INTS and column is FieldType.F64:

        def double(value: int) -> float:
            if abs(value) > 2**53:
                raise ValueError(f"{value} has no exact F64 value")
            return float(value)

        return double
    if source in _INTS and column is FieldType.F32:
        return lambda value: _exact_f32(float(value))
    if source is FieldType.F32 and column is FieldType.F64:
        return float
    if source is FieldType.F64 and column is FieldType.F32:
        return _exact_f32
    return None


def converter(source: FieldType, column: FieldType) -> Callable[[Any], Any] | None:
    """How a field of type ``source`` fills a column of field type ``column`` when the
    types differ: numbers (and arrays of numbers) convert when the value fits exactly,
    raising ValueError when it does not; None for every other pair of types."""
    if source in _ARRAYS and column in _ARRAYS:
        element = _scalar_converter(_ARRAYS[source], _ARRAYS[column])
        if element is None:
            return None
        return lambda values: [element(v) for v in values]
    return _scalar_converter(source, column)


def common_type(types: set[FieldType]) -> FieldType | None:
    """The one field type every type of ``types`` converts into exactly, whatever the
    value (the narrowest), or None: integers into the narrowest integer type holding
    them all, integers of at most 32 bits and floats into F64, F32 into F64."""
    if len(types) == 1:
        return next(iter(types))
    if types <= set(_INTS):
        low = min(_INTS[t][0] for t in types)
        high = max(_INTS[t][1] for t in types)
        fits = [c for c in _INTS if _INTS[c][0] <= low and high <= _INTS[c][1]]
        return min(fits, key=lambda c: _INTS[c][1] - _INTS[c][0]) if fits else None
    if types <= {*_INTS, *_FLOAT_TYPES}:
        wide_ints = {FieldType.I64, FieldType.U64} & types
        return None if wide_ints else FieldType.F64
    return None


def projector(ftype: FieldType) -> Callable[[Message, str], Any]:
    """A function taking (message, field name) to the column value: None when the message
    lacks the field or holds it with another type (a column has one type)."""
    element = _ARRAYS.get(ftype, ftype)
    scalar = _scalar_to_column(element)
    array = ftype in _ARRAYS

    def project(msg: Message, name: str) -> Any:
        try:
            field = msg.field(name)
        except KeyError:
            return None
        if field.type is not ftype:
            return None
        value = field.value
        if scalar is None:
            return value
        return [scalar(v) for v in value] if array else scalar(value)

    return project


# -- writing: column value -> field value ------------------------------------------------

_INT_SPARK = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FLOAT_SPARK = (T.FloatType, T.DoubleType)
_DEFAULT: dict[type, FieldType] = {
    T.StringType: FieldType.STRING,
    T.BinaryType: FieldType.OPAQUE,
    T.BooleanType: FieldType.BOOL,
    T.ByteType: FieldType.I8,
    T.ShortType: FieldType.I16,
    T.IntegerType: FieldType.I32,
    T.LongType: FieldType.I64,
    T.FloatType: FieldType.F32,
    T.DoubleType: FieldType.F64,
    T.TimestampType: FieldType.DATETIME,
    T.TimestampNTZType: FieldType.DATETIME,
    T.DateType: FieldType.DATETIME,
}
_ARRAY_OF = {scalar: array for array, scalar in _ARRAYS.items()}
_INT_FIELDS = {
    FieldType.I8,
    FieldType.I16,
    FieldType.I32,
    FieldType.I64,
    FieldType.U8,
    FieldType.U16,
    FieldType.U32,
    FieldType.U64,
    FieldType.IPPORT16,
}


def _utc(value: _dt.datetime, naive_is_local: bool) -> _dt.datetime:
    if value.tzinfo is not None:
        return value
    # PySpark hands TimestampType values over as naive local time; NTZ values are wall clock.
    return value.astimezone(_dt.UTC) if naive_is_local else value.replace(tzinfo=_dt.UTC)


def _allowed(dtype: T.DataType, ftype: FieldType) -> bool:
    """Whether a column of ``dtype`` can carry a field of ``ftype``."""
    if isinstance(dtype, T.StringType):
        return ftype in (FieldType.STRING, FieldType.XML, FieldType.IPADDR32)
    if isinstance(dtype, T.BinaryType):
        return ftype in (FieldType.OPAQUE, FieldType.XML)
    if isinstance(dtype, _INT_SPARK):
        return ftype in _INT_FIELDS or ftype is FieldType.IPADDR32
    if isinstance(dtype, T.DecimalType):
        return dtype.scale == 0 and ftype in _INT_FIELDS
    if isinstance(dtype, _FLOAT_SPARK):
        return ftype in (FieldType.F32, FieldType.F64)
    if isinstance(dtype, T.BooleanType):
        return ftype is FieldType.BOOL
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return ftype is FieldType.DATETIME
    if isinstance(dtype, T.StructType):
        return ftype is FieldType.MSG
    if isinstance(dtype, T.ArrayType):
        if isinstance(dtype.elementType, T.StructType):
            return ftype is FieldType.MSGARRAY
        return ftype in _ARRAYS and _allowed(dtype.elementType, _ARRAYS[ftype])
    return False


def _default_type(dtype: T.DataType, where: str) -> FieldType:
    for spark_type, ftype in _DEFAULT.items():
        if isinstance(dtype, spark_type):
            return ftype
    if isinstance(dtype, T.DecimalType):
        if dtype.scale == 0 and dtype.precision <= 18:
            return FieldType.I64
        if dtype == _U64:
            return FieldType.U64
        raise InvalidArgument(
            f"{where}: {dtype.simpleString()} has no exact field type; cast it to double, "
            f"to string, or to decimal(20,0) for U64"
        )
    if isinstance(dtype, T.StructType):
        return FieldType.MSG
    if isinstance(dtype, T.ArrayType):
        element = dtype.elementType
        if isinstance(element, T.StructType):
            return FieldType.MSGARRAY
        scalar = _default_type(element, f"{where} (array element)")
        if scalar in _ARRAY_OF:
            return _ARRAY_OF[scalar]
    raise InvalidArgument(
        f"{where}: Spark type {dtype.simpleString()} has no field type "
        f"(maps and intervals cannot travel in a message; convert the column first)"
    )


def _value_converter(dtype: T.DataType, ftype: FieldType, where: str) -> Callable[[Any], Any]:
    """Python value of a ``dtype`` column -> a value ``convert(ftype, ...)`` accepts."""
    if isinstance(dtype, T.StructType):
        build = message_builder(dtype, {}, where)
        return lambda row: build(row, None)
    if isinstance(dtype, T.ArrayType):
        element_type = _ARRAYS.get(ftype, FieldType.MSG)
        element = _value_converter(dtype.elementType, element_type, f"{where} (array element)")
        return lambda values: [element(v) for v in values]
    if isinstance(dtype, T.TimestampType):
        return lambda v: DateTime.from_datetime(_utc(v, True))
    if isinstance(dtype, T.TimestampNTZType):
        return lambda v: DateTime.from_datetime(_utc(v, False))
    if isinstance(dtype, T.DateType):
        return lambda v: DateTime.from_datetime(
            _dt.datetime(v.year, v.month, v.day, tzinfo=_dt.UTC)
        )
    if isinstance(dtype, T.DecimalType):
        return int
    if ftype is FieldType.IPADDR32 and isinstance(dtype, _INT_SPARK):
        return ipaddress.IPv4Address
    return lambda v: v


def spark_to_field(
    dtype: T.DataType, metadata: dict[str, Any] | None, override: FieldType | None, where: str
) -> tuple[FieldType, Callable[[Any], Any]]:
    """The field type for a column, and a function from its value to the field's value.

    ``override`` (the ``fieldTypes`` option) wins over the column metadata,
    which wins over the Spark type. Incompatible choices raise InvalidArgument.
    """
    ftype = override
    source = "option fieldTypes"
    if ftype is None and metadata and METADATA_KEY in metadata:
        ftype = parse_field_type(str(metadata[METADATA_KEY]), f"{where} metadata {METADATA_KEY}")
        source = f"column metadata {METADATA_KEY}"
    if ftype is None:
        ftype = _default_type(dtype, where)
    elif not _allowed(dtype, ftype):
        raise InvalidArgument(
            f"{where}: a {dtype.simpleString()} column cannot carry a {ftype.name} field "
            f"(asked for by {source})"
        )
    to_value = _value_converter(dtype, ftype, where)

    def field_value(value: Any) -> Any:
        try:
            return convert(ftype, to_value(value), where)
        except (ConversionError, InvalidArgument, ValueError, TypeError) as exc:
            raise InvalidArgument(
                f"{where}: value {value!r} does not fit {ftype.name}: {exc}"
            ) from None

    return ftype, field_value


def message_builder(
    schema: T.StructType, overrides: dict[str, FieldType], where: str
) -> Callable[[Any, str | None], Message]:
    """A function from a row (tuple or Row of ``schema``) to a Message of its non-null columns."""
    plan = []
    for field in schema.fields:
        if field.name.startswith("_"):
            raise InvalidArgument(
                f"{where}: column {field.name!r} cannot become a field: names starting "
                f"with '_' are reserved"
            )
        ftype, to_field = spark_to_field(
            field.dataType, field.metadata, overrides.get(field.name), f"column {field.name!r}"
        )
        plan.append((field.name, ftype, to_field))

    def build(row: Any, subject: str | None) -> Message:
        msg = Message(subject)
        for (name, ftype, to_field), value in zip(plan, row, strict=True):
            if value is not None:
                msg.add(name, to_field(value), ftype)
        return msg

    return build
