"""A simulated routing domain for the sans-IO router core: routers, LANs, neighbor links.

Frames on a link are delivered in order, synchronously, until nothing is left
(``settle``): the records have flooded and every router has converged. A LAN
is a broadcast medium: a message published into it reaches every program
there and every router attached to it that listens to its subject, as a real
network transport would hand it over.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from rvasync.protocol.rvrd import (
    Deliver,
    DeliverRun,
    ListenSet,
    Loss,
    NetworkPolicy,
    RouterCore,
    SendFrame,
    SendLan,
)
from rvasync.subjects import subject_matches


class Domain:
    def __init__(
        self,
        attach: dict[str, list[str]],
        weights: dict[tuple[str, str], tuple[tuple[str, int], ...]] | None = None,
        *,
        lan: bool = False,
    ) -> None:
        """``attach``: router -> the networks it is attached to; ``weights``: (router,
        network) -> that router's import weights there; ``lan``: routers sharing a
        network hear each other on it (LAN peers, records exchanged over it)."""
        self.lan = lan
        self.attach = attach
        w = weights or {}
        self.cores = {
            r: RouterCore(r, {n: NetworkPolicy(weights=w.get((r, n), ())) for n in nets})
            for r, nets in attach.items()
        }
        self.up: dict[frozenset[str], int] = {}
        self.queue: deque[tuple[str, Any]] = deque()  # (router, output) to carry out
        #: (network, message id) -> deliveries
        self.delivered: Counter[tuple[str, Any]] = Counter()
        #: (network, message id) -> the router that delivered it last
        self.deliverer: dict[tuple[str, Any], str] = {}
        #: (link, message id) -> DATA frames that crossed it (either direction)
        self.crossings: Counter[tuple[frozenset[str], Any]] = Counter()
        #: (from, to, message id) -> DATA frames sent that way
        self.directed: Counter[tuple[str, str, Any]] = Counter()
        self.losses: list[Loss] = []
        self.interest: Counter[tuple[str, str]] = Counter()
        for r, core in self.cores.items():
            self._take(r, core.start())
        if lan:
            for r, nets in attach.items():
                for net in nets:
                    for other, their in attach.items():
                        if other != r and net in their:
                            self._take(r, self.cores[r].lan_peer_up(net, other))
        self.settle()

    def _take(self, router: str, outputs: list[Any]) -> None:
        for out in outputs:
            if isinstance(out, DeliverRun):
                # A batch passing through: its messages, in order, as the driver publishes them.
                self.queue.extend((router, deliver) for deliver in out.deliveries())
            else:
                self.queue.append((router, out))

    def settle(self, limit: int = 1_000_000) -> None:
        self.step(limit, must_finish=True)

    def step(self, count: int, *, must_finish: bool = False) -> None:
        """Carry out up to ``count`` queued outputs (all of them with ``must_finish``)."""
        steps = 0
        while self.queue:
            steps += 1
            if steps > count:
                assert not must_finish, "the domain never settled (a loop?)"
                return
            router, out = self.queue.popleft()
            if isinstance(out, SendFrame):
                link = frozenset((router, out.neighbor))
                if link not in self.up:
                    continue  # the link broke while the frame was queued
                if out.frame[0] == "DATA":
                    self.crossings[(link, out.frame[6])] += 1
                    self.directed[(router, out.neighbor, out.frame[6])] += 1
                elif out.frame[0] == "BATCH":
                    for msg_id in out.frame[6]:
                        self.crossings[(link, msg_id)] += 1
                        self.directed[(router, out.neighbor, msg_id)] += 1
                self._take(out.neighbor, self.cores[out.neighbor].receive(router, out.frame))
            elif isinstance(out, SendLan):
                for other, nets in self.attach.items():
                    if other != router and out.network in nets:
                        self._take(
                            other, self.cores[other].receive_lan(out.network, router, out.frame)
                        )
            elif isinstance(out, Deliver):
                self.delivered[(out.network, out.payload)] += 1
                self.deliverer[(out.network, out.payload)] = router
                for other, nets in self.attach.items():
                    if out.network in nets and self._listens(other, out.network, out.subject):
                        self._take(
                            other,
                            self.cores[other].import_message(
                                out.network, out.subject, out.payload, out.tag
                            ),
                        )
            elif isinstance(out, Loss):
                self.losses.append(out)
            elif isinstance(out, ListenSet):
                pass

    def _listens(self, router: str, network: str, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.cores[router].listen_set(network))

    # -- events

    def link_up(self, a: str, b: str, cost: int = 1, *, settle: bool = True) -> None:
        link = frozenset((a, b))
        if link in self.up:
            return
        self.up[link] = cost
        self._take(a, self.cores[a].link_up(b, cost))
        self._take(b, self.cores[b].link_up(a, cost))
        if settle:
            self.settle()

    def link_down(self, a: str, b: str, *, settle: bool = True) -> None:
        link = frozenset((a, b))
        if self.up.pop(link, None) is None:
            return
        self._take(a, self.cores[a].link_down(b))
        self._take(b, self.cores[b].link_down(a))
        if settle:
            self.settle()

    def listen(self, network: str, subject: str) -> None:
        self.interest[(network, subject)] += 1
        for r, nets in self.attach.items():
            if network in nets:
                self._take(r, self.cores[r].add_interest(network, subject))
        self.settle()

    def unlisten(self, network: str, subject: str) -> None:
        if self.interest[(network, subject)] <= 0:
            return
        self.interest[(network, subject)] -= 1
        for r, nets in self.attach.items():
            if network in nets:
                self._take(r, self.cores[r].remove_interest(network, subject))
        self.settle()

    def publish(self, network: str, subject: str, msg_id: Any, *, settle: bool = True) -> None:
        for r, nets in self.attach.items():
            if network in nets and self._listens(r, network, subject):
                self._take(r, self.cores[r].import_message(network, subject, msg_id))
        if settle:
            self.settle()

    def publish_batch(
        self, network: str, subject: str, msg_ids: list[Any], *, settle: bool = True
    ) -> None:
        """Several messages of one subject, handed to each router as one batch."""
        for r, nets in self.attach.items():
            if network in nets and self._listens(r, network, subject):
                self._take(r, self.cores[r].import_batch(network, subject, list(msg_ids)))
        if settle:
            self.settle()

    # -- the truth the routers must agree with

    def wants(self, network: str, subject: str) -> bool:
        return any(
            n == network and c > 0 and subject_matches(s, subject)
            for (n, s), c in self.interest.items()
        )

    def router_component(self, router: str) -> set[str]:
        seen = {router}
        todo = [router]
        while todo:
            r = todo.pop()
            for link in self.up:
                if r in link:
                    (other,) = link - {r}
                    if other not in seen:
                        seen.add(other)
                        todo.append(other)
        return seen

    def reachable_networks(self, network: str) -> set[str]:
        out: set[str] = set()
        for r, nets in self.attach.items():
            if network in nets:
                for other in self.router_component(r):
                    out.update(self.attach[other])
        return out

    def networks(self) -> set[str]:
        return {n for nets in self.attach.values() for n in nets}
