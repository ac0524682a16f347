"""Property tests: under random loss, duplication and reordering, every message is presented
exactly once, in per-sender order per stream kind, as delivered or (only when retention is
too short) as reported lost. Run against both rmframe implementations."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simnet import Ledger, SimNet

from rvasync import _accel
from rvasync.protocol.reliable import ReliableEndpoint
from rvasync.protocol.reliable_events import InboundDataLoss

NAMES = "abc"

#: Loss rates: the extremes are what matter, so they are drawn more often than the middle.
loss_rates = st.one_of(st.sampled_from([0.0, 0.05, 0.2]), st.floats(0.0, 0.2))


def make_traffic(seed: int, count: int, big: float, cuts: float, nodes: int) -> list:
    """``count`` sends (sender, destination or None, size, pause after, node to cut off or
    reconnect or None), from one seed.

    Hypothesis draws the seed and the shape; generating the list from a seed keeps
    hundreds of messages per example cheap. A cut isolates a node from the network
    until it is drawn again, 3 s pass or the traffic ends: up to seconds of silence.
    """
    rng = random.Random(seed)
    traffic = []
    for _ in range(count):
        sender = rng.randrange(nodes)
        dest = None if rng.random() < 0.6 else rng.randrange(nodes)
        size = rng.randint(1400, 6000) if rng.random() < big else rng.randint(17, 300)
        pause = rng.choice([0.0] * 8 + [0.001, 0.01, 0.2])
        cut = rng.randrange(nodes) if rng.random() < cuts else None
        traffic.append((sender, dest, size, pause, cut))
    return traffic


traffic_shape = st.tuples(
    st.integers(10, 250), st.sampled_from([0.0, 0.05, 0.2]), st.sampled_from([0.0, 0.0, 0.05])
)

PROPERTY_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)


@pytest.fixture(params=_accel.implementations("rmframe"), ids=lambda m: m.__name__.split(".")[0])
def frame(request):
    return request.param


def build(frame, seed, loss, duplicate, delay, nodes, lone=False, **options):
    net = SimNet(seed=seed, loss=loss, duplicate=duplicate, delay=delay, lone=lone)
    for i in range(nodes):
        net.add(
            NAMES[i],
            ReliableEndpoint(
                now=0.0, session_id=100 + i, frame=frame, max_datagram=1400, **options
            ),
        )
    return net


def play(net: SimNet, ledger: Ledger, nodes: int, traffic) -> None:
    cut_at = {}
    for sender, dest, size, pause, cut in traffic:
        if cut is not None:
            cut_at.setdefault(NAMES[cut], net.now)
        for name, since in list(cut_at.items()):
            # Reconnect when drawn again, or after 3 s (well within peer_timeout).
            if (cut is not None and name == NAMES[cut] and since < net.now) or net.now - since > 3:
                del cut_at[name]
        net.isolated = set(cut_at)
        src = NAMES[sender % nodes]
        if dest is None:
            ledger.multicast(src, size)
        else:
            target = NAMES[dest % nodes]
            if target == src:
                target = NAMES[(dest + 1) % nodes]
            ledger.ptp(src, target, size)
        if pause:
            net.run_for(pause)
    net.isolated.clear()


@PROPERTY_SETTINGS
@given(
    seed=st.integers(0, 2**32),
    loss=loss_rates,
    duplicate=st.floats(0.0, 0.1),
    jitter=st.floats(0.0, 0.01),
    nodes=st.integers(2, 3),
    shape=traffic_shape,
    lone=st.booleans(),
)
def test_long_retention_delivers_everything_once_in_order(
    frame, seed, loss, duplicate, jitter, nodes, shape, lone
):
    """``lone``: each turn's first message goes out at once through ``flush_lone``."""
    traffic = make_traffic(seed, *shape, nodes)
    net = build(
        frame, seed, loss, duplicate, (0.0001, 0.0001 + jitter), nodes, lone, reliability=30
    )
    ledger = Ledger(net)
    play(net, ledger, nodes, traffic)
    assert net.run_until(ledger.all_accounted, 60), "not everything arrived within 60 s"
    for name in net.endpoints:
        ledger.check(name, lossless=True)
        ep = net.endpoints[name]
        assert ep.stats.internal_errors == 0, ep.last_internal_error
        assert ep.stats.malformed == 0


