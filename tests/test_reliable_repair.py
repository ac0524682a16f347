"""Repair traffic of the reliable core as the number of hosts grows (issue 40).

A loss one host suffers alone is repaired to that host only. A loss several
hosts share (a burst on the sender's link, a lossy subnet, or simply many
hosts each losing a little) is resent once to the group, which serves every
host that misses it, instead of once per host; and once a sender has seen
shared losses its heartbeats say so (E_SHARED), and receivers spread their
first NAK over ``nak_spread`` so that most of them hear the repair before
they ask. Before this, N hosts missing one datagram caused N NAKs and N
retransmissions (NAK implosion).
"""

from __future__ import annotations

import itertools
import random
import struct
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simnet import Ledger, SimNet

import rvasync as rv
from rvasync import _accel, _rmwire
from rvasync.protocol.reliable import SHARED_PEERS, ReliableEndpoint

_DATA = struct.Struct("<QIQ")  # session, stream, seq (a DATA datagram, from byte 8)


@pytest.fixture(params=_accel.implementations("rmframe"), ids=lambda m: m.__name__.split(".")[0])
def frame(request):
    return request.param


class Tap:
    """Every transmission of a SimNet, sorted: NAKs (who asked for which datagram,
    when) and resends of the publisher's multicast stream (to whom, when)."""

    def __init__(self, net: SimNet, frame, publisher: int) -> None:
        self.net = net
        self.frame = frame
        self.publisher = publisher
        self.seen: set[int] = set()
        #: seq -> [(time, dest)] of each resend (dest None: the group)
        self.resends: dict[int, list[tuple[float, object]]] = defaultdict(list)
        #: seq -> [(time, requester session)] of each NAK asking for it (multicast stream)
        self.asked: dict[int, list[tuple[float, int]]] = defaultdict(list)
        #: (stream, seq) -> times of NAKs for the publisher's point-to-point streams
        self.asked_ptp: dict[tuple[int, int], list[float]] = defaultdict(list)
        self.shared_flags: list[tuple[float, bool]] = []
        net.tap = self

    def __call__(self, src, data, dest) -> None:
        data = bytes(data)
        p = self.frame.parse(data)
        if p is None:
            return
        if p[0] == _rmwire.T_DATA and p[1] == self.publisher and p[2] == 0:
            if p[3] in self.seen:
                self.resends[p[3]].append((self.net.now, dest))
            self.seen.add(p[3])
        elif p[0] == _rmwire.T_NAK and p[2] == self.publisher:
            for first, count in p[4]:
                for seq in range(first, first + count):
                    if p[3] == 0:
                        self.asked[seq].append((self.net.now, p[1]))
                    else:
                        self.asked_ptp[(p[3], seq)].append(self.net.now)
        elif p[0] == _rmwire.T_HEARTBEAT and p[1] == self.publisher:
            for entry in p[3]:
                if entry[0] == 0:
                    self.shared_flags.append((self.net.now, bool(entry[1] & _rmwire.E_SHARED)))

    def group_resends(self, seq: int) -> int:
        return sum(1 for _, dest in self.resends[seq] if dest is None)


def service(frame, receivers: int, seed: int, **options) -> tuple[SimNet, list[str]]:
    net = SimNet(seed=seed, delay=(0.0002, 0.001))
    names = ["p", *(f"r{i}" for i in range(receivers))]
    for i, name in enumerate(names):
        net.add(
            name,
            ReliableEndpoint(now=0.0, session_id=100 + i, frame=frame, max_datagram=400, **options),
        )
    net.run_for(1.5)  # everyone has heard everyone's heartbeat
    return net, names


def first_copy_dropper(net: SimNet, seqs: set[int], dests) -> callable:
    """A SimNet drop hook: the first transmission of these multicast datagrams of the
    publisher never reaches ``dests``; repairs (later transmissions) pass."""
    first: dict[int, int] = {}

    def drop(data, src, dest):
        if src != "p" or bytes(data)[7] != _rmwire.T_DATA:
            return False
        _session, stream, seq = _DATA.unpack_from(bytes(data), 8)
        if stream != 0 or seq not in seqs:
            return False
        return first.setdefault(seq, net.sent) == net.sent and dest in dests

    return drop


