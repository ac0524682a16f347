"""Building messages: the native and pure twins of ``Message.__init__`` / ``Message.add`` agree.

``rvasync_native.msgbuild`` stores the usual field (plain ASCII name, a str,
int, float, bool or bytes value, no type, no id) itself and hands everything
else to the Python checks; ``rvasync.fallback.msgbuild`` always runs the
checks. These properties build the same message through both from random
subjects, dicts and ``add`` calls -- valid and invalid -- and require the
same fields (name, id, type, value and the value's Python type) or the same
error (class and text).
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync import _accel
from rvasync.fieldtypes import FieldType

IMPLS = _accel.implementations("msgbuild")
_new = object.__new__


class Colour(enum.IntEnum):
    RED = 1


names = st.one_of(
    st.sampled_from(["payload", "n", "x", "_reserved", "", "é", "a_b", "_", "Ünïcode"]),
    st.text(max_size=6),
    st.none(),
    st.integers(-2, 2),
)
ints = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, -(2**64), 2**63 - 1, -(2**63), 0]),
    st.integers(),
)
values = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["\ud800", "ascii", "", "é"]),
    ints,
    st.floats(allow_nan=False),
    st.booleans(),
    st.binary(max_size=16),
    st.binary(max_size=8).map(bytearray),
    st.none(),
    st.lists(st.integers(-5, 5), max_size=3),
    st.lists(st.text(max_size=3), max_size=3),
    st.just(Colour.RED),
    st.just(object()),
    # A dict becomes a nested message: keys and values are checked as Message(None, d) does.
    st.recursive(
        st.dictionaries(
            st.one_of(st.sampled_from(["a", "_b", "", "n"]), st.integers(0, 1)),
            st.one_of(st.integers(-3, 3), st.text(max_size=3), st.just(object())),
            max_size=3,
        ),
        lambda inner: st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2),
        max_leaves=4,
    ),
    st.lists(st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3)), max_size=2),
)
subjects = st.one_of(st.none(), st.sampled_from(["ORDERS.X", "a.b", ""]), st.integers(0, 1))


def outcome(build: Any) -> tuple[str, Any]:
    """What building gave: the fields (with their values' Python types), or the error."""
    try:
        msg = build()
    except Exception as exc:  # the error itself (class and text) is what is compared
        return ("error", (type(exc), str(exc)))
    fields = [(f.name, f.id, f.type, type(f.type), f.value, type(f.value)) for f in msg]
    return ("ok", (msg.subject, msg.reply_subject, msg.cm, msg.origin, fields, len(msg)))


def built(impl: Any, subject: Any, fields: Any, reply: Any = None) -> rv.Message:
    msg = _new(rv.Message)
    impl.init(msg, subject, fields, reply_subject=reply)
    return msg


def twins_agree(build: Any) -> tuple[str, Any]:
    results = [outcome(lambda impl=impl: build(impl)) for impl in IMPLS]
    assert all(result == results[0] for result in results[1:]), results
    return results[0]


@settings(max_examples=150, deadline=None)
@given(
    subject=subjects,
    reply=st.one_of(st.none(), st.just("R.1"), st.just(3)),
    items=st.lists(st.tuples(names, values), max_size=6),
)
def test_init_from_dict_same_in_both_twins(subject, reply, items):
    fields = dict(items)
    twins_agree(lambda impl: built(impl, subject, fields, reply))


@settings(max_examples=100, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            names,
            values,
            st.one_of(st.none(), st.sampled_from([FieldType.I64, FieldType.STRING, 20, 8, 999])),
            st.one_of(st.just(0), st.integers(-1, 3), st.just(False), st.just(70000)),
        ),
        max_size=6,
    ),
    share=st.booleans(),
)
def test_add_same_in_both_twins(calls, share):
    def build(impl: Any) -> rv.Message:
        msg = built(impl, "A.B", {"first": 1})
        other = msg.copy() if share else None
        for name, value, ftype, field_id in calls:
            try:
                impl.add(msg, name, value, ftype, field_id)
            except (rv.InvalidArgument, rv.ConversionError):
                continue  # a refused field is not added; the rest goes on
        if other is not None:  # the copy made before the adds is untouched
            assert [(f.name, f.value) for f in other] == [("first", 1)]
        return msg

    twins_agree(build)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__.split(".")[0])
