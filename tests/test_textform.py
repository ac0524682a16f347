"""The Rendezvous text form (``str(msg)``, ``Message.from_text``) and the typed getters.

Every property runs on messages decoded by each codec twin (pure and native),
since a program reads what the wire gave it.
"""

from __future__ import annotations

import ipaddress
import math
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_codec import IMPLS, INT_RANGES, NATIVE, messages

import rvasync as rv
from rvasync.fieldtypes import FieldType, values_equal
from rvasync.message import Message
from rvasync.rvdatetime import DateTime
from rvasync.textform import printable

F = FieldType


@pytest.fixture(params=IMPLS, ids=lambda m: "native" if m is NATIVE else "pure")
def impl(request: pytest.FixtureRequest) -> ModuleType:
    return request.param


def through(impl: ModuleType, msg: Message) -> Message:
    """``msg`` as a receiver gets it: encoded and decoded by ``impl``."""
    if msg.subject is None:
        msg = msg.copy()
        msg.subject = "S"
    back: Message = impl.decode(impl.encode(msg))
    back.subject = None
    return back


# -- the form itself ------------------------------------------------------------------------


def test_the_forms_of_the_contract() -> None:
    assert str(Message()) == "{}"
    assert str(Message(fields={"DATA": "hello"})) == '{DATA="hello"}'
    assert str(Message(fields={"N": -120})) == "{N=-120}"
    assert str(Message(fields={"OUTER": Message(fields={"INNER": 1})})) == "{OUTER={INNER=1}}"
    assert str(Message(fields={"A": 1, "B": "x"})) == '{A=1 B="x"}'
    assert str(Message(fields={"XS": [1, 2, 3]})) == "{XS=[1 2 3]}"


def test_repr_stays_the_debugging_form() -> None:
    msg = Message("a.b", {"N": 1})
    assert repr(msg).startswith("<Message subject='a.b'")
    assert str(msg) == "{N=1}"


def test_every_type_has_its_form() -> None:
    msg = Message()
    msg.add("i8", -5, F.I8)
    msg.add("u64", 2**64 - 1, F.U64)
    msg.add("f32", 0.1, F.F32)
    msg.add("f64", 2.0)
    msg.add("b", False)
    msg.add("ip", ipaddress.IPv4Address("10.1.2.3"))
    msg.add("port", 7500, F.IPPORT16)
    msg.add("when", DateTime(1_700_000_000, 250_000))
    msg.add("o", b"abcd")
    msg.add("x", b"<a/>", F.XML)
    msg.add("fs", [0.5, 1.0], F.F32ARRAY)
    msg.add("ss", ["a", 'q"'])
    msg.add("ms", [Message(fields={"k": 1}), Message()])
    assert str(msg) == (
        "{i8=-5 u64=18446744073709551615 f32=0.1 f64=2.0 b=FALSE ip=10.1.2.3 port=7500 "
        "when=2023-11-14 22:13:20.250000000Z o=[4 opaque bytes] x=[XML document: 4 bytes] "
        'fs=[0.5 1.0] ss=["a" "q\\""] ms=[{k=1} {}]}'
    )


def test_f32_near_its_largest_value_prints_and_reads_back() -> None:
    msg = Message(
        fields=[rv.Field("f", 0, F.F32ARRAY, [3.4025001647762064e38, 3.4028234663852886e38])]
    )
    assert str(msg) == "{f=[3.4025002e+38 3.4028235e+38]}"
    assert str(Message.from_text(str(msg))) == str(msg)


def test_datetimes_print_in_common_era_years_at_both_ends_of_the_range() -> None:
    assert str(Message(fields={"t": DateTime(-62135596801)})) == (
        "{t=-0001-12-31 23:59:59.000000000Z}"
    )
    for seconds in (-(2**39), 2**39 - 1, -1, 0, 253402300800):
        msg = Message(fields={"t": DateTime(seconds, 7)})
        assert Message.from_text(str(msg)) == msg


def test_unnamed_and_odd_names_are_written_so_they_read_back() -> None:
    msg = Message()
    msg.add(None, 1)
    msg.add("a b", 2)
    msg.add("x=y", 3)
    msg.add("new\nline", 4)
    assert str(msg) == '{=1 "a b"=2 "x=y"=3 "new\\nline"=4}'
    assert Message.from_text(str(msg)) == msg


# -- nothing printed can act on a terminal (#43 item 3) ----------------------------------------


@pytest.mark.parametrize(
    "hostile", ["\x00", "\n", "\t", "\r", "\x1b[2J", "\u200b", "\u202e", "\x85"]
)
def test_control_and_format_characters_are_escaped(hostile: str) -> None:
    msg = Message(fields={f"n{hostile}": f"v{hostile}"})
    text = str(msg)
    assert text.isprintable()
    assert Message.from_text(text) == msg
    assert printable(f"a{hostile}b").isprintable()


@given(msg=messages())
@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_the_text_form_is_always_one_printable_line(msg: Message) -> None:
    for impl in IMPLS:
        assert str(through(impl, msg)).isprintable()


