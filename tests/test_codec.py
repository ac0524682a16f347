"""Wire codec: round trips, parity of the pure and native twins, and hostile input."""

from __future__ import annotations

import ipaddress
import math
import random
import struct
from types import ModuleType
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync import codec as codec_front
from rvasync._accel import implementations
from rvasync._wire import HEADER, MAX_MESSAGE_SIZE, MAX_NESTING_DEPTH, ORIGIN_SIZE
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Field, Message
from rvasync.rvdatetime import DateTime

F = FieldType
IMPLS = implementations("codec")
NATIVE = IMPLS[1] if len(IMPLS) > 1 else None


@pytest.fixture(params=IMPLS, ids=lambda m: "native" if m is NATIVE else "pure")
def impl(request: pytest.FixtureRequest) -> ModuleType:
    return request.param


# -- random messages -----------------------------------------------------------------------

INT_RANGES = {
    F.I8: (-(2**7), 2**7 - 1),
    F.I16: (-(2**15), 2**15 - 1),
    F.I32: (-(2**31), 2**31 - 1),
    F.I64: (-(2**63), 2**63 - 1),
    F.U8: (0, 2**8 - 1),
    F.U16: (0, 2**16 - 1),
    F.U32: (0, 2**32 - 1),
    F.U64: (0, 2**64 - 1),
    F.IPPORT16: (0, 2**16 - 1),
}
ARRAY_OF = {
    F.I8ARRAY: F.I8,
    F.I16ARRAY: F.I16,
    F.I32ARRAY: F.I32,
    F.I64ARRAY: F.I64,
    F.U8ARRAY: F.U8,
    F.U16ARRAY: F.U16,
    F.U32ARRAY: F.U32,
    F.U64ARRAY: F.U64,
}

subjects = st.none() | st.text(min_size=0, max_size=12)
names = st.none() | st.text(min_size=1, max_size=8)
cm_labels = st.none() | st.builds(
    CmLabel,
    st.text(min_size=1, max_size=8),
    st.none() | st.integers(0, 2**64 - 1),
    st.floats(0, 1e9),
)
#: Publication origins (Message.origin): None, or any int of 128 bits, the edges often.
origins = st.none() | st.integers(0, 2**128 - 1) | st.sampled_from([0, 2**64, 2**128 - 1])
#: Publisher correlation ids (Message.publisher_correlation): None mostly, else each kind.
correlations = (
    st.none()
    | st.none()
    | st.text(min_size=1, max_size=8)
    | st.binary(min_size=1, max_size=8).filter(lambda b: b.strip(b"\0"))
    | st.integers(-(2**63), 2**64 - 1).filter(bool)
)


def scalar_values(ftype: FieldType) -> st.SearchStrategy[Any]:
    if ftype in INT_RANGES:
        return st.integers(*INT_RANGES[ftype])
    if ftype in ARRAY_OF:
        return st.lists(st.integers(*INT_RANGES[ARRAY_OF[ftype]]), max_size=6)
    return {
        F.DATETIME: st.builds(DateTime, st.integers(-(2**39), 2**39 - 1), st.integers(0, 999_999)),
        F.OPAQUE: st.binary(max_size=20),
        F.XML: st.binary(max_size=20),
        F.STRING: st.text(max_size=20),
        F.BOOL: st.booleans(),
        F.F32: st.floats(width=32),
        F.F64: st.floats(),
        F.IPADDR32: st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
        F.F32ARRAY: st.lists(st.floats(width=32), max_size=6),
        F.F64ARRAY: st.lists(st.floats(), max_size=6),
        F.STRINGARRAY: st.lists(st.text(max_size=6), max_size=6),
    }[ftype]


SAMPLES: dict[FieldType, list[Any]] = {
    F.DATETIME: [DateTime(0), DateTime(-5, 999_999), DateTime(2**39 - 1)],
    F.OPAQUE: [b"", b"\x00\xff", bytes(70_000)],
    F.XML: [b"<a/>", b""],
    F.STRING: ["", "h\u00e9llo \u2603", "x" * 300],
    F.BOOL: [True, False],
    F.F32: [0.0, 1.5, -3.4028234663852886e38, 1e-45],
    F.F64: [0.0, -1.5, 1e308, 5e-324],
    F.IPADDR32: [ipaddress.IPv4Address("0.0.0.0"), ipaddress.IPv4Address("192.168.1.255")],
    F.F32ARRAY: [[], [0.5, -1.0, 3.4028234663852886e38]],
    F.F64ARRAY: [[], [0.1, -2.0, 1e300]],
    F.STRINGARRAY: [[], ["a", "", "\u00e9" * 40], ["x"] * 20],
}

LEAF_TYPES = [t for t in FieldType if t not in (F.MSG, F.MSGARRAY)]