def test_every_slot_is_set_on_a_new_message(impl):
    """The native twin writes slots at their offsets: none may be left unset."""
    msg = built(impl, "A.B", {"n": 1}, "R.1")
    for slot in rv.Message.__slots__:
        getattr(msg, slot)  # AttributeError if a slot was left unset
    assert msg.origin is None and msg.cm is None and msg.listener is None


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__.split(".")[0])
def test_usual_fields_get_the_inferred_types(impl):
    msg = built(
        impl,
        "ORDERS.X",
        {"payload": b"x" * 128, "n": 7, "px": 1.5, "ok": True, "sym": "RV"},
    )
    types = {f.name: f.type for f in msg}
    assert types == {
        "payload": FieldType.OPAQUE,
        "n": FieldType.I64,
        "px": FieldType.F64,
        "ok": FieldType.BOOL,
        "sym": FieldType.STRING,
    }


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__.split(".")[0])
def test_bad_input_names_the_problem(impl):
    with pytest.raises(rv.InvalidArgument, match="reserved"):
        built(impl, "A", {"_x": 1})
    with pytest.raises(rv.InvalidArgument, match="subject must be a str"):
        built(impl, 5, None)
    with pytest.raises(rv.InvalidArgument, match="out of range"):
        built(impl, "A", {"n": 2**70})
    with pytest.raises(rv.ConversionError):
        built(impl, "A", {"n": None})


def test_message_uses_the_selected_twin():
    selected = _accel.load("msgbuild")
    assert rv.Message.__init__ is selected.init
    assert rv.Message.add is selected.add
    assert rv.Message.delivery_copy is selected.delivery_copy


@settings(max_examples=100, deadline=None)
@given(
    subject=st.sampled_from(["A.B", "_INBOX.x.1"]),
    reply=st.one_of(st.none(), st.just("R.1")),
    items=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 9)), max_size=4),
    changes=st.lists(st.tuples(st.booleans(), st.integers(10, 19)), max_size=4),
)
def test_delivery_copy_same_in_both_twins(subject, reply, items, changes):
    """Every slot of the copy is set as the Python body sets it, and copy-on-write holds.

    Each step adds a field to the original or to the copy: the other side keeps
    exactly what it had, in both twins.
    """

    def build(impl: Any) -> tuple[Any, ...]:
        original = built(impl, subject, dict(items), reply)
        original.cm = None
        original.origin = 2**100 + len(items)
        listener, closure = object(), ("closure",)
        copy = impl.delivery_copy(original, listener, closure)
        slots = {name: getattr(copy, name) for name in rv.Message.__slots__}  # unset: raises
        assert slots["listener"] is listener and slots["closure"] is closure
        assert copy.origin == original.origin  # the same publication
        assert copy.subject == subject and copy.reply_subject == reply and copy.cm is None
        assert type(copy) is rv.Message and copy._shared and original._shared
        before = [(f.name, f.value) for f in original]
        expected_original, expected_copy = list(before), list(before)
        for on_copy, value in changes:
            (copy if on_copy else original).add("n", value)
            (expected_copy if on_copy else expected_original).append(("n", value))
        assert [(f.name, f.value) for f in original] == expected_original
        assert [(f.name, f.value) for f in copy] == expected_copy
        return (copy.subject, copy.reply_subject, expected_copy, expected_original)

    results = [build(impl) for impl in IMPLS]
    assert all(result == results[0] for result in results[1:])


def test_round_trip_of_a_built_message():
    msg = rv.Message("ORDERS.X", {"payload": b"x" * 128, "n": 3, "s": "é", "f": 0.5})
    msg.add("flag", False)
    assert rv.Message.from_bytes(msg.to_bytes()) == msg


class Stamped(rv.Message):
    """A Message subclass: ``Origins.stamp`` takes the attribute path for it."""

    __slots__ = ()


