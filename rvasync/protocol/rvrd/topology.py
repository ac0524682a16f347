"""The link-state database of a routing domain and the shortest-path trees drawn from it.

Every router floods a :class:`LinkState` record: its neighbor links with their
path costs, and per attached network the subjects listened to there. From the
records it holds, each router builds the same :class:`Topology` and, for a
message entering the domain at network ``o``, the same shortest-path tree
rooted at ``o`` (ties broken by node name, so every router draws the same
tree). A message follows that tree only: each link at most once, never a
loop, always along the cheapest path, and it is sent down a branch only if a
network in that branch listens to its subject.

Nodes are strings: ``"r:<router>"`` for routers and ``"n:<network>"`` for
networks. A router-to-router edge exists only when both ends report it (the
two-way check), so a stale record of a dead router never draws a path.
Routers that hear each other on a LAN they share (their records list each
other as LAN peers, both ways) are reachable to each other even without a
neighbor link: they exchange records over the LAN, so they agree on which
of them serves it, but the LAN still carries no routed message between them. The
edge from a router to an attached network costs :data:`ATTACH_COST`; a
network is a leaf, never a transit between routers (routers that share a LAN
cooperate through neighbor links), except as the root of its own messages.

Subject weights: when several routers reach a network at the same (lowest)
cost, which of them delivers a message there depends on its subject. Each
router floods, per attached network, its import weights (subject pattern,
weight); for a subject, the candidate with the greatest weight delivers
(a router without a matching pattern weighs :data:`DEFAULT_WEIGHT`), ties
going to the smallest router name. Path costs come first: weights only choose
among routers at equal cost. Every router computes the same choice from the
same records, so a message is still delivered once; when the chosen router
becomes unreachable, the next candidate takes over at the recomputation.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from rvasync.subjects import subject_matches

__all__ = [
    "ATTACH_COST",
    "DEFAULT_WEIGHT",
    "INBOX_ROUTE",
    "LinkState",
    "Topology",
    "Tree",
    "net_node",
    "router_node",
]

#: Cost of the edge between a router and a network it is attached to.
ATTACH_COST = 1

#: The import weight of a subject no configured weight pattern matches.
DEFAULT_WEIGHT = 1

Weights = tuple[tuple[str, int], ...]


def weight_of(weights: Weights, subject: str) -> int:
    """The greatest weight among ``weights`` patterns matching ``subject`` (else the default)."""
    best = None
    for pattern, weight in weights:
        if subject_matches(pattern, subject) and (best is None or weight > best):
            best = weight
    return DEFAULT_WEIGHT if best is None else best


#: Every network implicitly wants the replies addressed to its inboxes (see inbox.py).
INBOX_ROUTE = "_RVRD.INBOX"


def router_node(name: str) -> str:
    return "r:" + name


def net_node(name: str) -> str:
    return "n:" + name


@dataclass(frozen=True)
class LinkState:
    """One router's flooded record. ``seq`` orders the records of one router (higher wins)."""

    router: str
    seq: int
    links: dict[str, int] = field(default_factory=dict)
    networks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: network -> import weights (pattern, weight >= 1) of this router there
    weights: dict[str, Weights] = field(default_factory=dict)
    #: network -> the other routers this one hears on it (LAN peers)
    lan: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def to_wire(self) -> list[object]:
        return [
            self.router,
            self.seq,
            sorted([k, v] for k, v in self.links.items()),
            sorted([k, list(v)] for k, v in self.networks.items()),
            sorted([k, [list(pw) for pw in v]] for k, v in self.weights.items() if v),
            sorted([k, list(v)] for k, v in self.lan.items() if v),
        ]

    @classmethod
    def from_wire(cls, body: object) -> LinkState:
        """Parse a record; ValueError on anything malformed (a peer's bad frame)."""
        if not isinstance(body, list | tuple) or len(body) != 6:
            raise ValueError("a link-state record is [router, seq, links, networks, weights, lan]")
        router, seq, links, networks, weights, lan = body
        if not isinstance(router, str) or not router:
            raise ValueError("link-state router name must be a non-empty string")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError("link-state seq must be an integer >= 0")
        parsed_links: dict[str, int] = {}
        for item in _pairs(links, "links"):
            name, cost = item
            if not isinstance(name, str) or not isinstance(cost, int) or cost < 1:
                raise ValueError("a link is [router name, cost >= 1]")
            parsed_links[name] = cost
        parsed_nets: dict[str, tuple[str, ...]] = {}
        for item in _pairs(networks, "networks"):
            name, subjects = item
            if not isinstance(name, str) or not isinstance(subjects, list | tuple):
                raise ValueError("a network is [name, [subjects]]")
            if not all(isinstance(s, str) and s for s in subjects):
                raise ValueError("network interest must be a list of subjects")
            parsed_nets[name] = tuple(subjects)
        parsed_weights: dict[str, Weights] = {}
        for item in _pairs(weights, "weights"):
            name, pairs = item
            if not isinstance(name, str) or not isinstance(pairs, list | tuple):
                raise ValueError("a network's weights are [name, [[pattern, weight], ...]]")
            entries = []
            for pair in pairs:
                if (
                    not isinstance(pair, list | tuple)
                    or len(pair) != 2
                    or not isinstance(pair[0], str)
                    or not pair[0]
                    or not isinstance(pair[1], int)
                    or isinstance(pair[1], bool)
                    or pair[1] < 1
                ):
                    raise ValueError("a subject weight is [pattern, integer >= 1]")
                entries.append((pair[0], pair[1]))
            parsed_weights[name] = tuple(entries)
        parsed_lan: dict[str, tuple[str, ...]] = {}
        for item in _pairs(lan, "lan"):
            name, peers = item
            if not isinstance(name, str) or not isinstance(peers, list | tuple):
                raise ValueError("a network's LAN peers are [name, [router, ...]]")
            if not all(isinstance(p, str) and p for p in peers):
                raise ValueError("LAN peers must be router names")
            parsed_lan[name] = tuple(peers)
        return cls(router, seq, parsed_links, parsed_nets, parsed_weights, parsed_lan)


