"""Fan-out of one publisher to N daemons, simulated with the project's reliable core.

Every host is a real :class:`~rvasync.protocol.reliable.ReliableEndpoint` (the
core the daemon runs, not a model of it) on the simulated network and clock of
``tests/simnet.py``, configured as the daemon configures it on a real network
(1,400-byte datagrams, 60 s retention, 1 s heartbeats). One publisher sends a
fixed paced stream to the service; each subscriber host checks that it
presents every message once, in order, or a loss report that counts it.

Loss models (:data:`MODELS`) decide each copy's fate: independent loss at every
host, a burst on the publisher's link (every host misses the same datagrams),
a lossy subnet (the hosts behind one uplink miss the same datagrams), a slow
host (a queue that overflows) and a lossy host. The run is a pure function of
its case and seed.

What is counted (see :class:`benchmarks.scale.wire.Wire`): datagrams and bytes
on the wire per message by kind, NAKs and repairs per lost datagram (a datagram
some host missed, counted once) and per loss (one host missing one datagram),
what the publisher handled per message, delivery latency, and every message
delivered or reported lost.

Simplification, stated on the page: the subscribers' own multicast (their
heartbeats; they publish nothing) reaches the publisher only, not each
other. It changes none of the quantities measured and spares the
simulation the N² heartbeats a real service of N daemons carries (N per
second into every host).
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.scale.wire import Wire
from rvasync.protocol.reliable import ReliableEndpoint
from rvasync.protocol.reliable_events import Delivered, InboundDataLoss
from tests.simnet import SimNet

PUBLISHER = 0
_INDEX = struct.Struct("<I")
#: one-way delay of a copy on the simulated LAN, seconds (uniform, but each link keeps
#: its datagrams in order, as a switch does: copies to different hosts arrive at
#: different moments, a host gets one sender's datagrams in the order they were sent)
DELAY = (0.0002, 0.001)
#: the daemon's settings on a real network (rvasync/daemon/engine.py)
ENDPOINT = {"max_datagram": 1400, "reliability": 60.0, "heartbeat_interval": 1.0}

MODELS: dict[str, str] = {
    "independent": "every host loses `loss` of what reaches it, independently",
    "burst": "`loss` at every host, and the publisher's link loses all it sends for 5 ms "
    "at random moments, 4 times a second on average: every host misses the same datagrams",
    "subnet": "`loss` at every host, and the hosts sit in subnets of 32: the uplink of "
    "the first subnet loses 5 % of what crosses it, so its hosts miss the same datagrams",
    "slow": "`loss` at every host, and one host takes datagrams from a 300-datagram "
    "socket buffer at 70 % of the rate they arrive (the rest overflow)",
    "lossy-host": "`loss` at every host but one, which loses 20 %",
}


@dataclass(frozen=True)
class Traffic:
    """The publisher's paced stream: ``per_turn`` messages every ``interval`` seconds."""

    size: int
    messages: int
    per_turn: int
    interval: float

    @classmethod
    def default(cls, size: int, hosts: int) -> Traffic:
        """10,000 msg/s of 128 B for 2 s; 500 msg/s of 16 KiB (1 s, 0.5 s past 100 hosts)."""
        if size <= 1024:
            return cls(size, 20_000, 10, 0.001)
        return cls(size, 500 if hosts <= 100 else 250, 1, 0.002)


@dataclass(frozen=True)
class Case:
    hosts: int
    size: int = 128
    loss: float = 0.0
    model: str = "independent"
    seed: int = 1

    def label(self) -> str:
        return f"{self.model} {self.loss:g}% {self.size}B x{self.hosts}"


class Tally:
    """What one subscriber presented: in order, once, delivered or reported lost."""

    __slots__ = (
        "delivered",
        "errors",
        "finished",
        "finished_at",
        "latency_max",
        "latency_sum",
        "lost",
        "next",
    )

    def __init__(self) -> None:
        self.finished = False
        self.finished_at = 0.0
        self.next = 1
        self.delivered = self.lost = self.errors = 0
        self.latency_sum = self.latency_max = 0.0


