"""A simulated clock and datagram network for driving sans-IO protocol endpoints in tests.

Each endpoint sits at an opaque address. Datagrams with destination None go
to every endpoint (the sender included, like multicast loopback); others go
to one address. Each copy is independently lost, duplicated and delayed (a
random delay per copy, so copies overtake each other: reordering), all from
one seeded ``random.Random``, so a run is a pure function of its seed.

Time only moves when the simulation steps: it jumps to the next datagram
arrival or endpoint deadline, whichever is first, so hours of protocol time
run in milliseconds. After every instant, each endpoint that received input
is "at the end of its event-loop turn": it is flushed and its outputs are
collected, exactly as the asyncio driver does.

Scale: deadlines are kept in a heap (each endpoint's is read again after every
turn it took part in), so an instant costs what happens in it, not a pass over
every endpoint; a thousand endpoints run as easily as three
(benchmarks/scale/sim.py). Endpoints are visited in the order they were touched
(never in set order), so a run is the same whatever the hash seed. Two hooks
shape the network beyond uniform loss and delay: ``link`` decides each copy's
fate (a lossy subnet, a burst on one link, a slow host's queue) and
``audience`` who hears a multicast; ``tap`` sees every transmission and
``sink`` takes the events instead of ``events`` keeping them.
"""

from __future__ import annotations

import heapq
import random
import struct
from collections.abc import Callable, Hashable
from typing import Any

Address = Hashable


