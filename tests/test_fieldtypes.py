"""Field types: conversion, range checks and type inference."""

from __future__ import annotations

import array
import datetime as dt
import enum
import ipaddress
import math
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync.fieldtypes import ARRAY_TYPES, FieldType, convert, infer
from rvasync.message import Message
from rvasync.rvdatetime import DateTime

F = FieldType

INT_LIMITS = {
    F.I8: (-128, 127),
    F.I16: (-(2**15), 2**15 - 1),
    F.I32: (-(2**31), 2**31 - 1),
    F.I64: (-(2**63), 2**63 - 1),
    F.U8: (0, 255),
    F.U16: (0, 65535),
    F.U32: (0, 2**32 - 1),
    F.U64: (0, 2**64 - 1),
    F.IPPORT16: (0, 65535),
}

INT_ARRAYS = {
    F.I8ARRAY: F.I8,
    F.I16ARRAY: F.I16,
    F.I32ARRAY: F.I32,
    F.I64ARRAY: F.I64,
    F.U8ARRAY: F.U8,
    F.U16ARRAY: F.U16,
    F.U32ARRAY: F.U32,
    F.U64ARRAY: F.U64,
}


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_members_are_exactly_the_contract() -> None:
    assert [m.name for m in FieldType] == [
        "MSG",
        "DATETIME",
        "OPAQUE",
        "STRING",
        "XML",
        "BOOL",
        "I8",
        "I16",
        "I32",
        "I64",
        "U8",
        "U16",
        "U32",
        "U64",
        "F32",
        "F64",
        "IPADDR32",
        "IPPORT16",
        "I8ARRAY",
        "I16ARRAY",
        "I32ARRAY",
        "I64ARRAY",
        "U8ARRAY",
        "U16ARRAY",
        "U32ARRAY",
        "U64ARRAY",
        "F32ARRAY",
        "F64ARRAY",
        "MSGARRAY",
        "STRINGARRAY",
    ]
    assert issubclass(FieldType, enum.IntEnum)
    assert len({int(m) for m in FieldType}) == len(FieldType)
    assert {m.name for m in ARRAY_TYPES} == {m.name for m in FieldType if m.name.endswith("ARRAY")}


@pytest.mark.parametrize("ftype", list(INT_LIMITS))
def test_integer_ranges(ftype: FieldType) -> None:
    lo, hi = INT_LIMITS[ftype]
    assert convert(ftype, lo, "n") == lo
    assert convert(ftype, hi, "n") == hi
    for bad in (lo - 1, hi + 1):
        with pytest.raises(rv.InvalidArgument) as info:
            convert(ftype, bad, "n")
        text = str(info.value)
        assert "'n'" in text and ftype.name in text and str(bad) in text


@pytest.mark.parametrize("ftype", list(INT_LIMITS))
@pytest.mark.parametrize("bad", [1.0, "1", True, None, b"1"])
def test_integer_types_refuse_other_python_types(ftype: FieldType, bad: object) -> None:
    with pytest.raises(rv.ConversionError) as info:
        convert(ftype, bad, "qty")
    assert "'qty'" in str(info.value) and ftype.name in str(info.value)


def test_int_like_values_become_exact_ints() -> None:
    class Level(enum.IntEnum):
        HIGH = 7

    value = convert(F.U8, Level.HIGH, "x")
    assert value == 7 and type(value) is int


def test_bool_only_from_bool() -> None:
    assert convert(F.BOOL, True) is True
    assert convert(F.BOOL, False) is False
    for bad in (0, 1, "true", None):
        with pytest.raises(rv.ConversionError):
            convert(F.BOOL, bad, "flag")


