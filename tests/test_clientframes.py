"""The message-frame hot path of the client protocol: the native and pure twins agree.

``rvasync_native.clientframes`` parses frame headers and msgpack array/bin
headers itself; these properties hold it to its pure twin (msgpack) on valid
frames, on frames of other types, on truncated and mutated streams, and on
random bytes, and hold ``pack_messages`` to msgpack's own packer byte for byte.
"""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync import _accel
from rvasync.protocol.clientproto.frames import (
    MAX_FRAME,
    Deliver,
    FrameType,
    Ping,
    Publish,
    encode,
)

IMPLS = _accel.implementations("clientframes")
MAX_BIN = 64 * 1024 * 1024


def twins():
    return pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__.split(".")[0])


def expected_frame(frame_type: int, messages: list[bytes]) -> bytes:
    body = msgpack.packb(messages, use_bin_type=True)
    return struct.pack(">IB", len(body) + 1, frame_type) + body


# Sizes on both sides of every msgpack length boundary (fixarray/array16, bin8/bin16/bin32).
wire_sizes = st.sampled_from([0, 1, 15, 16, 255, 256, 300, 65535, 65536, 70000])
wires = st.one_of(st.binary(max_size=300), wire_sizes.map(lambda n: b"w" * n))
message_lists = st.lists(wires, max_size=20)


@twins()
@settings(max_examples=200, deadline=None)
@given(messages=message_lists, deliver=st.booleans())
def test_pack_messages_is_msgpack_byte_for_byte(impl, messages, deliver):
    frame_type = FrameType.DELIVER if deliver else FrameType.PUBLISH
    assert impl.pack_messages(frame_type, messages) == expected_frame(frame_type, messages)


@twins()
@pytest.mark.parametrize("count", [15, 16, 65535, 65536])
def test_pack_messages_array_header_boundaries(impl, count):
    messages = [b""] * count
    assert impl.pack_messages(FrameType.PUBLISH, messages) == expected_frame(
        FrameType.PUBLISH, messages
    )


@twins()
def test_pack_messages_refuses_what_is_not_bytes(impl):
    with pytest.raises(TypeError, match="messages must be bytes, got str"):
        impl.pack_messages(FrameType.PUBLISH, [b"a", "b"])


def frame_bytes(kind: str, messages: list[bytes]) -> bytes:
    if kind == "publish":
        return expected_frame(FrameType.PUBLISH, messages)
    if kind == "deliver":
        return expected_frame(FrameType.DELIVER, messages)
    return encode(Ping(len(messages)))


frames = st.tuples(st.sampled_from(["publish", "deliver", "ping"]), message_lists)
streams = st.lists(frames, max_size=6).map(lambda fs: b"".join(frame_bytes(k, m) for k, m in fs))


def take(impl, buffer, offset=0, max_frame=MAX_FRAME):
    return impl.take_message_frames(buffer, offset, max_frame, MAX_BIN, Publish, Deliver)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(frames, max_size=6), cut=st.integers(min_value=0), offset=st.integers(0))
def test_twins_take_the_same_frames_from_any_cut_and_offset(parts, cut, offset):
    stream = b"".join(frame_bytes(kind, messages) for kind, messages in parts)
    data = stream[: cut % (len(stream) + 1)]
    start = offset % (len(data) + 1)
    results = [take(impl, data, start) for impl in IMPLS]
    assert all(r == results[0] for r in results)
    taken, end = results[0]
    assert start <= end <= len(data)
    if start == 0 and data == stream:
        # Uncut, from the start: exactly the message frames before the first PING.
        expected = []
        for kind, messages in parts:
            if kind == "ping":
                break
            expected.append(Publish(messages) if kind == "publish" else Deliver(messages))
        assert taken == expected


@settings(max_examples=300, deadline=None)
@given(
    stream=streams,
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
)
def test_twins_agree_on_mutated_streams(stream, flips):
    data = bytearray(stream)
    for position, value in flips:
        if data:
            data[position % len(data)] = value
    results = [take(impl, bytes(data)) for impl in IMPLS]
    assert all(r == results[0] for r in results)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=64))
def test_twins_agree_on_random_bytes(data):
    results = [take(impl, data) for impl in IMPLS]
    assert all(r == results[0] for r in results)


@twins()
def test_take_reads_a_run_of_message_frames_and_stops_at_a_ping(impl):
    first, second = [b"a", b"bb"], [b"ccc"]
    data = (
        expected_frame(FrameType.PUBLISH, first)
        + expected_frame(FrameType.DELIVER, second)
        + encode(Ping(7))
        + expected_frame(FrameType.DELIVER, [b"after"])
    )
    taken, offset = take(impl, data)
    assert taken == [Publish(first), Deliver(second)]
    assert data[offset:].startswith(encode(Ping(7)))
    # The frames it makes are the frozen dataclasses, equal to ones built the usual way.
    assert type(taken[1]) is Deliver and taken[1].messages == second


@twins()
def test_take_stops_at_a_body_that_is_not_an_array_of_bins(impl):
    body = msgpack.packb(["text, not bin"], use_bin_type=True)
    bad = struct.pack(">IB", len(body) + 1, FrameType.PUBLISH) + body
    assert take(impl, bad) == ([], 0)
    trailing = expected_frame(FrameType.PUBLISH, [b"x"])
    length = struct.unpack(">I", trailing[:4])[0]
    extra = struct.pack(">I", length + 1) + trailing[4:] + b"\xc0"  # one byte after the array
    assert take(impl, extra) == ([], 0)


@twins()
def test_take_leaves_lengths_outside_the_limit_to_the_general_decoder(impl):
    frame = expected_frame(FrameType.DELIVER, [b"x" * 100])
    assert take(impl, frame, max_frame=50) == ([], 0)
    assert take(impl, b"\x00\x00\x00\x00\x07") == ([], 0)  # length 0