@st.composite
def messages(draw: st.DrawFn, depth: int = 0) -> Message:
    """Random messages of every field type, nested up to three levels, with names, ids and cm."""
    msg = Message(draw(subjects), reply_subject=draw(subjects))
    msg.cm = draw(cm_labels)
    msg.origin = draw(origins)
    msg.publisher_correlation = draw(correlations)
    count = draw(st.integers(0, 6 if depth == 0 else 3))
    types = list(FieldType) if depth < 3 else LEAF_TYPES
    ids = iter(draw(st.lists(st.integers(1, 65535), unique=True, min_size=count, max_size=count)))
    for _ in range(count):
        ftype = draw(st.sampled_from(types))
        if ftype is F.MSG:
            value = draw(messages(depth + 1))
        elif ftype is F.MSGARRAY:
            value = draw(st.lists(messages(depth + 1), max_size=2))
        else:
            value = draw(scalar_values(ftype))
        name = draw(names)
        field_id = next(ids)
        if name is None or draw(st.booleans()):
            field_id = 0
        msg._add_reserved(name, value, ftype, field_id)  # reserved names travel too
    return msg


# -- round trips ---------------------------------------------------------------------


@given(msg=messages())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip_random_messages(msg: Message) -> None:
    for impl in IMPLS:
        data = impl.encode(msg)
        back = impl.decode(data)
        assert back == msg
        assert back.cm == msg.cm
        assert back.origin == msg.origin
        assert back.publisher_correlation == msg.publisher_correlation
        assert [(f.name, f.id, f.type) for f in back] == [(f.name, f.id, f.type) for f in msg]
        assert impl.encode(back) == data
        assert back.listener is None and back.closure is None


@pytest.mark.skipif(NATIVE is None, reason="native codec not built")
@given(msg=messages())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_pure_and_native_encode_identically(msg: Message) -> None:
    assert IMPLS[0].encode(msg) == NATIVE.encode(msg)


class Labelled(Message):
    """A Message subclass: the native encoder reads its slots through attributes."""

    __slots__ = ()


@given(msg=messages())
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
def test_a_subclass_encodes_as_a_message(msg: Message) -> None:
    """The native encoder reads a Message's slots at their offsets and any other class's
    through attributes: both give the bytes of the pure twin."""
    other = object.__new__(Labelled)
    for name in Message.__slots__:
        setattr(other, name, getattr(msg, name))
    for impl in IMPLS:
        assert impl.encode(other) == impl.encode(msg) == IMPLS[0].encode(msg)


@pytest.mark.parametrize("missing", ["subject", "reply_subject", "cm", "origin", "_fields"])
def test_an_unset_slot_is_named(impl: ModuleType, missing: str) -> None:
    msg = Message("S.X", {"n": 1})
    msg.origin = 5
    delattr(msg, missing)
    with pytest.raises(AttributeError, match=missing):
        impl.encode(msg)


