"""RouterCore: the sans-IO state machine of one routing daemon.

A driver feeds it four kinds of input and carries out what it returns:

* **local interest** (:meth:`RouterCore.add_interest` / ``remove_interest``):
  a subject listened to on an attached network, learned from the daemons'
  LISTEN.START / LISTEN.STOP advisories;
* **neighbor link events** (:meth:`~RouterCore.link_up`, ``link_down``) and
  the **frames** neighbors send (:meth:`~RouterCore.receive`);
* **messages** taken from an attached network (:meth:`~RouterCore.import_message`);
* **time** (:meth:`~RouterCore.tick`), for link acknowledgements and for
  forgetting routers that stayed unreachable.

It returns :class:`SendFrame` (a frame to one neighbor), :class:`Deliver`
(publish a message into an attached network; :class:`DeliverRun` for a
batch passing through), :class:`ListenSet` (the
subjects the router must listen to on an attached network: what the rest of
the domain wants and the network exports) and :class:`Loss` (messages that
could not cross: the driver presents DATALOSS).

Interest propagation is link state: every router floods its record (links,
costs, per-network interest) and each router computes, per origin network,
the shortest-path tree of :mod:`~rvasync.protocol.rvrd.topology`. A message
carries its origin network, the router that imported it and that router's
sequence number, so a router that sees it twice (possible only while records
are still flooding) drops the second copy, and a hop limit bounds any
transient loop. The payload is opaque bytes: the core reads only the subject.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from rvasync.protocol.rvrd.patterns import overlapping
from rvasync.protocol.rvrd.topology import (
    INBOX_ROUTE,
    LinkState,
    Topology,
    net_node,
    router_node,
)
from rvasync.subjects import subject_matches

__all__ = [
    "Deliver",
    "DeliverRun",
    "ListenSet",
    "Loss",
    "NetworkPolicy",
    "RouterCore",
    "SendFrame",
    "SendLan",
    "TopologyChanged",
    "routable",
]

#: A receiver acknowledges data frames at least this often (and on every tick).
ACK_EVERY = 64
#: Forwarding decisions remembered per topology.
DECISION_CACHE = 4096

LSA = "LSA"
DATA = "DATA"
#: Several messages of one subject, imported one after another by one router:
#: ``[BATCH, origin, importer, first seq, hops, subject, [payload, ...]]`` (consecutive seqs).
BATCH = "BATCH"
ACK = "ACK"
#: Largest number of messages in one BATCH frame.
MAX_BATCH = 256
_INBOX_ROUTE_DOT = INBOX_ROUTE + "."


def routable(subject: str) -> bool:
    """Subjects that may ever cross a router: not inboxes, ``_LOCAL.``, advisories or ``_RVRD.``
    (replies travel as ``_RVRD.INBOX.`` subjects made by the router itself)."""
    head = subject.split(".", 1)[0]
    return head not in ("_INBOX", "_LOCAL", "_RV", "_RVRD")


@dataclass(frozen=True)
class NetworkPolicy:
    """Per attached network: subjects imported into it and exported out of it (patterns)."""

    imports: tuple[str, ...] = (">",)
    exports: tuple[str, ...] = (">",)
    #: Import weights (pattern, weight >= 1): among routers reaching this network at the
    #: same cost, the one with the greatest weight for a subject delivers it here.
    weights: tuple[tuple[str, int], ...] = ()

    def imports_subject(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.imports)

    def exports_subject(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.exports)


class SendFrame(NamedTuple):
    """Send ``frame`` (msgpack-able list) on the link to ``neighbor``."""

    neighbor: str
    frame: list[Any]


class Deliver(NamedTuple):
    """Publish ``payload`` (subject ``subject``) into attached ``network``, tagged with
    ``tag`` = (origin network, importer, sequence, hops) so other routers there know it."""

    network: str
    subject: str
    payload: Any
    tag: tuple[str, str, int, int]


class DeliverRun(NamedTuple):
    """:class:`Deliver` for consecutive messages of one subject (a BATCH passing through):
    ``payloads[i]`` is tagged ``(origin, importer, seq + i, hops)``. One output per batch,
    however many messages it holds."""

    network: str
    subject: str
    payloads: list[Any]
    origin: str
    importer: str
    seq: int
    hops: int

    def deliveries(self) -> list[Deliver]:
        """The same, one :class:`Deliver` per message."""
        net, subject, origin, importer, seq, hops = (
            self.network,
            self.subject,
            self.origin,
            self.importer,
            self.seq,
            self.hops,
        )
        return [
            Deliver(net, subject, payload, (origin, importer, seq + i, hops))
            for i, payload in enumerate(self.payloads)
        ]


class ListenSet(NamedTuple):
    """The router must listen to exactly ``subjects`` on attached ``network``."""

    network: str
    subjects: frozenset[str]


class Loss(NamedTuple):
    """``messages`` could not cross (``reason``); ``subject`` when known."""

    messages: int
    reason: str
    subject: str | None = None
    neighbor: str | None = None


class SendLan(NamedTuple):
    """Publish ``frame`` (an LSA) on attached ``network``, for the other routers there."""

    network: str
    frame: list[Any]


class TopologyChanged(NamedTuple):
    """The set of reachable routers changed (for logging and status)."""

    reachable: frozenset[str]


@dataclass
class _Link:
    cost: int
    sent: int = 0
    acked: int = 0
    received: int = 0
    ack_sent: int = 0


@dataclass
class RouterStats:
    """What the core counted (read by the driver for status)."""

    imported: int = 0
    forwarded: int = 0
    delivered: int = 0
    duplicates: int = 0
    echoes: int = 0
    lost: int = 0
    not_exported: int = 0
    records_received: int = 0
    bad_frames: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class RouterCore:
    """The routing logic of router ``name`` attached to ``networks`` (name -> policy)."""

    def __init__(
        self,
        name: str,
        networks: dict[str, NetworkPolicy],
        *,
        max_hops: int = 64,
        dedup_window: int = 65536,
        record_lifetime: float = 3600.0,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ValueError("a router needs a non-empty name")
        self.name = name
        self.networks = dict(networks)
        self.max_hops = max_hops
        self.record_lifetime = record_lifetime
        self.stats = RouterStats()
        self._links: dict[str, _Link] = {}
        #: network -> the other routers heard on it (LAN peers)
        self._lan: dict[str, set[str]] = {}
        self._records: dict[str, LinkState] = {}
        self._seq = 0
        self._import_seq = 0
        #: (network, subject) -> listen count
        self._interest: dict[tuple[str, str], int] = {}
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._dedup_window = dedup_window
        self._listen: dict[str, frozenset[str]] = {}
        self._unreachable_since: dict[str, float] = {}
        self._decisions: dict[tuple[str, str], tuple[list[str], list[str], int, list[str]]] = {}
        #: LAN peer -> messages this router left to it (it serves their network) since it
        #: was last heard; reported lost if it goes silent (they may not have arrived).
        self._left: dict[str, int] = {}
        self._exports: dict[tuple[str, str], bool] = {}
        self._reachable: frozenset[str] = frozenset()
        #: No import weights in the domain and no dot in a network name: replies to one
        #: network's inboxes share one routing decision (see _decide).
        self._plain_inboxes = True
        self.topology = Topology(name, {})

    # ------------------------------------------------------------------ queries

    @property
    def neighbors(self) -> list[str]:
        """Neighbors whose links are up."""
        return sorted(self._links)

    def listen_set(self, network: str) -> frozenset[str]:
        return self._listen.get(network, frozenset())

    def advertised(self, network: str) -> tuple[str, ...]:
        """Subjects this router advertises for ``network`` (its interest, within imports)."""
        policy = self.networks[network]
        return tuple(
            sorted(
                s
                for (net, s), n in self._interest.items()
                if net == network and n > 0 and overlapping(s, policy.imports)
            )
        )

    # ------------------------------------------------------------------ start

    def start(self) -> list[Any]:
        """Originate this router's first record; returns the initial listen sets."""
        return self._originate()

    # ------------------------------------------------------------------ interest

    def add_interest(self, network: str, subject: str) -> list[Any]:
        """Something on ``network`` started listening to ``subject``."""
        self._check_network(network)
        if not routable(subject):
            return []
        key = (network, subject)
        count = self._interest.get(key, 0) + 1
        self._interest[key] = count
        return self._originate() if count == 1 else []

    def remove_interest(self, network: str, subject: str) -> list[Any]:
        """Undo one :meth:`add_interest` (an unknown subject is ignored)."""
        self._check_network(network)
        key = (network, subject)
        count = self._interest.get(key, 0)
        if count <= 0:
            return []
        if count == 1:
            del self._interest[key]
            return self._originate()
        self._interest[key] = count - 1
        return []

    def reset_interest(self, network: str, subjects: list[str]) -> list[Any]:
        """Replace all interest of ``network`` (after re-attaching to it)."""
        self._check_network(network)
        for key in [k for k in self._interest if k[0] == network]:
            del self._interest[key]
        for subject in subjects:
            if routable(subject):
                key = (network, subject)
                self._interest[key] = self._interest.get(key, 0) + 1
        return self._originate()

    def _check_network(self, network: str) -> None:
        if network not in self.networks:
            raise KeyError(f"router {self.name!r} is not attached to network {network!r}")

    # ------------------------------------------------------------------ links

    def link_up(self, neighbor: str, cost: int) -> list[Any]:
        """The link to ``neighbor`` (path cost ``cost`` >= 1) is up: full record exchange."""
        if neighbor == self.name:
            raise ValueError("a router cannot be its own neighbor")
        if neighbor in self._links:
            raise ValueError(f"the link to {neighbor!r} is already up")
        if not isinstance(cost, int) or cost < 1:
            raise ValueError(f"path cost must be an integer >= 1, got {cost!r}")
        self._links[neighbor] = _Link(cost)
        out: list[Any] = [
            SendFrame(neighbor, [LSA, record.to_wire()])
            for _, record in sorted(self._records.items())
            if record.router != self.name
        ]
        out += self._originate()
        return out

    def link_down(self, neighbor: str) -> list[Any]:
        """The link to ``neighbor`` broke (or closed): report what may not have crossed."""
        link = self._links.pop(neighbor, None)
        if link is None:
            return []
        out: list[Any] = []
        unacked = link.sent - link.acked
        if unacked > 0:
            self.stats.lost += unacked
            out.append(Loss(unacked, f"neighbor link to {neighbor} broke", neighbor=neighbor))
        out += self._originate()
        return out

    # ------------------------------------------------------------------ LAN peers

    def lan_peer_up(self, network: str, peer: str) -> list[Any]:
        """Router ``peer`` is heard on attached ``network`` (each of its announcements).

        Routers sharing a LAN exchange their records over it, so they know each
        other (and agree on which of them serves the LAN) without a neighbor
        link between them. The LAN carries records only, never routed messages.
        """
        self._check_network(network)
        if peer == self.name:
            raise ValueError("a router cannot be its own LAN peer")
        peers = self._lan.setdefault(network, set())
        if peer in peers:
            self._left.pop(peer, None)  # heard again: what it was left before, it handled
            return []
        peers.add(peer)
        out: list[Any] = [
            SendLan(network, [LSA, record.to_wire()])
            for _, record in sorted(self._records.items())
            if record.router != self.name
        ]
        out += self._originate()
        return out

    def lan_peer_down(self, network: str, peer: str) -> list[Any]:
        """Router ``peer`` has not been heard on ``network`` for too long."""
        self._check_network(network)
        peers = self._lan.get(network)
        if not peers or peer not in peers:
            return []
        peers.discard(peer)
        out: list[Any] = []
        if not any(peer in others for others in self._lan.values()):
            left = self._left.pop(peer, 0)
            if left:
                self.stats.lost += left
                out.append(Loss(left, f"router {peer} went silent on {network}", neighbor=peer))
        return out + self._originate()

    def lan_peers(self, network: str) -> frozenset[str]:
        return frozenset(self._lan.get(network, ()))

    def receive_lan(self, network: str, peer: str, frame: Any) -> list[Any]:
        """A frame router ``peer`` published on ``network``: only LSA; ValueError otherwise."""
        self._check_network(network)
        if peer == self.name:
            return []
        if not isinstance(frame, list | tuple) or len(frame) != 2 or frame[0] != LSA:
            self.stats.bad_frames += 1
            raise ValueError("a LAN frame is [LSA, record]")
        try:
            record = LinkState.from_wire(frame[1])
        except ValueError:
            self.stats.bad_frames += 1
            raise
        return self._record_in("", record, network)

    # ------------------------------------------------------------------ frames

    def receive(self, neighbor: str, frame: Any) -> list[Any]:
        """A frame from ``neighbor``. ValueError for a malformed one (drop the link)."""
        link = self._links.get(neighbor)
        if link is None:
            raise ValueError(f"frame from {neighbor!r}, whose link is not up")
        if not isinstance(frame, list | tuple) or not frame:
            self.stats.bad_frames += 1
            raise ValueError("a frame is a non-empty list")
        kind = frame[0]
        if kind == DATA and len(frame) == 7:
            _, origin, importer, seq, hops, subject, payload = frame
            if not (
                isinstance(origin, str)
                and isinstance(importer, str)
                and isinstance(seq, int)
                and isinstance(hops, int)
                and isinstance(subject, str)
            ):
                self.stats.bad_frames += 1
                raise ValueError("malformed DATA frame")
            link.received += 1
            came_from = router_node(neighbor)
            out = self._forward_in(origin, importer, seq, hops, subject, payload, came_from)
            if link.received - link.ack_sent >= ACK_EVERY:
                link.ack_sent = link.received
                out.append(SendFrame(neighbor, [ACK, link.received]))
            return out
        if kind == BATCH and len(frame) == 7:
            _, origin, importer, seq, hops, subject, payloads = frame
            if not (
                isinstance(origin, str)
                and isinstance(importer, str)
                and isinstance(seq, int)
                and isinstance(hops, int)
                and isinstance(subject, str)
                and isinstance(payloads, list)
                and 0 < len(payloads) <= MAX_BATCH
            ):
                self.stats.bad_frames += 1
                raise ValueError("malformed BATCH frame")
            link.received += len(payloads)
            out = self._batch_in(origin, importer, seq, hops, subject, payloads, neighbor)
            if link.received - link.ack_sent >= ACK_EVERY:
                link.ack_sent = link.received
                out.append(SendFrame(neighbor, [ACK, link.received]))
            return out
        if kind == ACK and len(frame) == 2 and isinstance(frame[1], int):
            link.acked = max(link.acked, min(frame[1], link.sent))
            return []
        if kind == LSA and len(frame) == 2:
            try:
                record = LinkState.from_wire(frame[1])
            except ValueError:
                self.stats.bad_frames += 1
                raise
            return self._record_in(neighbor, record)
        self.stats.bad_frames += 1
        raise ValueError(f"unknown frame {kind!r}")

    def tick(self, now: float) -> list[Any]:
        """Acknowledge received data; forget routers unreachable for ``record_lifetime``."""
        out: list[Any] = []
        for neighbor, link in self._links.items():
            if link.received > link.ack_sent:
                link.ack_sent = link.received
                out.append(SendFrame(neighbor, [ACK, link.received]))
        reachable = self.topology.reachable
        expired = False
        for name in list(self._records):
            if name in reachable:
                self._unreachable_since.pop(name, None)
                continue
            since = self._unreachable_since.setdefault(name, now)
            if now - since >= self.record_lifetime:
                del self._records[name]
                del self._unreachable_since[name]
                expired = True
        if expired:
            out += self._recompute()
        return out

    # ------------------------------------------------------------------ messages

    def import_message(
        self,
        network: str,
        subject: str,
        payload: Any,
        tag: tuple[str, str, int, int] | None = None,
    ) -> list[Any]:
        """A message taken from attached ``network``.

        ``tag`` is None for a message a program published there (this router
        imports it if the network exports the subject), or the tag another
        router put on a message it delivered into the network (forwarded only
        if that network is this router's parent in the message's tree).
        """
        self._check_network(network)
        if tag is None:
            if not self._exported(network, subject):
                self.stats.not_exported += 1
                return []
            self._import_seq += 1
            self.stats.imported += 1
            return self._forward(network, self.name, self._import_seq, 0, subject, payload, True)
        origin, importer, seq, hops = tag
        return self._forward_in(origin, importer, seq, hops, subject, payload, net_node(network))

    def import_batch(self, network: str, subject: str, payloads: list[Any]) -> list[Any]:
        """Messages of one ``subject`` that programs published on ``network``, in order.

        The same outcome as :meth:`import_message` called for each payload
        (untagged), at the cost of one routing decision, and the messages
        cross each link as one BATCH frame (up to :data:`MAX_BATCH` each)
        instead of one frame per message.
        """
        self._check_network(network)
        if not payloads:
            return []
        if not self._exported(network, subject):
            self.stats.not_exported += len(payloads)
            return []
        out: list[Any] = []
        for start in range(0, len(payloads), MAX_BATCH):
            chunk = payloads[start : start + MAX_BATCH]
            first = self._import_seq + 1
            self._import_seq += len(chunk)
            self.stats.imported += len(chunk)
            out += self._forward_batch(network, self.name, first, 0, subject, chunk, True, None)
        return out

    def _exported(self, network: str, subject: str) -> bool:
        """Whether a program's message on ``network`` enters the domain (cached per subject)."""
        key = (network, subject)
        found = self._exports.get(key)
        if found is None:
            found = subject.startswith(INBOX_ROUTE + ".") or (
                routable(subject) and self.networks[network].exports_subject(subject)
            )
            if len(self._exports) >= DECISION_CACHE:
                self._exports.clear()
            self._exports[key] = found
        return found

    def _batch_in(
        self,
        origin: str,
        importer: str,
        seq: int,
        hops: int,
        subject: str,
        payloads: list[Any],
        neighbor: str,
    ) -> list[Any]:
        """A BATCH frame from ``neighbor``: as many DATA frames, decided once."""
        keys = list(zip(repeat(importer), range(seq, seq + len(payloads))))
        if not self._seen.keys().isdisjoint(keys):
            # Some already seen (records still flooding): take them one by one.
            out: list[Any] = []
            came_from = router_node(neighbor)
            for i, payload in enumerate(payloads):
                out += self._forward_in(
                    origin, importer, seq + i, hops, subject, payload, came_from
                )
            return out
        tree = self.topology.tree(net_node(origin))
        off_tree = tree is None or tree.parent.get(router_node(self.name)) != router_node(neighbor)
        return self._forward_batch(
            origin,
            importer,
            seq,
            hops,
            subject,
            payloads,
            False,
            router_node(neighbor) if off_tree else None,
            keys,
        )

    def _forward_batch(
        self,
        origin: str,
        importer: str,
        seq: int,
        hops: int,
        subject: str,
        payloads: list[Any],
        fresh: bool,
        off_tree_from: str | None,
        keys: list[tuple[str, int]] | None = None,
    ) -> list[Any]:
        """:meth:`_forward` for consecutive sequence numbers ``seq``.. of one subject
        (``keys``: their dedup keys, when the caller has them already)."""
        n = len(payloads)
        seen = self._seen
        # Remembered in order, as _remember does one by one (a C loop, not a Python one).
        seen.update(
            dict.fromkeys(zip(repeat(importer), range(seq, seq + n)) if keys is None else keys)
        )
        excess = len(seen) - self._dedup_window
        for _ in range(excess):
            seen.popitem(last=False)  # the oldest first, as _remember does one by one
        if hops >= self.max_hops:
            self.stats.lost += n
            return [Loss(n, "hop limit reached", subject)]
        out: list[Any] = []
        if off_tree_from is not None:
            nets = [
                node[2:]
                for node in self._attached_nodes()
                if node != net_node(origin) and self._delivers(node, subject)
            ]
            routers: list[str] = []
            lost = 0
        else:
            nets, routers, lost, delegates = self._decide(origin, subject)
            if fresh:
                for peer in delegates:
                    self._left[peer] = self._left.get(peer, 0) + n
        for net in nets:
            self.stats.delivered += n
            out.append(DeliverRun(net, subject, payloads, origin, importer, seq, hops + 1))
        for neighbor in routers:
            link = self._links.get(neighbor)
            if link is None:
                self.stats.lost += n
                out.append(Loss(n, f"no link to {neighbor}", subject, neighbor))
                continue
            link.sent += n
            self.stats.forwarded += n
            out.append(
                SendFrame(neighbor, [BATCH, origin, importer, seq, hops + 1, subject, payloads])
            )
        if fresh and lost:
            self.stats.lost += n
            out.append(Loss(n, "no path to a network that listens", subject))
        return out

    def _forward_in(
        self,
        origin: str,
        importer: str,
        seq: int,
        hops: int,
        subject: str,
        payload: Any,
        came_from: str,
    ) -> list[Any]:
        """A message already in the domain reached this router from ``came_from``."""
        key = (importer, seq)
        if key in self._seen:
            self.stats.duplicates += 1
            return []
        tree = self.topology.tree(net_node(origin))
        me = router_node(self.name)
        if tree is None or tree.parent.get(me) != came_from:
            if came_from.startswith("n:"):
                # Our own delivery (or another router's) heard back on the network.
                self.stats.echoes += 1
                return []
            # Sent by a neighbor whose view differs: the records are still flooding.
            return self._forward(origin, importer, seq, hops, subject, payload, False, came_from)
        return self._forward(origin, importer, seq, hops, subject, payload, False)

    def _forward(
        self,
        origin: str,
        importer: str,
        seq: int,
        hops: int,
        subject: str,
        payload: Any,
        fresh: bool,
        off_tree_from: str | None = None,
    ) -> list[Any]:
        self._remember((importer, seq))
        if hops >= self.max_hops:
            self.stats.lost += 1
            return [Loss(1, "hop limit reached", subject)]
        out: list[Any] = []
        if off_tree_from is not None:
            # Off our tree: deliver to our own networks that want it, forward nowhere.
            nets = [
                n[2:]
                for n in self._attached_nodes()
                if n != net_node(origin) and self._delivers(n, subject)
            ]
            tag = (origin, importer, seq, hops + 1)
            for net in nets:
                self.stats.delivered += 1
                out.append(Deliver(net, subject, payload, tag))
            return out
        nets, routers, lost, delegates = self._decide(origin, subject)
        if fresh:
            for peer in delegates:
                self._left[peer] = self._left.get(peer, 0) + 1
        tag = (origin, importer, seq, hops + 1)
        for net in nets:
            self.stats.delivered += 1
            out.append(Deliver(net, subject, payload, tag))
        for neighbor in routers:
            link = self._links.get(neighbor)
            if link is None:
                self.stats.lost += 1
                out.append(Loss(1, f"no link to {neighbor}", subject, neighbor))
                continue
            link.sent += 1
            self.stats.forwarded += 1
            out.append(
                SendFrame(neighbor, [DATA, origin, importer, seq, hops + 1, subject, payload])
            )
        if fresh and lost:
            self.stats.lost += 1
            out.append(Loss(1, "no path to a network that listens", subject))
        return out

    def _attached_nodes(self) -> list[str]:
        return [net_node(n) for n in sorted(self.networks)]

    def _delivers(self, node: str, subject: str) -> bool:
        if not self.topology.wants(node, subject):
            return False
        if subject.startswith(INBOX_ROUTE + "."):
            return True
        return self.networks[node[2:]].imports_subject(subject)

    def _decide(self, origin: str, subject: str) -> tuple[list[str], list[str], int, list[str]]:
        """(networks to deliver into, neighbors to send to, lost?, LAN peers of ``origin``
        that take it from there themselves to serve a network) for a message of ``origin``."""
        key = (origin, subject)
        if self._plain_inboxes and subject.startswith(_INBOX_ROUTE_DOT):
            # A reply: without import weights in the domain (nor dots in network names),
            # its route depends only on the network whose inbox it answers, not on the
            # inbox itself, which is new for every request.
            home, dot, _ = subject[len(_INBOX_ROUTE_DOT) :].partition(".")
            if dot:
                key = (origin, _INBOX_ROUTE_DOT + home)
        found = self._decisions.get(key)
        if found is not None:
            return found
        topo = self.topology
        root = net_node(origin)
        tree = topo.tree(root)
        me = router_node(self.name)
        nets: list[str] = []
        routers: list[str] = []
        delegates: list[str] = []
        lost = 0
        if tree is None or (me not in tree.parent):
            lost = 1 if self._anyone_wants(subject, root) else 0
        else:
            # Which router serves each listening network: the cheapest, then the heaviest
            # import weight for this subject (topology.py); a branch is taken only toward
            # a network whose server lies in it.
            servers = [
                topo.server(tree, node, subject)
                for node in tree.candidates
                if node != root and topo.wants(node, subject)
            ]
            for node in self._attached_nodes():
                if (
                    node != root
                    and node in tree.candidates
                    and topo.server(tree, node, subject) == me
                    and self._delivers(node, subject)
                ):
                    nets.append(node[2:])
            for child in tree.children.get(me, ()):
                if child.startswith("r:"):
                    below = tree.subtree[child]
                    if any(server in below for server in servers):
                        routers.append(child[2:])
            peers = self._lan.get(origin, ())
            delegates = sorted(
                {
                    server[2:]
                    for server in servers
                    if server is not None
                    and server != me
                    and server[2:] in peers
                    and tree.parent.get(server) == root
                }
            )
            # Reported once per message: by the smallest-named router attached to the origin.
            attached = topo.attached.get(root, [])
            if attached and attached[0] == self.name and self._unreached(subject, root, tree):
                lost = 1
        found = (nets, routers, lost, delegates)
        if len(self._decisions) >= DECISION_CACHE:
            self._decisions.clear()
        self._decisions[key] = found
        return found

    def _anyone_wants(self, subject: str, root: str) -> bool:
        topo = self.topology
        return any(topo.wants(n, subject) for n in topo.interest if n != root) or bool(
            topo.unreachable_wants(subject)
        )

    def _unreached(self, subject: str, root: str, tree: Any) -> bool:
        topo = self.topology
        if topo.unreachable_wants(subject):
            return True
        if any(
            node != root and node not in tree.candidates and topo.wants(node, subject)
            for node in topo.interest
        ):
            return True  # known through a shared LAN, but no path of links leads there
        if subject.startswith(INBOX_ROUTE + "."):
            target = net_node(subject.split(".", 3)[2])
            return target != root and target not in tree.descendants.get(root, ())
        return False

    def _remember(self, key: tuple[str, int]) -> None:
        seen = self._seen
        seen[key] = None
        if len(seen) > self._dedup_window:
            seen.popitem(last=False)

    # ------------------------------------------------------------------ link state

    def _originate(self) -> list[Any]:
        self._seq += 1
        record = LinkState(
            self.name,
            self._seq,
            {n: link.cost for n, link in self._links.items()},
            {net: self.advertised(net) for net in self.networks},
            {net: policy.weights for net, policy in self.networks.items() if policy.weights},
            {net: tuple(sorted(peers)) for net, peers in self._lan.items() if peers},
        )
        self._records[self.name] = record
        out: list[Any] = [SendFrame(n, [LSA, record.to_wire()]) for n in sorted(self._links)]
        out += self._flood_lans(record, None)
        out += self._recompute()
        return out

    def _flood_lans(self, record: LinkState, came_on: str | None) -> list[Any]:
        """The record on every attached LAN with peers, except the one it came on."""
        return [
            SendLan(net, [LSA, record.to_wire()])
            for net, peers in sorted(self._lan.items())
            if peers and net != came_on
        ]

    def _record_in(self, neighbor: str, record: LinkState, came_on: str | None = None) -> list[Any]:
        self.stats.records_received += 1
        if record.router == self.name:
            if record.seq == self._seq and record.to_wire() == self._records[self.name].to_wire():
                return []  # our own current record, come back another way (a LAN, a ring)
            if record.seq >= self._seq:
                # An old self from before a restart is still flooding: outnumber it.
                self._seq = record.seq
                return self._originate()
            return []
        stored = self._records.get(record.router)
        if stored is not None and stored.seq >= record.seq:
            return []
        self._records[record.router] = record
        out: list[Any] = [
            SendFrame(n, [LSA, record.to_wire()]) for n in sorted(self._links) if n != neighbor
        ]
        out += self._flood_lans(record, came_on)
        out += self._recompute()
        return out

    def _recompute(self) -> list[Any]:
        self.topology = topo = Topology(self.name, dict(self._records))
        self._decisions.clear()
        self._plain_inboxes = not any(
            record.weights or any("." in net for net in record.networks)
            for record in self._records.values()
        )
        out: list[Any] = []
        if topo.reachable != self._reachable:
            self._reachable = frozenset(topo.reachable)
            out.append(TopologyChanged(self._reachable))
        for net, policy in sorted(self.networks.items()):
            mine = net_node(net)
            wanted: set[str] = set()
            # Unreachable networks' interest too: their messages are taken and reported lost.
            everyone = itertools.chain(topo.interest.items(), topo.unreachable_interest.items())
            for node, patterns in everyone:
                if node == mine:
                    continue
                for p in patterns:
                    if routable(p) and overlapping(p, policy.exports):
                        wanted.add(p)
            frozen = frozenset(wanted)
            if self._listen.get(net) != frozen:
                self._listen[net] = frozen
                out.append(ListenSet(net, frozen))
        return out