def publish(net: SimNet, ledger: Ledger, count: int, names: list[str] | None = None) -> None:
    """``count`` messages from the publisher, a millisecond apart; then every receiver (of
    ``names``) has each once, in order."""
    for _ in range(count):
        ledger.multicast("p", size=150)
        net.run_for(0.001)
    assert net.run_until(ledger.all_accounted, 10)
    for name in (names or [])[1:]:
        ledger.check(name, lossless=True)


def test_a_loss_one_host_suffers_alone_is_repaired_to_it_alone(frame):
    net, names = service(frame, 4, seed=1)
    tap = Tap(net, frame, 100)
    ledger = Ledger(net)
    net.drop = first_copy_dropper(net, set(range(2, 40, 3)), {"r0"})
    publish(net, ledger, 60, names)
    assert tap.resends, "nothing was lost"
    assert all(dest == "r0" for sends in tap.resends.values() for _, dest in sends)
    assert net.endpoints["p"].stats.retransmissions_to_group == 0
    assert all(net.endpoints[n].stats.duplicates == 0 for n in names[2:])
    assert not any(flag for _, flag in tap.shared_flags), "no loss was shared"


def test_a_loss_every_host_shares_is_resent_to_the_group_once(frame):
    """Eight hosts miss the same datagrams: each is resent at most twice (to the first
    host that asked, then once to the group for the rest), not eight times."""
    net, names = service(frame, 8, seed=2)
    tap = Tap(net, frame, 100)
    ledger = Ledger(net)
    lost = {5, 9, 13, 14}
    net.drop = first_copy_dropper(net, lost, set(names[1:]))
    publish(net, ledger, 40, names)
    for seq in lost:
        assert tap.group_resends(seq) == 1, (seq, tap.resends[seq])
        assert len(tap.resends[seq]) <= 2, (seq, tap.resends[seq])
    publisher = net.endpoints["p"]
    assert publisher.stats.datagrams_retransmitted <= 2 * len(lost)
    assert publisher.stats.retransmissions_to_group == len(lost)


def _naks_for_one_shared_loss(frame, spread: float, receivers: int = 20) -> tuple[int, Tap]:
    net, names = service(frame, receivers, seed=3, nak_spread=spread)
    tap = Tap(net, frame, 100)
    ledger = Ledger(net)
    seq = _shared_loss_first(net, names, ledger) + 2
    net.drop = first_copy_dropper(net, {seq}, set(names[1:]))
    publish(net, ledger, 6, names)
    return len(tap.asked[seq]), tap


def test_receivers_spread_their_naks_once_the_sender_says_losses_are_shared(frame):
    """Twenty hosts miss the same datagram: without the spread all twenty ask; with it,
    most of them hear the repair to the group before their NAK is due."""
    spread_naks, tap = _naks_for_one_shared_loss(frame, 0.02)
    together_naks, _ = _naks_for_one_shared_loss(frame, 0.0)
    assert together_naks == 20
    assert spread_naks <= 6, spread_naks
    flags = [flag for when, flag in tap.shared_flags]
    assert flags and flags[-1], "the heartbeats after a group resend carry E_SHARED"


def test_the_shared_flag_clears_when_losses_stop_being_shared(frame):
    net, names = service(frame, 3, seed=4, peer_timeout=3.0)
    tap = Tap(net, frame, 100)
    ledger = Ledger(net)
    net.drop = first_copy_dropper(net, {2}, set(names[1:]))
    publish(net, ledger, 5)
    shared_from = net.now
    net.run_for(5.0)
    during = [flag for when, flag in tap.shared_flags if when < shared_from + 2.5]
    after = [flag for when, flag in tap.shared_flags if when > shared_from + 3.5]
    assert during and all(during)
    assert after and not any(after)


def _shared_loss_first(net: SimNet, names: list[str], ledger: Ledger) -> int:
    """Three datagrams, the second lost by every receiver (resent to the group: the
    publisher's heartbeats say its losses are shared from now on); the next seq."""
    net.drop = first_copy_dropper(net, {2}, set(names[1:]))
    publish(net, ledger, 3)
    net.drop = None
    net.run_for(1.2)
    return 4