class Links:
    """The SimNet ``link`` hook: loss and delay of each copy under one loss model."""

    def __init__(self, case: Case, rng: random.Random, wire: Wire, service: float) -> None:
        self.case = case
        self.rng = rng
        self.wire = wire
        self.loss = case.loss / 100.0
        self.bad = case.hosts  # the slow or lossy host: the last one
        self.service = service  # the slow host's time per datagram
        self.buffer = 300 * service
        self.busy = 0.0
        self.subnet = set(range(1, min(32, case.hosts) + 1))
        self._uplink: tuple[int, bool] = (-1, False)
        self._burst = (0.0, 0.0)  # the current or next burst: (start, end)
        self._last: dict[tuple[Any, Any], float] = {}  # (src, dest) -> last arrival
        self.net: SimNet | None = None

    def __call__(self, data: Any, src: Any, dest: Any, now: float) -> float | None:
        if self._lost(src, dest, now):
            if dest != PUBLISHER:
                self.wire.copy_lost()
            return None
        arrival = now + self.rng.uniform(*DELAY)
        link = (src, dest)
        arrival = max(arrival, self._last.get(link, 0.0) + 1e-6)
        self._last[link] = arrival
        if self.case.model == "slow" and dest == self.bad:
            start = max(arrival, self.busy)
            if start - arrival > self.buffer:
                self.wire.copy_lost()
                return None  # the socket buffer is full
            self.busy = start + self.service
            arrival = self.busy
        return arrival

    def _lost(self, src: Any, dest: Any, now: float) -> bool:
        model = self.case.model
        loss = 0.2 if model == "lossy-host" and dest == self.bad else self.loss
        if loss and self.rng.random() < loss:
            return True
        if model == "burst":
            return src == PUBLISHER and self._in_burst(now)
        if model == "subnet" and (src in self.subnet or dest in self.subnet):
            return self._uplink_drops()
        return False

    def _in_burst(self, now: float) -> bool:
        """Bursts of 5 ms starting at random (exponential gaps, mean 250 ms): never in
        step with the heartbeats, which a periodic burst could swallow every time."""
        start, end = self._burst
        while now >= end:
            start = end + self.rng.expovariate(4.0)
            end = start + 0.005
        self._burst = (start, end)
        return now >= start

    def _uplink_drops(self) -> bool:
        """One decision per transmission crossing the subnet's uplink, shared by its copies."""
        assert self.net is not None
        sent = self.net.sent
        if self._uplink[0] != sent:
            self._uplink = (sent, self.rng.random() < 0.05)
        return self._uplink[1]


@dataclass
class Run:
    """The measured quantities of one case (what the page shows)."""

    case: dict[str, Any]
    traffic: dict[str, Any]
    warmup_s: float
    drain_s: float
    wall_s: float
    data_datagrams: int
    lost_datagrams: int
    losses: int
    naks: int
    repairs: int
    repairs_multicast: int
    wire_datagrams: dict[str, int]
    wire_bytes: dict[str, int]
    publisher: dict[str, int]
    delivered: int
    reported_lost: int
    errors: int
    latency_ms: dict[str, float]
    healthy: dict[str, float] = field(default_factory=dict)

    def ratios(self) -> dict[str, float | None]:
        """Per lost datagram, per loss and per message (None where nothing was lost)."""
        messages = self.traffic["messages"]
        lost, losses = self.lost_datagrams, self.losses
        wire = sum(self.wire_datagrams.values()) - self.wire_datagrams.get("heartbeat", 0)
        bytes_ = sum(self.wire_bytes.values()) - self.wire_bytes.get("heartbeat", 0)
        return {
            "naks_per_lost": self.naks / lost if lost else None,
            "repairs_per_lost": self.repairs / lost if lost else None,
            "naks_per_loss": self.naks / losses if losses else None,
            "repairs_per_loss": self.repairs / losses if losses else None,
            "datagrams_per_msg": wire / messages,
            "bytes_per_msg": bytes_ / messages,
            "publisher_in_per_msg": self.publisher["datagrams_received"] / messages,
            "publisher_out_per_msg": self.publisher["datagrams_sent"] / messages,
        }

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratios": self.ratios()}


