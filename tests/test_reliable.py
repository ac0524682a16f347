"""Scenario tests of the reliable multicast core, driven through the simulated network."""

from __future__ import annotations

import dataclasses

import pytest
from simnet import Ledger, SimNet

import rvasync as rv
from rvasync import _accel
from rvasync.protocol.reliable import MAX_MESSAGE, ReliableEndpoint
from rvasync.protocol.reliable_events import (
    Delivered,
    InboundDataLoss,
    OutboundDataLoss,
    PeerDiscovered,
    PeerSilent,
    RetransmissionRequested,
    RetransmissionSent,
)


@pytest.fixture(params=_accel.implementations("rmframe"), ids=lambda m: m.__name__.split(".")[0])
def frame(request):
    return request.param


def endpoint(net: SimNet, address, frame, session: int, **options) -> ReliableEndpoint:
    return net.add(
        address, ReliableEndpoint(now=net.now, session_id=session, frame=frame, **options)
    )


def no_errors(*endpoints: ReliableEndpoint) -> None:
    for ep in endpoints:
        assert ep.stats.internal_errors == 0, ep.last_internal_error


def test_receive_hands_back_the_common_case_and_queues_the_rest(frame):
    """``receive`` returns the Delivered of the next datagram of whole messages when nothing
    else is waiting; anything else goes through events() as with receive_datagram."""
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame)
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame)

    def datagram(payload: bytes, now: float) -> bytes:
        a.send_multicast(payload)
        ((data, dest),) = a.flush_datagrams(now)
        assert dest is None
        return data

    first, second, third, fourth = (datagram(bytes([n]) * 40, 0.001 * n) for n in range(1, 5))
    # A new peer: PeerDiscovered comes first, so the delivery is queued behind it.
    assert b.receive(first, "a", 0.01) is None
    events = b.events()
    assert [type(e) for e in events] == [PeerDiscovered, Delivered]
    assert events[1].payloads == [b"\x01" * 40]
    # The next in order: handed back, nothing queued, nothing to send.
    delivered = b.receive(second, "a", 0.02)
    assert isinstance(delivered, Delivered)
    assert (delivered.session, delivered.src, delivered.ptp) == (1, "a", False)
    assert delivered.payloads == [b"\x02" * 40]
    assert b.events() == [] and b.datagrams_to_send() == []
    # A gap: buffered, nothing handed back; the missing one then fills it through events().
    assert b.receive(fourth, "a", 0.03) is None
    assert b.events() == []
    assert b.receive(third, "a", 0.04) is None
    assert [e.payloads for e in b.events()] == [[b"\x03" * 40], [b"\x04" * 40]]
    # A duplicate is dropped and counted.
    assert b.receive(second, "a", 0.05) is None
    assert b.stats.duplicates == 1
    no_errors(a, b)


def test_flush_datagrams_is_flush_then_datagrams_to_send(frame):
    one = ReliableEndpoint(now=0.0, session_id=9, frame=frame)
    two = ReliableEndpoint(now=0.0, session_id=9, frame=frame)
    for ep in (one, two):
        ep.send_multicast(b"m" * 100)
        ep.send_ptp(("127.0.0.1", 9), b"p" * 100)
        ep.send_multicast(b"n" * 100)
    one.flush(0.5)
    expected = one.datagrams_to_send()
    got = two.flush_datagrams(0.5)
    assert [(bytes(d), dest) for d, dest in got] == [(bytes(d), dest) for d, dest in expected]
    assert [dest for _, dest in got] == [None, ("127.0.0.1", 9)], "multicast stream first"
    assert two.flush_datagrams(0.6) == [] and two.datagrams_to_send() == []
    assert two.retained_datagrams() == one.retained_datagrams() == 2


def test_flush_lone_is_the_packed_way_for_a_lone_message(frame):
    """``flush_lone`` returns the very datagram send + flush_datagrams would have made, and
    numbers, retains and counts it the same way; it never shows up in the output."""
    fast = ReliableEndpoint(now=0.0, session_id=9, frame=frame)
    slow = ReliableEndpoint(now=0.0, session_id=9, frame=frame)
    dest = ("127.0.0.1", 9)
    for ep in (fast, slow):  # a point-to-point stream exists once something went to dest
        ep.send_ptp(dest, b"hello")
        ep.flush_datagrams(0.0)
    for n, (where, now) in enumerate([(None, 0.25), (dest, 0.5), (None, 0.75), (dest, 1.0)]):
        payload = bytes([n]) * (50 + n)
        got = fast.flush_lone(payload, where, now)
        if where is None:
            slow.send_multicast(payload)
        else:
            slow.send_ptp(where, payload)
        assert [(got, where)] == slow.flush_datagrams(now)
        assert fast.datagrams_to_send() == []
    assert fast.retained_datagrams() == slow.retained_datagrams() == 5
    assert dataclasses.asdict(fast.stats) == dataclasses.asdict(slow.stats)
    assert fast.next_deadline() == slow.next_deadline()