def test_a_sender_among_many_daemons_says_its_losses_are_shared_from_the_start(frame):
    """Among more than SHARED_PEERS daemons the first loss on the sender's own link is
    already asked for with spread requests, not one NAK from every host at once."""
    net, names = service(frame, SHARED_PEERS + 6, seed=9)
    tap = Tap(net, frame, 100)
    ledger = Ledger(net)
    net.run_for(1.1)
    assert tap.shared_flags and all(flag for _, flag in tap.shared_flags)
    net.drop = first_copy_dropper(net, {3}, set(names[1:]))
    publish(net, ledger, 6)
    assert len(tap.asked[3]) <= 10, len(tap.asked[3])
    assert tap.group_resends(3) == 1
    few, _ = service(frame, 3, seed=9)
    few_tap = Tap(few, frame, 100)
    few.run_for(1.1)
    assert few_tap.shared_flags and not any(flag for _, flag in few_tap.shared_flags)


def test_point_to_point_gaps_are_asked_for_without_spread(frame):
    """The spread only ever delays NAKs of a multicast stream whose sender says its
    losses are shared: a lost point-to-point datagram is asked for after nak_delay."""
    net, names = service(frame, 2, seed=5, nak_spread=0.5)
    tap = Tap(net, frame, 100)
    ledger = Ledger(net)
    _shared_loss_first(net, names, ledger)
    assert tap.shared_flags[-1][1]
    lost: list[int] = []

    def drop_first_ptp(data, src, dest):
        data = bytes(data)
        if src == "p" and data[7] == _rmwire.T_DATA and not lost:
            _session, stream, _seq = _DATA.unpack_from(data, 8)
            if stream != 0:
                lost.append(net.now)
                return True
        return False

    net.drop = drop_first_ptp
    for _ in range(4):
        ledger.ptp("p", "r1", size=150)
        net.run_for(0.001)
    assert net.run_until(ledger.all_accounted, 5)
    ledger.check("r1", lossless=True)
    assert lost and tap.asked_ptp, "the point-to-point datagram was not lost"
    asked_at = min(min(times) for times in tap.asked_ptp.values())
    assert asked_at - lost[0] < 0.02  # nak_delay 10 ms + delays, not up to 0.5 s