class SimNet:
    """Endpoints joined by a lossy, duplicating, reordering network on a simulated clock."""

    def __init__(
        self,
        *,
        seed: int = 0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        delay: tuple[float, float] = (0.0002, 0.002),
        start: float = 0.0,
        lone: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.duplicate = duplicate
        self.delay = delay
        self.now = start
        self.endpoints: dict[Address, Any] = {}
        self.events: dict[Address, list] = {}
        #: Optional hook: return True to drop this copy (data, src, dest).
        self.drop: Callable[[bytes, Address, Address], bool] | None = None
        #: Optional hook replacing ``loss`` and ``delay``: (data, src, dest, now) -> the
        #: copy's arrival time, or None to lose it. ``sent`` numbers the transmission
        #: the copy belongs to (one multicast, many copies), for losses shared by copies.
        self.link: Callable[[bytes, Address, Address, float], float | None] | None = None
        #: Optional hook: (src, data, dest) is told of every transmission, once, before
        #: its copies (dest None: multicast), to count what crosses the network.
        self.tap: Callable[[Address, Any, Address | None], None] | None = None
        #: Optional hook: (src) -> the addresses that hear src's multicast (default all).
        self.audience: Callable[[Address], list[Address]] | None = None
        #: Optional hook: (address, events) takes each turn's events instead of
        #: ``events`` keeping them (a long run of many endpoints need not hold them all).
        self.sink: Callable[[Address, list[Any]], None] | None = None
        #: Addresses cut off from the network (nothing in or out).
        self.isolated: set[Address] = set()
        self.sent = 0
        self.dropped = 0
        self._queue: list[tuple[float, int, Address, bytes, Address]] = []
        self._counter = 0
        #: Endpoints to flush at the end of this instant, in the order they were touched.
        self._touched: dict[Address, None] = {}
        #: (deadline, counter, address): each endpoint's deadline as last read (stale
        #: entries, whose deadline is not _deadline[address], are skipped).
        self._timers: list[tuple[float, int, Address]] = []
        self._deadline: dict[Address, float | None] = {}
        #: Send each endpoint's first message of a turn with ``flush_lone`` (as the daemon
        #: does), transmitted at once; the rest of the turn is packed and flushed.
        self.lone = lone
        self._lone_sent: set[Address] = set()

    # ------------------------------------------------------------ topology

    def add(self, address: Address, endpoint: Any) -> Any:
        """Attach ``endpoint`` at ``address`` (replacing whatever was there: a restart)."""
        self.endpoints[address] = endpoint
        self.events.setdefault(address, [])
        self._touched[address] = None
        self._watch(address)
        return endpoint

    def remove(self, address: Address) -> None:
        """Detach the endpoint at ``address`` (it crashed: no goodbye)."""
        self.endpoints.pop(address, None)
        self._deadline.pop(address, None)

    def touch(self, address: Address) -> None:
        """Say that ``address``'s endpoint was called directly: it is flushed at the end of
        this instant and its deadline read again."""
        self._touched[address] = None

    def _watch(self, address: Address) -> None:
        """Read ``address``'s deadline again (after anything that may have moved it)."""
        endpoint = self.endpoints.get(address)
        deadline = None if endpoint is None else endpoint.next_deadline()
        if self._deadline.get(address, -1.0) == deadline:
            return
        self._deadline[address] = deadline
        if deadline is not None:
            self._counter += 1
            heapq.heappush(self._timers, (deadline, self._counter, address))

    # ------------------------------------------------------------ driving

    def send_multicast(self, address: Address, payload: bytes) -> None:
        if not self._send_lone(address, None, payload):
            self.endpoints[address].send_multicast(payload)
        self._touched[address] = None

    def send_ptp(self, address: Address, dest: Address, payload: bytes) -> None:
        if not self._send_lone(address, dest, payload):
            self.endpoints[address].send_ptp(dest, payload)
        self._touched[address] = None

    def _send_lone(self, address: Address, dest: Address | None, payload: bytes) -> bool:
        if not self.lone or address in self._lone_sent:
            return False
        self._lone_sent.add(address)
        datagram = self.endpoints[address].flush_lone(payload, dest, self.now)
        if datagram is None:
            return False
        self._transmit(address, datagram, dest)
        return True

    def close(self, address: Address) -> None:
        self.endpoints[address].close(self.now)
        self._touched[address] = None
        self._end_turn()

    def _end_turn(self) -> None:
        self._lone_sent.clear()
        touched, self._touched = self._touched, {}
        for address in touched:
            endpoint = self.endpoints.get(address)
            if endpoint is None:
                continue
            endpoint.flush(self.now)
            for data, dest in endpoint.datagrams_to_send():
                self._transmit(address, data, dest)
            events = endpoint.events()
            if events:
                if self.sink is None:
                    self.events[address].extend(events)
                else:
                    self.sink(address, events)
            self._watch(address)

    def _transmit(self, src: Address, data: bytes, dest: Address | None) -> None:
        self.sent += 1
        if self.tap is not None:
            self.tap(src, data, dest)
        if dest is not None:
            targets = [dest]
        elif self.audience is not None:
            targets = self.audience(src)
        else:
            targets = list(self.endpoints)
        link = self.link
        for target in targets:
            if src in self.isolated or target in self.isolated:
                self.dropped += 1
                continue
            if self.drop is not None and self.drop(data, src, target):
                self.dropped += 1
                continue
            if link is not None:
                arrival = link(data, src, target, self.now)
                if arrival is None:
                    self.dropped += 1
                    continue
                self._counter += 1
                heapq.heappush(self._queue, (arrival, self._counter, target, data, src))
                continue
            if self.rng.random() < self.loss:
                self.dropped += 1
                continue
            copies = 2 if self.rng.random() < self.duplicate else 1
            for _ in range(copies):
                when = self.now + self.rng.uniform(*self.delay)
                self._counter += 1
                heapq.heappush(self._queue, (when, self._counter, target, data, src))

    def next_time(self) -> float | None:
        """The next instant anything happens (a datagram arrives or a deadline falls due)."""
        best = self._queue[0][0] if self._queue else None
        timers = self._timers
        while timers and self._deadline.get(timers[0][2], None) != timers[0][0]:
            heapq.heappop(timers)  # stale: that endpoint's deadline moved or it left
        if timers and (best is None or timers[0][0] < best):
            best = timers[0][0]
        return best

    def step(self, limit: float) -> bool:
        """Advance to the next instant (not beyond ``limit``) and process it; False if none."""
        self._end_turn()
        when = self.next_time()
        if when is None or when > limit:
            self.now = max(self.now, limit)
            return False
        self.now = max(self.now, when)
        queue = self._queue
        touched = self._touched
        while queue and queue[0][0] <= self.now:
            _, _, target, data, src = heapq.heappop(queue)
            endpoint = self.endpoints.get(target)
            if endpoint is not None:
                endpoint.receive_datagram(data, src, self.now)
                touched[target] = None
        for address in touched:
            self._watch(address)  # a datagram may have brought a deadline forward to now
        timers = self._timers
        due: dict[Address, None] = {}
        while timers and timers[0][0] <= self.now:
            deadline, _, address = heapq.heappop(timers)
            if self._deadline.get(address) == deadline:
                due[address] = None
        for address in due:
            endpoint = self.endpoints.get(address)
            self._deadline[address] = None  # read again at the end of the turn
            if endpoint is not None:
                endpoint.handle_timer(self.now)
                touched[address] = None
        self._end_turn()
        return True

    def run_for(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        """Run the simulation for ``seconds`` of simulated time, or until ``until()`` holds."""
        limit = self.now + seconds
        while self.step(limit):
            if until is not None and until():
                return

    def run_until(self, until: Callable[[], bool], timeout: float) -> bool:
        """Run until ``until()`` holds (True) or ``timeout`` simulated seconds pass (False)."""
        self.run_for(timeout, until)
        return until()

    # ------------------------------------------------------------ observing

    def of_type(self, address: Address, cls: type) -> list:
        """The events of class ``cls`` presented so far at ``address``."""
        return [e for e in self.events[address] if isinstance(e, cls)]


class Ledger:
    """Sends numbered test messages through a SimNet and checks what each receiver presented.

    A payload carries (sender session, ptp flag, index) and a filler derived
    from them, so a receiver can tell exactly which message it got and that
    its bytes are intact. Indices count from 1 per sender stream, matching
    the protocol's message indices, so loss reports can be checked exactly.
    """

    _HEAD = struct.Struct("<QBQ")

    def __init__(self, net: SimNet) -> None:
        self.net = net
        #: (sender session, ptp, receiver address or None for multicast) -> messages sent
        self.sent: dict[tuple[int, bool, Address | None], int] = {}
        #: (sender session, ptp, receiver session) -> [first, last] index meant for that receiver
        self.meant: dict[tuple[int, bool, int], list[int]] = {}

    def _note(self, session: int, ptp: bool, index: int, receivers: list[Address]) -> None:
        for receiver in receivers:
            endpoint = self.net.endpoints.get(receiver)
            if endpoint is None:
                continue
            span = self.meant.setdefault((session, ptp, endpoint.session_id), [index, index])
            span[1] = index

    @classmethod
    def payload(cls, session: int, ptp: bool, index: int, size: int) -> bytes:
        head = cls._HEAD.pack(session, ptp, index)
        if size <= len(head):
            return head
        seed = (session * 31 + index * 7 + ptp) & 0xFF
        filler = bytes((seed + i) & 0xFF for i in range(min(size - len(head), 251)))
        reps, rest = divmod(size - len(head), len(filler))
        return head + filler * reps + filler[:rest]

    def multicast(self, src: Address, size: int = 64) -> None:
        session = self.net.endpoints[src].session_id
        key = (session, False, None)
        index = self.sent.get(key, 0) + 1
        self.sent[key] = index
        self._note(session, False, index, [r for r in self.net.endpoints if r != src])
        self.net.send_multicast(src, self.payload(session, False, index, size))

    def ptp(self, src: Address, dest: Address, size: int = 64) -> None:
        session = self.net.endpoints[src].session_id
        key = (session, True, dest)
        index = self.sent.get(key, 0) + 1
        self.sent[key] = index
        self._note(session, True, index, [dest])
        self.net.send_ptp(src, dest, self.payload(session, True, index, size))

    def streams_at(self, receiver: Address) -> dict[tuple[int, bool], list[tuple[int, str]]]:
        """Per (sender session, ptp): the presented sequence of (index, "d"elivered or "l"ost)."""
        from rvasync.protocol.reliable_events import Delivered, InboundDataLoss

        seen: dict[tuple[int, bool], list[tuple[int, str]]] = {}
        for event in self.net.events[receiver]:
            if isinstance(event, Delivered):
                for payload in event.payloads:
                    session, ptp, index = self._HEAD.unpack_from(payload)
                    assert session == event.session, "payload from another session"
                    assert bool(ptp) == event.ptp, "payload on the wrong stream kind"
                    assert payload == self.payload(session, bool(ptp), index, len(payload))
                    seen.setdefault((session, event.ptp), []).append((index, "d"))
            elif isinstance(event, InboundDataLoss):
                entries = seen.setdefault((event.session, event.ptp), [])
                for index in range(event.first_message, event.first_message + event.messages):
                    entries.append((index, "l"))
        return seen

    def expected_at(self, receiver: Address) -> dict[tuple[int, bool], list[int]]:
        """Per (sender session, ptp): the [first, last] indices meant for ``receiver``."""
        session = self.net.endpoints[receiver].session_id
        return {(s, ptp): span for (s, ptp, r), span in self.meant.items() if r == session}

    def accounted(self, receiver: Address) -> bool:
        """True when every message meant for ``receiver`` was delivered or reported lost."""
        seen = self.streams_at(receiver)
        return all(
            seen.get(key) and seen[key][-1][0] >= last
            for key, (_, last) in self.expected_at(receiver).items()
        )

    def all_accounted(self) -> bool:
        return all(self.accounted(r) for r in self.net.endpoints)

    def check(self, receiver: Address, *, complete: bool = True, lossless: bool = False) -> None:
        """Each stream presented in order, once, as delivered or lost (all of it if complete)."""
        seen = self.streams_at(receiver)
        expected = self.expected_at(receiver)
        for key, entries in seen.items():
            indices = [i for i, _ in entries]
            assert indices == list(range(indices[0], indices[0] + len(indices))), (
                f"stream {key} at {receiver!r} out of order or duplicated: {indices[:50]}"
            )
            assert key in expected, f"unexpected stream {key} at {receiver!r}"
            first, last = expected[key]
            assert indices[-1] <= last, f"stream {key} at {receiver!r} beyond what was sent"
            if complete:
                assert indices[0] <= first, f"stream {key} at {receiver!r} starts at {indices[0]}"
            if lossless:
                lost = [i for i, kind in entries if kind == "l"]
                assert not lost, f"stream {key} at {receiver!r} lost {lost[:20]}"
        if complete:
            for key, (_, last) in expected.items():
                got = seen.get(key, [])
                assert got and got[-1][0] == last, (
                    f"stream {key} at {receiver!r}: presented up to "
                    f"{got[-1][0] if got else None} of {last}"
                )
