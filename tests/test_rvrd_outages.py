"""Router outages in the sans-IO core: incarnations, and what an outage loses, reported where.

Issue #34: a routing daemon restarted after kill -9 lost messages silently
and kept losing them: the far side took the new incarnation's messages for
its predecessor's (the same importer and sequence numbers) and dropped them
as duplicates, and nothing told the listeners on the far side what was lost.
These tests drive the cores through tests/rvrd_sim.py: restarts (a new
incarnation, its in-flight frames gone), link cuts with frames in flight,
and both; every message a listening network misses must be counted in a
DATALOSS presented on that network, or fall inside a window presented there
between the last message before the gap and the first after it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync.protocol.rvrd import LossReport, NetworkPolicy, RouterCore, SendFrame
from rvasync.protocol.rvrd.frames import HelloFrame
from tests.rvrd_sim import Domain


def _line(n: int) -> Domain:
    domain = Domain({f"r{i}": [f"N{i}"] for i in range(n)})
    for i in range(n - 1):
        domain.link_up(f"r{i}", f"r{i + 1}")
    return domain


def test_a_restarted_router_is_a_new_incarnation() -> None:
    """Before the fix the far side dropped what the new incarnation imported: the same
    importer and sequence numbers as its predecessor's messages (issue #34)."""
    domain = _line(2)
    domain.listen("N1", "X")
    for i in range(5):
        domain.publish("N0", "X", ("old", i))
    domain.restart("r0")
    for i in range(5):
        domain.publish("N0", "X", ("new", i))
    assert all(domain.delivered[("N1", ("new", i))] == 1 for i in range(5))
    old, new = domain.cores["r0"].importer, f"r0.{domain.cores['r0'].incarnation:x}"
    assert old == new and old != "r0.0"


def test_the_importer_names_the_incarnation() -> None:
    core = RouterCore("ra", {"A": NetworkPolicy()}, incarnation=0x2A)
    assert core.importer == "ra.2a"
    out = core.link_up("rb", 1, 7)
    assert isinstance(out[0], SendFrame) and out[0].frame.kind == "RESUME"


def _gap_covered(log: list[tuple[str, Any]], missing: Any, order: list[Any], origin: str) -> bool:
    """A window for ``origin`` lies between the last message of ``order`` received before
    ``missing`` and the first received after it."""
    at = {m: i for i, (kind, m) in enumerate(log) if kind == "m"}
    k = order.index(missing)
    before = [at[m] for m in order[:k] if m in at]
    after = [at[m] for m in order[k + 1 :] if m in at]
    start = before[-1] if before else -1
    end = after[0] if after else len(log)
    return any(
        kind == "p" and not r.exact and r.origin in (None, origin) and start < i < end
        for i, (kind, r) in enumerate(log)
    )


def _accounted(domain: Domain, published: dict[str, list[Any]], wanted: set[str]) -> None:
    """Every message published on a network is delivered once on every other network of
    ``wanted``, or counted for it, or inside a window presented there."""
    for net in sorted(wanted):
        log = domain.log.get(net, [])
        counts = Counter(m for kind, m in log if kind == "m")
        assert all(c == 1 for c in counts.values()), ("delivered twice", net)
        for origin, order in sorted(published.items()):
            if origin == net:
                continue
            missing = [m for m in order if not counts[m]]
            uncovered = [m for m in missing if not _gap_covered(log, m, order, origin)]
            counted = domain.counted(net, origin)
            assert len(uncovered) <= counted, (net, origin, uncovered, counted, log[-10:])


def test_the_ingress_router_restarted_the_far_side_presents_a_window() -> None:
    domain = _line(2)
    domain.listen("N1", "X")
    domain.publish("N0", "X", 1)
    domain.publish("N0", "X", 2, settle=False)  # still in r0 when it dies
    domain.restart("r0", state=False)
    domain.publish("N0", "X", 3)
    assert [m for kind, m in domain.log["N1"] if kind == "m"] == [1, 3]
    windows = [r for kind, r in domain.log["N1"] if kind == "p"]
    # One when the link broke (open), one when r0 came back as a new incarnation.
    assert [(w.exact, w.origin, w.target, w.until is None) for w in windows] == [
        (False, "N0", "N1", True),
        (False, "N0", "N1", False),
    ]
    _accounted(domain, {"N0": [1, 2, 3]}, {"N1"})


def test_the_egress_router_restarted_its_neighbor_counts_for_it() -> None:
    """r1 dies with messages r0 sent it unacknowledged: r0 counts them for N1, and the new
    r1 presents the count on N1."""
    domain = _line(2)
    domain.listen("N1", "X")
    domain.tick()
    for i in range(3):
        domain.publish("N0", "X", i, settle=False)
    domain.restart("r1", state=False)
    domain.publish("N0", "X", 3)
    domain.tick()
    exact = [r for kind, r in domain.log["N1"] if kind == "p" and r.exact]
    assert [(r.lost, r.origin, r.subject, r.router) for r in exact] == [(3, "N0", "X", "r0")]
    _accounted(domain, {"N0": [0, 1, 2, 3]}, {"N1"})


