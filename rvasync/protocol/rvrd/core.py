"""RouterCore: the sans-IO state machine of one routing daemon.

A driver feeds it four kinds of input and carries out what it returns:

* **local interest** (:meth:`RouterCore.add_interest` / ``remove_interest``):
  a subject listened to on an attached network, learned from the daemons'
  LISTEN.START / LISTEN.STOP advisories;
* **neighbor link events** (:meth:`~RouterCore.link_up`, ``link_down``) and
  the **frames** neighbors send (:meth:`~RouterCore.receive`);
* **messages** taken from an attached network (:meth:`~RouterCore.import_message`);
* **time** (:meth:`~RouterCore.tick`), for link acknowledgements, for loss
  reports waiting for a path, and for forgetting routers that stayed
  unreachable.

It returns a list of :data:`~rvasync.protocol.rvrd.outputs.Output` (small
classes: a frame to send, a message to publish, subjects to listen to, a
DATALOSS to present; see rvasync.protocol.rvrd.outputs).

Interest propagation is link state: every router floods its record (links,
costs, per-network interest) and each router computes, per origin network,
the shortest-path tree of :mod:`~rvasync.protocol.rvrd.topology`. A message
carries its origin network, the router that imported it and that router's
sequence number, so a router that sees it twice (possible only while records
are still flooding) drops the second copy, and a hop limit bounds any
transient loop. The payload is opaque bytes: the core reads only the subject.

Each start of a router is a new *incarnation* (a number the driver gives,
never used before by that name): the importer a message carries is
``<name>.<incarnation>``, so a restarted router numbers its messages afresh
without any of them being taken for its predecessor's, and the HELLO of a
link says which incarnation is at the other end. What outages lose is
counted or bounded, and reported to the networks that missed it, by the
core's :class:`~rvasync.protocol.rvrd.desk.LossDesk`.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from rvasync.protocol.rvrd.desk import LinkSession, LossDesk, downstream
from rvasync.protocol.rvrd.frames import (
    ACK,
    BATCH,
    DATA,
    LOSS,
    LSA,
    MAX_BATCH,
    RESUME,
    AckFrame,
    BatchFrame,
    DataFrame,
    LsaFrame,
)
from rvasync.protocol.rvrd.outputs import (
    Deliver,
    DeliverRun,
    ListenSet,
    Output,
    RouteTag,
    SendFrame,
    SendLan,
    TopologyChanged,
)
from rvasync.protocol.rvrd.patterns import overlapping
from rvasync.protocol.rvrd.topology import (
    INBOX_ROUTE,
    LinkState,
    Topology,
    Tree,
    net_node,
    router_node,
)
from rvasync.subjects import subject_matches

__all__ = ["ACK_EVERY", "NetworkPolicy", "RouterCore", "RouterStats", "routable"]

#: A receiver acknowledges data frames at least this often (and on every tick).
ACK_EVERY = 64
#: Forwarding decisions remembered per topology.
DECISION_CACHE = 4096

_INBOX_ROUTE_DOT = INBOX_ROUTE + "."

#: (networks to deliver into, neighbors to send to, lost?, LAN peers that take it on)
Decision = tuple[list[str], list[str], int, list[str]]


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


@dataclass
class RouterStats:
    """What the core counted (read by the driver for status). ``lost``: messages it
    counted lost itself; what broken links lost is counted by its LossDesk."""

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
    """The routing logic of router ``name`` attached to ``networks`` (name -> policy), in
    its start ``incarnation`` (a number never used before by this name: the driver
    picks one at random at every start)."""

    def __init__(
        self,
        name: str,
        networks: dict[str, NetworkPolicy],
        *,
        incarnation: int = 0,
        max_hops: int = 64,
        dedup_window: int = 65536,
        record_lifetime: float = 3600.0,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ValueError("a router needs a non-empty name")
        if not isinstance(incarnation, int) or incarnation < 0:
            raise ValueError(f"incarnation must be an integer >= 0, got {incarnation!r}")
        self.name = name
        self.incarnation = incarnation
        #: What the messages this router brings into the domain carry as their importer.
        self.importer = f"{name}.{incarnation:x}"
        self.networks = dict(networks)
        self.max_hops = max_hops
        self.record_lifetime = record_lifetime
        self.stats = RouterStats()
        self._links: dict[str, LinkSession] = {}
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
        self._decisions: dict[tuple[str, str], Decision] = {}
        #: network -> subjects this router's previous incarnation advertised there, advertised
        #: again until the driver says the network's interest is known (interest_settled)
        self._provisional: dict[str, set[str]] = {}
        self._settled = False
        #: LAN peer -> (origin, subject) -> messages this router left to it (it serves their
        #: network) since it was last heard; reported lost if it goes silent.
        self._left: dict[str, dict[tuple[str, str], int]] = {}
        self._exports: dict[tuple[str, str], bool] = {}
        self._reachable: frozenset[str] = frozenset()
        #: No import weights in the domain and no dot in a network name: replies to one
        #: network's inboxes share one routing decision (see _decide).
        self._plain_inboxes = True
        self.topology = Topology(name, {})
        self.losses = LossDesk(
            name,
            self.importer,
            list(self.networks),
            self._links,
            self._lan,
            lambda: self.topology,
            max_hops,
        )

    # ------------------------------------------------------------------ queries

    @property
    def neighbors(self) -> list[str]:
        """Neighbors whose links are up."""
        return sorted(self._links)

    def listen_set(self, network: str) -> frozenset[str]:
        return self._listen.get(network, frozenset())

    def advertised(self, network: str) -> tuple[str, ...]:
        """Subjects this router advertises for ``network`` (its interest, within imports;
        and, until its interest is settled, its predecessor's)."""
        policy = self.networks[network]
        mine = {
            s
            for (net, s), n in self._interest.items()
            if net == network and n > 0 and overlapping(s, policy.imports)
        }
        mine.update(self._provisional.get(network, ()))
        return tuple(sorted(mine))

    def interest_settled(self) -> list[Output]:
        """The attached networks' interest is known now (the driver waited for its daemons'
        announcements): the predecessor's interest is no longer advertised for them.

        Until then a router that has just started advertises what its
        previous incarnation did, as its neighbors still hold it: they keep
        taking those subjects and sending them here, where they are
        delivered, instead of stopping for the moment between this start
        and the first LISTEN announcements, when nothing would count what
        is published on the other side.
        """
        self._settled = True
        if not self._provisional:
            return []
        self._provisional.clear()
        return self._originate()

    # ------------------------------------------------------------------ start

    def start(self) -> list[Output]:
        """Originate this router's first record; returns the initial listen sets."""
        return self._originate()

    def restarted(self, since: float, until: float) -> list[Output]:
        """This router's previous incarnation was last known alive at ``since`` (its state
        file): what it was routing into this router's networks from then until ``until``
        is lost, uncounted."""
        out: list[Output] = []
        reason = f"router {self.name} restarted: messages it was routing here are lost"
        for net in sorted(self.networks):
            out += self.losses.window(net, reason, None, since, until)
        return out

    # ------------------------------------------------------------------ interest

    def add_interest(self, network: str, subject: str) -> list[Output]:
        """Something on ``network`` started listening to ``subject``."""
        self._check_network(network)
        if not routable(subject):
            return []
        key = (network, subject)
        count = self._interest.get(key, 0) + 1
        self._interest[key] = count
        return self._originate() if count == 1 else []

    def remove_interest(self, network: str, subject: str) -> list[Output]:
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

    def reset_interest(self, network: str, subjects: list[str]) -> list[Output]:
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

    def link_up(
        self, neighbor: str, cost: int, incarnation: int = 0, at: float = 0.0
    ) -> list[Output]:
        """The link to ``neighbor`` (path cost ``cost`` >= 1, in its start ``incarnation``)
        is up at wall-clock time ``at``: full record exchange. Its first frame is RESUME."""
        if neighbor == self.name:
            raise ValueError("a router cannot be its own neighbor")
        if neighbor in self._links:
            raise ValueError(f"the link to {neighbor!r} is already up")
        if not isinstance(cost, int) or cost < 1:
            raise ValueError(f"path cost must be an integer >= 1, got {cost!r}")
        out: list[Output] = [SendFrame(neighbor, self.losses.resume_frame(neighbor))]
        self._links[neighbor] = LinkSession(cost, incarnation)
        out += [
            SendFrame(neighbor, LsaFrame(LSA, record.to_wire()))
            for _, record in sorted(self._records.items())
            if record.router != self.name
        ]
        out += self.losses.link_back(neighbor, incarnation, at)
        out += self._originate()
        return out

    def link_down(self, neighbor: str, at: float = 0.0) -> list[Output]:
        """The link to ``neighbor`` broke (or closed) at wall-clock time ``at``: what it
        carried may not have crossed (LossDesk)."""
        link = self._links.pop(neighbor, None)
        if link is None:
            return []
        out = self.losses.link_lost(neighbor, link, self.topology, at)
        out += self._originate()
        return out

    def unsent(self, neighbor: str, frame: DataFrame | BatchFrame) -> list[Output]:
        """The driver could not write ``frame`` (a data frame this core gave for
        ``neighbor``: the link is too far behind): its messages are lost, counted."""
        n = len(frame.payloads) if frame.kind == BATCH else 1  # type: ignore[union-attr]
        link = self._links.get(neighbor)
        if link is not None:
            link.sent -= n
            link.inflight.unsend(frame.origin, frame.subject, n)
        return self._lost_via(neighbor, frame.origin, frame.subject, n,
                              f"link to {neighbor} cannot take it")  # fmt: skip

    def publish_failed(self, network: str, subject: str, n: int) -> list[Output]:
        """``n`` messages of ``subject`` could not be published into attached ``network``."""
        self.stats.lost += n
        return self.losses.count(network, f"cannot publish into {network}", None, subject, n)

    def _lost_via(
        self, neighbor: str, origin: str, subject: str, n: int, reason: str
    ) -> list[Output]:
        """``n`` messages of ``origin`` / ``subject`` bound for ``neighbor`` did not leave."""
        self.stats.lost += n
        targets: list[str | None] = list(downstream(self.topology, origin, neighbor, subject))
        out: list[Output] = []
        for target in targets or [None]:
            out += self.losses.count(target, reason, origin, subject, n)
        return out

    # ------------------------------------------------------------------ LAN peers

    def lan_peer_up(self, network: str, peer: str) -> list[Output]:
        """Router ``peer`` is heard on attached ``network`` (each of its announcements).

        Routers sharing a LAN exchange their records over it, so they know each
        other (and agree on which of them serves the LAN) without a neighbor
        link between them. The LAN carries records (and loss reports) only,
        never routed messages.
        """
        self._check_network(network)
        if peer == self.name:
            raise ValueError("a router cannot be its own LAN peer")
        peers = self._lan.setdefault(network, set())
        if peer in peers:
            self._left.pop(peer, None)  # heard again: what it was left before, it handled
            return []
        peers.add(peer)
        out: list[Output] = [
            SendLan(network, LsaFrame(LSA, record.to_wire()))
            for _, record in sorted(self._records.items())
            if record.router != self.name
        ]
        out += self._originate()
        return out

    def lan_peer_down(self, network: str, peer: str) -> list[Output]:
        """Router ``peer`` has not been heard on ``network`` for too long."""
        self._check_network(network)
        peers = self._lan.get(network)
        if not peers or peer not in peers:
            return []
        peers.discard(peer)
        out: list[Output] = []
        if not any(peer in others for others in self._lan.values()):
            out += self._left_lost(network, peer)
        return out + self._originate()

    def _left_lost(self, network: str, peer: str) -> list[Output]:
        """What this router left to LAN ``peer`` since it was last heard: counted."""
        out: list[Output] = []
        record = self._records.get(peer)
        served = sorted(record.networks) if record is not None else []
        reason = f"router {peer} went silent on {network}"
        for (origin, subject), n in sorted(self._left.pop(peer, {}).items()):
            self.stats.lost += n
            nets: list[str | None] = [t for t in served if t != origin]
            for target in nets or [None]:
                out += self.losses.count(target, reason, origin, subject, n)
        return out

    def lan_peers(self, network: str) -> frozenset[str]:
        return frozenset(self._lan.get(network, ()))

    def receive_lan(self, network: str, peer: str, frame: Any) -> list[Output]:
        """A frame router ``peer`` published on ``network``: LSA, or LOSS for a router
        there; ValueError otherwise."""
        self._check_network(network)
        if peer == self.name:
            return []
        if not isinstance(frame, list | tuple) or not frame or frame[0] not in (LSA, LOSS):
            self.stats.bad_frames += 1
            raise ValueError("a LAN frame is [LSA, record] or a LOSS frame")
        try:
            if frame[0] == LOSS:
                return self.losses.receive(frame, None)
            if len(frame) != 2:
                raise ValueError("a LAN frame is [LSA, record]")
            record = LinkState.from_wire(frame[1])
        except ValueError:
            self.stats.bad_frames += 1
            raise
        return self._record_in("", record, network)

    # ------------------------------------------------------------------ frames

    def receive(self, neighbor: str, frame: Any) -> list[Output]:
        """A frame from ``neighbor`` (as msgpack decoded it). ValueError for a malformed
        one (the driver drops the link)."""
        link = self._links.get(neighbor)
        if link is None:
            raise ValueError(f"frame from {neighbor!r}, whose link is not up")
        if not isinstance(frame, list | tuple) or not frame:
            self.stats.bad_frames += 1
            raise ValueError("a frame is a non-empty list")
        kind = frame[0]
        if kind in (DATA, BATCH) and len(frame) == 7:
            return self._data_in(neighbor, link, frame)
        if kind == ACK and len(frame) == 2 and isinstance(frame[1], int):
            acked = max(link.acked, min(frame[1], link.sent))  # [ACK, received]
            link.inflight.drop(acked - link.acked)
            link.acked = acked
            return []
        try:
            if kind == LSA and len(frame) == 2:
                return self._record_in(neighbor, LinkState.from_wire(frame[1]))
            if kind == LOSS:
                out = self.losses.receive(frame, link)
                return out + self._counted(neighbor, link, 1)
            if kind == RESUME and len(frame) == 3:
                return self._resume_in(neighbor, frame)
        except ValueError:
            self.stats.bad_frames += 1
            raise
        self.stats.bad_frames += 1
        raise ValueError(f"unknown frame {kind!r}")

    def _resume_in(self, neighbor: str, frame: Any) -> list[Output]:
        _, incarnation, received = frame
        if not (isinstance(incarnation, int) and isinstance(received, int) and received >= 0):
            raise ValueError("malformed RESUME frame")
        return self.losses.resumed(neighbor, incarnation, received, self.incarnation)

    def _data_in(self, neighbor: str, link: LinkSession, frame: Any) -> list[Output]:
        """A DATA or BATCH frame: ``[kind, origin, importer, seq, hops, subject, payload(s)]``."""
        kind, origin, importer, seq, hops, subject, body = frame
        if not (
            isinstance(origin, str)
            and isinstance(importer, str)
            and isinstance(seq, int)
            and isinstance(hops, int)
            and isinstance(subject, str)
        ):
            self.stats.bad_frames += 1
            raise ValueError(f"malformed {kind} frame")
        if kind == DATA:
            out = self._forward_in(
                origin, importer, seq, hops, subject, body, router_node(neighbor)
            )
            return out + self._counted(neighbor, link, 1)
        if not (isinstance(body, list) and 0 < len(body) <= MAX_BATCH):
            self.stats.bad_frames += 1
            raise ValueError("malformed BATCH frame")
        out = self._batch_in(origin, importer, seq, hops, subject, body, neighbor)
        return out + self._counted(neighbor, link, len(body))

    def _counted(self, neighbor: str, link: LinkSession, n: int) -> list[Output]:
        """``n`` more of the link's stream arrived: an ACK every :data:`ACK_EVERY`."""
        link.received += n
        if link.received - link.ack_sent >= ACK_EVERY:
            link.ack_sent = link.received
            return [SendFrame(neighbor, AckFrame(ACK, link.received))]
        return []

    def tick(self, now: float) -> list[Output]:
        """Acknowledge received data; send loss reports a path reaches now; forget routers
        unreachable for ``record_lifetime``."""
        out: list[Output] = []
        for neighbor, link in self._links.items():
            if link.received > link.ack_sent:
                link.ack_sent = link.received
                out.append(SendFrame(neighbor, AckFrame(ACK, link.received)))
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
        out += self.losses.flush()
        return out

    # ------------------------------------------------------------------ messages

    def import_message(
        self,
        network: str,
        subject: str,
        payload: Any,
        tag: tuple[str, str, int, int] | None = None,
    ) -> list[Output]:
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
            return self._forward(
                network, self.importer, self._import_seq, 0, subject, payload, True
            )
        origin, importer, seq, hops = tag
        return self._forward_in(origin, importer, seq, hops, subject, payload, net_node(network))

    def import_batch(self, network: str, subject: str, payloads: list[Any]) -> list[Output]:
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
        out: list[Output] = []
        importer = self.importer
        for start in range(0, len(payloads), MAX_BATCH):
            chunk = payloads[start : start + MAX_BATCH]
            first = self._import_seq + 1
            self._import_seq += len(chunk)
            self.stats.imported += len(chunk)
            out += self._forward_batch(network, importer, first, 0, subject, chunk, True, None)
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
    ) -> list[Output]:
        """A BATCH frame from ``neighbor``: as many DATA frames, decided once."""
        keys = list(zip(repeat(importer), range(seq, seq + len(payloads))))
        if not self._seen.keys().isdisjoint(keys):
            # Some already seen (records still flooding): take them one by one.
            out: list[Output] = []
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
    ) -> list[Output]:
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
            return self._hop_limit(origin, subject, n)
        if off_tree_from is not None:
            nets = self._off_tree_nets(origin, subject)
            routers: list[str] = []
            lost = 0
        else:
            nets, routers, lost, delegates = self._decide(origin, subject)
            if fresh and delegates:
                self._leave(delegates, origin, subject, n)
        out: list[Output] = []
        for net in nets:
            self.stats.delivered += n
            out.append(DeliverRun(net, subject, payloads, origin, importer, seq, hops + 1))
        for neighbor in routers:
            link = self._links.get(neighbor)
            if link is None:
                out += self._lost_via(neighbor, origin, subject, n, f"no link to {neighbor}")
                continue
            link.sent += n
            link.inflight.add(origin, subject, n)
            self.stats.forwarded += n
            out.append(
                SendFrame(
                    neighbor, BatchFrame(BATCH, origin, importer, seq, hops + 1, subject, payloads)
                )
            )
        if fresh and lost:
            out += self._no_path(origin, subject, n)
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
    ) -> list[Output]:
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
    ) -> list[Output]:
        self._remember((importer, seq))
        if hops >= self.max_hops:
            return self._hop_limit(origin, subject, 1)
        out: list[Output] = []
        tag = RouteTag(origin, importer, seq, hops + 1)
        if off_tree_from is not None:
            # Off our tree: deliver to our own networks that want it, forward nowhere.
            for net in self._off_tree_nets(origin, subject):
                self.stats.delivered += 1
                out.append(Deliver(net, subject, payload, tag))
            return out
        nets, routers, lost, delegates = self._decide(origin, subject)
        if fresh and delegates:
            self._leave(delegates, origin, subject, 1)
        for net in nets:
            self.stats.delivered += 1
            out.append(Deliver(net, subject, payload, tag))
        for neighbor in routers:
            link = self._links.get(neighbor)
            if link is None:
                out += self._lost_via(neighbor, origin, subject, 1, f"no link to {neighbor}")
                continue
            link.sent += 1
            link.inflight.add(origin, subject, 1)
            self.stats.forwarded += 1
            out.append(
                SendFrame(
                    neighbor, DataFrame(DATA, origin, importer, seq, hops + 1, subject, payload)
                )
            )
        if fresh and lost:
            out += self._no_path(origin, subject, 1)
        return out

    def _hop_limit(self, origin: str, subject: str, n: int) -> list[Output]:
        self.stats.lost += n
        return self.losses.count(None, "hop limit reached", origin, subject, n)

    def _leave(self, delegates: list[str], origin: str, subject: str, n: int) -> None:
        """LAN peers ``delegates`` take ``n`` fresh messages from ``origin`` themselves."""
        key = (origin, subject)
        for peer in delegates:
            left = self._left.setdefault(peer, {})
            left[key] = left.get(key, 0) + n

    def _no_path(self, origin: str, subject: str, n: int) -> list[Output]:
        """``n`` fresh messages that networks known to listen cannot be reached for."""
        self.stats.lost += n
        out: list[Output] = []
        reason = "no path to a network that listens"
        targets: list[str | None] = list(self._unreached_networks(origin, subject))
        for target in targets or [None]:
            out += self.losses.count(target, reason, origin, subject, n)
        return out

    def _off_tree_nets(self, origin: str, subject: str) -> list[str]:
        root = net_node(origin)
        return [
            node[2:]
            for node in self._attached_nodes()
            if node != root and self._delivers(node, subject)
        ]

    def _attached_nodes(self) -> list[str]:
        return [net_node(n) for n in sorted(self.networks)]

    def _delivers(self, node: str, subject: str) -> bool:
        if not self.topology.wants(node, subject):
            return False
        if subject.startswith(_INBOX_ROUTE_DOT):
            return True
        return self.networks[node[2:]].imports_subject(subject)

    def _decide(self, origin: str, subject: str) -> Decision:
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
        root = net_node(origin)
        tree = self.topology.tree(root)
        if tree is None or router_node(self.name) not in tree.parent:
            found = ([], [], 1 if self._anyone_wants(subject, root) else 0, [])
        else:
            found = self._decide_on(tree, root, subject)
        if len(self._decisions) >= DECISION_CACHE:
            self._decisions.clear()
        self._decisions[key] = found
        return found

    def _decide_on(self, tree: Tree, root: str, subject: str) -> Decision:
        """:meth:`_decide` for a router on ``tree``, the tree of origin ``root``."""
        topo = self.topology
        me = router_node(self.name)
        # Which router serves each listening network: the cheapest, then the heaviest
        # import weight for this subject (topology.py); a branch is taken only toward
        # a network whose server lies in it.
        servers = [
            topo.server(tree, node, subject)
            for node in tree.candidates
            if node != root and topo.wants(node, subject)
        ]
        nets = [
            node[2:]
            for node in self._attached_nodes()
            if node != root
            and node in tree.candidates
            and topo.server(tree, node, subject) == me
            and self._delivers(node, subject)
        ]
        routers = [
            child[2:]
            for child in tree.children.get(me, ())
            if child.startswith("r:") and any(s in tree.subtree[child] for s in servers)
        ]
        peers = self._lan.get(root[2:], ())
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
        lost = int(
            bool(attached) and attached[0] == self.name and self._unreached(subject, root, tree)
        )
        return (nets, routers, lost, delegates)

    def _anyone_wants(self, subject: str, root: str) -> bool:
        topo = self.topology
        return any(topo.wants(n, subject) for n in topo.interest if n != root) or bool(
            topo.unreachable_wants(subject)
        )

    def _unreached(self, subject: str, root: str, tree: Tree) -> bool:
        topo = self.topology
        if topo.unreachable_wants(subject):
            return True
        if any(
            node != root and node not in tree.candidates and topo.wants(node, subject)
            for node in topo.interest
        ):
            return True  # known through a shared LAN, but no path of links leads there
        if subject.startswith(_INBOX_ROUTE_DOT):
            target = net_node(subject.split(".", 3)[2])
            return target != root and target not in tree.descendants.get(root, ())
        return False

    def _unreached_networks(self, origin: str, subject: str) -> list[str]:
        """The networks known to listen to ``subject`` that messages of ``origin`` cannot
        reach now (where a report of their loss is to go)."""
        topo = self.topology
        root = net_node(origin)
        tree = topo.tree(root)
        reached = tree.candidates if tree is not None else {}
        nodes = set(topo.unreachable_wants(subject))
        nodes.update(
            node for node in topo.interest
            if node != root and node not in reached and topo.wants(node, subject)
        )  # fmt: skip
        if subject.startswith(_INBOX_ROUTE_DOT):
            target = net_node(subject.split(".", 3)[2])
            if target != root and target not in reached:
                nodes.add(target)
        return sorted(node[2:] for node in nodes)

    def _remember(self, key: tuple[str, int]) -> None:
        seen = self._seen
        seen[key] = None
        if len(seen) > self._dedup_window:
            seen.popitem(last=False)

    # ------------------------------------------------------------------ link state

    def _originate(self) -> list[Output]:
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
        wire = record.to_wire()
        out: list[Output] = [SendFrame(n, LsaFrame(LSA, wire)) for n in sorted(self._links)]
        out += self._flood_lans(record, None)
        out += self._recompute()
        return out

    def _flood_lans(self, record: LinkState, came_on: str | None) -> list[Output]:
        """The record on every attached LAN with peers, except the one it came on."""
        return [
            SendLan(net, LsaFrame(LSA, record.to_wire()))
            for net, peers in sorted(self._lan.items())
            if peers and net != came_on
        ]

    def _record_in(
        self, neighbor: str, record: LinkState, came_on: str | None = None
    ) -> list[Output]:
        self.stats.records_received += 1
        if record.router == self.name:
            if record.seq == self._seq and record.to_wire() == self._records[self.name].to_wire():
                return []  # our own current record, come back another way (a LAN, a ring)
            if record.seq >= self._seq:
                # An old self from before a restart is still flooding: outnumber it (and
                # keep its interest until this incarnation knows its own: interest_settled).
                self._seq = record.seq
                if not self._settled:
                    for net, subjects in record.networks.items():
                        if net in self.networks:
                            self._provisional.setdefault(net, set()).update(subjects)
                return self._originate()
            return []
        stored = self._records.get(record.router)
        if stored is not None and stored.seq >= record.seq:
            return []
        self._records[record.router] = record
        wire = record.to_wire()
        out: list[Output] = [
            SendFrame(n, LsaFrame(LSA, wire)) for n in sorted(self._links) if n != neighbor
        ]
        out += self._flood_lans(record, came_on)
        out += self._recompute()
        return out

    def _recompute(self) -> list[Output]:
        self.topology = topo = Topology(self.name, dict(self._records))
        self._decisions.clear()
        self._plain_inboxes = not any(
            record.weights or any("." in net for net in record.networks)
            for record in self._records.values()
        )
        out: list[Output] = []
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
        out += self.losses.failover()
        out += self.losses.flush()
        return out
