"""LossDesk: one router's loss reports and what its links' outages lost, sans-IO.

The router core (rvasync.protocol.rvrd.core) hands the desk every loss it
notices and every link that breaks or comes back; the desk decides what is
reported where (see rvasync.protocol.rvrd.losses for the two kinds of
report) and returns the outputs that carry it out:

* a **count** is presented at once on this router's own networks (so the
  publishers' side learns it too) and, when the network that missed the
  messages is elsewhere, waits for a path there and travels as a ``LOSS``
  frame;
* a link that breaks leaves an :class:`~rvasync.protocol.rvrd.losses.Orphan`
  (what it carried that the neighbor had not acknowledged). When the link
  comes back with the same neighbor incarnation, the neighbor's first frame
  (``RESUME``) says how much of it arrived and the rest is counted exactly;
  a neighbor that comes back as a new incarnation, or another path to the
  networks those messages were going to, turns all of it into counts;
* the receiving end of a broken link presents a **window** on the networks
  below it for every network whose messages came through that neighbor
  (whatever was inside the neighbor is lost uncounted), and when the
  neighbor comes back as a new incarnation, a second window from the break
  to that moment (its predecessor's traffic, and what was published while
  no router took it, are gone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rvasync.protocol.rvrd.frames import RESUME, ResumeFrame
from rvasync.protocol.rvrd.losses import (
    InFlight,
    LossReport,
    Orphan,
    PendingLosses,
    Presented,
    Run,
)
from rvasync.protocol.rvrd.outputs import Output, Present, SendFrame, SendLan
from rvasync.protocol.rvrd.topology import Topology, net_node, router_node

__all__ = ["LinkSession", "LossDesk", "downstream", "next_hop", "upstream"]


@dataclass
class LinkSession:
    """One established link to a neighbor (in its incarnation ``incarnation``): the counts
    of its acknowledged stream of messages (and loss reports) each way."""

    cost: int
    incarnation: int = 0
    sent: int = 0
    acked: int = 0
    received: int = 0
    ack_sent: int = 0
    inflight: InFlight = field(default_factory=InFlight)


def downstream(topo: Topology, origin: str, neighbor: str, subject: str) -> list[str]:
    """The networks messages of ``origin`` / ``subject`` sent to ``neighbor`` were going to."""
    tree = topo.tree(net_node(origin))
    node = router_node(neighbor)
    if tree is None or node not in tree.subtree:
        return []
    below = tree.subtree[node]
    root = net_node(origin)
    return [
        n[2:]
        for n in tree.descendants.get(node, ())
        if n != root and topo.wants(n, subject) and topo.server(tree, n, subject) in below
    ]


def upstream(topo: Topology, me: str, neighbor: str) -> dict[str, list[str]]:
    """Origin network -> the listening networks at or below ``me`` whose messages from it
    came through ``neighbor`` (on ``topo``, the view before the link broke)."""
    mine, theirs = router_node(me), router_node(neighbor)
    out: dict[str, list[str]] = {}
    for node in sorted(topo.attached):
        tree = topo.tree(node)
        if tree is None or tree.parent.get(mine) != theirs:
            continue
        nets = [n[2:] for n in tree.descendants.get(mine, ()) if n != node and topo.interest.get(n)]
        if nets:
            out[node[2:]] = nets
    return out


def next_hop(topo: Topology, me: str, target: str) -> str | None:
    """The neighbor on ``me``'s shortest path of links to a router attached to ``target``
    (None when no such path; ``me`` itself when it is attached)."""
    tree = topo.tree(router_node(me))
    node = net_node(target)
    if tree is None or node not in tree.parent:
        return None
    root = router_node(me)
    up = tree.parent[node]
    if up == root:
        return me
    while up != root:
        node, up = up, tree.parent[up]
    return node[2:]


@dataclass
class _Outage:
    """A neighbor's link broke: when, in which incarnation, and whose messages it carried."""

    incarnation: int
    since: float
    #: origin network -> the networks below this router that missed its messages
    upstream: dict[str, list[str]]