def test_flush_lone_declines_when_the_packed_way_is_needed(frame):
    ep = ReliableEndpoint(now=0.0, session_id=9, frame=frame, max_datagram=1400)
    assert ep.flush_lone(b"x", ("127.0.0.1", 9), 0.0) is None, "no stream to that address yet"
    assert ep.flush_lone(b"x" * 1400, None, 0.0) is None, "needs more than one datagram"
    assert ep.flush_lone(bytearray(b"x"), None, 0.0) is None, "not bytes"
    ep.send_multicast(b"packed")
    assert ep.flush_lone(b"x", None, 0.0) is None, "something is packed before it"
    assert len(ep.flush_datagrams(0.0)) == 1
    assert ep.flush_lone(b"x", None, 0.1) is not None
    ep.close(0.2)
    assert ep.flush_lone(b"x", None, 0.3) is None, "closed"
    assert ep.stats.messages_sent == 2


def test_a_lost_flush_lone_datagram_is_recovered_by_nak(frame):
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame)
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame)
    first, second, third = (a.flush_lone(bytes([n]) * 30, None, 0.01 * n) for n in (1, 2, 3))
    b.receive_datagram(first, "a", 0.04)
    b.receive_datagram(third, "a", 0.05)  # second lost: a gap
    now, resent = 0.05, []
    while not resent and now < 1.0:  # b's timer NAKs the gap; a answers from retention
        now = b.next_deadline()
        b.handle_timer(now)
        for nak, _ in b.datagrams_to_send():
            a.receive_datagram(bytes(nak), "b", now)
        resent = [bytes(d) for d, _ in a.datagrams_to_send()]
    assert second in resent, "resent from retention"
    for data in resent:
        b.receive_datagram(data, "a", now + 0.001)
    delivered = [p for e in b.events() if isinstance(e, Delivered) for p in e.payloads]
    assert delivered == [bytes([n]) * 30 for n in (1, 2, 3)]
    no_errors(a, b)


def test_small_messages_are_packed_and_delivered_in_order(frame):
    net = SimNet(seed=1)
    a = endpoint(net, "a", frame, 1)
    b = endpoint(net, "b", frame, 2)
    ledger = Ledger(net)
    for _ in range(2000):
        ledger.multicast("a", size=128)
    assert net.run_until(ledger.all_accounted, 5)
    ledger.check("b", lossless=True)
    data = a.stats.datagrams_sent - a.stats.heartbeats_sent
    assert data <= 6, "2000 messages of 128 bytes should fill a handful of 60000-byte datagrams"
    assert b.stats.messages_delivered == 2000
    assert a.stats.messages_sent == 2000
    assert net.of_type("b", PeerDiscovered)[0].session == 1
    assert a.stats.own_datagrams > 0, "the sender's multicast loops back and is ignored"
    no_errors(a, b)


def test_multicast_and_ptp_to_several_destinations_under_loss(frame):
    net = SimNet(seed=7, loss=0.15, duplicate=0.05)
    eps = [endpoint(net, name, frame, i + 1, max_datagram=1400) for i, name in enumerate("abcd")]
    ledger = Ledger(net)
    for round_ in range(60):
        for src in "abcd":
            ledger.multicast(src, size=100 + round_)
            for dest in "abcd":
                if dest != src:
                    ledger.ptp(src, dest, size=40 + round_)
        net.run_for(0.003)
    assert net.run_until(ledger.all_accounted, 30)
    for name in "abcd":
        ledger.check(name, lossless=True)
        assert net.of_type(name, RetransmissionRequested), "15% loss must cause NAKs"
    assert sum(ep.stats.duplicates for ep in eps) > 0
    no_errors(*eps)