def payload(index: int, size: int) -> bytes:
    head = _INDEX.pack(index)
    return head + bytes(max(0, size - len(head)))


class FanOut:
    """One simulated service: the publisher, ``case.hosts`` subscribers, the tallies."""

    def __init__(self, case: Case, traffic: Traffic, endpoint: dict[str, Any]) -> None:
        self.case = case
        self.traffic = traffic
        self.rng = random.Random(case.seed)
        self.net = SimNet(seed=case.seed)
        self.wire = Wire(publisher=1)
        self.counting = False
        room = endpoint["max_datagram"] - 45
        turn_datagrams = max(1, -(-traffic.per_turn * (traffic.size + 4) // room))
        self.links = Links(case, self.rng, self.wire, traffic.interval / turn_datagrams / 0.7)
        self.links.net = self.net
        self.net.link = self.links
        receivers = list(range(1, case.hosts + 1))
        self.net.audience = lambda src: receivers if src == PUBLISHER else [PUBLISHER]
        self.net.tap = self._tap
        self.net.sink = self._sink
        for address in range(case.hosts + 1):
            self.net.add(address, ReliableEndpoint(now=0.0, session_id=address + 1, **endpoint))
        self.tallies = {address: Tally() for address in receivers}
        self.sent_at: list[float] = [0.0]
        self.samples: dict[bool, list[float]] = {True: [], False: []}
        self.done = 0
        self.started = 0.0

    def _tap(self, src: Any, data: Any, dest: Any) -> None:
        if self.counting:
            size = len(data) if type(data) is bytes else len(bytes(data))
            self.wire.transmit(data, dest, size)
        else:
            self.wire.skip()

    def _sink(self, address: Any, events: list[Any]) -> None:
        tally = self.tallies.get(address)
        if tally is None:
            return
        for event in events:
            if event.__class__ is Delivered and not event.ptp:
                self._delivered(address, tally, event.payloads)
            elif event.__class__ is InboundDataLoss and not event.ptp:
                if event.first_message != tally.next:
                    tally.errors += 1
                tally.next = event.first_message + event.messages
                tally.lost += event.messages
                self._check_done(tally)

    def _delivered(self, address: Any, tally: Tally, payloads: list[bytes]) -> None:
        """A datagram's messages: consecutive, so its first and last index tell it all."""
        (first,) = _INDEX.unpack_from(payloads[0])
        (last,) = _INDEX.unpack_from(payloads[-1])
        count = len(payloads)
        if first != tally.next or last != first + count - 1:
            tally.errors += 1
        tally.next = last + 1
        tally.delivered += count
        latency = self.net.now - self.sent_at[first]
        tally.latency_sum += latency * count
        if latency > tally.latency_max:
            tally.latency_max = latency
        self.samples[self.healthy(address)].append(latency)
        self._check_done(tally)

    def healthy(self, address: Any) -> bool:
        """Every subscriber but the slow or lossy one of those models."""
        return address != self.case.hosts or self.case.model not in ("slow", "lossy-host")

    def _check_done(self, tally: Tally) -> None:
        if not tally.finished and tally.next > self.traffic.messages:
            tally.finished = True
            tally.finished_at = self.net.now
            self.done += 1

    def warm_up(self, timeout: float = 120.0) -> float:
        """Run until the publisher knows every subscriber (it refuses NAKs of unknown ones)."""
        publisher = self.net.endpoints[PUBLISHER]
        hosts = self.case.hosts
        ok = self.net.run_until(lambda: len(publisher.peers()) >= hosts, timeout)
        if not ok:
            raise RuntimeError(f"the publisher knew {len(publisher.peers())} of {hosts} hosts")
        self.net.run_for(1.0)
        return self.net.now

    def publish(self) -> None:
        t = self.traffic
        self.counting = True
        self.started = self.net.now
        send = self.net.send_multicast
        index = 0
        while index < t.messages:
            for _ in range(min(t.per_turn, t.messages - index)):
                index += 1
                self.sent_at.append(self.net.now)
                send(PUBLISHER, payload(index, t.size))
            self.net.run_for(t.interval)

    def drain(self, timeout: float = 300.0) -> bool:
        hosts = self.case.hosts
        return self.net.run_until(lambda: self.done >= hosts, timeout)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(case: Case, traffic: Traffic | None = None, endpoint: dict[str, Any] | None = None) -> Run:
    """Simulate ``case``; raises if the subscribers did not all account for every message."""
    traffic = traffic or Traffic.default(case.size, case.hosts)
    started = time.perf_counter()
    sim = FanOut(case, traffic, {**ENDPOINT, **(endpoint or {})})
    warm = sim.warm_up()
    publisher = sim.net.endpoints[PUBLISHER]
    before = publisher.stats.as_dict()
    naks_before = sum(sim.net.endpoints[a].stats.naks_sent for a in sim.tallies)
    dups_before = {a: sim.net.endpoints[a].stats.duplicates for a in sim.tallies}
    sim.publish()
    ended = sim.net.now
    if not sim.drain():
        behind = {a: t.next for a, t in sim.tallies.items() if t.next <= traffic.messages}
        raise RuntimeError(f"{case.label()}: hosts still waiting: {dict(list(behind.items())[:5])}")
    after = publisher.stats.as_dict()
    sim.counting = False
    result = _result(sim, case, traffic, warm, ended, started, before, after, naks_before)
    result.healthy = _healthy(sim, dups_before)
    return result


def _result(
    sim: FanOut,
    case: Case,
    traffic: Traffic,
    warm: float,
    ended: float,
    started: float,
    before: dict[str, int],
    after: dict[str, int],
    naks_before: int,
) -> Run:
    wire = sim.wire
    tallies = sim.tallies.values()
    naks = sum(sim.net.endpoints[a].stats.naks_sent for a in sim.tallies) - naks_before
    healthy = sim.samples[True]
    bad = sim.samples[False]
    return Run(
        case=asdict(case),
        traffic=asdict(traffic),
        warmup_s=round(warm, 3),
        drain_s=round(sim.net.now - ended, 3),
        wall_s=round(time.perf_counter() - started, 2),
        data_datagrams=wire.datagrams["data"],
        lost_datagrams=len(wire.lost),
        losses=wire.losses,
        naks=naks,
        repairs=wire.repairs(),
        repairs_multicast=wire.datagrams["repair (multicast)"],
        wire_datagrams=dict(wire.datagrams),
        wire_bytes=dict(wire.bytes),
        publisher={k: after[k] - before[k] for k in after},
        delivered=sum(t.delivered for t in tallies),
        reported_lost=sum(t.lost for t in tallies),
        errors=sum(t.errors for t in tallies),
        latency_ms={
            "p50": round(1000 * _percentile(healthy, 0.5), 3),
            "p99": round(1000 * _percentile(healthy, 0.99), 3),
            "max": round(1000 * max((t.latency_max for t in tallies), default=0.0), 3),
            "bad_p99": round(1000 * _percentile(bad, 0.99), 3),
        },
    )


def _healthy(sim: FanOut, dups_before: dict[Any, int]) -> dict[str, float]:
    """The subscribers other than the bad one: how fast they got everything, and how many
    datagrams they received twice (resends to the group they did not need) per message."""
    healthy = [a for a in sim.tallies if sim.healthy(a)]
    messages = sim.traffic.messages
    last = max(sim.tallies[a].finished_at for a in healthy)
    duplicates = sum(sim.net.endpoints[a].stats.duplicates - dups_before[a] for a in healthy)
    return {
        "hosts": len(healthy),
        "rate_msg_s": round(messages / max(last - sim.started, 1e-9), 1),
        "offered_msg_s": round(sim.traffic.per_turn / sim.traffic.interval, 1),
        "duplicates_per_msg": round(duplicates / len(healthy) / messages, 5),
    }


Progress = Callable[[str], None]