def test_a_cut_link_that_comes_back_counts_exactly_what_did_not_arrive() -> None:
    """Frames in flight when the link is cut: the neighbor's RESUME says how many arrived,
    and exactly the others are counted, on the network that missed them."""
    domain = _line(2)
    domain.listen("N1", "X")
    domain.tick()
    for i in range(6):
        domain.publish("N0", "X", i, settle=False)
    domain.step(2)  # some frames arrive before the cut
    domain.link_down("r0", "r1")
    domain.publish("N0", "X", 6)  # during the cut: no path
    domain.link_up("r0", "r1")
    domain.tick()
    got = [m for kind, m in domain.log["N1"] if kind == "m"]
    missing = 7 - len(got)
    assert 0 < missing < 7
    assert domain.counted("N1", "N0") == missing  # exact, not the unacknowledged count
    assert not domain.cores["r0"].losses.pending.lost()


def test_a_report_follows_the_path_to_the_network_that_missed_the_messages() -> None:
    """r0 - r1 - r2: the link r1 - r2 breaks; r0's messages it carried are counted by r1
    and presented by r2 on N2, two hops from where they were counted (not on N1)."""
    domain = _line(3)
    domain.listen("N2", "X")
    domain.tick()
    domain.publish("N0", "X", 0, settle=False)
    domain.step(1)  # through r0 and r1, not yet at r2
    domain.link_down("r1", "r2")
    domain.link_up("r1", "r2")
    domain.tick()
    on_n2 = [r for kind, r in domain.log.get("N2", []) if kind == "p" and r.exact]
    assert [(r.lost, r.target, r.router) for r in on_n2] == [(1, "N2", "r1")]
    assert not [r for kind, r in domain.log.get("N1", []) if kind == "p" and r.target == "N1"]


def test_a_router_that_has_not_heard_its_listeners_yet_still_delivers() -> None:
    """A new incarnation links up before it heard its daemons' LISTEN announcements: what
    its neighbor sends for its network (r0 still has the old record's interest) is
    delivered there, not dropped uncounted."""
    domain = _line(2)
    domain.listen("N1", "X")
    domain.restart("r1", relisten=False)
    domain.publish("N0", "X", "m")
    assert domain.delivered[("N1", "m")] == 1


def test_loss_frames_are_checked() -> None:
    good = LossReport("r.1", 3, "N", 2, True, "why", "O", "X").frame(1)
    report, via, hops = LossReport.from_frame(list(good))
    assert (report.lost, via, hops, report.router) == (2, "", 1, "r")
    for bad in ([*good[:-1]], [*good[:6], -1, *good[7:]], [*good[:7], "yes", *good[8:]]):
        try:
            LossReport.from_frame(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
    assert HelloFrame._fields == ("kind", "version", "router", "incarnation")


@st.composite
def _plans(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 4))
    # A tree (one path between two networks): a window then falls where the gap is.
    parents = [draw(st.integers(0, i - 1)) for i in range(1, n)]
    listeners = draw(st.sets(st.integers(0, n - 1), min_size=1))
    events = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["publish", "cut", "heal", "restart", "tick", "step"]),
                st.integers(0, 30),
            ),
            max_size=25,
        )
    )
    return {"n": n, "parents": parents, "listeners": listeners, "events": events}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_plans())
def test_every_message_is_delivered_or_accounted_for(plan: dict[str, Any]) -> None:
    n = plan["n"]
    domain = Domain({f"r{i}": [f"N{i}"] for i in range(n)})
    edges = [(f"r{p}", f"r{i + 1}") for i, p in enumerate(plan["parents"])]
    for a, b in edges:
        domain.link_up(a, b)
    wanted = {f"N{i}" for i in plan["listeners"]}
    for net in sorted(wanted):
        domain.listen(net, "X")
    published: dict[str, list[Any]] = {f"N{i}": [] for i in range(n)}
    ids = itertools.count()
    for action, k in plan["events"]:
        if action == "publish":
            net = f"N{k % n}"
            batch = [(net, next(ids)) for _ in range(1 + k % 3)]
            published[net] += batch
            domain.publish_batch(net, "X", batch, settle=False)
        elif action == "cut":
            a, b = edges[k % len(edges)]
            domain.link_down(a, b, settle=False)
        elif action == "heal":
            a, b = edges[k % len(edges)]
            domain.link_up(a, b, settle=False)
        elif action == "restart":
            domain.restart(f"r{k % n}", settle=False)
        elif action == "tick":
            domain.settle()
            domain.tick()
        else:
            domain.step(k)
    for a, b in edges:
        domain.link_up(a, b, settle=False)
    domain.settle()
    for _ in range(3):
        domain.tick()
    for core in domain.cores.values():
        assert core.losses.orphaned() == 0
        assert len(core.losses.pending) == 0, core.losses.pending.counts()
    _accounted(domain, published, wanted)
    # Once healed, every network's messages flow again (no incarnation taken for another).
    for i in range(n):
        domain.publish(f"N{i}", "X", ("final", i))
        for net in wanted - {f"N{i}"}:
            assert domain.delivered[(net, ("final", i))] == 1, (net, i)