@pytest.mark.parametrize("max_datagram", [8000, 40000], ids=["copied", "gathered"])
def test_large_messages_fragment_and_reassemble_under_loss(frame, max_datagram):
    """At 40000 bytes the middle fragments are Gathered (a view of the message, not a
    copy) both when first sent and when retransmitted."""
    net = SimNet(seed=3, loss=0.2, duplicate=0.05)
    a = endpoint(net, "a", frame, 1, max_datagram=max_datagram)
    b = endpoint(net, "b", frame, 2, max_datagram=max_datagram)
    ledger = Ledger(net)
    for size in (3_000_000, 20, 70_000, 7_950, 7_960, 17, 250_000):
        ledger.multicast("a", size=size)
    ledger.ptp("a", "b", size=1_500_000)
    ledger.ptp("a", "b", size=5)
    assert net.run_until(ledger.all_accounted, 60)
    ledger.check("b", lossless=True)
    sizes = [len(p) for e in net.of_type("b", Delivered) if not e.ptp for p in e.payloads]
    assert sizes == [3_000_000, 20, 70_000, 7_950, 7_960, 17, 250_000]
    assert b.stats.datagrams_retransmitted == 0 and a.stats.datagrams_retransmitted > 0
    no_errors(a, b)


def test_message_at_the_64_mib_limit_passes_and_one_byte_more_is_refused():
    frame = _accel.load("rmframe")
    net = SimNet(seed=4, delay=(0.001, 0.001))  # no reordering: one copy of the data at a time
    a = endpoint(net, "a", frame, 1)
    endpoint(net, "b", frame, 2)
    big = bytes(range(256)) * (MAX_MESSAGE // 256)
    assert len(big) == MAX_MESSAGE
    with pytest.raises(rv.MessageTooLarge, match="64 MiB"):
        a.send_multicast(big + b"!")
    with pytest.raises(rv.MessageTooLarge):
        a.send_ptp("b", big + b"!")
    net.send_multicast("a", big)
    net.send_multicast("a", b"after")
    got = []

    def done():
        got.extend(p for e in net.events["b"] if isinstance(e, Delivered) for p in e.payloads)
        net.events["b"].clear()
        return len(got) == 2

    assert net.run_until(done, 10)
    assert got[0] == big and got[1] == b"after"
    data_datagrams = a.stats.datagrams_sent - a.stats.heartbeats_sent
    assert data_datagrams == a.datagrams_for(MAX_MESSAGE) == 1120


def test_tail_loss_is_recovered_through_heartbeats(frame):
    net = SimNet(seed=5)
    a = endpoint(net, "a", frame, 1)
    b = endpoint(net, "b", frame, 2)
    ledger = Ledger(net)
    net.run_for(0.1)
    lost_data = []

    def drop_data(data, src, dest):
        # Drop the first transmission of every data datagram to b (type byte 1).
        if dest == "b" and data[7] == 1 and data not in lost_data:
            lost_data.append(data)
            return True
        return False

    net.drop = drop_data
    for _ in range(3):
        ledger.multicast("a")
    ledger.ptp("a", "b")
    net.run_for(0.001)
    assert not net.of_type("b", Delivered)
    assert net.run_until(ledger.all_accounted, 2)
    ledger.check("b", lossless=True)
    assert len(lost_data) == 2 and a.stats.datagrams_retransmitted == 2
    assert b.stats.naks_sent >= 2
    no_errors(a, b)


def test_receiver_cut_off_beyond_retention_gets_exact_data_loss(frame):
    net = SimNet(seed=6)
    a = endpoint(net, "a", frame, 1, reliability=0.5, max_datagram=1000)
    b = endpoint(net, "b", frame, 2, reliability=0.5)
    ledger = Ledger(net)
    for _ in range(20):
        ledger.multicast("a", size=300)
    net.run_for(0.1)
    net.isolated.add("b")
    for _ in range(30):
        ledger.multicast("a", size=300)
    ledger.multicast("a", size=2500)  # a fragmented message, lost too
    ledger.ptp("a", "b", size=10)
    net.run_for(2.0)
    net.isolated.clear()
    for _ in range(5):
        ledger.multicast("a", size=300)
    ledger.ptp("a", "b", size=10)
    assert net.run_until(ledger.all_accounted, 5)
    ledger.check("b")
    losses = net.of_type("b", InboundDataLoss)
    bcast = [e for e in losses if not e.ptp]
    assert sum(e.messages for e in bcast) == 31
    assert bcast[0].first_message == 21 and bcast[0].reason == "retention"
    assert sum(e.messages for e in losses if e.ptp) == 1
    assert b.stats.messages_lost_inbound == 32
    assert all(e.session == 1 and e.src == "a" for e in losses)
    assert not net.of_type("b", PeerSilent), "2 s of silence is below the peer timeout"
    no_errors(a, b)


def test_sender_reports_outbound_loss_when_asked_for_discarded_data(frame):
    net = SimNet(seed=8)
    a = endpoint(net, "a", frame, 1, reliability=0.2)
    b = endpoint(net, "b", frame, 2)
    ledger = Ledger(net)
    ledger.multicast("a")
    net.run_for(0.05)
    # b misses two datagrams and every heartbeat, then hears a later datagram.
    net.drop = lambda data, src, dest: dest == "b" and src == "a"
    ledger.multicast("a")
    net.run_for(0.01)
    ledger.multicast("a")
    net.run_for(0.5)
    net.drop = None
    ledger.multicast("a")
    assert net.run_until(ledger.all_accounted, 3)
    ledger.check("b")
    outbound = net.of_type("a", OutboundDataLoss)
    assert outbound and outbound[0].dest == "b" and not outbound[0].ptp
    assert sum(e.datagrams for e in outbound) == 2
    assert a.stats.datagrams_lost_outbound == 2
    inbound = net.of_type("b", InboundDataLoss)
    assert [(e.first_message, e.messages) for e in inbound] == [(2, 2)]
    no_errors(a, b)


def test_reliability_zero_reports_loss_without_naks(frame):
    net = SimNet(seed=9, loss=0.2)
    a = endpoint(net, "a", frame, 1, reliability=0, max_datagram=600)
    b = endpoint(net, "b", frame, 2)
    ledger = Ledger(net)
    for _ in range(40):
        for _ in range(5):
            ledger.multicast("a", size=200)
        ledger.ptp("a", "b", size=200)
        net.run_for(0.02)
    assert net.run_until(ledger.all_accounted, 10)
    ledger.check("b")
    losses = net.of_type("b", InboundDataLoss)
    assert losses and all(e.reason == "no-retention" for e in losses)
    assert any(e.ptp for e in losses) and any(not e.ptp for e in losses)
    assert b.stats.naks_sent == 0 and a.stats.datagrams_retransmitted == 0
    assert not net.of_type("b", RetransmissionRequested)
    assert a.retention_deadline() is None
    no_errors(a, b)


def test_late_joiner_starts_mid_stream_without_history(frame):
    net = SimNet(seed=10)
    endpoint(net, "a", frame, 1)
    ledger = Ledger(net)
    for _ in range(5):
        ledger.multicast("a")
    net.run_for(20.0)  # older than the backfill window (peer_timeout)
    b = endpoint(net, "b", frame, 2)
    for _ in range(5):
        ledger.multicast("a")
    net.run_for(1.0)
    seen = ledger.streams_at("b")[(1, False)]
    assert seen == [(i, "d") for i in range(6, 11)]
    assert b.stats.naks_sent == 0 and b.stats.messages_lost_inbound == 0


def _first_datagram_to_b_is_lost_and_recovered(net: SimNet, a, b) -> None:
    """a multicasts twice; b loses a's first DATA datagram and must recover it by NAK."""
    ledger = Ledger(net)
    dropped = []

    def drop_first(data, src, dest):
        if dest == "b" and data[7] == 1 and not dropped:
            dropped.append(data)
            return True
        return False

    net.drop = drop_first
    ledger.multicast("a")
    net.run_for(0.01)
    ledger.multicast("a")
    assert net.run_until(ledger.all_accounted, 2)
    ledger.check("b", lossless=True)
    assert dropped and a.stats.datagrams_retransmitted == 1
    no_errors(a, b)


def test_receiver_present_from_the_start_recovers_a_lost_first_datagram(frame):
    net = SimNet(seed=11)
    a = endpoint(net, "a", frame, 1)
    b = endpoint(net, "b", frame, 2)
    net.run_for(3.0)
    _first_datagram_to_b_is_lost_and_recovered(net, a, b)


def test_receiver_started_after_an_idle_sender_still_recovers_its_first_datagram(frame):
    # The sender's endpoint exists long before the receiver, but sends nothing until
    # after the receiver started: its stream began while the receiver listened, so a
    # lost first datagram must be recovered, not skipped as history.
    net = SimNet(seed=12)
    a = endpoint(net, "a", frame, 1)
    net.run_for(8.3)
    b = endpoint(net, "b", frame, 2)
    net.run_for(0.05)  # a's first data comes before any heartbeat of a reaches b
    _first_datagram_to_b_is_lost_and_recovered(net, a, b)


def test_sender_restart_is_a_new_session_and_the_old_one_times_out(frame):
    net = SimNet(seed=12, loss=0.05)
    endpoint(net, "a", frame, 1, peer_timeout=3.0)
    b = endpoint(net, "b", frame, 2, peer_timeout=3.0)
    ledger = Ledger(net)
    for _ in range(50):
        ledger.multicast("a")
        ledger.ptp("a", "b")
    net.run_for(1.0)
    net.remove("a")  # crash, no goodbye
    endpoint(net, "a", frame, 99, peer_timeout=3.0)
    for _ in range(50):
        ledger.multicast("a")
        ledger.ptp("a", "b")
    assert net.run_until(ledger.all_accounted, 5)
    ledger.check("b", lossless=True)
    net.run_for(5.0)
    silent = net.of_type("b", PeerSilent)
    assert [(e.session, e.reason) for e in silent] == [(1, "timeout")]
    assert set(b.peers()) == {99}
    no_errors(b)


def test_dead_sender_gaps_are_declared_lost_after_peer_timeout(frame):
    net = SimNet(seed=13)
    a = endpoint(net, "a", frame, 1, max_datagram=500)
    b = endpoint(net, "b", frame, 2, peer_timeout=2.0, max_datagram=500)
    ledger = Ledger(net)
    for _ in range(3):
        ledger.multicast("a", size=400)
    net.run_for(0.5)
    # b misses the next two datagrams, then the sender dies (no retransmission possible).
    net.drop = lambda data, src, dest: dest == "b"
    ledger.multicast("a", size=400)
    ledger.multicast("a", size=400)
    net.run_for(0.003)
    net.drop = None
    ledger.multicast("a", size=400)
    net.run_for(0.0001)
    net.remove("a")
    assert net.run_until(ledger.all_accounted, 5)
    ledger.check("b")
    losses = net.of_type("b", InboundDataLoss)
    assert [(e.first_message, e.messages, e.datagrams, e.reason) for e in losses] == [
        (4, 2, 2, "sender-silent")
    ]
    assert [e.reason for e in net.of_type("b", PeerSilent)] == ["timeout"]
    assert a.stats.datagrams_sent > 0
    no_errors(b)


def test_close_makes_peers_forget_the_session_promptly(frame):
    net = SimNet(seed=14)
    a = endpoint(net, "a", frame, 1)
    b = endpoint(net, "b", frame, 2)
    ledger = Ledger(net)
    ledger.multicast("a")
    ledger.ptp("a", "b")
    net.run_for(0.5)
    net.close("a")
    with pytest.raises(rv.TransportClosed):
        a.send_multicast(b"x")
    with pytest.raises(rv.TransportClosed):
        a.send_ptp("b", b"x")
    assert a.next_deadline() is None
    net.run_for(1.5)
    assert [(e.session, e.reason) for e in net.of_type("b", PeerSilent)] == [(1, "closed")]
    ledger.check("b", lossless=True)
    no_errors(a, b)


def test_retransmissions_are_sent_to_the_requester_and_counted(frame):
    net = SimNet(seed=15)
    a = endpoint(net, "a", frame, 1, max_datagram=300)
    b = endpoint(net, "b", frame, 2)
    c = endpoint(net, "c", frame, 3)
    ledger = Ledger(net)
    net.drop = lambda data, src, dest: dest == "b" and data[7] == 1 and data[20] % 2 == 0
    for _ in range(20):
        ledger.multicast("a", size=200)
    net.run_for(0.005)
    net.drop = None
    assert net.run_until(ledger.all_accounted, 3)
    ledger.check("b", lossless=True)
    ledger.check("c", lossless=True)
    sent = net.of_type("a", RetransmissionSent)
    assert sent and all(e.dest == "b" for e in sent)
    assert sum(e.datagrams for e in sent) == 10 == a.stats.datagrams_retransmitted
    assert c.stats.duplicates == 0, "retransmissions go to the requester only"
    assert b.stats.datagrams_missed == 10
    no_errors(a, b, c)


def test_reorder_buffer_limit_drops_and_recovers(frame):
    net = SimNet(seed=16)
    a = endpoint(net, "a", frame, 1, max_datagram=300)
    b = endpoint(net, "b", frame, 2, reorder_limit_datagrams=4)
    ledger = Ledger(net)
    first = []

    def hold_first(data, src, dest):
        if dest == "b" and data[7] == 1 and not first:
            first.append(data)
            return True
        return False

    net.drop = hold_first
    for _ in range(20):
        ledger.multicast("a", size=200)
    assert net.run_until(ledger.all_accounted, 5)
    ledger.check("b", lossless=True)
    assert b.stats.over_limit > 0
    no_errors(a, b)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("reliability", -1),
        ("reliability", float("nan")),
        ("heartbeat_interval", 0),
        ("peer_timeout", 0.5),
        ("max_datagram", 100),
        ("max_datagram", 70000),
        ("max_nak_datagrams", 0),
        ("session_id", 0),
        ("session_id", 1 << 64),
        ("nak_max_interval", 0.01),
        ("reorder_limit_bytes", "big"),
    ],
)
def test_bad_configuration_is_refused_with_a_clear_error(option, value):
    with pytest.raises(rv.InvalidArgument, match=option):
        ReliableEndpoint(now=0.0, **{option: value})


