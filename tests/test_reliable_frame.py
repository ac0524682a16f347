"""The rmframe hot path: round trips, validation, and parity between the pure and native twins."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync import _accel, _rmwire

IMPLEMENTATIONS = _accel.implementations("rmframe")
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda m: m.__name__.split(".")[0])
def frame(request):
    return request.param


def test_wire_constants_have_one_definition(frame):
    """Both twins take the format's numbers from rvasync._rmwire (as the core does)."""
    exported = [name for name in _rmwire.__all__ if hasattr(frame, name)]
    assert len(exported) >= 24
    for name in exported:
        assert getattr(frame, name) == getattr(_rmwire, name), name


def pack(frame, max_datagram, payloads, session=9, stream=3, flags=0):
    packer = frame.Packer(max_datagram, session, stream, flags)
    packer.age_ms = 1234
    states = []
    for payload in payloads:
        packer.add(payload)
        states.append((packer.seq, packer.msg_next, packer.head_msg, packer.head_cont))
    packer.flush()
    return packer.take(), states


def unpack(frame, datagrams):
    """Reassemble the message stream from parsed datagrams (no loss)."""
    out, partial = [], None
    for data in datagrams:
        p = frame.parse(data)
        assert p is not None and p[0] == frame.T_DATA
        payloads, head, tail = p[10], p[7], p[8]
        start, stop = 0, len(payloads)
        if head in (frame.K_MIDDLE, frame.K_LAST):
            partial.append(payloads[0])
            start = 1
            if head == frame.K_LAST:
                out.append(b"".join(partial))
                partial = None
        if tail == frame.K_FIRST:
            stop -= 1
            partial = [payloads[-1]]
            assert p[9] > len(payloads[-1])
        out.extend(payloads[start:stop])
    assert partial is None
    return out


sizes = st.lists(
    st.one_of(st.integers(0, 100), st.integers(100, 3000), st.integers(3000, 20000)),
    min_size=1,
    max_size=25,
)


@SETTINGS
@given(sizes=sizes, max_datagram=st.sampled_from([256, 300, 1400, 8000, 65507]))
def test_pack_and_parse_round_trip(frame, sizes, max_datagram):
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    datagrams, _ = pack(frame, max_datagram, payloads)
    assert all(len(d) <= max_datagram for d in datagrams)
    assert unpack(frame, datagrams) == payloads
    seqs = [frame.parse(d)[3] for d in datagrams]
    assert seqs == list(range(1, len(datagrams) + 1))
    for d in datagrams:
        seq, msg, cont = frame.data_info(d)
        p = frame.parse(d)
        assert (seq, msg, cont) == (p[3], p[4], p[7] in (frame.K_MIDDLE, frame.K_LAST))
        assert p[1:3] == (9, 3) and p[5] == 1234


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="native rmframe not built")
@SETTINGS
@given(sizes=sizes, max_datagram=st.sampled_from([256, 1400, 8000]), flags=st.integers(0, 1))
def test_native_packer_builds_the_same_bytes(sizes, max_datagram, flags):
    payloads = [bytes(range(256))[: n % 256] * (n // 256 + 1) for n in sizes]
    pure, native = IMPLEMENTATIONS
    assert pack(pure, max_datagram, payloads, flags=flags) == pack(
        native, max_datagram, payloads, flags=flags
    )


def _packer_state(packer):
    return (packer.seq, packer.msg_next, packer.head_msg, packer.head_cont, packer.age_ms)


@SETTINGS
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["seal_one", "add", "flush"]), st.integers(0, 1500)),
        min_size=1,
        max_size=30,
    ),
    age=st.integers(0, 2**32 - 1),
)
def test_seal_one_is_add_flush_take_of_a_lone_message(frame, steps, age):
    """``seal_one`` makes the very datagram add + flush + take would, when the packer is
    empty and the message fits; otherwise it returns None and changes nothing."""
    fast = frame.Packer(1400, 9, 3)
    slow = frame.Packer(1400, 9, 3)
    for i, (op, size) in enumerate(steps):
        payload = bytes([i % 251]) * size
        if op == "seal_one":
            before = _packer_state(fast)
            closed = slow.take()  # the same closed datagrams wait in ``fast``
            waiting = fast.pending or bool(closed)
            got = fast.seal_one(payload, age)
            if not waiting and size + 4 <= 1400 - frame.DATA_HEADER:
                slow.age_ms = age
                slow.add(payload)
                slow.flush()
                assert [got] == slow.take()
                assert frame.parse(got)[10] == [payload]
            else:
                assert got is None
                assert _packer_state(fast) == before
                assert fast.take() == closed
                fast.add(payload)  # the caller's longer way
                slow.add(payload)
        elif op == "add":
            fast.add(payload)
            slow.add(payload)
        else:
            fast.flush()
            slow.flush()
        assert _packer_state(fast)[:4] == _packer_state(slow)[:4]
    fast.flush()
    slow.flush()
    assert fast.take() == slow.take()