@pytest.mark.skipif(NATIVE is None, reason="native codec not built")
@given(
    sizes=st.lists(st.integers(min_value=60 * 1024, max_value=200 * 1024), min_size=1, max_size=3),
    text_first=st.booleans(),
    tail=st.integers(min_value=0, max_value=300),
)
@settings(max_examples=20, deadline=None)
def test_large_payloads_encode_identically(sizes: list[int], text_first: bool, tail: int) -> None:
    """Payloads large enough to be copied straight into the result (the native encoder's
    deferred path), mixed with small fields and nested messages, still match the pure twin."""
    msg = Message("BIG.PAYLOADS")
    for k, size in enumerate(sizes):
        if (k % 2 == 0) == text_first:
            msg.add(f"text{k}", "é" * (size // 2))
        else:
            msg.add(f"blob{k}", bytes([k]) * size, type=F.OPAQUE)
        msg.add(f"small{k}", k)
    msg.add("nested", Message(None, {"inner": bytes(sizes[0]), "after": "x" * tail}))
    data = NATIVE.encode(msg)
    assert data == IMPLS[0].encode(msg)
    assert NATIVE.decode(data) == msg


@pytest.mark.parametrize("ftype", list(FieldType))
def test_every_type_round_trips(impl: ModuleType, ftype: FieldType) -> None:
    examples: dict[FieldType, list[Any]] = {
        F.MSG: [Message(), Message("in", {"a": Message(None, {"b": 1})}, reply_subject="r")],
        F.MSGARRAY: [[], [Message("x"), Message(None, {"y": [1.5]})]],
    }
    if ftype in INT_RANGES:
        values = [*INT_RANGES[ftype], 1]
    elif ftype in ARRAY_OF:
        values = [[], list(INT_RANGES[ARRAY_OF[ftype]]), [0] * 300]
    else:
        values = examples.get(ftype) or SAMPLES[ftype]
    msg = Message("T")
    for value in values:
        msg.add("v", value, ftype)
    back = impl.decode(impl.encode(msg))
    assert back == msg
    assert all(f.type is ftype for f in back)


def test_f32_travels_as_float32(impl: ModuleType) -> None:
    msg = Message(None, [Field("x", 0, F.F32, 0.1), Field("v", 0, F.F32ARRAY, [0.1, -2.5e-40])])
    back = impl.decode(impl.encode(msg))
    expected = struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert back["x"] == expected and back["v"][0] == expected
    assert back["v"][1] == struct.unpack("<f", struct.pack("<f", -2.5e-40))[0]


def test_special_floats(impl: ModuleType) -> None:
    msg = Message(None, {"inf": math.inf, "ninf": -math.inf, "nan": math.nan, "neg0": -0.0})
    back = impl.decode(impl.encode(msg))
    assert back["inf"] == math.inf and back["ninf"] == -math.inf
    assert math.isnan(back["nan"]) and math.copysign(1, back["neg0"]) == -1


def test_datetime_edges(impl: ModuleType) -> None:
    edges = [DateTime(-(2**39)), DateTime(2**39 - 1, 999_999), DateTime(-1, 1), DateTime(0)]
    msg = Message(None, [Field("t", 0, None, edge) for edge in edges])
    assert impl.decode(impl.encode(msg)).get_all("t") == edges


def test_decoded_objects_have_every_slot_set(impl: ModuleType) -> None:
    """The native decoder writes slots at their offsets: none may be left unset,
    and the objects must behave like ones built by their constructors."""
    inner = Message(None, {"when": DateTime(1_700_000_000, 5)})
    msg = Message("A.B", {"inner": inner, "n": 1}, reply_subject="_INBOX.x")
    msg.cm = CmLabel("s", 3, 1.5)
    msg.origin = 2**100 + 7
    back = impl.decode(impl.encode(msg))
    assert back.origin == 2**100 + 7 and back["inner"].origin is None
    for decoded in (back, back["inner"]):
        for slot in Message.__slots__:
            getattr(decoded, slot)  # AttributeError if a slot was left unset
        assert decoded.listener is None and decoded.closure is None
    when = back["inner"]["when"]
    assert type(when) is DateTime and when == DateTime(1_700_000_000, 5)
    assert hash(when) == hash(DateTime(1_700_000_000, 5))
    assert back == msg and back.reply_subject == "_INBOX.x" and back.cm == msg.cm
    back.add("more", 2)  # a decoded message is an ordinary, changeable message
    assert back["more"] == 2 and msg.get("more") is None


def test_cm_label_travels(impl: ModuleType) -> None:
    msg = Message("S", {"a": 1})
    msg.cm = CmLabel("sender", 2**64 - 1, 12.5)
    back = impl.decode(impl.encode(msg))
    assert back.cm == msg.cm
    msg.cm = CmLabel("sender", None, 0)
    assert impl.decode(impl.encode(msg)).cm == msg.cm


def test_origin_travels_alone_and_beside_a_cm_label(impl: ModuleType) -> None:
    origin = (0x70756269_64313233 << 64) | (2**64 - 1)  # publisher id, then its sequence
    msg = Message("S", {"a": 1})
    msg.origin = origin
    data = impl.encode(msg)
    # the label slot holds bin8 of 16 bytes, big-endian
    assert b"\xc4\x10" + origin.to_bytes(ORIGIN_SIZE, "big") in data
    back = impl.decode(data)
    assert back.origin == origin and back.cm is None
    assert back == Message("S", {"a": 1})  # not part of equality
    msg.cm = CmLabel("sender", 3, 1.0)
    back = impl.decode(impl.encode(msg))
    assert back.origin == origin and back.cm == msg.cm
    assert back.copy().origin == origin and back.delivery_copy(None, None).origin == origin
    msg.origin = None
    back = impl.decode(impl.encode(msg))
    assert back.origin is None and back.cm == msg.cm
    assert (
        Message("S").origin is None and Message.from_bytes(Message("S").to_bytes()).origin is None
    )


@pytest.mark.parametrize(
    "origin",
    [-1, -(2**100), 2**128, 2**128 + 1, 2**150, True, 1.0, b"\x00" * 16, "x" * 16, [1, 2]],
)
def test_encode_rejects_a_bad_origin(impl: ModuleType, origin: Any) -> None:
    msg = Message("S", {"a": 1})
    msg.origin = origin
    with pytest.raises(rv.InvalidArgument, match="origin"):
        impl.encode(msg)
    msg.cm = CmLabel("sender", 3, 1.0)
    with pytest.raises(rv.InvalidArgument, match="origin"):
        impl.encode(msg)


#: Origins at every digit boundary of CPython's 30-bit ints (the native twin reads
#: and writes the digits directly) and of the two 64-bit halves.
EDGE_ORIGINS = sorted(
    {0, 1, 2**128 - 1, 2**127}
    | {v for k in (30, 60, 64, 90, 120) for v in (2**k - 1, 2**k, 2**k + 1)}
    | {(2**64 - 1) << 64, 0xFEDCBA9876543210 << 64 | 0x0123456789ABCDEF}
)


@pytest.mark.parametrize("origin", EDGE_ORIGINS, ids=hex)
def test_origins_at_digit_boundaries_round_trip(impl: ModuleType, origin: int) -> None:
    msg = Message("S")
    msg.origin = origin
    data = impl.encode(msg)
    assert data.endswith(b"\xc4\x10" + origin.to_bytes(16, "big") + b"\x90")
    assert impl.decode(data).origin == origin
    assert data == IMPLS[0].encode(msg)


@pytest.mark.skipif(NATIVE is None, reason="native codec not built")
@given(origin=st.integers(0, 2**128 - 1), cm=cm_labels)
@settings(max_examples=200)
def test_pure_and_native_encode_and_decode_origins_identically(
    origin: int, cm: CmLabel | None
) -> None:
    msg = Message("S", {"a": 1})
    msg.origin = origin
    msg.cm = cm
    pure = IMPLS[0]
    data = pure.encode(msg)
    assert data == NATIVE.encode(msg)
    for impl in IMPLS:
        back = impl.decode(data)
        assert back.origin == origin and back.cm == cm


def test_nesting_to_the_documented_limit(impl: ModuleType) -> None:
    def chain(levels: int, via_array: bool) -> Message:
        msg = Message(None, {"leaf": 1})
        for _ in range(levels):
            msg = Message(None, {"down": [msg] if via_array else msg})
        return msg

    for via_array in (False, True):
        deepest = chain(MAX_NESTING_DEPTH, via_array)
        assert impl.decode(impl.encode(deepest)) == deepest
        with pytest.raises(rv.InvalidArgument, match="nested deeper"):
            impl.encode(chain(MAX_NESTING_DEPTH + 1, via_array))


def test_message_methods_use_the_codec() -> None:
    msg = Message("S", {"a": [1, 2]})
    assert msg.to_bytes() == codec_front.encode(msg)
    assert Message.from_bytes(bytearray(msg.to_bytes())) == msg
    assert codec_front.MAX_MESSAGE_SIZE == 64 * 1024 * 1024
    assert codec_front.implementation in IMPLS


def test_decode_accepts_buffers(impl: ModuleType) -> None:
    data = impl.encode(Message("S", {"a": 1}))
    for form in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert impl.decode(form) == Message("S", {"a": 1})
    strided = memoryview(bytes(b for pair in zip(data, data, strict=True) for b in pair))[::2]
    assert impl.decode(strided) == Message("S", {"a": 1})


# -- encode-side errors ----------------------------------------------------------------------------


def test_payloads_of_many_mib_round_trip(impl: ModuleType) -> None:
    """Large enough for the native codec to split its copies across two threads."""
    blob = bytes(range(256)) * (5 * 4096 + 3)
    text = "ünïcode " * (700 * 1024)
    msg = Message("BIG", {"blob": blob, "text": text, "after": 7})
    data = impl.encode(msg)
    assert data == IMPLS[0].encode(msg)
    back = impl.decode(data)
    assert back["blob"] == blob and back["text"] == text and back["after"] == 7


def test_encode_too_large(impl: ModuleType) -> None:
    msg = Message("BIG", [Field("blob", 0, F.OPAQUE, bytes(MAX_MESSAGE_SIZE))])
    with pytest.raises(rv.MessageTooLarge):
        impl.encode(msg)
    fits = Message(None, [Field("blob", 0, F.OPAQUE, bytes(MAX_MESSAGE_SIZE - 64))])
    assert len(impl.encode(fits)) <= MAX_MESSAGE_SIZE


def test_encode_rejects_unrepresentable_messages(impl: ModuleType) -> None:
    # Message() refuses these itself; assigned afterwards, the codec refuses them.
    msg = Message(None, {"a": 1})
    msg.subject = 5  # type: ignore[assignment]
    with pytest.raises(rv.InvalidArgument, match="subject"):
        impl.encode(msg)
    msg = Message("S")
    msg.reply_subject = b"R"  # type: ignore[assignment]
    with pytest.raises(rv.InvalidArgument, match="reply"):
        impl.encode(msg)
    msg = Message("bad \udc80")
    with pytest.raises(rv.InvalidArgument, match="Unicode"):
        impl.encode(msg)
    msg = Message("S")
    msg.cm = ("x", 1, 0)  # type: ignore[assignment]
    with pytest.raises(rv.InvalidArgument, match="CmLabel"):
        impl.encode(msg)
    with pytest.raises(rv.InvalidArgument):
        impl.encode("not a message")


@pytest.mark.parametrize(
    ("ftype", "bad"),
    [
        (F.U8ARRAY, 256),
        (F.I8ARRAY, -129),
        (F.I32ARRAY, 1.5),
        (F.U64ARRAY, -1),
        (F.I64ARRAY, 2**63),
        (F.F32ARRAY, 1e39),
        (F.F64ARRAY, "x"),
        (F.STRINGARRAY, 5),
        (F.MSGARRAY, "x"),
    ],
)
def test_encode_rejects_lists_changed_in_place(
    impl: ModuleType, ftype: FieldType, bad: Any
) -> None:
    """The lists a message returns must not be mutated; if they are, encode refuses bad elements."""
    msg = Message()
    msg.add(
        "arr",
        [Message()] if ftype is F.MSGARRAY else ["s"] if ftype is F.STRINGARRAY else [1],
        ftype,
    )
    msg["arr"].append(bad)
    with pytest.raises(rv.InvalidArgument, match="'arr'"):
        impl.encode(msg)


# -- decode-side errors ----------------------------------------------------------------------------


def wire(tree: Any) -> bytes:
    """A hand-built wire message: the header and any msgpack tree."""
    return HEADER + msgpack.packb(tree, use_bin_type=True)


def node(fields: list, subject: Any = "S", reply: Any = None, cm: Any = None) -> list:
    return [subject, reply, cm, fields]


def assert_malformed(impl: ModuleType, data: Any, *words: str) -> None:
    with pytest.raises(rv.MalformedMessage) as info:
        impl.decode(data)
    for word in words:
        assert word.lower() in str(info.value).lower(), (word, str(info.value))
    # check() refuses the same input with the same error (the daemon's check of a publish).
    assert check_outcome(impl, data) == (type(info.value).__name__, str(info.value))
    assert subject_outcome(impl, data) == (type(info.value).__name__, str(info.value))


def check_outcome(impl: ModuleType, data: Any) -> tuple[str, str]:
    """What ``impl.check`` does: ("ok", "") or (error class name, its text)."""
    try:
        assert impl.check(data) is None
    except rv.RvError as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


def full_outcome(impl: ModuleType, data: Any) -> tuple[str, str]:
    """What ``impl.decode`` does, in the form of :func:`check_outcome`."""
    try:
        impl.decode(data)
    except rv.RvError as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


def test_valid_hand_built_message(impl: ModuleType) -> None:
    msg = impl.decode(wire(node(["a", 1, int(F.I32), -5, None, 0, int(F.STRING), "x"])))
    assert msg == Message("S", [Field("a", 1, F.I32, -5), Field(None, 0, None, "x")])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", ("header",)),
        (b"\xc1R", ("header",)),
        (b"RVM\x01\x94\xc0\xc0\xc0\x90", ("header",)),
        (HEADER[:-1] + b"\x09" + b"\x94\xc0\xc0\xc0\x90", ("version",)),
        (HEADER, ("truncated",)),
        (HEADER + b"\x94\xc0\xc0\xc0", ("truncated",)),
        (HEADER + b"\x94\xc0\xc0\xc0\x90\x00", ("trailing",)),
        (HEADER + b"\xc1", ()),
        (HEADER + b"\x94\xc0\xc0\xc0\x91", ()),
        (HEADER + b"\xdd\xff\xff\xff\xff", ()),
        (HEADER + b"\x94\xc0\xc0\xc0\xdd\x7f\xff\xff\xfc", ()),
        (HEADER + b"\x94\xc6\xff\xff\xff\xff", ()),
        (HEADER + b"\x94\xdb\xff\xff\xff\xff", ()),
        (HEADER + b"\x94\xa2\xff\xfe\xc0\xc0\x90", ()),
        (HEADER + b"\x94\x80\xc0\xc0\x90", ()),
        (HEADER + b"\x94\xd4\x01\x00\xc0\xc0\x90", ()),
        (HEADER + b"\x94\xc7\x00\xff\xc0\xc0\x90", ()),
    ],
)
def test_decode_low_level_garbage(impl: ModuleType, data: bytes, words: tuple[str, ...]) -> None:
    assert_malformed(impl, data, *words)


