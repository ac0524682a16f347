"""The remote-operation PDU codec: the native and pure twins agree, byte for byte.

``rvasync_native.ropspdu`` writes and reads the usual PDU in C and hands
everything else to ``rvasync.fallback.ropspdu``. These properties run both
twins on random PDUs (valid ones, and ones with values of the wrong type or
range), on their encodings, on mutations of the encodings and on random
bytes, and require the same bytes, the same PDU (fields, and the enum
members themselves) or the same error (class and text).
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync import _accel
from rvasync.protocol.rops.pdu import decode_pdu, encode_pdu
from rvasync.protocol.rops.pdutypes import Kind, Pdu, PduError, VerifyStatus

IMPLS = _accel.implementations("ropspdu")
PURE = IMPLS[0]
needs_native = pytest.mark.skipif(len(IMPLS) < 2, reason="rvasync_native.ropspdu is not built")

texts = st.one_of(
    st.sampled_from(["", "A", "BENCH_INVOKER", "a1b2c3d4e5f6a7b8.12", "é", "\ud800", "x" * 40]),
    st.text(max_size=12),
    st.text(min_size=250, max_size=300),
)
valid_texts = st.one_of(
    st.sampled_from(["", "A", "BENCH_INVOKER", "a1b2c3d4e5f6a7b8.12", "é", "x" * 40]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=250, max_size=300),
)
ints = st.one_of(st.integers(-3, 140), st.sampled_from([2, 3, 127, 128, 2**40, -(2**70)]))
kinds = st.one_of(st.sampled_from(list(Kind)), ints, st.booleans())
statuses = st.one_of(st.none(), st.sampled_from(list(VerifyStatus)), ints, st.booleans())
bodies = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"x" * 255, b"x" * 256, b"x" * 70000]),
    st.binary(max_size=8).map(bytearray),
    st.text(max_size=4),
)
ack_lists = st.one_of(
    st.lists(st.sampled_from(["i.1", "i.2", "é.3", "x" * 40]), max_size=20).map(tuple),
    st.lists(st.text(max_size=5), max_size=4),
    st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=3).map(tuple),
)


@st.composite
def pdus(draw: Any, valid: bool = False) -> Pdu:
    if valid:
        kind = draw(st.sampled_from(list(Kind)))
        needs_status = kind in (Kind.VERIFY_REPLY, Kind.RVERIFY_REPLY)
        return Pdu(
            kind,
            draw(valid_texts.filter(bool)),
            draw(valid_texts.filter(bool)),
            draw(valid_texts),
            draw(st.sampled_from([2, 3])),
            draw(st.binary(max_size=300)),
            draw(valid_texts),
            draw(st.booleans()),
            draw(valid_texts),
            draw(
                st.sampled_from(list(VerifyStatus))
                if needs_status
                else st.one_of(st.none(), st.sampled_from(list(VerifyStatus)))
            ),
            draw(st.lists(valid_texts.filter(bool), max_size=17).map(tuple)),
        )
    return Pdu(
        draw(kinds),
        draw(texts),
        draw(texts),
        draw(texts),
        draw(st.one_of(st.sampled_from([2, 3]), ints, st.booleans())),
        draw(bodies),
        draw(texts),
        draw(st.one_of(st.booleans(), st.integers(0, 1))),
        draw(texts),
        draw(statuses),
        draw(ack_lists),
    )


def _outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(arg)
    except Exception as exc:
        return "error", (type(exc), str(exc))


def _same_pdu(a: Pdu, b: Pdu) -> None:
    assert a == b
    assert a.kind is b.kind and a.status is b.status
    for name in Pdu.__dataclass_fields__:
        assert type(getattr(a, name)) is type(getattr(b, name)), name


def _agree_on_decode(data: bytes) -> None:
    results = [_outcome(impl.decode, data) for impl in IMPLS]
    first = results[0]
    for other in results[1:]:
        assert first[0] == other[0], (data, results)
        if first[0] == "ok":
            _same_pdu(first[1], other[1])
        else:
            assert first[1] == other[1]
            assert first[1][0] is PduError


@needs_native
@settings(max_examples=200, deadline=None)
@given(pdus())
def test_twins_encode_alike(pdu: Pdu) -> None:
    results = [_outcome(impl.encode, pdu) for impl in IMPLS]
    assert results[0] == results[1]
    if results[0][0] == "ok":
        _agree_on_decode(results[0][1])


@settings(max_examples=150, deadline=None)
@given(pdus(valid=True))
def test_round_trip(pdu: Pdu) -> None:
    for impl in IMPLS:
        data = impl.encode(pdu)
        back = impl.decode(data)
        _same_pdu(back, pdu)
        assert PURE.decode(data) == pdu
    # The form is msgpack's: another msgpack reader sees the documented items.
    items = msgpack.unpackb(encode_pdu(pdu))
    assert items[:3] == [1, int(pdu.kind), pdu.src]
    assert len(items) == (12 if pdu.acks else 11)
    _same_pdu(decode_pdu(encode_pdu(pdu)), pdu)


@needs_native
@settings(max_examples=200, deadline=None)
@given(pdus(valid=True), st.data())
def test_twins_decode_mutations_alike(pdu: Pdu, data: Any) -> None:
    raw = bytearray(PURE.encode(pdu))
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["flip", "cut", "insert", "append"]))
        at = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if how == "flip" and raw:
            raw[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del raw[at:]
        elif how == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        else:
            raw += data.draw(st.binary(min_size=1, max_size=3))
    _agree_on_decode(bytes(raw))


@needs_native
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=60))
def test_twins_decode_random_bytes_alike(data: bytes) -> None:
    _agree_on_decode(data)


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-2, 300),
            st.text(max_size=4),
            st.binary(max_size=4),
            st.booleans(),
            st.none(),
            st.lists(st.text(max_size=2), max_size=2),
            st.floats(allow_nan=False),
        ),
        min_size=10,
        max_size=13,
    )
)
def test_twins_decode_arrays_of_anything_alike(items: list[Any]) -> None:
    """msgpack arrays of the right length with values of any type (and any int encoding)."""
    _agree_on_decode(msgpack.packb(items, use_bin_type=True))
    if len(items) >= 11:
        items[0] = 1
        _agree_on_decode(msgpack.packb(items, use_bin_type=True))


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__)
def test_errors_name_the_problem(impl: Any) -> None:
    good = [1, 1, "A", "A.1", "op", 2, b"", "", False, "", 0]

    def packed(**changes: Any) -> bytes:
        items = list(good)
        for index, value in changes.items():
            items[int(index[1:])] = value
        return msgpack.packb(items, use_bin_type=True)

    cases = {
        b"\xc1": "not msgpack",
        msgpack.packb([1, 2]): "not an 11- or 12-item array",
        packed(i0=2): "unknown wire version",
        packed(i1=9): "unknown kind",
        packed(i2=""): "empty sender",
        packed(i5=4): "handshake must be 2 or 3",
        packed(i6="x"): "body is not bytes",
        packed(i8=1): "transient is not a bool",
        packed(i10=9): "unknown verify status",
        packed(i1=6): "a verify reply without a status",
        msgpack.packb([*good, ["ok", ""]], use_bin_type=True): "acks is not a list",
    }
    for data, words in cases.items():
        with pytest.raises(PduError, match=words):
            impl.decode(data)


def test_the_selected_codec_is_a_twin() -> None:
    assert encode_pdu.__module__ in {impl.__name__ for impl in IMPLS}
    if _accel.pure_forced():
        assert encode_pdu.__module__ == "rvasync.fallback.ropspdu"


@settings(max_examples=100, deadline=None)
@given(pdus())
def test_new_makes_the_same_pdu_as_the_class(pdu: Pdu) -> None:
    fields = [getattr(pdu, name) for name in Pdu.__dataclass_fields__]
    for impl in IMPLS:
        made = impl.new(*fields)
        assert type(made) is Pdu
        for name, value in zip(Pdu.__dataclass_fields__, fields, strict=True):
            assert getattr(made, name) is value
        assert made == pdu
