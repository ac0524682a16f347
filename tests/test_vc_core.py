"""The virtual circuit core under loss, duplication and reordering on a simulated clock.

Properties: each terminal delivers exactly what the other sent, in order,
or a prefix of it followed by an ERROR disconnect (never a gap); both
terminals end in the same state; a silent partner is noticed within the
documented disconnect time (``silence``); forged frames never reach the
stream; a deliberate close is INFO on the other side after all its data.
"""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync.errors import InvalidArgument, MalformedMessage, NotPermitted, TransportClosed
from rvasync.message import Message
from rvasync.protocol.vc import (
    Circuit,
    CircuitParams,
    CircuitState,
    Frame,
    FrameKind,
    frame_from_message,
    frame_to_message,
)
from tests.vc_sim import VcSim

PARAMS = CircuitParams(heartbeat=1.0, silence=4.0, retransmit=0.2)


def connected_pair(sim: VcSim) -> tuple[Circuit, Circuit]:
    a, b = sim.pair()
    sim.run_until(sim.now + 3.0)
    return a, b


def test_handshake_and_ordered_delivery_on_a_clean_network() -> None:
    sim = VcSim(params=PARAMS)
    a, b = connected_pair(sim)
    assert a.state is b.state is CircuitState.CONNECTED
    for i in range(100):
        sim.send("A", ("a", i))
        sim.send("B", ("b", i))
    sim.run_until(sim.now + 2.0)
    assert sim.records["B"].delivered == sim.records["A"].sent
    assert sim.records["A"].delivered == sim.records["B"].sent
    assert a.unacked == b.unacked == 0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    loss=st.floats(0.0, 0.3),
    duplicate=st.floats(0.0, 0.3),
    jitter=st.floats(0.0005, 0.3),
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    batch=st.integers(1, 7),
    flush_every=st.integers(1, 12),
)
def test_in_order_or_loud_never_a_gap(
    seed: int,
    loss: float,
    duplicate: float,
    jitter: float,
    counts: list[int],
    batch: int,
    flush_every: int,
) -> None:
    """Frames of one message (``flush_every=1``) and runs of several (up to ``batch``
    per frame): lost, repeated and overtaking each other on the way."""
    params = replace(PARAMS, batch=batch)
    sim = VcSim(seed=seed, loss=loss, duplicate=duplicate, delay=(0.0001, jitter), params=params)
    a, b = sim.pair()
    sim.run_until(1.0)
    n = 0
    for count in counts:
        for _ in range(count):
            n += 1
            for name, circuit in (("A", a), ("B", b)):
                if circuit.state is CircuitState.CONNECTED:
                    sim.queue(name, (name, n))
                    if n % flush_every == 0:
                        sim.flush(name)
        for name in ("A", "B"):
            sim.flush(name)
        sim.run_until(sim.now + 0.3)
    # Quiet period long enough for recovery or for both sides to give up.
    sim.run_until(sim.now + 3 * PARAMS.silence)
    # A late failure (heartbeats lost at the very end) reaches the other side
    # within one more silence period: give it that, a few times at most.
    for _ in range(5):
        if a.state is b.state or CircuitState.CONNECTING in (a.state, b.state):
            break
        sim.run_until(sim.now + PARAMS.silence + 1.0)
    for me, other in (("A", "B"), ("B", "A")):
        got = sim.records[me].delivered
        sent = sim.records[other].sent
        assert got == sent[: len(got)], "delivered out of order or with a gap"
    if a.state is CircuitState.CONNECTING:
        # Every CONNECT was lost: the acceptor still waits, the connector gave up.
        assert b.state is CircuitState.DISCONNECTED
        assert sim.records["A"].delivered == sim.records["B"].delivered == []
        return
    states = {a.state, b.state}
    assert len(states) == 1, f"terminals disagree: {states}"
    if a.state is CircuitState.CONNECTED:
        assert sim.records["A"].delivered == sim.records["B"].sent
        assert sim.records["B"].delivered == sim.records["A"].sent
    else:
        for name in ("A", "B"):
            disc = sim.records[name].disconnected
            assert disc is not None and disc[0] is False, disc


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32), kill_at=st.floats(0.5, 10.0), loss=st.floats(0.0, 0.1))
def test_silent_partner_noticed_within_the_disconnect_time(
    seed: int, kill_at: float, loss: float
) -> None:
    sim = VcSim(seed=seed, loss=loss, params=PARAMS)
    a, _ = sim.pair()
    sim.run_until(kill_at)
    if a.state is not CircuitState.CONNECTED:
        return  # the handshake itself failed under loss: covered elsewhere
    sim.dead.add("B")
    sim.run_until(kill_at + PARAMS.silence + 1.0)
    rec = sim.records["A"]
    assert rec.disconnected is not None and rec.disconnected[0] is False
    assert rec.disconnected_at is not None
    assert rec.disconnected_at <= kill_at + PARAMS.silence + 0.01