def test_f64_accepts_ints_and_reals() -> None:
    assert convert(F.F64, 3) == 3.0 and type(convert(F.F64, 3)) is float
    assert convert(F.F64, Fraction(1, 4)) == 0.25
    assert math.isinf(convert(F.F64, math.inf))
    assert math.isnan(convert(F.F64, math.nan))
    with pytest.raises(rv.InvalidArgument):
        convert(F.F64, 10**400, "big")
    for bad in ("1.5", True, None):
        with pytest.raises(rv.ConversionError):
            convert(F.F64, bad, "x")


def test_f32_stores_the_float32_rounding() -> None:
    assert convert(F.F32, 0.1) == f32(0.1) != 0.1
    assert convert(F.F32, 3.4028235e38) == f32(3.4028235e38)
    assert math.isinf(convert(F.F32, -math.inf))
    assert math.isnan(convert(F.F32, math.nan))
    with pytest.raises(rv.InvalidArgument) as info:
        convert(F.F32, 3.5e38, "p")
    assert "F32" in str(info.value) and "'p'" in str(info.value)


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
@settings(max_examples=100)
def test_f32_rounding_property(x: float) -> None:
    try:
        expected = f32(x)
    except OverflowError:
        with pytest.raises(rv.InvalidArgument):
            convert(F.F32, x)
        return
    assert convert(F.F32, x) == expected
    assert convert(F.F32, expected) == expected  # idempotent


def test_strings() -> None:
    assert convert(F.STRING, "héllo") == "héllo"

    class Name(str):
        pass

    value = convert(F.STRING, Name("x"))
    assert value == "x" and type(value) is str
    with pytest.raises(rv.ConversionError):
        convert(F.STRING, b"bytes", "s")
    with pytest.raises(rv.InvalidArgument, match="not valid Unicode"):
        convert(F.STRING, "bad \udc80 surrogate", "s")


def test_opaque_and_xml() -> None:
    assert convert(F.OPAQUE, bytearray(b"ab")) == b"ab"
    assert type(convert(F.OPAQUE, memoryview(b"ab"))) is bytes
    assert convert(F.XML, "<a/>") == b"<a/>"
    assert convert(F.XML, b"<a/>") == b"<a/>"
    with pytest.raises(rv.ConversionError):
        convert(F.OPAQUE, "text", "blob")
    with pytest.raises(rv.ConversionError):
        convert(F.XML, 5, "doc")


def test_datetime_values() -> None:
    stamp = DateTime(10, 5)
    assert convert(F.DATETIME, stamp) is stamp
    naive = dt.datetime(2001, 2, 3, 4, 5, 6, 7)
    assert convert(F.DATETIME, naive) == DateTime.from_datetime(naive)
    with pytest.raises(rv.ConversionError):
        convert(F.DATETIME, 12345, "when")
    with pytest.raises(rv.ConversionError):
        convert(F.DATETIME, dt.date(2001, 1, 1), "when")


def test_ipaddr32() -> None:
    addr = ipaddress.IPv4Address("10.1.2.3")
    assert convert(F.IPADDR32, addr) == addr
    assert convert(F.IPADDR32, "10.1.2.3") == addr
    assert convert(F.IPADDR32, int(addr)) == addr
    assert convert(F.IPADDR32, 0) == ipaddress.IPv4Address("0.0.0.0")
    assert convert(F.IPADDR32, 2**32 - 1) == ipaddress.IPv4Address("255.255.255.255")
    for bad in (-1, 2**32):
        with pytest.raises(rv.InvalidArgument):
            convert(F.IPADDR32, bad, "host")
    with pytest.raises(rv.InvalidArgument):
        convert(F.IPADDR32, "10.1.2", "host")
    for bad in (1.0, ipaddress.IPv6Address("::1"), True):
        with pytest.raises(rv.ConversionError):
            convert(F.IPADDR32, bad, "host")


