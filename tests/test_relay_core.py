"""The relay cores' parts on their own: frames, the link stream, the agent ledger, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rvasync as rv
from rvasync.protocol.relay import (
    RelayAgentCore,
    RelayClient,
    RelayTiming,
    decode_frame,
    decode_relay_ledger,
    encode_frame,
    encode_relay_record,
    new_relay_ledger,
)
from rvasync.protocol.relay.frames import Connect, Push
from rvasync.protocol.relay.stream import InStream, OutStream


def test_frames_round_trip():
    frames = [
        Connect("LIS", 7, "_INBOX.x", 3, 1, -1, (("foo", "data"),)),
        Push(7, 1, (("m", b"abc"), ("l", "foo", "data"))),
    ]
    for frame in frames:
        assert decode_frame(encode_frame(frame)) == frame


@given(st.binary(max_size=64))
def test_any_bytes_decode_to_a_frame_or_malformed(data):
    try:
        decode_frame(data)
    except rv.MalformedMessage:
        pass


@given(
    items=st.integers(1, 3000),
    script=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=400),
)
def test_stream_delivers_every_item_once_in_order_despite_loss_dup_reorder(items, script):
    """Go-back-N: frames lost, repeated or swapped; the receiver gets each item once, in order."""
    out = OutStream()
    for n in range(items):
        out.append(("m", n.to_bytes(4, "big")))
    rx = InStream()
    rx.start(1)
    got: list[tuple] = []
    now = 0.0
    in_flight: list[tuple[int, list]] = []
    steps = iter(script)
    for _ in range(100_000):
        if len(got) == items:
            break
        now += 0.1
        taken = out.take(now)
        if taken is not None:
            in_flight.append(taken)
        lose, dup, swap = next(steps, (False, False, False))
        if swap and len(in_flight) > 1:
            in_flight[0], in_flight[1] = in_flight[1], in_flight[0]
        if in_flight:
            first, frame_items = in_flight.pop(0)
            if dup:
                in_flight.append((first, frame_items))
            if not lose:
                got.extend(rx.accept(first, frame_items))
                out.ack(rx.received, now)
        out.check_retry(now, 1.0)
    assert got == [("m", n.to_bytes(4, "big")) for n in range(items)]
    assert len(out) == 0


def test_ledger_replay_torn_tail_and_corruption(tmp_path):
    path = str(tmp_path / "x")
    data = new_relay_ledger("RA")
    data += encode_relay_record(("l", "LIS", "foo", "data"))
    data += encode_relay_record(("s", "LIS", 1, "data", b"m1"))
    data += encode_relay_record(("s", "LIS", 2, "data", b"m2"))
    data += encode_relay_record(("a", "LIS", 1))
    replay = decode_relay_ledger(data, path, "RA")
    assert replay.state.clients["LIS"].items == {2: ("data", b"m2")}
    assert replay.state.clients["LIS"].listens == {("foo", "data")}
    # A record cut short by a crash is dropped.
    torn = data + encode_relay_record(("s", "LIS", 3, "data", b"m3"))[:-2]
    replay = decode_relay_ledger(torn, path, "RA")
    assert replay.torn and replay.valid_length == len(data)
    # Damage followed by more records is corruption, not a crash.
    damaged = bytearray(data)
    damaged[len(new_relay_ledger("RA")) + 10] ^= 0xFF
    with pytest.raises(rv.LedgerCorrupt, match="checksum"):
        decode_relay_ledger(bytes(damaged), path, "RA")
    with pytest.raises(rv.LedgerCorrupt, match="bad magic"):
        decode_relay_ledger(b"RVCMLEDGxxxxxxxxxxxx", path, "RA")
    with pytest.raises(rv.InvalidArgument, match="belongs to relay agent 'RA'"):
        decode_relay_ledger(data, path, "OTHER")
    # Compaction's snapshot rebuilds the same state.
    state = decode_relay_ledger(data, path, "RA").state
    again = new_relay_ledger("RA") + b"".join(encode_relay_record(r) for r in state.snapshot())
    assert decode_relay_ledger(again, path, "RA").state == state


def test_agent_restart_continues_numbering_and_listening():
    core = RelayAgentCore("RA", "_INBOX.a", "i1", file_ledger=True)
    client = RelayClient("LIS", "RA", "_INBOX.c", epoch=1)
    client.listen("foo", "data", 0.0)
    client.connect(0.0)
    for _ in range(10):  # move frames both ways until quiet
        moved = False
        for out in client.drain():
            if hasattr(out, "data") and hasattr(out, "subject"):
                core.receive(out.data, client.address, 0.0)
                moved = True
        for out in core.drain():
            if hasattr(out, "lsn"):
                core.durable(out.lsn, 0.0)
            elif hasattr(out, "subject") and out.subject == client.address:
                client.receive(out.data, 0.0)
                moved = True
        if not moved:
            break
    assert client.connected
    assert core.patterns == {"foo"}
    client.disconnect(0.0)
    core.network_message("foo", b"one", 0.0)
    restarted = RelayAgentCore("RA", "_INBOX.b", "i2", ledger=core.ledger)
    assert restarted.patterns == {"foo"}
    assert restarted.stored("LIS") == 1
    restarted.network_message("foo", b"two", 0.0)
    assert restarted.ledger.clients["LIS"].items == {1: ("data", b"one"), 2: ("data", b"two")}


def test_bad_arguments():
    with pytest.raises(rv.InvalidArgument):
        RelayClient("A", "RA", "", epoch=1)
    with pytest.raises(rv.InvalidArgument):
        RelayClient("A", "RA", "_INBOX.x", epoch=0)
    with pytest.raises(rv.InvalidArgument):
        RelayTiming(retry=0)
    with pytest.raises(rv.InvalidArgument):
        RelayTiming(keepalive=10, agent_timeout=5)
    core = RelayAgentCore("RA", "_INBOX.a", "i1")
    core.receive(b"\x00garbage", None, 0.0)
    assert core.malformed == 1
    with pytest.raises(rv.InvalidArgument):
        core.durable(-1, 0.0)