def test_lost_everything_disconnects_both() -> None:
    sim = VcSim(params=PARAMS)
    a, b = connected_pair(sim)
    sim.loss = 1.0
    sim.send("A", "x")
    sim.run_until(sim.now + PARAMS.silence + 1.0)
    assert a.state is b.state is CircuitState.DISCONNECTED
    assert sim.records["A"].disconnected[0] is False  # type: ignore[index]
    assert sim.records["B"].disconnected[0] is False  # type: ignore[index]
    assert sim.records["B"].delivered == []


def test_unanswered_connect_fails_loudly() -> None:
    sim = VcSim(params=PARAMS)
    b = sim.add("B", connect_subject="NOBODY")
    sim.run_until(10.0)
    assert b.state is CircuitState.DISCONNECTED
    assert sim.records["B"].disconnected == (
        False,
        f"no answer from the connect subject within {PARAMS.silence} s",
    )


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 50), loss=st.floats(0.0, 0.2))
def test_deliberate_close_is_graceful_after_all_data(seed: int, n: int, loss: float) -> None:
    sim = VcSim(seed=seed, loss=loss, params=PARAMS)
    a, b = sim.pair()
    sim.run_until(2.0)
    if b.state is not CircuitState.CONNECTED or a.state is not CircuitState.CONNECTED:
        return
    for i in range(n):
        sim.send("B", i)
    sim.run_until(sim.now + 5 * PARAMS.retransmit)
    if b.unacked:
        return  # closing with data in flight is the driver's linger; the core case is below
    sim.close("B")
    assert sim.records["B"].disconnected == (True, "closed by this terminal")
    sim.run_until(sim.now + 2 * PARAMS.silence)
    rec = sim.records["A"]
    assert rec.delivered == list(range(n))
    assert rec.disconnected is not None
    if rec.disconnected[0]:
        assert rec.disconnected[1] == "closed by the other terminal"
    else:  # the CLOSE frame was lost: the silence rule ends it, as an error
        assert "heartbeat" in rec.disconnected[1]


def test_close_waits_for_data_sent_before_it() -> None:
    sim = VcSim(params=PARAMS, delay=(0.01, 0.5), seed=3)
    connected_pair(sim)
    for i in range(20):
        sim.send("B", i)
    sim.close("B")
    sim.run_until(sim.now + 1.0)
    assert sim.records["A"].delivered == list(range(20))
    assert sim.records["A"].disconnected == (True, "closed by the other terminal")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    forged=st.lists(
        st.tuples(
            st.sampled_from(list(FrameKind)),
            st.booleans(),
            st.booleans(),
            st.integers(0, 5),
            st.integers(0, 5),
        ),
        max_size=30,
    ),
)
def test_forged_frames_never_reach_the_stream(
    seed: int, forged: list[tuple[FrameKind, bool, bool, int, int]]
) -> None:
    sim = VcSim(seed=seed, params=PARAMS)
    a, b = connected_pair(sim)
    intruder = sim.token()
    for i in range(3):
        sim.send("B", ("real", i))
    for kind, know_to, target_a, seq, ack in forged:
        victim = a if target_a else b
        to = victim.token if know_to else intruder  # even a leaked token of the receiver
        sim.inject(
            "A" if target_a else "B",
            Frame(kind, to, intruder, seq=seq, ack=ack, inbox="X", payload=[("forged", seq)]),
        )
    sim.run_until(sim.now + 2.0)
    for name in ("A", "B"):
        assert all(p[0] == "real" for p in sim.records[name].delivered)
    assert sim.records["A"].delivered == [("real", 0), ("real", 1), ("real", 2)]
    assert a.state is b.state is CircuitState.CONNECTED
    assert a.foreign + b.foreign == len(forged)


def test_send_before_connected_and_after_disconnect() -> None:
    sim = VcSim(params=PARAMS)
    a = sim.add("A")
    with pytest.raises(NotPermitted):
        a.send("x", sim.now)
    b = sim.add("B", connect_subject="A")
    sim.run_until(1.0)
    sim.close("B")
    with pytest.raises(TransportClosed):
        b.send("x", sim.now)
    with pytest.raises(TransportClosed):
        b.close(sim.now)