def test_bad_send_arguments_are_refused(frame):
    ep = ReliableEndpoint(now=0.0, frame=frame)
    with pytest.raises(rv.InvalidArgument, match="payload"):
        ep.send_multicast("text")
    with pytest.raises(rv.InvalidArgument, match="dest"):
        ep.send_ptp(None, b"x")
    with pytest.raises(rv.InvalidArgument, match="dest"):
        ep.send_ptp(["unhashable"], b"x")
    ep.send_multicast(bytearray(b"ok"))
    ep.send_multicast_many([b"a", memoryview(b"b")])
    ep.flush(0.0)
    assert len(ep.datagrams_to_send()) == 1
    assert ep.stats.messages_sent == 3


def test_sessions_are_random_and_distinct():
    ids = {ReliableEndpoint(now=0.0).session_id for _ in range(50)}
    assert len(ids) == 50 and all(0 < i < 1 << 64 for i in ids)


def test_deadlines_drive_heartbeats_and_naks(frame):
    a = ReliableEndpoint(now=100.0, session_id=1, frame=frame, heartbeat_interval=0.5)
    b = ReliableEndpoint(now=100.0, session_id=2, frame=frame)
    assert a.next_deadline() == 100.0
    b.handle_timer(100.0)
    b.datagrams_to_send()
    a.handle_timer(100.0)
    [(hb, dest)] = a.datagrams_to_send()
    assert dest is None and a.next_deadline() == 100.5
    for i in range(3):
        a.send_multicast(b"m%d" % i)
        a.flush(100.1)
    d1, d2, d3 = (d for d, _ in a.datagrams_to_send())
    assert a.next_deadline() == pytest.approx(100.1 + a.tail_probe)
    b.receive_datagram(hb, "a", 100.1)
    b.receive_datagram(d1, "a", 100.1)
    b.receive_datagram(d3, "a", 100.1)
    assert b.next_deadline() == pytest.approx(100.1 + b.nak_delay)
    b.handle_timer(100.2)
    [(nak, _to)] = [x for x in b.datagrams_to_send() if x[1] == "a"]
    a.receive_datagram(nak, "b", 100.2)
    [(again, to_b)] = a.datagrams_to_send()
    assert again == d2 and to_b == "b"
    b.receive_datagram(again, "a", 100.21)
    got = [p for e in b.events() if isinstance(e, Delivered) for p in e.payloads]
    assert got == [b"m0", b"m1", b"m2"]
    assert b.next_deadline() == 101.0, "no gap left: only b's next heartbeat is due"