def test_seal_one_refuses_when_something_waits(frame):
    packer = frame.Packer(1400, 9, 3)
    packer.add(b"open record")
    assert packer.seal_one(b"x", 5) is None, "an open record goes first"
    packer.flush()
    assert packer.seal_one(b"x", 5) is None, "a closed datagram not yet taken goes first"
    assert len(packer.take()) == 1
    assert packer.seal_one(b"x" * 1400, 5) is None, "needs more than one datagram"
    datagram = packer.seal_one(b"x", 5)
    assert frame.parse(datagram)[3:6] == (2, 2, 5)


def reseal(buf: bytes) -> bytes:
    return buf[:2] + struct.pack("<I", zlib.crc32(buf[6:])) + buf[6:]


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="native rmframe not built")
@SETTINGS
@given(seed=st.integers(0, 2**32), resealed=st.booleans())
def test_native_parse_agrees_on_mutated_input(seed, resealed):
    pure, native = IMPLEMENTATIONS
    rng = random.Random(seed)
    datagrams, _ = pack(pure, 300, [bytes(rng.randrange(0, 700)) for _ in range(4)])
    datagrams.append(pure.build_heartbeat(5, 0, [(0, 1, 2, 3, 4, 5, 6), (7, 0, 0, 1, 1, 0, 1)]))
    datagrams.append(pure.build_nak(5, 6, 7, [(1, 2), (10, 3)]))
    for data in datagrams:
        buf = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] = rng.choice([0, 1, 2, 3, 0x40, 0x80, 0xC0, 0xFF, rng.randrange(256)])
        if rng.random() < 0.3:
            del buf[rng.randrange(len(buf)) :]
        mutated = bytes(buf)
        if resealed and len(mutated) >= 6:
            mutated = reseal(mutated)
        assert pure.parse(mutated) == native.parse(mutated)
        assert pure.parse(data) == native.parse(data)


def test_heartbeat_and_nak_round_trip(frame):
    entries = [(0, 5, 10, 3, 7, 9, 12), (4, 0, 2**32 - 1, 1, 1, 0, 1)]
    assert frame.parse(frame.build_heartbeat(2**64 - 1, 1, entries)) == (
        frame.T_HEARTBEAT,
        2**64 - 1,
        1,
        entries,
    )
    ranges = [(1, 1), (2**63, 2**32 - 1)]
    assert frame.parse(frame.build_nak(3, 4, 5, ranges)) == (frame.T_NAK, 3, 4, 5, ranges)


@pytest.mark.parametrize(
    "entry",
    [
        (0, 0, 0, 0, 1, 5, 1),  # low 0
        (0, 0, 0, 7, 1, 5, 1),  # low beyond last + 1
        (0, 0, 0, 1, 0, 5, 1),  # message index 0
        (0, 0, 0, 1, 5, 5, 4),  # next message before low's
        (0, 0, 0, 1, 1, 2**64 - 1, 1),  # no room after last
    ],
)
def test_inconsistent_heartbeats_are_malformed(frame, entry):
    assert frame.parse(frame.build_heartbeat(1, 0, [entry])) is None


def test_layout_violations_are_malformed(frame):
    good, _ = pack(frame, 300, [b"a" * 10, b"b" * 500])
    assert frame.parse(good[0]) is not None

    def data_with(records: bytes, seq: int = 1, msg: int = 1) -> bytes:
        header = struct.pack("<2sIBBQIQQIB", b"\xd2R", 0, 1, 1, 1, 0, seq, msg, 0, 0)
        return reseal(header + records)

    def rec(kind, payload, total=None):
        word = struct.pack("<I", kind << 30 | len(payload))
        return word + (struct.pack("<I", total) if total is not None else b"") + payload

    whole, first = rec(0, b"xy"), rec(1, b"ab", 10)
    middle, last = rec(2, b"cd"), rec(3, b"ef")
    assert frame.parse(data_with(whole + whole + first))[7:10] == (0, 1, 10)
    assert frame.parse(data_with(last + whole))[7:9] == (3, 0)
    assert frame.parse(data_with(middle))[7:9] == (2, 2)
    for bad in (
        first + whole,  # nothing may follow a FIRST
        middle + whole,  # a MIDDLE is alone
        whole + last,  # continuations come first
        whole + middle,
        rec(1, b"ab", 2),  # FIRST chunk not shorter than its total
        rec(1, b"ab", 64 * 1024 * 1024 + 1),  # declared total over 64 MiB
        rec(3, b""),  # empty continuation
        whole[:-1],  # truncated payload
        whole + b"\x01\x00",  # truncated record header
        b"",  # no records
    ):
        assert frame.parse(data_with(bad)) is None, bad
    assert frame.parse(data_with(whole, seq=0)) is None
    assert frame.parse(data_with(whole, msg=0)) is None
    assert frame.parse(good[0][:-1]) is None, "CRC mismatch"
    assert frame.parse(b"\xd3" + good[0][1:]) is None
    for weird in (None, 5, "text", b"", bytearray(good[0]), memoryview(good[0])):
        result = frame.parse(weird)
        assert result is None or result == frame.parse(good[0])