@pytest.mark.parametrize(
    ("tree", "words"),
    [
        ("just a string", ("array of 4",)),
        ([None, None, None], ("array of 4",)),
        (node([], subject=5), ("subject",)),
        (node([], reply=b"r"), ("reply",)),
        (node([], cm=["s", 1]), ("origin",)),  # two: [origin, publisher correlation id]
        (node([], cm=["", 1, 0.0]), ("sender",)),
        (node([], cm=["s", -1, 0.0]), ("sequence",)),
        (node([], cm=["s", 1, 0]), ("time_limit",)),
        (node([], cm=["s", 1, -1.0]), ("time_limit",)),
        (node([], cm=["s", 1, math.nan]), ("time_limit",)),
        (node([], cm=["s", 1, math.inf]), ("time_limit",)),
        (node([], cm=b"short"), ("origin", "16")),
        (node([], cm=b"x" * 17), ("origin", "16")),
        (node([], cm=["s", 1, 0.0, b"x" * 15]), ("origin",)),
        (node([], cm=["s", 1, 0.0, "x" * 16]), ("origin",)),
        (node([], cm=["s", 1, 0.0, 5]), ("origin",)),
        (node([], cm=["s", 1, 0.0, b"x" * 16, 0]), ("correlation id",)),
        (node([], cm=["s", 1, 0.0, b"x" * 16, 5, 6]), ("CM label",)),
        (node([], cm=[None, ""]), ("correlation id",)),
        (node([], cm=[b"x" * 16]), ("CM label",)),
        ([None, None, None, {}], ()),
        (node(["a", 0, 8]), ("multiple of 4",)),
        (node(["", 0, 8, "x"]), ("name",)),
        (node([5, 0, 8, "x"]), ("name",)),
        (node(["a", 65536, 8, "x"]), ("field id",)),
        (node(["a", -1, 8, "x"]), ("field id",)),
        (node(["a", True, 8, "x"]), ("field id",)),
        (node(["a", 1.0, 8, "x"]), ("field id",)),
        (node([None, 3, 8, "x"]), ("unnamed",)),
        (node(["a", 3, 8, "x", "b", 3, 8, "y"]), ("duplicate", "'b'")),
        (node(["a", 0, 2, "x"]), ("type code",)),
        (node(["a", 0, 99, "x"]), ("type code",)),
        (node(["a", 0, -1, "x"]), ("type code",)),
        (node(["a", 0, "STRING", "x"]), ("type code",)),
        (node(["a", 0, int(F.STRING), b"x"]), ("STRING",)),
        (node(["a", 0, int(F.OPAQUE), "x"]), ("bin",)),
        (node(["a", 0, int(F.XML), 1]), ("bin",)),
        (node(["a", 0, int(F.BOOL), 1]), ("BOOL",)),
        (node(["a", 0, int(F.I32), True]), ("I32",)),
        (node(["a", 0, int(F.I32), 1.0]), ("I32",)),
        (node(["a", 0, int(F.F64), 1]), ("F64",)),
        (node(["a", 0, int(F.F32), 1.0]), ("F32",)),
        (node(["a", 0, int(F.F32), b"abc"]), ("F32",)),
        (node(["a", 0, int(F.IPADDR32), b"abcde"]), ("IPADDR32",)),
        (node(["a", 0, int(F.IPADDR32), 5]), ("IPADDR32",)),
        (node(["a", 0, int(F.DATETIME), 1_000_000]), ("microseconds",)),
        (node(["a", 0, int(F.DATETIME), 2**63]), ("64-bit",)),
        (node(["a", 0, int(F.DATETIME), "2020"]), ("DATETIME",)),
        (node(["a", 0, int(F.I32ARRAY), b"abcdef"]), ("multiple of 4",)),
        (node(["a", 0, int(F.I32ARRAY), [1, 2]]), ("I32ARRAY",)),
        (node(["a", 0, int(F.STRINGARRAY), ["a", 1]]), ("element 1",)),
        (node(["a", 0, int(F.STRINGARRAY), "a"]), ("STRINGARRAY",)),
        (node(["a", 0, int(F.MSGARRAY), [node([]), 5]]), ("element 1",)),
        (node(["a", 0, int(F.MSGARRAY), node([])]), ()),
        (node(["a", 0, int(F.MSG), [1, 2, 3, 4]]), ("'a'",)),
        (node(["sub", 0, int(F.MSG), node(["x", 0, int(F.U8), 256])]), ("'sub'", "'x'", "U8")),
    ],
)
def test_decode_structural_errors(impl: ModuleType, tree: Any, words: tuple[str, ...]) -> None:
    assert_malformed(impl, wire(tree), *words)