@PROPERTY_SETTINGS
@given(
    seed=st.integers(0, 2**32),
    loss=loss_rates,
    duplicate=st.floats(0.0, 0.1),
    jitter=st.floats(0.0, 0.05),
    reliability=st.sampled_from([0.0, 0.02, 0.1, 0.5]),
    nodes=st.integers(2, 3),
    shape=traffic_shape,
    lone=st.booleans(),
)
def test_short_retention_reports_exactly_what_was_lost(
    frame, seed, loss, duplicate, jitter, reliability, nodes, shape, lone
):
    traffic = make_traffic(seed, *shape, nodes)
    net = build(
        frame,
        seed,
        loss,
        duplicate,
        (0.0001, 0.0001 + jitter),
        nodes,
        lone,
        reliability=reliability,
    )
    ledger = Ledger(net)
    play(net, ledger, nodes, traffic)
    assert net.run_until(ledger.all_accounted, 60), "some messages were neither delivered nor lost"
    for name in net.endpoints:
        ledger.check(name)
        ep = net.endpoints[name]
        assert ep.stats.internal_errors == 0, ep.last_internal_error
        lost = sum(e.messages for e in net.of_type(name, InboundDataLoss))
        assert lost == ep.stats.messages_lost_inbound


def drop_openings(net: SimNet, frame, count: int) -> set:
    """Drop the first transmission of datagrams 1..``count`` of every point-to-point stream.

    Retransmissions (a second copy of the same datagram) pass, so whatever the
    receiver asks for again arrives. Returns the set of (sender, stream, seq) dropped.
    """
    dropped: set = set()

    def drop(data, src, dest):
        p = frame.parse(bytes(data))
        if p is None or p[0] != frame.T_DATA or p[2] == 0 or p[3] > count:
            return False
        key = (p[1], p[2], p[3])
        if key in dropped:
            return False
        dropped.add(key)
        return True

    net.drop = drop
    return dropped


@PROPERTY_SETTINGS
@given(
    seed=st.integers(0, 2**32),
    origin=st.sampled_from([0.0, 1000.0, 250_000.0]),
    idle=st.floats(0.0, 30.0),
    opening=st.integers(1, 3),
    reliability=st.sampled_from([30.0, 0.0]),
    nodes=st.integers(2, 3),
    turns=st.integers(1, 6),
    per_turn=st.integers(1, 4),
    big=st.booleans(),
    lone=st.booleans(),
)
def test_lost_opening_of_a_new_ptp_stream_is_recovered_or_reported(
    frame, seed, origin, idle, opening, reliability, nodes, turns, per_turn, big, lone
):
    """The first datagrams of a new point-to-point stream (a first request to an inbox on
    another daemon) are lost: the receiver, listening long before the stream began, still
    gets every message (NAK and retransmission), or with no retention a loss report counting
    exactly the lost ones. Never a silent loss, whatever the endpoints' clock origin and
    however long they idled before the stream began."""
    net = SimNet(seed=seed, start=origin, delay=(0.0002, 0.002), lone=lone)
    for i in range(nodes):
        net.add(
            NAMES[i],
            ReliableEndpoint(
                now=origin,
                session_id=100 + i,
                frame=frame,
                max_datagram=1400,
                reliability=reliability,
            ),
        )
    net.run_for(idle)
    dropped = drop_openings(net, frame, opening)
    ledger = Ledger(net)
    rng = random.Random(seed)
    for _ in range(turns):
        for _ in range(per_turn):
            src = rng.randrange(nodes)
            dest = (src + 1 + rng.randrange(nodes - 1)) % nodes
            size = rng.randint(1500, 4000) if big and rng.random() < 0.3 else rng.randint(17, 300)
            ledger.ptp(NAMES[src], NAMES[dest], size)
        net.run_for(rng.choice([0.0005, 0.01, 0.2]))
    assert net.run_until(ledger.all_accounted, 60), "some messages were neither delivered nor lost"
    assert dropped, "the test dropped nothing"
    for name in net.endpoints:
        ledger.check(name, lossless=reliability > 0)
        ep = net.endpoints[name]
        assert ep.stats.internal_errors == 0, ep.last_internal_error
        lost = sum(e.messages for e in net.of_type(name, InboundDataLoss))
        assert lost == ep.stats.messages_lost_inbound