def test_joining_through_a_heartbeat_mid_message_keeps_message_indices_exact(frame):
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame, reliability=0, max_datagram=1000)
    a.handle_timer(0.0)
    a.send_multicast(b"x" * 2500)  # its LAST fragment stays in the open datagram
    a.datagrams_to_send()  # its first fragments leave at 0.0: the stream begins then
    a.handle_timer(30.0)  # heartbeat: the next datagram opens with a continuation
    heartbeat = a.datagrams_to_send()[-1][0]
    b = ReliableEndpoint(now=29.0, session_id=2, frame=frame)
    b.receive_datagram(heartbeat, "a", 30.0)
    a.flush(30.0)
    a.datagrams_to_send()  # the rest of message 1: b never sees it
    a.send_multicast(b"two")  # message 2: lost too
    a.flush(30.1)
    a.datagrams_to_send()
    a.send_multicast(b"three")
    a.flush(30.2)
    for data, _ in a.datagrams_to_send():
        b.receive_datagram(data, "a", 30.2)
    b.handle_timer(30.3)
    events = b.events()
    losses = [e for e in events if isinstance(e, InboundDataLoss)]
    assert [(e.first_message, e.messages, e.reason) for e in losses] == [(2, 1, "no-retention")]
    got = [p for e in events if isinstance(e, Delivered) for p in e.payloads]
    assert got == [b"three"]