@pytest.mark.parametrize("ftype", list(INT_RANGES))
def test_decode_integer_ranges(impl: ModuleType, ftype: FieldType) -> None:
    lo, hi = INT_RANGES[ftype]
    assert impl.decode(wire(node(["n", 0, int(ftype), lo, "n", 0, int(ftype), hi]))).get_all(
        "n"
    ) == [lo, hi]
    for bad in (lo - 1, hi + 1):
        if -(2**63) <= bad < 2**64:  # beyond that msgpack cannot even carry it
            assert_malformed(impl, wire(node(["n", 0, int(ftype), bad])), ftype.name)


def test_decode_nesting_limit(impl: ModuleType) -> None:
    def nested(levels: int) -> list:
        tree = node([])
        for _ in range(levels):
            tree = node(["d", 0, int(F.MSG), tree])
        return tree

    assert impl.decode(wire(nested(MAX_NESTING_DEPTH)))
    assert_malformed(impl, wire(nested(MAX_NESTING_DEPTH + 1)), "nested deeper")
    # far deeper than msgpack itself allows
    assert_malformed(impl, HEADER + b"\x94\xc0\xc0\xc0\x94" + b"\x91" * 5000 + b"\xc0")


def test_decode_size_limit(impl: ModuleType) -> None:
    with pytest.raises(rv.MessageTooLarge):
        impl.decode(bytes(MAX_MESSAGE_SIZE + 1))