def test_second_connector_is_refused() -> None:
    sim = VcSim(params=PARAMS)
    a, b = connected_pair(sim)
    c = sim.add("C", connect_subject="A")
    sim.run_until(sim.now + 2 * PARAMS.silence)
    assert c.state is CircuitState.DISCONNECTED
    assert a.state is b.state is CircuitState.CONNECTED
    assert a.foreign >= 1


def test_params_are_checked() -> None:
    with pytest.raises(InvalidArgument):
        CircuitParams(heartbeat=0)
    with pytest.raises(InvalidArgument):
        CircuitParams(heartbeat=2.0, silence=1.0)
    with pytest.raises(InvalidArgument):
        CircuitParams(burst=0)
    with pytest.raises(InvalidArgument):
        Circuit(token=b"short", inbox="X")


def test_frame_message_roundtrip() -> None:
    inner = Message("USER.SUBJ", {"x": 1}, reply_subject="_INBOX.R.1")
    other = Message("USER.OTHER", {"y": b"z"})
    payload = (inner.to_bytes(), other.to_bytes())
    frame = Frame(FrameKind.DATA, b"t" * 16, b"f" * 16, seq=7, ack=3, payload=payload)
    wire = Message.from_bytes(frame_to_message(frame, "_INBOX.P.1").to_bytes())
    back = frame_from_message(wire)
    assert (back.kind, back.to_token, back.from_token, back.seq, back.ack) == (
        FrameKind.DATA,
        b"t" * 16,
        b"f" * 16,
        7,
        3,
    )
    first, second = back.payload
    assert first.subject == "USER.SUBJ"
    assert first.reply_subject == "_INBOX.R.1"
    assert first["x"] == 1
    assert (second.subject, second.reply_subject, second["y"]) == ("USER.OTHER", None, b"z")
    connect = Frame(FrameKind.CONNECT, b"", b"f" * 16, inbox="_INBOX.C.1")
    assert frame_from_message(frame_to_message(connect, "_INBOX.A.1")) == connect


def _header(kind: int, seq: int = 0) -> bytes:
    return struct.pack(">B16s16sQQ", kind, b"t" * 16, b"f" * 16, seq, 0)


_A = Message("A", {}).to_bytes()


def _data(header: bytes, wires: list[bytes]) -> dict[str, object]:
    """A DATA frame's fields carrying ``wires`` (the form frame_to_message gives them)."""
    lens = struct.pack(f">{len(wires)}I", *map(len, wires))
    return {"vc": header, "lens": lens, "run": b"".join(wires)}


def test_a_data_frame_of_messages_round_trips() -> None:
    """What _data builds is what frame_from_message reads (so the cases below are refused
    for their one fault, not for the form)."""
    frame = frame_from_message(Message("_INBOX.X.1", _data(_header(3, seq=1), [_A, _A])))
    assert [m.subject for m in frame.payload] == ["A", "A"]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"vc": 3},
        {"vc": b"short"},
        {"vc": _header(99)},  # no such kind
        {"vc": _header(3, seq=1)},  # DATA without payload
        _data(_header(3, seq=0), [Message("A", {}).to_bytes()]),  # DATA numbered 0
        _data(_header(3, seq=1), [Message(None, {}).to_bytes()]),  # an entry without subject
        _data(_header(3, seq=1), []),  # no message at all
        _data(_header(3, seq=1), [b"not a message"]),  # an entry that is not a message
        {**_data(_header(3, seq=1), [_A]), "lens": b"\0\0\0"},  # a length cut short
        {**_data(_header(3, seq=1), [_A]), "run": _A + b"x"},  # a run longer than its lengths
        {**_data(_header(3, seq=1), [_A, _A]), "run": _A},  # a run shorter than its lengths
        {"vc": _header(3, seq=1), "lens": "A", "run": _A},  # lengths that are not bytes
        {"vc": _header(3, seq=1), "lens": struct.pack(">I", len(_A)), "run": 5},  # nor the run
        {"vc": _header(1)},  # CONNECT without inbox
        {"vc": _header(6), "text": 7},  # ABORT whose text is not a str
    ],
)
def test_not_a_frame(fields: dict[str, object]) -> None:
    with pytest.raises(MalformedMessage):
        frame_from_message(Message("_INBOX.X.1", fields))


def test_a_stall_of_this_side_alone_does_not_break_the_circuit() -> None:
    sim = VcSim(params=PARAMS)
    a, _ = connected_pair(sim)
    later = sim.now + 10 * PARAMS.silence  # A's process did not run for a long while
    out = a.timer(later)
    assert out.disconnected is None and a.state is CircuitState.CONNECTED
    # ... but a partner that stays silent afterwards is still found out.
    out = a.timer(later + PARAMS.silence / 2)
    assert out.disconnected is not None and out.disconnected[0] is False


