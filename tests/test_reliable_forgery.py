"""Forged datagrams against the reliable core: what unknown sources can and cannot cause.

An attacker who can send UDP to the service port can invent sender sessions
at will. The core bounds what such sessions may cost (tracked sessions,
streams, NAKs, retransmissions), pins each session to the address it was
first heard from, and names the requesting session in outbound reports.
Forged *content* can only be kept out with the service key (a MAC checked by
the driver, rvasync.daemon.datagram_mac); see docs/service-key.md.
"""

from __future__ import annotations

import pytest
from simnet import Ledger, SimNet

from rvasync import _accel
from rvasync.protocol.reliable import ReliableEndpoint
from rvasync.protocol.reliable_events import (
    OutboundDataLoss,
    RetransmissionSent,
)


@pytest.fixture(params=_accel.implementations("rmframe"), ids=lambda m: m.__name__.split(".")[0])
def frame(request):
    return request.param


def forged_data(frame, session: int, seq: int) -> bytes:
    """A valid DATA datagram of ``session`` whose stream starts at ``seq`` (a gap before it)."""
    packer = frame.Packer(1400, session, 0)
    for _ in range(seq):
        packer.add(b"forged")
        packer.flush()
    return packer.take()[-1]


def test_a_flood_of_invented_sessions_is_bounded_and_spares_the_known_peer(frame):
    net = SimNet(seed=3)
    a = net.add("a", ReliableEndpoint(now=0.0, session_id=1, frame=frame))
    b = net.add(
        "b",
        ReliableEndpoint(now=0.0, session_id=2, frame=frame, max_new_peers=16, probation_naks=8),
    )
    ledger = Ledger(net)
    for _ in range(5):
        ledger.multicast("a")
    net.run_for(2.0)  # a is heard over two heartbeats: confirmed
    forgers = 0
    start = net.now
    for _ in range(30):
        for _ in range(100):
            forgers += 1
            b.receive_datagram(forged_data(frame, 1000 + forgers, 5), ("x", forgers), net.now)
        for _ in range(3):
            ledger.multicast("a")
        net.run_for(0.1)
    net.run_for(3.0)
    ledger.check("b", lossless=True)
    assert len(b.peers()) <= 1 + 16
    assert b.stats.peers_refused >= forgers - 16 * 2
    # NAKs (all of them for forged gaps: a's stream is lossless) stay within the budget
    # of 8 per heartbeat interval, however many sessions were invented.
    intervals = int(net.now - start) + 2
    assert b.stats.naks_sent <= 8 * intervals
    assert b.stats.internal_errors == 0, b.last_internal_error
    assert a.stats.internal_errors == 0


def test_naks_to_unconfirmed_sessions_share_a_budget_per_interval(frame):
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame, max_new_peers=100, probation_naks=5)
    for n in range(50):
        b.receive_datagram(forged_data(frame, 100 + n, 4), ("x", n), 0.0)
    b.handle_timer(0.05)
    naks = [d for d, dest in b.datagrams_to_send() if dest != None]  # noqa: E711
    assert len(naks) == 5
    assert b.stats.naks_deferred == 45
    b.handle_timer(1.0)  # next interval: a fresh budget
    naks = [d for d, dest in b.datagrams_to_send() if dest != None]  # noqa: E711
    assert len(naks) == 5


def test_a_known_session_is_pinned_to_its_address(frame):
    """A datagram naming a known session from elsewhere neither feeds it nor redirects NAKs."""
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame)
    b.receive_datagram(forged_data(frame, 7, 1), "a", 0.0)
    b.events()
    liar = frame.build_heartbeat(7, 0, [(0, 0, 0, 1, 1, 500, 1)])
    b.receive_datagram(liar, "evil", 0.01)
    assert b.stats.wrong_source == 1
    b.handle_timer(0.5)
    assert not [dest for _, dest in b.datagrams_to_send() if dest == "evil"]
    assert b.peers() == {7: "a"}


def test_streams_per_session_are_bounded(frame):
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame, max_streams_per_peer=3)
    for stream in range(10):
        packer = frame.Packer(1400, 7, stream)
        packer.add(b"x")
        packer.flush()
        b.receive_datagram(packer.take()[0], "a", 0.0)
    assert b.stats.streams_refused == 7


def test_a_nak_from_an_unconfirmed_session_is_served_one_datagram(frame):
    """A spoofed requester cannot make the sender resend megabytes to its victim."""
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame, max_datagram=1400)
    for _ in range(200):
        a.send_multicast(bytes(1000))
    a.flush_datagrams(0.0)
    nak = frame.build_nak(99, 1, 0, [(1, 200)])
    a.receive_datagram(nak, "victim", 0.1)
    resent = [d for d, dest in a.datagrams_to_send() if dest == "victim"]
    assert len(resent) == 1
    (event,) = [e for e in a.events() if isinstance(e, RetransmissionSent)]
    assert event.session == 99


def test_outbound_reports_name_the_requesting_session(frame):
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame, reliability=1.0)
    a.send_multicast(b"x")
    a.flush_datagrams(0.0)
    a.handle_timer(5.0)  # retention over: datagram 1 is gone
    nak = frame.build_nak(42, 1, 0, [(1, 1)])
    a.receive_datagram(nak, "r", 5.0)
    (loss,) = [e for e in a.events() if isinstance(e, OutboundDataLoss)]
    assert loss.session == 42 and loss.dest == "r"


def test_retention_is_bounded_in_bytes_and_what_it_drops_is_reported(frame):
    """Over max_retention the oldest datagrams go early; a receiver asking for them is told
    (OutboundDataLoss here, the heartbeat's low mark there), never silently."""
    a = ReliableEndpoint(
        now=0.0, session_id=1, frame=frame, max_datagram=1400, max_retention=20_000
    )
    for n in range(100):
        a.send_multicast(bytes(1000))
        a.flush_datagrams(n * 0.001)
    assert a.retained_bytes() <= 20_000
    assert a.stats.retention_trimmed >= 80
    assert a.retained_datagrams() < 25
    # A receiver that missed everything asks for it all: the trimmed ones are reported gone.
    a.receive_datagram(frame.build_nak(9, 1, 0, [(1, 100)]), "r", 0.2)
    (loss,) = [e for e in a.events() if isinstance(e, OutboundDataLoss)]
    assert loss.datagrams == 100 - a.retained_datagrams()


def test_a_receiver_reports_datagrams_trimmed_from_retention_as_lost(frame):
    net = SimNet(seed=5)
    a = net.add(
        "a",
        ReliableEndpoint(now=0.0, session_id=1, frame=frame, max_datagram=1400, max_retention=8000),
    )
    net.add("b", ReliableEndpoint(now=0.0, session_id=2, frame=frame))
    ledger = Ledger(net)
    ledger.multicast("a")
    net.run_for(2.0)  # b knows a, a is confirmed
    net.isolated.add("b")
    for _ in range(40):
        ledger.multicast("a", size=1000)
        net.run_for(0.001)
    net.isolated.discard("b")
    net.run_for(5.0)
    assert a.stats.retention_trimmed > 0
    ledger.check("b")  # every message delivered or counted in a loss report, exactly