def test_printable_leaves_ordinary_text_alone_and_escapes_backslashes() -> None:
    assert printable("NEWS.SPORTS.é") == "NEWS.SPORTS.é"
    assert printable("a\\b") == "a\\\\b"
    assert printable("a\nb") == "a\\nb"


# -- reading the form back ------------------------------------------------------------------

#: Types the text form names unambiguously: a field of one of these reads back exactly.
TEXT_TYPES = {
    F.STRING: st.text(max_size=12),
    F.I64: st.integers(*INT_RANGES[F.I64]),
    F.U64: st.integers(2**63, 2**64 - 1),
    F.F64: st.floats(),
    F.BOOL: st.booleans(),
    F.IPADDR32: st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
    F.DATETIME: st.builds(DateTime, st.integers(-(2**39), 2**39 - 1), st.integers(0, 999_999)),
    F.I64ARRAY: st.lists(st.integers(*INT_RANGES[F.I64]), max_size=4),
    F.F64ARRAY: st.lists(st.floats(), min_size=1, max_size=4),
    F.STRINGARRAY: st.lists(st.text(max_size=4), min_size=1, max_size=4),
}


@st.composite
def text_messages(draw: st.DrawFn, depth: int = 0) -> Message:
    msg = Message()
    for _ in range(draw(st.integers(0, 5 if depth == 0 else 2))):
        name = draw(st.none() | st.text(min_size=1, max_size=6))
        kind = draw(
            st.sampled_from([*TEXT_TYPES, F.MSG, F.MSGARRAY] if depth < 2 else list(TEXT_TYPES))
        )
        if kind is F.MSG:
            value: Any = draw(text_messages(depth + 1))
        elif kind is F.MSGARRAY:
            value = draw(st.lists(text_messages(depth + 1), min_size=1, max_size=2))
        else:
            value = draw(TEXT_TYPES[kind])
        msg._add_reserved(name, value, kind)
    return msg


@given(msg=text_messages())
@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_the_form_reads_back_exactly_where_it_names_the_type(msg: Message) -> None:
    for impl in IMPLS:
        received = through(impl, msg)
        back = Message.from_text(str(received))
        assert back == msg
        assert [f.type for f in back] == [f.type for f in msg]


def _without_bytes(msg: Message) -> bool:
    for field in msg:
        if field.type in (F.OPAQUE, F.XML):
            return False
        if field.type is F.MSG and not _without_bytes(field.value):
            return False
        if field.type is F.MSGARRAY and not all(_without_bytes(m) for m in field.value):
            return False
    return True


@given(msg=messages())
@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_reading_any_form_back_gives_the_same_form(msg: Message) -> None:
    """Types the form does not name (I8, F32, IPPORT16 ...) read back as their
    nearest named type, whose text is the same."""
    for impl in IMPLS:
        text = str(through(impl, msg))
        if _without_bytes(msg):
            assert str(Message.from_text(text)) == text
        else:
            with pytest.raises(rv.InvalidArgument, match="opaque and XML"):
                Message.from_text(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "expected '{'"),
        ("{A=1", "not closed"),
        ("{A=}", "not a value"),
        ('{A="x}', "not closed"),
        ("{A=1  B=2}x", "after the end"),
        ("{A=1,B=2}", "not a value"),
        ('{A="\\q"}', "unknown escape"),
        ('{A=[1 "x"]}', "no array type"),
        ("{A=[TRUE]}", "no array type"),
        ("{A=99999999999999999999999}", "range"),
        ("{A=2024-13-01 00:00:00Z}", "not a valid date"),
        ("{A=2024-01-01 00:00:00.123456789Z}", "microseconds"),
        ("{A=[3 opaque bytes]}", "cannot be read back"),
    ],
)
def test_bad_text_is_refused_naming_the_column(text: str, words: str) -> None:
    with pytest.raises(rv.InvalidArgument, match="column") as caught:
        Message.from_text(text)
    assert words in str(caught.value)


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(rv.InvalidArgument, match="nested deeper"):
        Message.from_text("{A=" * 200 + "}" * 200)


# -- typed getters ----------------------------------------------------------------------------

INT_TYPES = [F.I8, F.I16, F.I32, F.I64, F.U8, F.U16, F.U32, F.U64, F.IPPORT16]


@given(
    source=st.sampled_from(INT_TYPES),
    target=st.sampled_from(INT_TYPES),
    data=st.data(),
)
@settings(deadline=None, max_examples=300)
def test_integers_read_as_any_integer_type_that_holds_them(
    source: FieldType, target: FieldType, data: st.DataObject
) -> None:
    value = data.draw(st.integers(*INT_RANGES[source]))
    msg = Message(fields=[rv.Field("n", 0, source, value)])
    lo, hi = INT_RANGES[target]
    for impl in IMPLS:
        received = through(impl, msg)
        if lo <= value <= hi:
            assert received.get_as("n", target) == value
        else:
            with pytest.raises(rv.ConversionError) as caught:
                received.get_as("n", target)
            assert "'n'" in str(caught.value)
            assert source.name in str(caught.value) and target.name in str(caught.value)