def test_packer_rejects_bad_sizes(frame):
    for size in (frame.MIN_DATAGRAM - 1, frame.MAX_DATAGRAM + 1):
        with pytest.raises(ValueError, match="max_datagram"):
            frame.Packer(size, 1, 0)
    packer = frame.Packer(1000, 1, 0)
    assert not packer.pending
    packer.add(bytearray(b"abc"))
    packer.add(memoryview(b"defg"))
    packer.add_many([b"", b"h"])
    assert packer.pending and packer.msg_next == 5
    packer.flush()
    assert frame.parse(packer.take()[0])[10] == [b"abc", b"defg", b"", b"h"]
    assert packer.take() == []


@SETTINGS
@given(data=st.binary(min_size=2, max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=6))
def test_assembly_rebuilds_the_message_from_its_fragments(frame, data, cuts):
    bounds = sorted({min(c, len(data) - 1) for c in cuts} | {1})
    chunks = [data[a:b] for a, b in zip(bounds, [*bounds[1:], len(data)], strict=True)]
    asm = frame.Assembly(len(data), data[: bounds[0]])
    for chunk in chunks:
        with pytest.raises(ValueError, match="incomplete"):
            asm.result()
        assert asm.add(memoryview(chunk) if len(chunk) % 2 else chunk)
    assert (asm.size, asm.total) == (len(data), len(data))
    assert asm.result() == data
    assert type(asm.result()) is bytes


def test_assembly_refuses_overflow_and_impossible_sizes(frame):
    asm = frame.Assembly(10, b"abc")
    assert not asm.add(b"12345678")
    assert asm.size == 3
    assert asm.add(b"1234567")
    assert not asm.add(b"x")
    assert asm.result() == b"abc1234567"
    for total, first in ((3, b"abc"), (0, b""), (frame.MAX_MESSAGE + 1, b"a")):
        with pytest.raises(ValueError, match="fragmented message"):
            frame.Assembly(total, first)


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 120_000), min_size=1, max_size=6),
    max_datagram=st.sampled_from([16_500, 20_000, 65507]),
)
def test_middle_fragments_are_gathered_views_of_the_message(frame, sizes, max_datagram):
    payloads = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    datagrams, _ = pack(frame, max_datagram, payloads)
    # Header fields are readable before a Gathered datagram computes its CRC (on first
    # use of .parts), and the CRC it then computes is the one parse verifies.
    info = [frame.data_info(d) for d in datagrams]
    flat = [bytes(d) for d in datagrams]
    assert info == [frame.data_info(f) for f in flat]
    assert [len(d) for d in datagrams] == [len(d) for d in flat]
    assert all(len(d) <= max_datagram for d in flat)
    assert unpack(frame, flat) == payloads
    for d, f in zip(datagrams, flat, strict=True):
        assert frame.data_info(d) == frame.data_info(f)
        if type(d) is not bytes:
            header, chunk = d.parts
            assert type(header) is bytes and chunk.readonly
            assert d.parts[0] is header, "sealed once"
            assert frame.parse(f)[7] == frame.K_MIDDLE
    whole_room = max_datagram - frame.DATA_HEADER - 4
    if whole_room >= frame.GATHER_MIN and any(n > 3 * whole_room for n in sizes):
        assert any(type(d) is not bytes for d in datagrams)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="native rmframe not built")
def test_native_and_pure_gather_the_same_datagrams():
    payloads = [b"a" * 10, bytes(range(256)) * 900, b"z" * 3]
    pure, native = ([bytes(d) for d in pack(f, 20_000, payloads)[0]] for f in IMPLEMENTATIONS)
    assert pure == native


def test_mutable_payloads_are_copied_not_gathered(frame):
    payload = bytearray(b"m" * 100_000)
    packer = frame.Packer(20_000, 1, 0)
    packer.add(payload)
    packer.flush()
    datagrams = packer.take()
    payload[:] = b"x" * len(payload)
    assert all(type(d) is bytes for d in datagrams)
    assert unpack(frame, datagrams) == [b"m" * 100_000]
