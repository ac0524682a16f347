"""Hostile input: receive_datagram never raises, counts what it drops, and stays bounded."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simnet import Ledger, SimNet

from rvasync import _accel
from rvasync.protocol.reliable import ReliableEndpoint
from rvasync.protocol.reliable_events import Delivered

FUZZ_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(params=_accel.implementations("rmframe"), ids=lambda m: m.__name__.split(".")[0])
def frame(request):
    return request.param


def reseal(data: bytes) -> bytes:
    """Recompute the CRC so a mutated datagram passes the checksum (a forgery)."""
    body = bytes(data[6:])
    return bytes(data[:2]) + struct.pack("<I", zlib.crc32(body)) + body


def corpus(frame) -> list[bytes]:
    """Valid datagrams of every kind from a short lossy exchange (data, heartbeats, NAKs)."""
    net = SimNet(seed=42, loss=0.3)
    for i, name in enumerate("ab"):
        net.add(name, ReliableEndpoint(now=0.0, session_id=i + 1, frame=frame, max_datagram=600))
    captured: list[bytes] = []
    net.drop = lambda data, src, dest: captured.append(data) and False
    ledger = Ledger(net)
    for size in (20, 50, 1500, 30, 2000, 17, 90):
        ledger.multicast("a", size)
        ledger.ptp("a", "b", size)
        ledger.multicast("b", size)
    net.run_for(2.0)
    kinds = {d[7] for d in captured}
    assert kinds == {1, 2, 3}, "the corpus must hold data, heartbeats and NAKs"
    return captured


def fresh(frame, **options) -> ReliableEndpoint:
    ep = ReliableEndpoint(now=0.0, session_id=77, frame=frame, **options)
    ep.handle_timer(0.0)
    ep.datagrams_to_send()
    return ep


def still_works(ep: ReliableEndpoint, frame) -> None:
    """After any abuse, a genuine new sender is still received normally."""
    sender = ReliableEndpoint(now=ep._now, session_id=999, frame=frame)
    sender.send_multicast(b"genuine")
    sender.flush(ep._now)
    for data, _ in sender.datagrams_to_send():
        ep.receive_datagram(data, "genuine-src", ep._now)
    events = [e for e in ep.events() if isinstance(e, Delivered) and e.session == 999]
    got = [p for e in events for p in e.payloads]
    assert got == [b"genuine"]


@FUZZ_SETTINGS
@given(blobs=st.lists(st.binary(max_size=200), min_size=1, max_size=20))
def test_random_bytes_are_dropped_and_counted(frame, blobs):
    ep = fresh(frame)
    for blob in blobs:
        ep.receive_datagram(blob, "x", 1.0)
    assert ep.stats.malformed == len(blobs)
    assert ep.stats.internal_errors == 0
    assert ep.events() == []


@pytest.fixture(scope="module")
def valid_corpus():
    return {m.__name__: corpus(m) for m in _accel.implementations("rmframe")}


MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "truncate", "extend", "splice"]),
        st.integers(0, 2**32),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, steps, *, keep_crc: bool) -> bytes:
    buf = bytearray(data)
    for op, seed in steps:
        rng = random.Random(seed)
        if op == "flip" and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == "set" and buf:
            i = rng.randrange(len(buf))
            buf[i] = rng.choice([0, 1, 2, 3, 0x3F, 0x40, 0x7F, 0x80, 0xBF, 0xC0, 0xFF])
        elif op == "truncate":
            del buf[rng.randrange(len(buf) + 1) :]
        elif op == "extend":
            buf += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        elif op == "splice" and len(buf) > 8:
            i = rng.randrange(6, len(buf))
            word = rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x40000000, 0xC0000010, 2**26])
            buf[i : i + 4] = struct.pack("<I", word)[: len(buf) - i]
    if keep_crc and len(buf) >= 6:
        return reseal(bytes(buf))
    return bytes(buf)


@FUZZ_SETTINGS
@given(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=30), steps=MUTATIONS)
def test_mutated_datagrams_fail_the_checksum(frame, valid_corpus, picks, steps):
    datagrams = valid_corpus[frame.__name__]
    ep = fresh(frame)
    changed = 0
    for pick in picks:
        original = datagrams[pick % len(datagrams)]
        data = mutate(original, steps, keep_crc=False)
        changed += data != original
        ep.receive_datagram(data, "x", 1.0)
    assert ep.stats.internal_errors == 0, ep.last_internal_error
    # A CRC-32 catches every change of up to 32 bits; longer changes it catches all but 2**-32.
    assert ep.stats.malformed >= changed
    still_works(ep, frame)


@FUZZ_SETTINGS
@given(
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    steps=MUTATIONS,
    mutate_every=st.integers(1, 4),
)
def test_forged_datagrams_with_valid_checksums_never_break_the_core(
    frame, valid_corpus, picks, steps, mutate_every
):
    datagrams = valid_corpus[frame.__name__]
    ep = fresh(frame, reorder_limit_bytes=20000, reorder_limit_datagrams=50)
    now = 1.0
    for i, pick in enumerate(picks):
        data = datagrams[pick % len(datagrams)]
        if i % mutate_every == 0:
            data = mutate(data, steps, keep_crc=True)
        ep.receive_datagram(data, ("src", pick % 3), now)
        now += 0.003
        if i % 5 == 0:
            ep.handle_timer(now)
            ep.datagrams_to_send()
            ep.events()
        assert ep.buffered_bytes() <= 20000 + 3 * 64 * 1024 * 1024
    for _ in range(5):
        now += 1.0
        ep.handle_timer(now)
        out = ep.datagrams_to_send()
        assert len(out) < 10_000
    assert ep.stats.internal_errors == 0, ep.last_internal_error
    still_works(ep, frame)


def test_forged_stream_claims_do_not_cause_unbounded_work(frame):
    """A heartbeat claiming 2**63 datagrams exist, and NAKs for absurd ranges, stay cheap."""
    ep = fresh(frame)
    liar = frame.build_heartbeat(5, 0, [(0, 0, 0, 1, 1, 2**63, 1)])
    ep.receive_datagram(liar, "liar", 1.0)
    ep.handle_timer(1.02)
    naks = [d for d, dest in ep.datagrams_to_send() if dest == "liar"]
    # The claim cannot be true (2**63 datagrams in a stream that just began): dropped,
    # counted, and never asked for (it once was, max_nak_datagrams at a time).
    assert naks == [] and ep.stats.implausible == 1
    assert ep.stats.datagrams_missed == 0
    # The sender side: NAKs for everything, for the future, and for another session.
    for nak in (
        frame.build_nak(5, ep.session_id, 0, [(1, 2**32 - 1)] * 100),
        frame.build_nak(5, ep.session_id, 0, [(2**63, 5)]),
        frame.build_nak(5, ep.session_id + 1, 0, [(1, 1)]),
        frame.build_nak(5, ep.session_id, 12345, [(1, 1)]),
    ):
        ep.receive_datagram(nak, "liar", 1.1)
    ep.datagrams_to_send()
    assert ep.stats.naks_ignored >= 3
    assert ep.stats.internal_errors == 0, ep.last_internal_error
    # A first fragment declaring a message over 64 MiB is malformed.
    packer = frame.Packer(1000, 5, 1)
    packer.add(bytes(5000))
    packer.flush()
    first = bytearray(packer.take()[0])
    struct.pack_into("<I", first, frame.DATA_HEADER + 4, 64 * 1024 * 1024 + 1)
    ep.receive_datagram(reseal(bytes(first)), "liar", 1.2)
    assert ep.stats.malformed == 1