def _pairs(value: object, what: str) -> list[tuple[object, object]]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"link-state {what} must be a list")
    out = []
    for item in value:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise ValueError(f"link-state {what} entries are pairs")
        out.append((item[0], item[1]))
    return out


class Tree:
    """The shortest-path tree rooted at one network, as one router's view draws it."""

    __slots__ = ("candidates", "children", "descendants", "parent", "root", "subtree")

    def __init__(
        self, root: str, parent: dict[str, str], candidates: dict[str, list[str]] | None = None
    ) -> None:
        self.root = root
        self.parent = parent
        #: network node -> every router node reaching it at the lowest cost (sorted); the
        #: subject's weights choose among them (``parent`` holds the first).
        self.candidates: dict[str, list[str]] = candidates or {}
        self.children: dict[str, list[str]] = {}
        for node, up in sorted(parent.items()):
            self.children.setdefault(up, []).append(node)
        #: node -> the networks at or below it (a network in its own set).
        self.descendants: dict[str, tuple[str, ...]] = {}
        self._collect(root)

    def _collect(self, root: str) -> None:
        # Iterative post-order: deep line topologies must not hit the recursion limit.
        order: list[str] = []
        stack = [root]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(self.children.get(node, ()))
        for node in reversed(order):
            nets: list[str] = [node] if node.startswith("n:") else []
            for child in self.children.get(node, ()):
                nets.extend(self.descendants[child])
            self.descendants[node] = tuple(nets)
        #: router node -> the router nodes at or below it
        self.subtree: dict[str, frozenset[str]] = {}
        for node in reversed(order):
            if node.startswith("r:"):
                below = {node}
                for child in self.children.get(node, ()):
                    if child.startswith("r:"):
                        below |= self.subtree[child]
                self.subtree[node] = frozenset(below)