@pytest.mark.parametrize("bad", ["text", 5, None, [1, 2]])
def test_decode_wrong_python_types(impl: ModuleType, bad: Any) -> None:
    assert_malformed(impl, bad)


# -- fuzzing ---------------------------------------------------------------------------------------


def decode_outcome(impl: ModuleType, data: bytes) -> tuple[str, Message | None]:
    """What decoding does: ("ok", message) or (error class name, None). Only RvError may escape."""
    try:
        return "ok", impl.decode(data)
    except rv.RvError as exc:
        return type(exc).__name__, None


def sample_message() -> Message:
    msg = Message("ORDERS.NEW", reply_subject="_INBOX.x")
    msg.cm = CmLabel("sender", 7, 5.0)
    msg.origin = (0x0123456789ABCDEF << 64) | 99
    msg.add("id", 42, F.U32, 1)
    msg.add("px", 1.25, F.F32)
    msg.add("when", DateTime(1700000000, 5))
    msg.add("ip", ipaddress.IPv4Address("10.0.0.1"))
    msg.add("tags", ["a", "b"])
    msg.add("v", [1, -2, 3], F.I16ARRAY)
    msg.add("sub", Message(None, {"x": True, "y": b"zz"}))
    msg.add("subs", [Message(None, {"q": 1.5})])
    return msg


def mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        buf = bytearray(data)
        kind = rng.randrange(5)
        if kind == 0:
            for _ in range(rng.randint(1, 3)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif kind == 1:
            del buf[rng.randrange(len(buf)) :]
        elif kind == 2:
            pos = rng.randrange(len(buf))
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif kind == 3:
            pos = rng.randrange(len(buf))
            del buf[pos : pos + rng.randint(1, 4)]
        else:
            pos = rng.randrange(len(HEADER), len(buf))
            buf[pos] = rng.choice([0xC1, 0xDD, 0xDC, 0xC6, 0xDB, 0x80, 0xD4, 0xFF, 0x00, 0x9F])
        out.append(bytes(buf))
    return out


def test_mutated_encodings_only_raise_rv_errors_and_twins_agree() -> None:
    rng = random.Random(20240501)
    data = IMPLS[0].encode(sample_message())
    for mutated in mutations(data, rng, 1500):
        outcomes = [decode_outcome(impl, mutated) for impl in IMPLS]
        kinds = {kind for kind, _ in outcomes}
        assert kinds <= {"ok", "MalformedMessage"}
        assert len(kinds) == 1, (mutated, outcomes)
        if outcomes[0][0] == "ok":
            decoded = [m for _, m in outcomes]
            assert all(m == decoded[0] for m in decoded)
            assert len({(m.cm, m.origin) for m in decoded}) == 1


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_random_bytes_only_raise_malformed(data: bytes) -> None:
    for impl in IMPLS:
        for candidate in (data, HEADER + data):
            kind, _ = decode_outcome(impl, candidate)
            assert kind in ("ok", "MalformedMessage")


@given(msg=messages(), data=st.data())
@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_random_messages(msg: Message, data: st.DataObject) -> None:
    encoded = IMPLS[0].encode(msg)
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for mutated in mutations(encoded, rng, 10):
        outcomes = [decode_outcome(impl, mutated) for impl in IMPLS]
        assert outcomes[0][0] in ("ok", "MalformedMessage")
        assert all(kind == outcomes[0][0] for kind, _ in outcomes)
        if outcomes[0][0] == "ok":
            assert all(m == outcomes[0][1] for _, m in outcomes)
            assert len({(m.cm, m.origin) for _, m in outcomes}) == 1


def test_decoded_messages_are_independent(impl: ModuleType) -> None:
    data = impl.encode(sample_message())
    first, second = impl.decode(data), impl.decode(data)
    first["tags"] = ["changed"]
    first.add("extra", 1)
    assert second == sample_message()
    assert second.field_by_id(1).value == 42


# -- check(): the decoder's verdict without the Message -----------------------------------------


def subject_outcome(impl: ModuleType, data: Any) -> tuple[str, Any]:
    """What ``impl.check_subject`` does: ("ok", subject) or (error class name, its text)."""
    try:
        return "ok", impl.check_subject(data)
    except rv.RvError as exc:
        return type(exc).__name__, str(exc)


def assert_check_agrees(data: Any) -> None:
    """check() and check_subject() accept what decode() accepts and refuse the rest with
    the same error; check_subject() returns the decoded message's subject."""
    for impl in IMPLS:
        expected = full_outcome(impl, data)
        assert check_outcome(impl, data) == expected, data
        if expected[0] == "ok":
            expected = ("ok", impl.decode(data).subject)
        assert subject_outcome(impl, data) == expected, data
        if isinstance(data, bytes):
            assert subject_outcome(impl, bytearray(data)) == expected, data


def test_check_agrees_with_decode_on_mutated_encodings() -> None:
    rng = random.Random(20261124)
    data = IMPLS[0].encode(sample_message())
    assert_check_agrees(data)
    for mutated in mutations(data, rng, 2000):
        assert_check_agrees(mutated)


@given(msg=messages(), data=st.data())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_check_agrees_with_decode_on_random_messages(msg: Message, data: st.DataObject) -> None:
    encoded = IMPLS[0].encode(msg)
    assert_check_agrees(encoded)
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for mutated in mutations(encoded, rng, 10):
        assert_check_agrees(mutated)


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_check_agrees_with_decode_on_random_bytes(data: bytes) -> None:
    assert_check_agrees(data)
    assert_check_agrees(HEADER + data)


# Trees that look like messages but may break any rule of the format: every part of a
# field (name, id, type code, value) drawn from right and wrong values, values nested.
wire_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=9)
)
wire_values = st.recursive(wire_scalars, lambda inner: st.lists(inner, max_size=5), max_leaves=12)
bad_utf8 = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"])