@given(value=st.integers(-(2**63), 2**64 - 1), target=st.sampled_from([F.F32, F.F64]))
@settings(deadline=None)
def test_integers_read_as_floats_only_when_exact(value: int, target: FieldType) -> None:
    ftype = F.I64 if value < 2**63 else F.U64
    msg = Message(fields=[rv.Field("n", 0, ftype, value)])
    for impl in IMPLS:
        received = through(impl, msg)
        try:
            got = received.get_as("n", target)
        except rv.ConversionError:
            exact = Message(fields=[rv.Field("x", 0, target, float(value))])["x"]
            assert exact != value
        else:
            assert isinstance(got, float) and got == value


@given(value=st.floats(width=32))
@settings(deadline=None)
def test_f32_reads_as_f64_and_back(value: float) -> None:
    msg = Message(fields=[rv.Field("f", 0, F.F32, value)])
    for impl in IMPLS:
        received = through(impl, msg)
        wide = received.get_as("f", F.F64)
        assert wide == value or (math.isnan(wide) and math.isnan(value))
        narrow = Message(fields=[rv.Field("f", 0, F.F64, wide)]).get_as("f", F.F32)
        assert narrow == value or (math.isnan(narrow) and math.isnan(value))


def test_the_contracts_examples() -> None:
    msg = Message()
    msg.add("small", -3, F.I8)
    msg.add("port", 9000, F.U16)
    msg.add("f", 1.5, F.F32)
    msg.add("big", 300)
    msg.add("neg", -1)
    msg.add("s", "12")
    msg.add("half", 2.5)
    msg.add("whole", 3.0)
    assert msg.get_as("small", F.I64) == -3
    assert msg.get_as("port", F.I32) == 9000
    assert msg.get_as("f", F.F64) == 1.5
    assert msg.get_as("big", F.F64) == 300.0
    assert msg.get_as("whole", F.I32) == 3
    for name, target in [("neg", F.U32), ("big", F.I8), ("s", F.I64), ("half", F.I32)]:
        with pytest.raises(rv.ConversionError, match=f"'{name}'"):
            msg.get_as(name, target)
    with pytest.raises(KeyError):
        msg.get_as("missing", F.I64)


def test_arrays_read_as_wider_arrays() -> None:
    msg = Message(fields=[rv.Field("xs", 0, F.I8ARRAY, [1, -2])])
    assert msg.get_as("xs", F.I64ARRAY) == [1, -2]
    assert msg.get_as("xs", F.F64ARRAY) == [1.0, -2.0]
    with pytest.raises(rv.ConversionError, match="U8ARRAY"):
        msg.get_as("xs", F.U8ARRAY)
    with pytest.raises(rv.ConversionError):
        msg.get_as("xs", F.STRINGARRAY)


def test_get_as_by_field_id(impl: ModuleType) -> None:
    msg = Message()
    msg.add("a", 1, F.U8, field_id=7)
    msg.add("b", 2)
    received = through(impl, msg)
    assert received.get_as(None, F.I32, field_id=7) == 1
    assert received.get_as("a", F.I32, field_id=7) == 1
    with pytest.raises(rv.InvalidArgument, match="belongs to field 'a'"):
        received.get_as("b", F.I32, field_id=7)
    with pytest.raises(KeyError):
        received.get_as(None, F.I32, field_id=8)


@given(msg=messages())
@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow])
def test_positions_ids_and_types_agree_on_both_twins(msg: Message) -> None:
    """What a receiver walks (iteration, ``field_at``, ``field_by_id``, ``get_as`` in a
    field's own type) is the same fields, in order, with the types they were sent with,
    whichever codec twin decoded them."""
    sent = [(f.name, f.id, f.type) for f in msg]
    for impl in IMPLS:
        received: Message = impl.decode(impl.encode(msg))
        fields = list(received)
        assert [(f.name, f.id, f.type) for f in fields] == sent
        assert [received.field_at(i) for i in range(len(received))] == fields
        with pytest.raises(IndexError):
            received.field_at(len(received))
        first: dict[str | None, rv.Field] = {}
        for field in fields:
            first.setdefault(field.name, field)
            if field.id:
                assert received.field_by_id(field.id) == field
                got = received.get_as(field.name, field.type, field_id=field.id)
                assert values_equal(field.type, got, field.value)
        for name, field in first.items():
            assert values_equal(field.type, received.get_as(name, field.type), field.value)


def test_field_at(impl: ModuleType) -> None:
    msg = Message(fields={"a": 1, "b": "x"})
    received = through(impl, msg)
    assert [received.field_at(i) for i in range(len(received))] == list(received)
    assert received.field_at(1).type is F.STRING
    for bad in (2, -1):
        with pytest.raises(IndexError, match="2 fields"):
            received.field_at(bad)
    with pytest.raises(rv.ConversionError):
        received.field_at("0")  # type: ignore[arg-type]
    assert [(f.name, f.type) for f in received] == [("a", F.I64), ("b", F.STRING)]