def test_a_burst_travels_in_few_frames() -> None:
    """Queued messages are framed together, ``batch`` per frame at most."""
    sim = VcSim(params=replace(PARAMS, batch=256))
    a, b = connected_pair(sim)
    for i in range(600):
        a.queue(i)
    assert a.pending == 600 and a.unacked == 600
    out = a.flush(sim.now)
    frames = [frame for _, frame in out.transmit]
    assert [(f.kind, f.seq, len(f.payload)) for f in frames] == [
        (FrameKind.DATA, 1, 256),
        (FrameKind.DATA, 257, 256),
        (FrameKind.DATA, 513, 88),
    ]
    assert a.pending == 0
    sim.records["A"].sent.extend(range(600))
    sim.apply("A", out)
    sim.run_until(sim.now + 1.0)
    assert sim.records["B"].delivered == list(range(600))
    assert a.unacked == 0 and b.delivered == 600


def test_a_frame_stays_until_its_last_message_is_acknowledged() -> None:
    sim = VcSim(params=PARAMS)
    a, b = connected_pair(sim)
    for i in range(5):
        a.queue(i)
    out = a.flush(sim.now)
    (frame,) = [f for _, f in out.transmit]
    # An ack inside the frame (only a broken partner sends one) keeps the whole frame.
    a.receive(Frame(FrameKind.ACK, a.token, b.token, ack=3), sim.now)
    assert a.unacked == 2 and a.state is CircuitState.CONNECTED
    retransmitted = a.timer(sim.now + 2 * PARAMS.retransmit).transmit  # due, not late
    assert any(f.kind is FrameKind.DATA and f.seq == frame.seq for _, f in retransmitted)
    a.receive(Frame(FrameKind.ACK, a.token, b.token, ack=5), sim.now)
    assert a.unacked == 0


def test_close_frames_what_is_queued_first() -> None:
    sim = VcSim(params=PARAMS)
    _, b = connected_pair(sim)
    for i in range(3):
        sim.queue("B", i)
    sim.close("B")
    sim.run_until(sim.now + 1.0)
    assert sim.records["A"].delivered == [0, 1, 2]
    assert sim.records["A"].disconnected == (True, "closed by the other terminal")
    with pytest.raises(TransportClosed):
        b.queue(3)


def test_adopted_messages_travel_as_a_message_array() -> None:
    """Message.adopt_messages (the frame's driver API): the list itself, encoded as MSGARRAY."""
    from rvasync.errors import ConversionError
    from rvasync.fieldtypes import FieldType

    inner = [Message("A.B", {"i": 1}), Message("C", {"j": "x"}, reply_subject="R")]
    record = Message("_INBOX.X.1", {})
    record.adopt_messages("msgs", inner)
    assert record.field("msgs").type is FieldType.MSGARRAY
    back = Message.from_bytes(record.to_bytes())["msgs"]
    assert [(m.subject, m.reply_subject) for m in back] == [("A.B", None), ("C", "R")]
    assert back[0]["i"] == 1 and back[1]["j"] == "x"
    with pytest.raises(ConversionError):
        record.adopt_messages("msgs", tuple(inner))  # type: ignore[arg-type]


def test_a_late_retransmission_timer_waits_one_interval_for_unread_acks() -> None:
    sim = VcSim(params=PARAMS)
    a, b = connected_pair(sim)
    out = a.send("x", sim.now)
    deadline = a.next_deadline()
    assert deadline is not None
    late = sim.now + 3 * PARAMS.retransmit  # the process was busy meanwhile
    assert not [f for _, f in a.timer(late).transmit if f.kind is FrameKind.DATA]
    # The ack that was waiting unread arrives: nothing is resent at all.
    (frame,) = [f for _, f in out.transmit]
    a.receive(Frame(FrameKind.ACK, a.token, b.token, ack=frame.seq), late)
    assert a.unacked == 0
    # Without an ack, the next (late again) timer resends.
    out = a.send("y", late)
    later = late + 3 * PARAMS.retransmit
    assert not [f for _, f in a.timer(later).transmit if f.kind is FrameKind.DATA]
    even_later = later + 3 * PARAMS.retransmit
    resent = [f for _, f in a.timer(even_later).transmit if f.kind is FrameKind.DATA]
    assert [f.payload for f in resent] == [("y",)]
