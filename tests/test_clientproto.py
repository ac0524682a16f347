"""The daemon client protocol: framing, incremental decoding, limits and garbage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync._wire import MAX_MESSAGE_SIZE
from rvasync.message import Message
from rvasync.protocol.clientproto import (
    MAX_FRAME,
    Advisory,
    Bye,
    Deliver,
    Error,
    FrameDecoder,
    FrameType,
    Hello,
    Listen,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    Reliability,
    Unlisten,
    Welcome,
    encode,
    encode_messages,
)

texts = st.text(max_size=40)
opt_texts = st.none() | texts
wires = st.binary(max_size=300)
tokens = st.integers(min_value=-(2**63), max_value=2**64 - 1)

frames = st.one_of(
    st.builds(
        Hello,
        version=st.integers(0, 1000),
        service=opt_texts,
        network=opt_texts,
        description=opt_texts,
        reliability=st.none() | st.floats(0, 1e6, allow_nan=False),
    ),
    st.builds(
        Welcome,
        inbox_prefix=texts,
        daemon=st.dictionaries(texts, st.integers(0, 2**32) | texts, max_size=4),
    ),
    st.builds(Error, code=texts, text=texts),
    st.builds(Listen, subject=texts),
    st.builds(Unlisten, subject=texts),
    st.builds(Publish, messages=st.lists(wires, max_size=20)),
    st.builds(Deliver, messages=st.lists(wires, max_size=20)),
    st.builds(Advisory, message=wires),
    st.builds(Ping, token=tokens),
    st.builds(Pong, token=tokens),
    st.builds(Bye, reason=texts),
    st.builds(Reliability, seconds=st.floats(0, 1e6, allow_nan=False)),
)

MODERATE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def feed_in_pieces(data: bytes, cuts: list[int]) -> list:
    decoder = FrameDecoder()
    out = []
    start = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        out += decoder.feed(data[start:cut])
        start = cut
    assert decoder.buffered == 0
    return out


@MODERATE
@given(st.lists(frames, max_size=12), st.data())
def test_any_split_of_a_stream_decodes_to_the_same_frames(sent, data):
    stream = b"".join(encode(f) for f in sent)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=30))
    assert feed_in_pieces(stream, cuts) == sent


@MODERATE
@given(st.lists(st.binary(max_size=5000), max_size=60), st.integers(64, 20000))
def test_coalesced_messages_keep_order_and_frame_bounds(messages, target):
    buffers = encode_messages(FrameType.PUBLISH, messages, target=target)
    stream = b"".join(buffers)
    received = FrameDecoder().feed(stream)
    assert all(type(f) is Publish and f.messages for f in received)
    assert [m for f in received for m in f.messages] == messages
    # A frame holds one message alone or stays near the target.
    for f in received:
        if len(f.messages) > 1:
            assert sum(len(m) for m in f.messages) <= target


def test_message_frames_carry_codec_bytes_unchanged():
    wire = Message("A.B", {"x": 1, "s": "é"}).to_bytes()
    (frame,) = FrameDecoder().feed(b"".join(encode_messages(FrameType.DELIVER, [wire, wire])))
    assert frame == Deliver([wire, wire])
    assert Message.from_bytes(frame.messages[0]) == Message("A.B", {"x": 1, "s": "é"})


@MODERATE
@given(st.binary(max_size=400), st.data())
def test_random_bytes_only_ever_raise_protocol_error(junk, data):
    decoder = FrameDecoder()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(junk)), max_size=5)))
    start = 0
    try:
        for cut in [*cuts, len(junk)]:
            decoder.feed(junk[start:cut])
            start = cut
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decoder.feed(b"more")


@MODERATE
@given(st.lists(frames, min_size=1, max_size=6), st.data())
def test_mutated_streams_only_ever_raise_protocol_error(sent, data):
    stream = bytearray(b"".join(encode(f) for f in sent))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(stream) - 1))
        stream[pos] = data.draw(st.integers(0, 255))
    try:
        FrameDecoder().feed(bytes(stream))
    except ProtocolError:
        pass


def test_protocol_error_is_a_malformed_message_error():
    assert issubclass(ProtocolError, rv.MalformedMessage)
    assert issubclass(ProtocolError, rv.RvError)


def test_oversized_length_is_refused_before_the_body_arrives():
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="frame length"):
        decoder.feed(struct.pack(">IB", MAX_FRAME + 1, FrameType.PUBLISH))
    with pytest.raises(ProtocolError):
        decoder.feed(encode(Ping(1)))  # a broken stream stays broken


def test_frames_before_garbage_come_with_the_error():
    with pytest.raises(ProtocolError) as caught:
        FrameDecoder().feed(encode(Ping(1)) + encode(Listen("A")) + b"\x00\x00\x00\x00\x01")
    assert caught.value.frames == [Ping(1), Listen("A")]


def test_zero_length_and_unknown_type_are_refused_at_once():
    with pytest.raises(ProtocolError, match="frame length 0"):
        FrameDecoder().feed(b"\x00\x00\x00\x00\x01")
    with pytest.raises(ProtocolError, match="unknown frame type 200"):
        FrameDecoder().feed(struct.pack(">IB", 10, 200))


@pytest.mark.parametrize(
    ("frame_type", "body", "problem"),
    [
        (FrameType.PUBLISH, b"\xc4\x01x", "array of messages"),
        (FrameType.PUBLISH, b"\x91\xa1x", "must be binary"),
        (FrameType.LISTEN, b"\x01", "LISTEN subject must be a string"),
        (FrameType.HELLO, b"\x90", "HELLO body must be a map"),
        (FrameType.HELLO, b"\x81\xa7version\xa1x", "version must be an integer"),
        (FrameType.ERROR, b"\x91\xa1x", r"\[code, text\]"),
        (FrameType.PING, b"\xa1x", "token must be an integer"),
        (FrameType.ADVISORY, b"\xc1", "not valid msgpack"),
        (FrameType.BYE, b"\xa1x\xa1y", "not valid msgpack"),
    ],
)
def test_bad_bodies_name_the_problem(frame_type, body, problem):
    data = struct.pack(">IB", len(body) + 1, frame_type) + body
    with pytest.raises(ProtocolError, match=problem):
        FrameDecoder().feed(data)


def test_largest_message_fits_one_frame_and_over_limit_is_refused():
    big = bytes(MAX_MESSAGE_SIZE)
    buffers = encode_messages(FrameType.PUBLISH, [b"small", big, b"tail"])
    assert any(b is big for b in buffers)  # not copied on the way out
    decoder = FrameDecoder()
    stream = b"".join(buffers)
    got = []
    for start in range(0, len(stream), 1 << 20):
        got += decoder.feed(stream[start : start + (1 << 20)])
    assert [len(m) for f in got for m in f.messages] == [5, MAX_MESSAGE_SIZE, 4]
    del stream, got
    with pytest.raises(ProtocolError, match="message limit"):
        encode_messages(FrameType.DELIVER, [bytes(MAX_MESSAGE_SIZE + 1)])


def test_encode_refuses_non_frames():
    with pytest.raises(TypeError):
        encode("PING")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_messages(FrameType.LISTEN, [b"x"])