@settings(max_examples=200, deadline=None)
@given(
    publisher=st.one_of(
        st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**26 - 1, 2**26, 2**56, 2**64 - 1])
    ),
    sequence=st.one_of(
        st.integers(0, 2**64 - 1),
        st.sampled_from([0, 1, 2**30 - 1, 2**60 - 1, 2**60, 2**64 - 3, 2**64 - 1]),
    ),
    steps=st.lists(st.sampled_from(["stamp", "next", "subclass", "copy"]), max_size=6),
)
def test_origins_same_in_both_twins(publisher, sequence, steps):
    """Both twins give the same origins from the same start, in the same order, the
    sequence carrying into the id after 2**64 - 1; ``stamp`` writes the origin in place
    and marks the message shared (a plain Message or a subclass), ``next`` touches
    nothing, and a delivery copy keeps the stamped origin."""

    def run(impl: Any) -> list[Any]:
        origins = impl.Origins(publisher, sequence)
        out: list[Any] = [repr(origins)]
        for step in steps:
            if step == "next":
                try:
                    out.append(origins.next())
                except rv.InvalidArgument as exc:
                    out.append(str(exc))
                continue
            msg = (Stamped if step == "subclass" else rv.Message)("S.X", {"n": 1})
            assert msg.origin is None and not msg._shared
            try:
                origins.stamp(msg)
            except rv.InvalidArgument as exc:
                assert msg.origin is None and not msg._shared  # untouched
                out.append(str(exc))
                continue
            assert msg._shared and type(msg.origin) is int
            if step == "copy":
                assert msg.delivery_copy(None, None).origin == msg.origin
            out.append(msg.origin)
        out.append(repr(origins))
        return out

    results = [run(impl) for impl in IMPLS]
    assert all(result == results[0] for result in results[1:])
    value = (publisher << 64) + sequence
    expected = [
        o if o < 2**128 else "no origin left: 2**128 - 1 was the last"
        for o in range(value, value + len(steps))
    ]
    assert results[0][1:-1] == expected


@given(
    sequence=st.sampled_from([0, 1, 63, 64, 2**64 - 70, 2**64 - 1]),
    tick=st.sampled_from([0, 1, 2, 64, 1024]),
)
def test_stamp_says_every_tick_th_origin_in_both_twins(sequence, tick):
    """``stamp`` returns True when the origin it wrote has a low half that is a multiple
    of ``tick`` (the send pacer's look, rvasync.sendpace), never with tick 0."""

    def run(impl: Any) -> list[bool]:
        origins = impl.Origins(7, sequence, tick=tick)
        return [origins.stamp(rv.Message("S.X", {})) for _ in range(130)]

    results = [run(impl) for impl in IMPLS]
    assert all(result == results[0] for result in results[1:])
    lows = [(sequence + i) % 2**64 for i in range(130)]
    assert results[0] == [bool(tick) and low % tick == 0 for low in lows]


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__)
def test_origins_refuse_a_bad_tick(impl):
    for tick in (-1, 3, 96, 2**63, 1.0, None):
        with pytest.raises(rv.InvalidArgument, match="tick"):
            impl.Origins(1, 1, tick=tick)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__)
def test_origins_refuse_a_bad_start(impl):
    for publisher in (-1, 2**64, 1.0, "1", None, True):
        with pytest.raises(rv.InvalidArgument, match="publisher id"):
            impl.Origins(publisher)
    for sequence in (-1, 2**64, 2.0, None):
        with pytest.raises(rv.InvalidArgument, match="sequence"):
            impl.Origins(1, sequence)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__)
def test_a_stamped_origin_round_trips(impl):
    origins = impl.Origins(0xFEDCBA9876543210, 2**64 - 1)
    msg = rv.Message("S.X", {"n": 1})
    origins.stamp(msg)
    assert (
        rv.Message.from_bytes(msg.to_bytes()).origin
        == msg.origin
        == ((0xFEDCBA9876543210 << 64) | (2**64 - 1))
    )
    origins.stamp(msg)  # the next: the count carries into the id
    assert msg.origin == 0xFEDCBA9876543211 << 64