def test_idle_ptp_streams_are_dropped_and_a_later_send_starts_a_new_one(frame):
    net = SimNet(seed=17)
    a = endpoint(net, "a", frame, 1, reliability=0.5, peer_timeout=2.0)
    b = endpoint(net, "b", frame, 2, peer_timeout=2.0)
    net.send_ptp("a", "b", b"first")
    net.run_for(0.5)
    assert a.retained_datagrams() == 1
    assert a.retention_deadline() is not None
    net.run_for(5.0)  # idle beyond max(reliability, peer_timeout) + 1 heartbeat
    assert a.retained_datagrams() == 0 and a.retention_deadline() is None
    assert list(a._ptp_out) == []
    net.send_ptp("a", "b", b"second")
    net.run_for(0.5)
    got = [(e.ptp, p) for e in net.of_type("b", Delivered) for p in e.payloads]
    assert got == [(True, b"first"), (True, b"second")]
    assert sorted(b._peers[1].streams) == [0, 1, 2]
    net.run_for(12.0)  # the receiver forgets idle inbound streams too
    assert sorted(b._peers[1].streams) == [0]
    assert not net.of_type("b", InboundDataLoss)
    no_errors(a, b)


def test_counters_snapshot_and_buffer_introspection(frame):
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame, max_datagram=300)
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame)
    for i in range(3):
        a.send_multicast(bytes([i]) * 200)
    a.send_multicast(bytes(1000))
    a.flush(0.0)
    datagrams = [d for d, _ in a.datagrams_to_send()]
    for data in datagrams[1:3]:
        b.receive_datagram(data, "a", 0.0)
    assert b.buffered_bytes() == sum(len(d) for d in datagrams[1:3])
    b.receive_datagram(datagrams[0], "a", 0.0)
    b.receive_datagram(datagrams[3], "a", 0.0)
    assert 0 < b.buffered_bytes() < 1000, "the first fragments of the big message"
    for data in datagrams[4:]:
        b.receive_datagram(data, "a", 0.0)
    assert b.buffered_bytes() == 0
    snapshot = b.stats.as_dict()
    assert snapshot["messages_delivered"] == 4
    assert snapshot["datagrams_received"] == len(datagrams)
    assert set(snapshot) >= {"malformed", "duplicates", "naks_sent", "datagrams_lost_inbound"}
    assert b.peers() == {1: "a"}