class LossDesk:
    """The loss reports of router ``name`` (``reporter``: its name and incarnation), attached
    to ``networks``; ``links`` and ``lan`` are the core's own tables (shared, read only
    here but for the counts a report adds to a link), ``topology`` its current view."""

    def __init__(
        self,
        name: str,
        reporter: str,
        networks: list[str],
        links: dict[str, LinkSession],
        lan: dict[str, set[str]],
        topology: Callable[[], Topology],
        max_hops: int,
    ) -> None:
        self.name = name
        self.reporter = reporter
        self.networks = sorted(networks)
        self._links = links
        self._lan = lan
        self._topology = topology
        self._max_hops = max_hops
        self.pending = PendingLosses()
        self._presented = Presented()
        self._ident = 0
        self._orphans: dict[str, Orphan] = {}
        self._received_from: dict[str, tuple[int, int]] = {}
        self._outages: dict[str, _Outage] = {}
        #: Routed reports dropped for a hop limit or a target nobody knows (for status).
        self.dropped = 0

    # ------------------------------------------------------------------ reporting

    def _new(
        self, target: str | None, lost: int, exact: bool, reason: str, **what: Any
    ) -> LossReport:
        self._ident += 1
        return LossReport(self.reporter, self._ident, target, lost, exact, reason, **what)

    def count(
        self, target: str | None, reason: str, origin: str | None, subject: str | None, lost: int
    ) -> list[Output]:
        """``lost`` messages counted here did not reach ``target`` (None: not known where)."""
        report = LossReport(self.reporter, 0, target, lost, True, reason, origin, subject)
        out: list[Output] = [Present(net, report) for net in self.networks]
        if target is not None and target not in self.networks:
            self.pending.count((target, reason, origin, subject), lost)
        return out

    def window(
        self, target: str, reason: str, origin: str | None, since: float, until: float | None
    ) -> list[Output]:
        """Messages to ``target`` may have been lost uncounted between ``since`` and ``until``."""
        report = self._new(target, 0, False, reason, origin=origin, since=since, until=until)
        if target in self.networks:
            return [Present(target, report)]
        self.pending.hold(report)
        return self.flush()

    # ------------------------------------------------------------------ routing

    def flush(self) -> list[Output]:
        """Send the waiting reports whose target a path reaches now."""
        if not len(self.pending):
            return []
        out: list[Output] = []
        for target in sorted(self.pending.targets()):
            if not self._reachable(target):
                continue
            counts, held = self.pending.take(target)
            reports = [
                self._new(target, lost, True, reason, origin=origin, subject=subject)
                for (_, reason, origin, subject), lost in counts
            ]
            for report in reports + held:
                routed = self.route(report, 0)
                if routed is None:
                    self.pending.hold(report)
                else:
                    out += routed
        return out

    def _reachable(self, target: str) -> bool:
        topo = self._topology()
        hop = next_hop(topo, self.name, target)
        return (hop is not None and hop in self._links) or self._lan_carrier(
            topo, target
        ) is not None

    def _lan_carrier(self, topo: Topology, target: str) -> tuple[str, str] | None:
        """(LAN, peer) to hand a report for ``target`` to when no link of ours leads there."""
        for net, peers in sorted(self._lan.items()):
            for peer in sorted(peers):
                tree = topo.tree(router_node(peer))
                if tree is not None and net_node(target) in tree.parent:
                    return net, peer
        return None

    def route(self, report: LossReport, hops: int) -> list[Output] | None:
        """Present ``report`` here or send it one hop on; None when no path leads there now."""
        target = report.target
        if target is None or target in self.networks:
            if target is not None and not self._presented.first_time(report):
                return []
            return [Present(net, report) for net in ([target] if target else self.networks)]
        if hops >= self._max_hops:
            self.dropped += 1
            return []
        topo = self._topology()
        hop = next_hop(topo, self.name, target)
        link = self._links.get(hop) if hop is not None else None
        if link is not None:
            link.sent += 1
            link.inflight.runs.append(report)
            return [SendFrame(hop, report.frame(hops + 1))]  # type: ignore[arg-type]
        carrier = self._lan_carrier(topo, target)
        if carrier is None:
            return None
        return [SendLan(carrier[0], report.frame(hops + 1, via=carrier[1]))]

    def receive(self, raw: Any, link: LinkSession | None) -> list[Output]:
        """A LOSS frame (from a neighbor's ``link``, or from the LAN: None); ValueError if bad."""
        report, via, hops = LossReport.from_frame(raw)
        if link is None and via != self.name:
            return []  # a LAN report for another router there
        routed = self.route(report, hops)
        if routed is None:
            self.pending.hold(report)
            return []
        return routed

    # ------------------------------------------------------------------ link sessions

    def resume_frame(self, neighbor: str) -> ResumeFrame:
        """The first frame on a link that just came up (see :meth:`resumed`)."""
        incarnation, received = self._received_from.pop(neighbor, (0, 0))
        return ResumeFrame(RESUME, incarnation, received)

    def link_lost(
        self, neighbor: str, link: LinkSession, before: Topology, at: float
    ) -> list[Output]:
        """The link to ``neighbor`` broke; ``before`` is the view it was routed by."""
        out: list[Output] = []
        old = self._orphans.pop(neighbor, None)
        if old is not None:
            out += self._orphaned_lost(neighbor, old, "broke again before it resumed")
        runs = link.inflight.runs
        if runs:
            keys = {(r.origin, r.subject) for r in runs if isinstance(r, Run)}
            targets = {key: downstream(before, key[0], neighbor, key[1]) for key in keys}
            self._orphans[neighbor] = Orphan(link.incarnation, link.acked, runs, targets, at)
        self._received_from[neighbor] = (link.incarnation, link.received)
        ups = upstream(before, self.name, neighbor)
        self._outages[neighbor] = _Outage(link.incarnation, at, ups)
        for origin, nets in sorted(ups.items()):
            reason = (f"link to {neighbor} broke: messages from {origin} on their way through it"
                      f" may be lost (counted if {neighbor} comes back)")  # fmt: skip
            for net in nets:
                out += self.window(net, reason, origin, at, None)
        return out

    def link_back(self, neighbor: str, incarnation: int, at: float) -> list[Output]:
        """The link to ``neighbor`` (now in ``incarnation``) is up again."""
        out: list[Output] = []
        outage = self._outages.pop(neighbor, None)
        if outage is not None and outage.incarnation != incarnation:
            for origin, nets in sorted(outage.upstream.items()):
                reason = (f"router {neighbor} restarted: messages from {origin} it held, and"
                          " those published while no router took them, are lost")  # fmt: skip
                for net in nets:
                    out += self.window(net, reason, origin, outage.since, at)
        orphan = self._orphans.get(neighbor)
        if orphan is not None and orphan.incarnation != incarnation:
            del self._orphans[neighbor]
            out += self._orphaned_lost(neighbor, orphan, "restarted before acknowledging them")
        return out

    def resumed(self, neighbor: str, incarnation: int, received: int, mine: int) -> list[Output]:
        """``neighbor``'s RESUME: of our previous link (with us in ``incarnation``),
        ``received`` messages arrived; ``mine`` is this router's incarnation."""
        orphan = self._orphans.pop(neighbor, None)
        if orphan is None:
            return []
        if incarnation == mine and received >= orphan.acked:
            flight = InFlight()
            flight.runs = orphan.runs
            flight.drop(received - orphan.acked)
        return self._orphaned_lost(neighbor, orphan, "broke before they arrived")

    def failover(self) -> list[Output]:
        """Orphans of links still down whose networks another path reaches now: counted."""
        out: list[Output] = []
        for neighbor in sorted(self._orphans):
            if neighbor in self._links:
                continue  # back up: its RESUME settles it
            orphan = self._orphans[neighbor]
            if any(self._reachable(t) for t in orphan.networks()):
                del self._orphans[neighbor]
                out += self._orphaned_lost(neighbor, orphan, "broke (not acknowledged)")
        return out

    def _orphaned_lost(self, neighbor: str, orphan: Orphan, why: str) -> list[Output]:
        """Count what is left of ``orphan``; its reports are sent again."""
        out: list[Output] = []
        reason = f"link to {neighbor} {why}"
        for run in orphan.runs:
            if isinstance(run, LossReport):
                self.pending.hold(run)
                continue
            targets: list[str | None] = list(orphan.targets.get((run.origin, run.subject), []))
            for target in targets or [None]:
                out += self.count(target, reason, run.origin, run.subject, run.count)
        return out + self.flush()

    def orphaned(self) -> int:
        """Messages broken links carried that are not settled yet (for status and tests)."""
        return sum(r.count for o in self._orphans.values() for r in o.runs if isinstance(r, Run))
