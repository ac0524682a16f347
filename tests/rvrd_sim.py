"""A simulated routing domain for the sans-IO router core: routers, LANs, neighbor links.

Frames on a link are delivered in order, synchronously, until nothing is left
(``settle``): the records have flooded and every router has converged. A LAN
is a broadcast medium: a message published into it reaches every program
there and every router attached to it that listens to its subject, as a real
network transport would hand it over.

Loss reports are followed to where they are presented: :meth:`Domain.counted`
is what a network's listeners were told they missed (presented there, or
still waiting at some router for a path there).
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, NamedTuple

from rvasync.protocol.rvrd import (
    Deliver,
    DeliverRun,
    ListenSet,
    NetworkPolicy,
    Present,
    RouterCore,
    SendFrame,
    SendLan,
)
from rvasync.protocol.rvrd.frames import BatchFrame, DataFrame
from rvasync.subjects import subject_matches


class _OnLink(NamedTuple):
    """A frame queued on one session of its link."""

    out: SendFrame
    session: int


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
        self.weights = weights or {}
        self.cores = {r: self._core(r, 0) for r in attach}
        self.up: dict[frozenset[str], int] = {}
        #: link -> how many times it came up: a frame queued on an earlier session of the
        #: link is lost with it (as on a TCP connection that broke)
        self.session: Counter[frozenset[str]] = Counter()
        #: (router, output) to carry out; a SendFrame as (output, link session)
        self.queue: deque[tuple[str, Any]] = deque()
        #: (network, message id) -> deliveries
        self.delivered: Counter[tuple[str, Any]] = Counter()
        #: (network, message id) -> the router that delivered it last
        self.deliverer: dict[tuple[str, Any], str] = {}
        #: (link, message id) -> DATA frames that crossed it (either direction)
        self.crossings: Counter[tuple[frozenset[str], Any]] = Counter()
        #: (from, to, message id) -> DATA frames sent that way
        self.directed: Counter[tuple[str, str, Any]] = Counter()
        #: network -> what arrived there, in order: ("m", message id) and ("p", report)
        self.log: dict[str, list[tuple[str, Any]]] = {}
        #: Every DATALOSS presented: (router, output).
        self.presented: list[tuple[str, Present]] = []
        #: Wall-clock time the routers are told (``at``); tests move it on.
        self.now = 1000.0
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

    def _core(self, router: str, incarnation: int) -> RouterCore:
        nets = self.attach[router]
        w = self.weights
        policies = {n: NetworkPolicy(weights=w.get((router, n), ())) for n in nets}
        return RouterCore(router, policies, incarnation=incarnation)

    def _take(self, router: str, outputs: list[Any]) -> None:
        for out in outputs:
            if isinstance(out, DeliverRun):
                # A batch passing through: its messages, in order, as the driver publishes them.
                self.queue.extend((router, deliver) for deliver in out.deliveries())
            elif isinstance(out, SendFrame):
                link = frozenset((router, out.neighbor))
                self.queue.append((router, _OnLink(out, self.session[link])))
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
            if isinstance(out, _OnLink):
                out, session = out
                link = frozenset((router, out.neighbor))
                if link not in self.up or self.session[link] != session:
                    continue  # the link broke while the frame was queued
                frame = out.frame
                if isinstance(frame, DataFrame):
                    self.crossings[(link, frame.payload)] += 1
                    self.directed[(router, out.neighbor, frame.payload)] += 1
                elif isinstance(frame, BatchFrame):
                    for msg_id in frame.payloads:
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
                self.log.setdefault(out.network, []).append(("m", out.payload))
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
            elif isinstance(out, Present):
                self.log.setdefault(out.network, []).append(("p", out.report))
                self.presented.append((router, out))
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
        self.session[link] += 1
        ca, cb = self.cores[a], self.cores[b]
        self._take(a, ca.link_up(b, cost, cb.incarnation, self.now))
        self._take(b, cb.link_up(a, cost, ca.incarnation, self.now))
        if settle:
            self.settle()

    def link_down(self, a: str, b: str, *, settle: bool = True) -> None:
        link = frozenset((a, b))
        if self.up.pop(link, None) is None:
            return
        self._take(a, self.cores[a].link_down(b, self.now))
        self._take(b, self.cores[b].link_down(a, self.now))
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

    def restart(
        self, router: str, *, settle: bool = True, state: bool = True, relisten: bool = True
    ) -> None:
        """``router`` is killed (its links break without a word from it) and started again
        as a new incarnation (with a state file: ``state``); its links come back up, its
        networks' interest is learned again (unless not ``relisten``: not yet)."""
        links = [(link, cost) for link, cost in self.up.items() if router in link]
        for link, _ in links:
            (other,) = link - {router}
            del self.up[link]
            self._take(other, self.cores[other].link_down(router, self.now))
        self.queue = deque((r, out) for r, out in self.queue if r != router)  # died with it
        old = self.cores[router]
        self.cores[router] = core = self._core(router, old.incarnation + 1)
        self._take(router, core.start())
        if state:
            # Its state file: the predecessor was alive until now.
            self._take(router, core.restarted(self.now, self.now))
        for (network, subject), count in self.interest.items() if relisten else ():
            if network in self.attach[router]:
                for _ in range(count):
                    self._take(router, core.add_interest(network, subject))
        for link, cost in links:
            (other,) = link - {router}
            self.link_up(router, other, cost, settle=False)
        if settle:
            self.settle()

    def tick(self) -> None:
        """Every router's timer once (acknowledgements, waiting loss reports)."""
        self.now += 1.0
        for router, core in self.cores.items():
            self._take(router, core.tick(self.now))
        self.settle()

    # -- what was reported

    def counted(self, network: str, origin: str | None = None, subject: str | None = None) -> int:
        """Messages ``network``'s listeners were told they missed (exact counts presented
        there), plus those counted for it and still waiting at a router for a path."""
        total = sum(
            out.report.lost
            for _, out in self.presented
            if out.network == network
            and out.report.target == network
            and out.report.exact
            and (origin is None or out.report.origin == origin)
            and (subject is None or out.report.subject == subject)
        )
        for core in self.cores.values():
            for (target, _, o, s), n in core.losses.pending.counts().items():
                if target == network and origin in (None, o) and subject in (None, s):
                    total += n
        return total

    def windows(self, network: str) -> list[Present]:
        """The windows (uncounted losses) presented on ``network``."""
        return [out for _, out in self.presented if out.network == network and not out.report.exact]

    def reported(self) -> int:
        """Messages in every exact DATALOSS presented anywhere (local copies included)."""
        return sum(out.report.lost for _, out in self.presented if out.report.exact)

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