def test_a_stream_ages_from_its_first_flush_not_from_its_creation(frame):
    """Send calls take no time: each stream is stamped by the flush that first sends it, so
    a point-to-point stream opened by an endpoint that existed long before is young."""
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame)
    a.handle_timer(0.0)
    a.datagrams_to_send()
    a.send_ptp("b", b"request")
    a.send_multicast(b"news")
    ages = {dest: frame.parse(d)[5] for d, dest in a.flush_datagrams(5000.0)}
    assert ages == {"b": 0, None: 0}
    a.send_ptp("b", b"again")
    [(data, dest)] = a.flush_datagrams(5000.25)
    assert dest == "b" and frame.parse(data)[5] == 250
    lone = a.flush_lone(b"lone", "b", 5001.0)
    assert frame.parse(lone)[5] == 1000
    # A time earlier than the core's last time-bearing call counts as that call's.
    assert frame.parse(a.flush_lone(b"late", "b", 0.0))[5] == 1000
    a.send_ptp("c", b"big" * 30000)  # its first datagram is closed by the send call
    to_c = [frame.parse(bytes(d)) for d, dest in a.flush_datagrams(5002.0) if dest == "c"]
    assert [(p[3], p[5]) for p in to_c] == [(1, 0), (2, 0)], "a new stream: age 0"