class Topology:
    """The graph a router sees from its link-state database (an immutable snapshot)."""

    def __init__(self, me: str, records: dict[str, LinkState]) -> None:
        self.me = me
        self._records = records
        self.reachable = self._reachable_routers()
        self.adjacency: dict[str, dict[str, int]] = {}
        #: network node -> its interest patterns (union over the routers attached to it)
        self.interest: dict[str, tuple[str, ...]] = {}
        #: network node -> names of the reachable routers attached to it
        self.attached: dict[str, list[str]] = {}
        for name in sorted(self.reachable):
            record = records[name]
            rnode = router_node(name)
            edges = self.adjacency.setdefault(rnode, {})
            for other, cost in record.links.items():
                if other in self.reachable and name in records[other].links:
                    edges[router_node(other)] = max(cost, records[other].links[name])
            for net, subjects in record.networks.items():
                nnode = net_node(net)
                edges[nnode] = ATTACH_COST
                self.adjacency.setdefault(nnode, {})[rnode] = ATTACH_COST
                self.attached.setdefault(nnode, []).append(name)
                merged = dict.fromkeys(self.interest.get(nnode, ()))
                merged.update(dict.fromkeys(subjects))
                self.interest[nnode] = tuple(merged)
        # Interest of networks only unreachable routers report: counted as loss, never routed.
        self.unreachable_interest: dict[str, tuple[str, ...]] = {}
        for name, record in records.items():
            if name in self.reachable:
                continue
            for net, subjects in record.networks.items():
                nnode = net_node(net)
                if nnode not in self.interest:
                    prev = self.unreachable_interest.get(nnode, ())
                    self.unreachable_interest[nnode] = prev + tuple(subjects)
        self._trees: dict[str, Tree | None] = {}

    def _reachable_routers(self) -> set[str]:
        records = self._records
        if self.me not in records:
            return set()
        seen = {self.me}
        todo = [self.me]
        while todo:
            name = todo.pop()
            record = records[name]
            for other in record.links:
                if other in seen or other not in records:
                    continue
                if name in records[other].links:  # two-way check
                    seen.add(other)
                    todo.append(other)
            # Routers that hear each other on a shared LAN know each other (records only).
            for net, peers in record.lan.items():
                for other in peers:
                    if other in seen or other not in records:
                        continue
                    if name in records[other].lan.get(net, ()):
                        seen.add(other)
                        todo.append(other)
        return seen

    def tree(self, root: str) -> Tree | None:
        """The shortest-path tree rooted at ``root`` (a node), None if the root is unknown."""
        if root in self._trees:
            return self._trees[root]
        result = None
        if root in self.adjacency:
            result = self._dijkstra(root)
        self._trees[root] = result
        return result

    def _dijkstra(self, root: str) -> Tree:
        dist: dict[str, int] = {root: 0}
        heap = [(0, root)]
        done: set[str] = set()
        while heap:
            d, node = heapq.heappop(heap)
            if node in done:
                continue
            done.add(node)
            if node.startswith("n:") and node != root:
                continue  # a network is a leaf, never a transit
            for other, cost in self.adjacency.get(node, {}).items():
                nd = d + cost
                if nd < dist.get(other, nd + 1):
                    dist[other] = nd
                    heapq.heappush(heap, (nd, other))
        parent: dict[str, str] = {}
        candidates: dict[str, list[str]] = {}
        for node, d in dist.items():
            if node == root:
                continue
            # The same parent on every router: the smallest name among the cheapest.
            cheapest = sorted(
                up
                for up, cost in self.adjacency[node].items()
                if up in dist and dist[up] + cost == d and (up == root or not up.startswith("n:"))
            )
            parent[node] = cheapest[0]
            if node.startswith("n:"):
                candidates[node] = cheapest
        return Tree(root, parent, candidates)

    def server(self, tree: Tree, network: str, subject: str) -> str | None:
        """The router node that delivers ``subject`` into ``network`` (a node) on ``tree``.

        Among the routers reaching it at the lowest cost, the one whose import
        weight for the subject is greatest (the smallest name on a tie).
        """
        cands = tree.candidates.get(network)
        if not cands:
            return tree.parent.get(network)
        if len(cands) == 1:
            return cands[0]
        net = network[2:]
        best, best_weight = cands[0], -1
        for cand in cands:
            if cand.startswith("n:"):
                continue
            record = self._records.get(cand[2:])
            weights = record.weights.get(net, ()) if record is not None else ()
            weight = weight_of(weights, subject)
            if weight > best_weight:
                best, best_weight = cand, weight
        return best

    def wants(self, node: str, subject: str) -> bool:
        """True if network ``node`` listens to ``subject`` (its replies included)."""
        if subject.startswith(INBOX_ROUTE + "."):
            return subject.startswith(f"{INBOX_ROUTE}.{node[2:]}.")
        return any(subject_matches(p, subject) for p in self.interest.get(node, ()))

    def unreachable_wants(self, subject: str) -> list[str]:
        """Networks known to listen to ``subject`` that no path reaches."""
        out = []
        for node, patterns in self.unreachable_interest.items():
            if subject.startswith(INBOX_ROUTE + "."):
                if subject.startswith(f"{INBOX_ROUTE}.{node[2:]}."):
                    out.append(node)
            elif any(subject_matches(p, subject) for p in patterns):
                out.append(node)
        return out