def test_the_spread_is_a_truncated_exponential_most_hosts_wait_nearly_all_of_it(frame):
    """With the publisher deaf to NAKs, every host's first NAK shows its draw: all within
    nak_delay + [0, nak_spread), most near the end, a few early."""
    spread = 0.1
    net, names = service(frame, 120, seed=6, nak_spread=spread)
    tap = Tap(net, frame, 100)
    net.drop = first_copy_dropper(net, {2}, set(names[1:]))
    for _ in range(3):  # a first shared loss: the heartbeats then carry E_SHARED
        net.send_multicast("p", b"x" * 150)
        net.run_for(0.001)
    net.run_for(1.5)
    assert tap.group_resends(2) == 1 and tap.shared_flags[-1][1]
    dropped = first_copy_dropper(net, {5}, set(names[1:]))
    net.drop = lambda data, src, dest: dest == "p" or dropped(data, src, dest)
    start = net.now
    for _ in range(3):
        net.send_multicast("p", b"y" * 150)
        net.run_for(0.0005)
    net.run_for(0.3)
    first_nak: dict[int, float] = {}
    for when, requester in tap.asked[5]:
        first_nak.setdefault(requester, when)
    waits = sorted(when - start for when in first_nak.values())
    assert len(waits) == 120
    assert waits[0] >= 0.01 and waits[-1] < 0.01 + spread + 0.005
    median = waits[len(waits) // 2] - 0.01
    assert median > 0.75 * spread, median
    assert sum(1 for w in waits if w - 0.01 < 0.3 * spread) >= 1


def test_unconfirmed_requesters_never_cause_a_resend_to_the_group(frame):
    """Two made-up sessions asking for the same datagram (their source addresses may be
    spoofed) are served one datagram each, point to point: never the whole group."""
    net, _names = service(frame, 1, seed=7)
    ledger = Ledger(net)
    for _ in range(5):
        ledger.multicast("p", size=150)
    net.run_for(0.1)
    publisher = net.endpoints["p"]
    for forger in (900, 901):
        nak = frame.build_nak(forger, 100, 0, [(1, 3)])
        publisher.receive_datagram(nak, f"x{forger}", net.now)
    out = publisher.datagrams_to_send()
    assert out and all(dest is not None for _, dest in out)
    assert publisher.stats.retransmissions_to_group == 0


def test_a_loss_is_asked_for_while_reordered_datagrams_keep_filling_other_holes(frame):
    """A steady stream of large messages over a link that reorders (every fragment of
    a burst with its own delay): the lost datagram is asked for within tens of
    milliseconds. Before, every reordered datagram that filled a hole postponed the
    NAK by nak_delay, so it went out only when the stream paused (about 1 s here)."""
    net = SimNet(seed=8, delay=(0.0002, 0.002))
    for i, name in enumerate(("p", "r")):
        net.add(name, ReliableEndpoint(now=0.0, session_id=100 + i, frame=frame,
                                       max_datagram=1400))  # fmt: skip
    net.run_for(1.5)
    tap = Tap(net, frame, 100)
    net.drop = first_copy_dropper(net, {20}, {"r"})
    ledger = Ledger(net)
    start = net.now
    for _ in range(500):  # 16 KiB every 2 ms: 12 datagrams a burst, for a second
        ledger.multicast("p", size=16384)
        net.run_for(0.002)
    assert tap.asked[20], "the lost datagram was never asked for"
    assert tap.asked[20][0][0] - start < 0.1, tap.asked[20][0][0] - start
    assert net.run_until(ledger.all_accounted, 10)
    ledger.check("r", lossless=True)


@pytest.mark.parametrize("value", [-0.01, float("nan"), "wide"])
def test_a_bad_nak_spread_is_refused_with_a_clear_error(value):
    with pytest.raises(rv.InvalidArgument, match="nak_spread"):
        ReliableEndpoint(now=0.0, nak_spread=value)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    seed=st.integers(0, 2**32),
    receivers=st.integers(2, 12),
    loss=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    duplicate=st.sampled_from([0.0, 0.05]),
    jitter=st.sampled_from([0.0002, 0.005, 0.03]),
    burst=st.floats(0.0, 0.3),
    count=st.integers(20, 150),
)
def test_repairs_reach_everyone_and_go_to_the_group_only_when_shared(
    frame, seed, receivers, loss, duplicate, jitter, burst, count
):
    """Under loss, duplication, reordering, delay and losses shared by every host (the
    publisher's link), every message arrives once, in order; a datagram goes to the
    group only after two different hosts asked for it, and at most once per
    nak_max_interval."""
    net = SimNet(seed=seed, loss=loss, duplicate=duplicate, delay=(0.0001, 0.0001 + jitter))
    names = ["p", *(f"r{i}" for i in range(receivers))]
    for i, name in enumerate(names):
        net.add(
            name,
            ReliableEndpoint(
                now=0.0, session_id=100 + i, frame=frame, max_datagram=400, reliability=60
            ),
        )
    net.run_for(1.5)
    tap = Tap(net, frame, 100)
    rng = random.Random(seed)
    shared = {seq for seq in range(1, count + 1) if rng.random() < burst}
    ledger = Ledger(net)
    net.drop = first_copy_dropper(net, shared, set(names[1:]))
    for _ in range(count):
        ledger.multicast("p", size=rng.randint(20, 900))
        if rng.random() < 0.3:
            net.run_for(rng.choice([0.0005, 0.003, 0.05]))
    assert net.run_until(ledger.all_accounted, 120), "not everything arrived"
    for name in names[1:]:
        ledger.check(name, lossless=True)
        assert net.endpoints[name].stats.internal_errors == 0
    window = net.endpoints["p"].nak_max_interval
    for seq, sends in tap.resends.items():
        group_times = [when for when, dest in sends if dest is None]
        for when in group_times:
            askers = {who for at, who in tap.asked[seq] if when - window - 0.1 < at <= when}
            assert len(askers) >= 2, (seq, sends, tap.asked[seq])
        for a, b in itertools.pairwise(group_times):
            assert b - a >= window, (seq, group_times)
    counts = Counter(dest is None for sends in tap.resends.values() for _, dest in sends)
    assert counts[True] == net.endpoints["p"].stats.retransmissions_to_group