@pytest.mark.parametrize("ftype", list(INT_ARRAYS))
def test_integer_arrays(ftype: FieldType) -> None:
    lo, hi = INT_LIMITS[INT_ARRAYS[ftype]]
    source = [lo, 0, hi]
    stored = convert(ftype, tuple(source))
    assert stored == source and type(stored) is list
    assert convert(ftype, []) == []
    with pytest.raises(rv.InvalidArgument) as info:
        convert(ftype, [0, hi + 1], "arr")
    assert "element 1" in str(info.value) and ftype.name in str(info.value)
    with pytest.raises(rv.InvalidArgument):
        convert(ftype, [lo - 1], "arr")
    with pytest.raises(rv.ConversionError) as info:
        convert(ftype, [0, 1.5], "arr")
    assert "element 1" in str(info.value)
    with pytest.raises(rv.ConversionError):
        convert(ftype, [True], "arr")
    with pytest.raises(rv.ConversionError):
        convert(ftype, 5, "arr")


def test_arrays_copy_the_callers_list() -> None:
    source = [1, 2, 3]
    stored = convert(F.I32ARRAY, source)
    source.append(4)
    assert stored == [1, 2, 3]
    assert convert(F.I16ARRAY, range(3)) == [0, 1, 2]
    assert convert(F.I64ARRAY, array.array("q", [5, 6])) == [5, 6]


def test_float_arrays() -> None:
    assert convert(F.F64ARRAY, [1, 2.5]) == [1.0, 2.5]
    assert all(type(v) is float for v in convert(F.F64ARRAY, [1, 2]))
    assert convert(F.F32ARRAY, [0.1, 1]) == [f32(0.1), 1.0]
    with pytest.raises(rv.InvalidArgument) as info:
        convert(F.F32ARRAY, [1.0, 1e39], "v")
    assert "element 1" in str(info.value)
    with pytest.raises(rv.ConversionError):
        convert(F.F64ARRAY, ["1"], "v")


def test_string_and_message_arrays() -> None:
    assert convert(F.STRINGARRAY, ("a", "b")) == ["a", "b"]
    with pytest.raises(rv.ConversionError):
        convert(F.STRINGARRAY, ["a", 1], "names")
    inner = Message("X", {"a": 1})
    stored = convert(F.MSGARRAY, [inner])
    assert stored == [inner] and stored[0] is not inner
    assert convert(F.MSGARRAY, [inner, {"a": 1}], "msgs")[1] == Message(None, {"a": 1})
    with pytest.raises(rv.ConversionError, match="element 1"):
        convert(F.MSGARRAY, [inner, 1], "msgs")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, F.BOOL),
        (5, F.I64),
        (2.5, F.F64),
        ("s", F.STRING),
        (b"b", F.OPAQUE),
        (bytearray(b"b"), F.OPAQUE),
        (DateTime(0), F.DATETIME),
        (dt.datetime(2020, 1, 1), F.DATETIME),
        (ipaddress.IPv4Address("1.2.3.4"), F.IPADDR32),
        (Message(), F.MSG),
        (["a", "b"], F.STRINGARRAY),
        ((Message(), Message()), F.MSGARRAY),
        ([1, 2], F.I64ARRAY),
        ((1.5, 2.5), F.F64ARRAY),
        ([1, 2.5], F.F64ARRAY),
    ],
)
def test_inference(value: object, expected: FieldType) -> None:
    ftype, _ = infer(value)
    assert ftype is expected


def test_inference_failures() -> None:
    with pytest.raises(rv.ConversionError, match="empty"):
        infer([], "e")
    with pytest.raises(rv.ConversionError):
        infer([True, False], "flags")
    with pytest.raises(rv.ConversionError):
        infer(["a", 1], "mixed")
    assert infer({"a": 1}, "d") == (F.MSG, Message(None, {"a": 1}))  # a dict nests
    with pytest.raises(rv.ConversionError):
        infer({1, 2}, "s")
    with pytest.raises(rv.ConversionError):
        infer(None, "n")
    with pytest.raises(rv.InvalidArgument, match="U64"):
        infer(2**63, "big")
