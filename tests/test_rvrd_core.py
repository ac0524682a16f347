"""Property tests of the routing daemon's sans-IO core (rvasync.protocol.rvrd).

Random topologies (line, ring, full mesh, random graphs; some networks shared
by two routers), random interest and random link failures and repairs. After
every change the domain settles, then each published message must reach every
network that listens to it and that a path reaches exactly once, cross each
link at most once, reach no network that does not listen, and be counted as
lost wherever a listening network has no path: a loss report for that
network, presented there or waiting for a path there.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync.protocol.rvrd import (
    Deliver,
    DeliverRun,
    NetworkPolicy,
    Present,
    RouterCore,
    SendFrame,
)
from rvasync.protocol.rvrd.patterns import intersects
from rvasync.subjects import subject_matches
from tests.rvrd_sim import Domain

SUBJECTS = ["A.X", "A.Y", "B.X", "B.Y.Z"]
PATTERNS = ["A.X", "A.*", "B.>", ">", "*.X", "B.Y.Z"]


def _edges(kind: str, n: int, extra: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if kind == "line":
        return [(i, i + 1) for i in range(n - 1)]
    if kind == "ring":
        return [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)]
    if kind == "mesh":
        return list(itertools.combinations(range(n), 2))
    return sorted({(min(a, b), max(a, b)) for a, b in extra if a != b and a < n and b < n})


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    n = draw(st.integers(2, 6))
    kind = draw(st.sampled_from(["line", "ring", "mesh", "random"]))
    extra = draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=10))
    edges = _edges(kind, n, extra)
    costs = {e: draw(st.integers(1, 4)) for e in edges}
    attach = {f"r{i}": [f"n{i}"] for i in range(n)}
    # Some LANs have a second router (redundancy).
    for i in range(n):
        if draw(st.booleans()) and draw(st.booleans()):
            other = draw(st.integers(0, n - 1))
            if f"n{i}" not in attach[f"r{other}"]:
                attach[f"r{other}"].append(f"n{i}")
    listens = draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(PATTERNS)), max_size=8)
    )
    events = draw(
        st.lists(
            st.tuples(st.sampled_from(["cut", "heal", "unlisten"]), st.integers(0, 20)),
            max_size=6,
        )
    )
    weights = {
        (r, net): tuple(draw(st.lists(st.tuples(st.sampled_from(PATTERNS), st.integers(1, 5)))))
        for r, nets in attach.items()
        for net in nets
        if draw(st.booleans())
    }
    return {
        "lan": draw(st.booleans()),
        "weights": weights,
        "attach": attach,
        "edges": edges,
        "costs": costs,
        "listens": listens,
        "events": events,
    }


def _check(domain: Domain, ids: itertools.count, batched: bool = False) -> None:
    for network in sorted(domain.networks()):
        for subject in SUBJECTS:
            msg_id = next(ids)
            counted = {
                other: domain.counted(other, network, subject) for other in domain.networks()
            }
            before_reported = domain.reported()
            if batched:
                # Three messages in one batch: each must fare as a single message would.
                batch = [msg_id, next(ids), next(ids)]
                domain.publish_batch(network, subject, batch)
            else:
                batch = [msg_id]
                domain.publish(network, subject, msg_id)
            reach = domain.reachable_networks(network)
            for other, msg_id in itertools.product(domain.networks(), batch):
                got = domain.delivered[(other, msg_id)]
                if other == network or not domain.wants(other, subject):
                    assert got == 0, (other, subject, "delivered where nobody listens")
                elif other in reach:
                    # Exactly once. Without LAN peering, routers of a shared LAN that are
                    # cut apart from each other each serve it (at most once per piece).
                    split = (
                        1 if domain.lan else max(_pieces(domain, other), _pieces(domain, network))
                    )
                    assert 1 <= got <= split, (network, other, subject, got, domain.up)
                else:
                    assert got == 0
            for other in domain.networks():
                # A router can only report interest it heard of before the partition; then
                # the loss is counted for the network that missed it.
                if (
                    other != network
                    and other not in reach
                    and domain.wants(other, subject)
                    and _known(domain, network, other)
                ):
                    now = domain.counted(other, network, subject)
                    unreported = ("a loss went unreported", network, other, subject)
                    assert now - counted[other] >= len(batch), unreported
            for (link, mid), count in domain.crossings.items():
                if mid in batch:
                    assert count == 1, ("a link crossed twice", link, subject)
            # Nothing is reported lost when every router of the origin network sees all the
            # networks that listen (no partition hides one of them).
            routers = [r for r, nets in domain.attach.items() if network in nets]
            together = all(
                domain.router_component(r) == domain.router_component(routers[0]) for r in routers
            )
            unreached = any(
                o != network and o not in reach and domain.wants(o, subject) and
                _known(domain, network, o) for o in domain.networks()
            )  # fmt: skip
            if not unreached and together and not _stale(domain, network):
                assert domain.reported() == before_reported, (network, subject,
                                                              domain.presented[-3:])  # fmt: skip


def _pieces(domain: Domain, network: str) -> int:
    """Partitions among the routers attached to ``network``."""
    routers = [r for r, nets in domain.attach.items() if network in nets]
    return len({frozenset(domain.router_component(r)) for r in routers})


def _known(domain: Domain, network: str, other: str) -> bool:
    node = "n:" + other
    return any(
        node in domain.cores[r].topology.unreachable_interest
        or node in domain.cores[r].topology.interest  # known through a shared LAN
        for r, nets in domain.attach.items()
        if network in nets
    )


def _stale(domain: Domain, network: str) -> bool:
    """True if some origin router still holds records of routers it cannot reach."""
    for r, nets in domain.attach.items():
        if network in nets:
            core = domain.cores[r]
            if set(core.topology.reachable) != domain.router_component(r):
                return True
            if core.topology.unreachable_interest:
                return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_exactly_once_where_a_path_exists(sc: dict, batched: bool) -> None:
    domain = Domain(sc["attach"], sc["weights"], lan=sc["lan"])
    for a, b in sc["edges"]:
        domain.link_up(f"r{a}", f"r{b}", sc["costs"][(a, b)])
    for node, pattern in sc["listens"]:
        domain.listen(f"n{node}", pattern)
    ids = itertools.count()
    _check(domain, ids, batched)
    edges = sc["edges"]
    for action, index in sc["events"]:
        if action == "unlisten" and sc["listens"]:
            node, pattern = sc["listens"][index % len(sc["listens"])]
            domain.unlisten(f"n{node}", pattern)
        elif edges:
            a, b = edges[index % len(edges)]
            if action == "cut":
                domain.link_down(f"r{a}", f"r{b}")
            else:
                domain.link_up(f"r{a}", f"r{b}", sc["costs"][(a, b)])
        _check(domain, ids, batched)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 20)), max_size=12))
def test_no_loop_while_records_are_still_flooding(sc: dict, plan: list[tuple[int, int]]) -> None:
    """Links fail and heal between single steps, with messages in flight.

    Whatever the interleaving, the domain settles (no loop), a message goes
    each way of a link at most once, and a LAN served by one router gets it
    at most once.
    """
    domain = Domain(sc["attach"], sc["weights"], lan=sc["lan"])
    for a, b in sc["edges"]:
        domain.link_up(f"r{a}", f"r{b}", sc["costs"][(a, b)])
    for node, pattern in sc["listens"]:
        domain.listen(f"n{node}", pattern)
    edges = sc["edges"]
    nets = sorted(domain.networks())
    for i, (steps, which) in enumerate(plan):
        net, subject = nets[which % len(nets)], SUBJECTS[which % len(SUBJECTS)]
        if steps % 2:
            domain.publish_batch(net, subject, [i, (i, "b")], settle=False)
        else:
            domain.publish(net, subject, i, settle=False)
        if edges:
            a, b = edges[which % len(edges)]
            if frozenset((f"r{a}", f"r{b}")) in domain.up:
                domain.link_down(f"r{a}", f"r{b}", settle=False)
            else:
                domain.link_up(f"r{a}", f"r{b}", sc["costs"][(a, b)], settle=False)
        domain.step(steps)
    domain.settle()
    assert all(count == 1 for count in domain.directed.values())
    for (network, _msg), count in domain.delivered.items():
        routers = sum(network in nets_of for nets_of in sc["attach"].values())
        if routers == 1:
            assert count == 1, (network, count)


def test_ring_prefers_the_cheaper_way_and_fails_over() -> None:
    domain = Domain({"a": ["A"], "b": ["B"], "c": ["C"]})
    domain.link_up("a", "b", 1)
    domain.link_up("b", "c", 1)
    domain.link_up("a", "c", 5)
    domain.listen("C", "X")
    domain.publish("A", "X", "m1")
    ab, ac = frozenset("ab"), frozenset("ac")
    assert domain.crossings[(ab, "m1")] == 1 and domain.crossings[(ac, "m1")] == 0
    assert domain.delivered[("C", "m1")] == 1
    domain.link_down("b", "c")
    domain.publish("A", "X", "m2")
    assert domain.crossings[(ac, "m2")] == 1
    assert domain.delivered[("C", "m2")] == 1
    domain.link_up("b", "c", 1)
    domain.publish("A", "X", "m3")
    assert domain.crossings[(ab, "m3")] == 1 and domain.crossings[(ac, "m3")] == 0


def test_no_interest_nothing_crosses() -> None:
    domain = Domain({"a": ["A"], "b": ["B"]})
    domain.link_up("a", "b")
    domain.publish("A", "X", "m1")
    assert not domain.crossings and not domain.delivered and not domain.presented
    # The router does not even listen on A: the subject never leaves the network.
    assert domain.cores["a"].listen_set("A") == frozenset()
    domain.listen("B", "X")
    assert domain.cores["a"].listen_set("A") == frozenset({"X"})
    domain.unlisten("B", "X")
    assert domain.cores["a"].listen_set("A") == frozenset()


def test_partition_reports_dataloss_then_heals() -> None:
    domain = Domain({"a": ["A"], "b": ["B"]})
    domain.link_up("a", "b")
    domain.listen("B", "X")
    domain.link_down("a", "b")
    domain.publish("A", "X", "m1")
    assert domain.delivered[("B", "m1")] == 0
    # Presented on A at once (the publishers' side), and waiting at a for a path to B.
    assert [(out.network, out.report.target, out.report.lost) for _, out in domain.presented
            if out.report.exact] == [("A", "B", 1)]  # fmt: skip
    assert domain.counted("B") == 1
    domain.link_up("a", "b")
    domain.publish("A", "X", "m2")
    assert domain.delivered[("B", "m2")] == 1
    # The partition healed: b presents the count on B, where the listener missed it.
    presented_on_b = [out.report for r, out in domain.presented if r == "b" and out.network == "B"]
    exact = [r for r in presented_on_b if r.exact]
    assert [(r.lost, r.origin, r.subject, r.target) for r in exact] == [(1, "A", "X", "B")]
    assert domain.counted("B") == 1


def test_unacked_frames_on_a_broken_link_are_counted() -> None:
    domain = Domain({"a": ["A"], "b": ["B"]})
    domain.link_up("a", "b")
    domain.listen("B", "X")
    domain.publish("A", "X", "m1")
    assert domain.delivered[("B", "m1")] == 1
    # No tick ran: b never acknowledged, so a cannot know the frame arrived, and waits.
    domain.link_down("a", "b")
    assert domain.cores["a"].losses.orphaned() == 1
    assert not [out for _, out in domain.presented if out.report.exact]
    # b comes back (the same incarnation): its RESUME says the message arrived.
    domain.link_up("a", "b")
    assert domain.cores["a"].losses.orphaned() == 0
    assert not [out for _, out in domain.presented if out.report.exact]


def test_acknowledged_frames_are_not_lost() -> None:
    domain = Domain({"a": ["A"], "b": ["B"]})
    domain.link_up("a", "b")
    domain.listen("B", "X")
    domain.publish("A", "X", "m1")
    domain.tick()
    domain.link_down("a", "b")
    assert domain.cores["a"].losses.orphaned() == 0
    assert not [out for _, out in domain.presented if out.report.exact]


def test_inbox_replies_route_to_their_network() -> None:
    domain = Domain({"a": ["A"], "b": ["B"], "c": ["C"]})
    domain.link_up("a", "b")
    domain.link_up("b", "c")
    # A reply from C to an inbox on A: no listener needed, the route is implicit.
    domain._take("c", domain.cores["c"].import_message("C", "_RVRD.INBOX.A._INBOX.x.y.1", "r1"))
    domain.settle()
    assert domain.delivered[("A", "r1")] == 1
    assert domain.delivered[("B", "r1")] == 0


@pytest.mark.parametrize("names", [("A", "B", "C"), ("A", "A.X", "C")])
def test_replies_to_many_inboxes_share_a_route_only_where_it_cannot_differ(
    names: tuple[str, str, str],
) -> None:
    """Replies to one network share one routing decision (each inbox is new); with a dot in
    a network name (one inbox prefix inside another) every reply is decided on its own."""
    a, b, c = names
    domain = Domain({"a": [a], "b": [b], "c": [c]})
    domain.link_up("a", "b")
    domain.link_up("b", "c")
    reached: dict[str, list[set[str]]] = {a: [], b: []}
    for n in range(3):
        for home in (a, b):
            outs = domain.cores["c"].import_message(
                c, f"_RVRD.INBOX.{home}._INBOX.x.y.{n}", f"r{home}{n}"
            )
            domain._take("c", outs)
            domain.settle()
            reached[home].append({net for net in names if domain.delivered[(net, f"r{home}{n}")]})
    for home in (a, b):
        assert all(home in r for r in reached[home])
        # Every reply of a home goes where the first went (on a domain without dotted names:
        # exactly there; a dotted name's prefix network is reached as well, as ever).
        assert reached[home] == [reached[home][0]] * 3
        if "." not in "".join(names):
            assert reached[home][0] == {home}


def test_bad_frames_are_refused() -> None:
    core = RouterCore("a", {"A": NetworkPolicy()})
    core.start()
    core.link_up("b", 1)
    bad = (["DATA", 1], ["LSA", ["b", -1, [], []]], "x", [], ["NOPE"], ["RESUME", "x", 1],
           ["LOSS", 1, 2])  # fmt: skip
    for frame in bad:
        with pytest.raises(ValueError):
            core.receive("b", frame)
    with pytest.raises(ValueError):
        core.receive("z", ["ACK", 1])
    with pytest.raises(ValueError):
        core.link_up("b", 1)
    with pytest.raises(ValueError):
        core.link_up("c", 0)
    assert isinstance(core.import_message("A", "_RV.INFO.X", b""), list)


@given(st.sampled_from([*PATTERNS, "A.X.Y", "*", "*.*"]), st.sampled_from([*PATTERNS, "C"]))
def test_intersects_agrees_with_matching(a: str, b: str) -> None:
    samples = ["A.X", "A.Y", "B.X", "B.Y.Z", "A.X.Y", "C", "Q", "B"]
    witness = any(subject_matches(a, s) and subject_matches(b, s) for s in samples)
    if witness:
        assert intersects(a, b)
    assert intersects(a, b) == intersects(b, a)


def test_deliver_carries_tag() -> None:
    domain = Domain({"a": ["A"], "b": ["B"]})
    domain.link_up("a", "b")
    domain.listen("B", "X")
    outs = domain.cores["a"].import_message("A", "X", "m")
    frames = [o for o in outs if isinstance(o, SendFrame)]
    outs_b = domain.cores["b"].receive("a", frames[0].frame)
    (deliver,) = [o for o in outs_b if isinstance(o, Deliver)]
    assert deliver.tag.origin == "A" and deliver.tag.importer == domain.cores["a"].importer


def test_a_batch_passing_through_is_one_deliver_run() -> None:
    """A BATCH frame is delivered as one DeliverRun (not one output per message), whose
    messages carry the tags single deliveries would: consecutive sequence numbers."""
    domain = Domain({"a": ["A"], "b": ["B"]})
    domain.link_up("a", "b")
    domain.listen("B", "X")
    outs = domain.cores["a"].import_batch("A", "X", ["m1", "m2", "m3"])
    (frame,) = [o.frame for o in outs if isinstance(o, SendFrame)]
    assert frame.kind == "BATCH"
    outs_b = domain.cores["b"].receive("a", frame)
    (run,) = [o for o in outs_b if isinstance(o, DeliverRun)]
    assert not [o for o in outs_b if isinstance(o, Deliver)]
    assert (run.network, run.subject, run.payloads) == ("B", "X", ["m1", "m2", "m3"])
    importer = domain.cores["a"].importer
    assert [d.tag for d in run.deliveries()] == [
        ("A", importer, frame.seq + i, 2) for i in range(3)
    ]
    assert [d.payload for d in run.deliveries()] == ["m1", "m2", "m3"]


def _redundant_lan(weights: dict) -> Domain:
    """LAN B served by b1 and b2, both one link from a (LAN A): equal cost."""
    domain = Domain({"a": ["A"], "b1": ["B"], "b2": ["B"]}, weights)
    domain.link_up("a", "b1", 1)
    domain.link_up("a", "b2", 1)
    domain.listen("B", ">")
    return domain


def test_subject_weights_divide_a_lan_between_its_routers() -> None:
    domain = _redundant_lan({("b1", "B"): (("X.>", 10),), ("b2", "B"): (("Y.>", 10),)})
    for i, subject in enumerate(["X.1", "Y.1", "X.2.3", "Z"]):
        domain.publish("A", subject, i)
    assert domain.deliverer[("B", 0)] == "b1"
    assert domain.deliverer[("B", 1)] == "b2"
    assert domain.deliverer[("B", 2)] == "b1"
    assert domain.deliverer[("B", 3)] == "b1"  # equal weights (default): smallest name
    assert all(domain.delivered[("B", i)] == 1 for i in range(4))
    # Only the chosen router's link carries each subject.
    assert domain.directed[("a", "b2", 0)] == 0
    assert domain.directed[("a", "b1", 1)] == 0


def test_subject_weights_keep_fault_tolerance() -> None:
    domain = _redundant_lan({("b1", "B"): (("X.>", 10),), ("b2", "B"): (("Y.>", 10),)})
    domain.link_down("a", "b1")
    domain.publish("A", "X.1", "m1")
    assert domain.deliverer[("B", "m1")] == "b2"
    assert domain.delivered[("B", "m1")] == 1
    domain.link_up("a", "b1", 1)
    domain.publish("A", "X.1", "m2")
    assert domain.deliverer[("B", "m2")] == "b1"


def test_path_cost_comes_before_subject_weight() -> None:
    domain = Domain({"a": ["A"], "b1": ["B"], "b2": ["B"]}, {("b2", "B"): (("X", 99),)})
    domain.link_up("a", "b1", 1)
    domain.link_up("a", "b2", 3)
    domain.listen("B", "X")
    domain.publish("A", "X", "m")
    assert domain.deliverer[("B", "m")] == "b1"


def test_heaviest_matching_pattern_counts() -> None:
    domain = _redundant_lan({("b1", "B"): (("X.>", 2), ("X.Y", 1)), ("b2", "B"): (("X.*", 3),)})
    domain.publish("A", "X.Y", "m1")
    domain.publish("A", "X.Y.Z", "m2")
    assert domain.deliverer[("B", "m1")] == "b2"  # b1's X.Y is 2 (its greatest match), b2's 3
    assert domain.deliverer[("B", "m2")] == "b1"  # X.* does not match: b2 weighs 1


def test_two_routers_on_the_same_two_lans_without_a_link_deliver_once() -> None:
    """Both routers join A and B and hear each other there: no neighbor link needed."""
    domain = Domain({"r1": ["A", "B"], "r2": ["A", "B"]}, lan=True)
    domain.listen("B", "X")
    domain.listen("A", "Y")
    domain.publish("A", "X", "m1")
    domain.publish("B", "Y", "m2")
    assert domain.delivered[("B", "m1")] == 1
    assert domain.delivered[("A", "m2")] == 1
    assert domain.cores["r1"].topology.reachable == {"r1", "r2"}


def test_a_lan_peer_going_silent_reports_what_was_left_to_it() -> None:
    domain = Domain({"r1": ["A", "B"], "r2": ["A", "B"]}, lan=True)
    domain.listen("B", "X")
    domain.publish("A", "X", "m1")
    assert domain.deliverer[("B", "m1")] == "r1"
    r2 = domain.cores["r2"]
    r2.lan_peer_up("A", "r1")  # heard again: m1 was handled
    domain.publish("A", "X", "m2")
    domain.publish("A", "X", "m3")
    # r1 dies without a word; r2 notices the silence on both LANs.
    outs = r2.lan_peer_down("A", "r1") + r2.lan_peer_down("B", "r1")
    losses = [o for o in outs if isinstance(o, Present) and o.network == "B"]
    assert [(o.report.lost, o.report.target) for o in losses] == [(2, "B")]
    assert r2.topology.reachable == {"r2"}
    out = r2.import_message("A", "X", "m4")
    assert [o.network for o in out if isinstance(o, Deliver)] == ["B"]  # r2 took over
