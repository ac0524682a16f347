"""Networks joined by routing daemons, simulated with the project's router core.

Every router is a real :class:`~rvasync.protocol.rvrd.RouterCore` (the core
``rvasync router`` runs) in the routing domain of ``tests/rvrd_sim.py``, which
carries frames over neighbor links in order until nothing is left. Each of
``networks`` networks has one router; the routers are linked as a chain, a
ring, a square grid or a random mesh (a ring plus random chords, three links
a router on average).

Measured per topology, all counts (the simulated domain has no clock: a
frame crossing a link is one hop, and the page turns hops into time with the
lab's latency per hop):

- building the domain: frames until every router knows every other;
- an interest change (a listener appears on one network, then goes): frames
  that cross links, and hops from that router to the farthest one (how far
  the news must travel: its propagation time is hops times the per-hop
  latency);
- one message published into network 0 that k networks listen to: DATA frames
  that cross links per message and deliveries (each listening network once);
- route failover: a link on the path of a stream is cut; frames until the
  domain has converged again, and that the next message still reaches every
  listener once (ring, grid and mesh; a chain has no other way).
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from tests.rvrd_sim import Domain

Edges = list[tuple[int, int]]


def chain(n: int, rng: random.Random) -> Edges:
    return [(i, i + 1) for i in range(n - 1)]


def ring(n: int, rng: random.Random) -> Edges:
    return [*chain(n, rng), (n - 1, 0)]


def grid(n: int, rng: random.Random) -> Edges:
    side = max(1, round(n**0.5))
    edges = []
    for i in range(n):
        if (i + 1) % side and i + 1 < n:
            edges.append((i, i + 1))
        if i + side < n:
            edges.append((i, i + side))
    return edges


def mesh(n: int, rng: random.Random) -> Edges:
    """A ring plus n/2 random chords: about three links a router, every link on a cycle."""
    edges = set(ring(n, rng))
    while len(edges) < n + n // 2:
        a, b = rng.sample(range(n), 2)
        if (a, b) not in edges and (b, a) not in edges:
            edges.add((a, b))
    return sorted(edges)


TOPOLOGIES: dict[str, Callable[[int, random.Random], Edges]] = {
    "chain": chain,
    "ring": ring,
    "grid": grid,
    "mesh": mesh,
}


class Counted:
    """The routing domain with every frame that crosses a link counted by kind."""

    def __init__(self, networks: int, edges: Edges) -> None:
        self.n = networks
        self.edges = edges
        self.frames: Counter[str] = Counter()
        attach = {f"r{i}": [f"N{i}"] for i in range(networks)}
        self.domain = Domain(attach)
        for core in self.domain.cores.values():
            core.receive = self._counting(core.receive)  # type: ignore[method-assign]
        self.adjacent: dict[int, set[int]] = {i: set() for i in range(networks)}
        for a, b in edges:
            self.adjacent[a].add(b)
            self.adjacent[b].add(a)
            self.domain.link_up(f"r{a}", f"r{b}", settle=False)
        self.domain.settle()

    def _counting(self, receive: Callable[[str, Any], list[Any]]) -> Callable[..., list[Any]]:
        def counted(neighbor: str, frame: Any) -> list[Any]:
            self.frames[str(frame[0])] += 1
            return receive(neighbor, frame)

        return counted

    def take(self) -> Counter[str]:
        """The frames counted since the last call."""
        frames, self.frames = self.frames, Counter()
        return frames

    def hops_from(self, origin: int) -> int:
        """Links from ``origin`` to the router farthest from it (breadth-first)."""
        seen = {origin: 0}
        todo = deque([origin])
        while todo:
            here = todo.popleft()
            for there in self.adjacent[here]:
                if there not in seen:
                    seen[there] = seen[here] + 1
                    todo.append(there)
        return max(seen.values())

    def cut(self, a: int, b: int) -> None:
        self.adjacent[a].discard(b)
        self.adjacent[b].discard(a)
        self.domain.link_down(f"r{a}", f"r{b}")


def _interest_change(sim: Counted, origin: int) -> dict[str, Any]:
    sim.take()
    sim.domain.listen(f"N{origin}", f"SCALE.{origin}")
    added = sim.take()
    sim.domain.unlisten(f"N{origin}", f"SCALE.{origin}")
    removed = sim.take()
    return {
        "frames_listen": sum(added.values()),
        "frames_unlisten": sum(removed.values()),
        "hops": sim.hops_from(origin),
    }


def _publish(sim: Counted, listeners: list[int], tag: str) -> dict[str, Any]:
    """One message from network 0 to ``listeners``: DATA frames, deliveries, losses."""
    domain = sim.domain
    for i in listeners:
        domain.listen(f"N{i}", "SCALE.DATA")
    sim.take()
    losses = domain.reported()
    domain.publish("N0", "SCALE.DATA", tag)
    frames = sim.take()
    wanted = {f"N{i}" for i in listeners} - {"N0"}
    got = {net for (net, msg), count in domain.delivered.items() if msg == tag and count}
    once = all(domain.delivered[(net, tag)] == 1 for net in wanted)
    for i in listeners:
        domain.unlisten(f"N{i}", "SCALE.DATA")
    sim.take()
    return {
        "data_frames": frames["DATA"] + frames["BATCH"],
        "listening": len(wanted),
        "delivered": len(got & wanted),
        "exactly_once": once and got >= wanted,
        "losses": domain.reported() - losses,
    }


def _failover(sim: Counted) -> dict[str, Any] | None:
    """Cut a link on the path from network 0 to the farthest network, if another way exists."""
    far = max(range(sim.n), key=lambda i: len(_path(sim, 0, i)))
    path = _path(sim, 0, far)
    if len(path) < 2:
        return None
    a, b = path[len(path) // 2 - 1], path[len(path) // 2]
    sim.domain.listen(f"N{far}", "SCALE.FAIL")
    sim.domain.publish("N0", "SCALE.FAIL", "before-cut")
    sim.take()
    sim.cut(a, b)
    frames = sim.take()
    if _distance(sim, 0, far) is None:
        return {"cut": [a, b], "frames": sum(frames.values()), "rerouted": False}
    sim.domain.publish("N0", "SCALE.FAIL", "after-cut")
    return {
        "cut": [a, b],
        "frames": sum(frames.values()),
        "hops": max(sim.hops_from(a), sim.hops_from(b)),
        "rerouted": sim.domain.delivered[(f"N{far}", "after-cut")] == 1,
    }


def _distance(sim: Counted, a: int, b: int) -> int | None:
    path = _path(sim, a, b)
    return len(path) - 1 if path else None


def _path(sim: Counted, a: int, b: int) -> list[int]:
    parent = {a: a}
    todo = deque([a])
    while todo:
        here = todo.popleft()
        if here == b:
            break
        for there in sorted(sim.adjacent[here]):
            if there not in parent:
                parent[there] = here
                todo.append(there)
    if b not in parent:
        return []
    path = [b]
    while path[-1] != a:
        path.append(parent[path[-1]])
    return path[::-1]


def run(topology: str, networks: int, seed: int = 1) -> dict[str, Any]:
    """Everything measured for one topology of ``networks`` networks (see the docstring)."""
    rng = random.Random(seed)
    edges = TOPOLOGIES[topology](networks, rng)
    started = time.perf_counter()
    sim = Counted(networks, edges)
    build = sim.take()
    origins = sorted({0, networks // 2, networks - 1})
    changes = [_interest_change(sim, origin) for origin in origins]
    spread = [1, max(1, networks // 10), networks]
    publishes = [_publish(sim, rng.sample(range(networks), k), f"m{k}") for k in spread]
    failover = None if topology == "chain" else _failover(sim)
    return {
        "topology": topology,
        "networks": networks,
        "links": len(edges),
        "build_frames": sum(build.values()),
        "interest": changes,
        "publish": publishes,
        "failover": failover,
        "wall_s": round(time.perf_counter() - started, 2),
    }