@st.composite
def message_trees(draw: st.DrawFn, depth: int = 0) -> list[Any]:
    fields: list[Any] = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.text(max_size=4))
        if draw(st.integers(0, 5)) == 0:
            name = draw(st.none() | st.integers(-1, 3) | st.binary(max_size=2))
        fid = draw(st.sampled_from([0, 0, 0, 1, 2, 65535, 65536, -1]))
        code = draw(st.sampled_from([int(t) for t in FieldType] + [2, 99, -1]))
        if code == int(F.MSG) and depth < 2 and draw(st.booleans()):
            value: Any = draw(message_trees(depth + 1))
        elif code == int(F.MSGARRAY) and depth < 2 and draw(st.booleans()):
            value = draw(st.lists(message_trees(depth + 1), max_size=2))
        else:
            value = draw(wire_values)
        fields += [name, fid, code, value]
    if draw(st.integers(0, 9)) == 0:
        fields = fields[: draw(st.integers(0, len(fields)))]  # not a multiple of 4
    # Mostly a good header, so that most trees reach their fields.
    cm: Any = None
    if draw(st.integers(0, 4)) == 0:
        cm = [draw(st.text(max_size=3)), draw(wire_scalars), draw(wire_scalars)]
    elif draw(st.integers(0, 4)) == 0:
        cm = ["s", draw(st.none() | st.integers(0, 2**64 - 1)), draw(st.floats(0, 1e9))]
    subject: Any = draw(st.text(max_size=5))
    if draw(st.integers(0, 9)) == 0:
        subject = draw(st.none() | st.integers(0, 3) | st.binary(max_size=2))
    return [subject, None, cm, fields]


@given(tree=message_trees(), data=st.data())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_check_agrees_with_decode_on_message_like_trees(tree: Any, data: st.DataObject) -> None:
    encoded = wire(tree)
    assert_check_agrees(encoded)
    # Invalid UTF-8 spliced into the strings (names, subjects, values, labels).
    positions = [i for i in range(len(HEADER), len(encoded)) if 0xA1 <= encoded[i] <= 0xBF]
    if positions:
        pos = data.draw(st.sampled_from(positions))
        length = encoded[pos] - 0xA0
        junk = data.draw(bad_utf8)[:length]
        spliced = encoded[: pos + 1] + junk + encoded[pos + 1 + len(junk) :]
        assert_check_agrees(spliced)


# -- short strings decoded lately are reused (native) -----------------------------------


@given(
    texts=st.lists(
        st.text(alphabet="abcé\u00ff.X\U0001f600", min_size=1, max_size=70), min_size=1, max_size=12
    ),
    order=st.lists(st.integers(0, 11), max_size=40),
)
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_decoded_strings_are_right_whatever_was_decoded_before(
    texts: list[str], order: list[int]
) -> None:
    """The native decoder keeps recent short ASCII strings and hands the same str out
    again for the same bytes: strings that share a length and the bytes the cache looks
    at first, non-ASCII ones, and long ones decode to their own value in any order."""
    wires = [Message(f"S.{t}", {t: t, "v": [t, t[:1]]}).to_bytes() for t in texts]
    for k in [*order, *range(len(texts))]:
        k %= len(texts)
        for impl in IMPLS:
            back = impl.decode(wires[k])
            assert back.subject == f"S.{texts[k]}"
            assert back[texts[k]] == texts[k]
            assert back["v"] == [texts[k], texts[k][:1]]


def test_strings_that_share_a_cache_slot_stay_apart() -> None:
    # Same length and same first, middle and last bytes: the same slot of the cache.
    pairs = [("aXbYc", "aZbWc"), ("S.a.b", "S.c.b"), ("q" * 64, "q" * 31 + "r" + "q" * 32)]
    for first, second in pairs:
        wires = [Message(s, {s: s}).to_bytes() for s in (first, second)]
        for _ in range(3):
            for s, wire in zip((first, second), wires, strict=True):
                for impl in IMPLS:
                    back = impl.decode(wire)
                    assert back.subject == s and back[s] == s
