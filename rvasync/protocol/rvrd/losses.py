"""Loss reports of a routing domain: what an outage lost, carried to the listeners who missed it.

A router that cannot pass messages on counts them; the listeners that miss
them are on another network, maybe several routers away. A
:class:`LossReport` names that network (its *target*) and travels there over
neighbor links (a ``LOSS`` frame, hop by hop along each router's shortest
path to a router attached to the target), where that router presents it as
``_RV.ERROR.SYSTEM.DATALOSS.ROUTER``. While the target cannot be reached
(a partition, a router down) the report waits in :class:`PendingLosses`, one
aggregated count per kind of loss, and leaves when a path comes back.

Two kinds of report:

* a **count** (``exact``): messages this router knows it could not pass on,
  such as those imported while no path led to a network that listens, or
  sent on a link that broke before the neighbor acknowledged them (a link
  that comes back tells which of those arrived: ``RESUME``, so the count is
  exact);
* a **window** (not ``exact``): messages that may have been lost where
  nobody could count them: inside a neighbor that broke its link (killed, or
  cut off), or a router's own predecessor. ``lost`` is then a lower bound (0)
  and ``since`` / ``until`` bound the outage; presented by the router of the
  network that missed them, it arrives in that network's stream between the
  last message before the gap and the first after it.

A report crossing a link counts in the link's acknowledged stream like a
message (:class:`InFlight`): one whose link breaks before it was
acknowledged is sent again, and the presenting router presents each report
once.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from rvasync.protocol.rvrd.frames import LOSS, LossFrame

__all__ = [
    "Carried",
    "InFlight",
    "LossReport",
    "Orphan",
    "PendingLosses",
    "Presented",
    "Run",
]

#: Distinct pending counts kept per router; beyond it, new ones merge per (target, reason).
PENDING_LIMIT = 10_000
#: Loss reports remembered as presented, so a report sent again is presented once.
PRESENTED_WINDOW = 4096


@dataclass(frozen=True, slots=True)
class LossReport:
    """Messages that did not reach network ``target`` (None: this router's own networks).

    ``reporter`` is the router that counted (``<name>.<incarnation>``) and
    ``ident`` tells its reports apart. ``origin`` is the network the messages
    came from and ``subject`` their subject, when known. With ``exact``,
    ``lost`` messages were lost (or may not have arrived: counted as lost);
    without, ``lost`` is a lower bound and ``since`` / ``until`` (wall-clock
    seconds, ``until`` None while it lasts) bound when they were lost.
    """

    reporter: str
    ident: int
    target: str | None
    lost: int
    exact: bool
    reason: str
    origin: str | None = None
    subject: str | None = None
    since: float | None = None
    until: float | None = None

    @property
    def router(self) -> str:
        """The reporting router's name (``reporter`` without its incarnation)."""
        return self.reporter.split(".", 1)[0]

    def frame(self, hops: int, via: str = "") -> LossFrame:
        assert self.target is not None
        return LossFrame(LOSS, via, hops, self.reporter, self.ident, self.target, self.lost,
                         self.exact, self.reason, self.origin, self.subject, self.since,
                         self.until)  # fmt: skip

    @classmethod
    def from_frame(cls, raw: Any) -> tuple[LossReport, str, int]:
        """(report, via, hops) from a LOSS frame off the wire; ValueError if malformed."""
        if not isinstance(raw, list | tuple) or len(raw) != len(LossFrame.__annotations__):
            raise ValueError("malformed LOSS frame")
        f = LossFrame(*raw)
        checks = (
            isinstance(f.via, str)
            and isinstance(f.hops, int)
            and isinstance(f.reporter, str)
            and isinstance(f.ident, int)
            and isinstance(f.target, str)
            and isinstance(f.lost, int)
            and f.lost >= 0
            and isinstance(f.exact, bool)
            and isinstance(f.reason, str)
            and all(v is None or isinstance(v, str) for v in (f.origin, f.subject))
            and all(v is None or isinstance(v, int | float) for v in (f.since, f.until))
        )
        if not checks:
            raise ValueError("malformed LOSS frame")
        report = cls(f.reporter, f.ident, f.target, f.lost, f.exact, f.reason, f.origin,
                     f.subject, f.since, f.until)  # fmt: skip
        return report, f.via, f.hops


#: (target, reason, origin, subject) of an aggregated count.
CountKey = tuple[str, str, str | None, str | None]


class PendingLosses:
    """Reports waiting for a path to their target: counts aggregated per kind, and whole
    reports (windows, and reports a broken link gave back) as they are."""

    def __init__(self, limit: int = PENDING_LIMIT) -> None:
        self._counts: dict[CountKey, int] = {}
        self._held: list[LossReport] = []
        self._limit = limit

    def __len__(self) -> int:
        return len(self._counts) + len(self._held)

    def count(self, key: CountKey, lost: int) -> None:
        counts = self._counts
        if key not in counts and len(counts) >= self._limit:
            key = (key[0], key[1], key[2], None)  # one count for the subjects beyond the limit
        counts[key] = counts.get(key, 0) + lost

    def hold(self, report: LossReport) -> None:
        self._held.append(report)

    def targets(self) -> set[str]:
        out = {key[0] for key in self._counts}
        out.update(r.target for r in self._held if r.target is not None)
        return out

    def take(self, target: str) -> tuple[list[tuple[CountKey, int]], list[LossReport]]:
        """Everything waiting for ``target`` (removed)."""
        counts = [(k, n) for k, n in self._counts.items() if k[0] == target]
        for key, _ in counts:
            del self._counts[key]
        held = [r for r in self._held if r.target == target]
        if held:
            self._held = [r for r in self._held if r.target != target]
        return counts, held

    def lost(self) -> int:
        """Messages counted in the waiting reports (for status and tests)."""
        return sum(self._counts.values()) + sum(r.lost for r in self._held)

    def counts(self) -> dict[CountKey, int]:
        """The waiting counts (a copy): (target, reason, origin, subject) -> messages."""
        out = dict(self._counts)
        for r in self._held:
            if r.exact and r.target is not None:
                key = (r.target, r.reason, r.origin, r.subject)
                out[key] = out.get(key, 0) + r.lost
        return out


class Presented:
    """Which routed reports this router presented already (a bounded window)."""

    def __init__(self, window: int = PRESENTED_WINDOW) -> None:
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._window = window

    def first_time(self, report: LossReport) -> bool:
        key = (report.reporter, report.ident)
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._window:
            self._seen.popitem(last=False)
        return True


class Run:
    """``count`` consecutive messages of ``origin`` and ``subject`` on a link."""

    __slots__ = ("count", "origin", "subject")

    def __init__(self, origin: str, subject: str, count: int) -> None:
        self.origin = origin
        self.subject = subject
        self.count = count

    def __repr__(self) -> str:
        return f"Run({self.origin!r}, {self.subject!r}, {self.count})"


#: What a link carries, in order: runs of messages and loss reports (each counting one).
Carried = Run | LossReport


class InFlight:
    """What one link carried and the neighbor did not acknowledge yet, in order."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: deque[Carried] = deque()

    def add(self, origin: str, subject: str, n: int) -> None:
        runs = self.runs
        if runs:
            last = runs[-1]
            if last.__class__ is Run and last.subject == subject and last.origin == origin:
                last.count += n
                return
        runs.append(Run(origin, subject, n))

    def drop(self, n: int) -> None:
        """The first ``n`` arrived (acknowledged, or counted by the neighbor's RESUME)."""
        runs = self.runs
        while n > 0 and runs:
            head = runs[0]
            if isinstance(head, LossReport):
                runs.popleft()
                n -= 1
            elif head.count <= n:
                runs.popleft()
                n -= head.count
            else:
                head.count -= n
                n = 0

    def unsend(self, origin: str, subject: str, n: int) -> None:
        """``n`` messages of ``origin`` / ``subject`` were never written after all."""
        for run in reversed(self.runs):
            if isinstance(run, Run) and run.subject == subject and run.origin == origin:
                taken = min(n, run.count)
                run.count -= taken
                n -= taken
                if n == 0:
                    break
        self.runs = deque(r for r in self.runs if not isinstance(r, Run) or r.count > 0)


@dataclass
class Orphan:
    """What a broken link carried that its neighbor (in ``incarnation``) had not acknowledged.

    Kept until the link comes back (the neighbor's ``RESUME`` tells how much of
    it arrived), the neighbor comes back as a new incarnation (all of it is
    lost), or another path reaches the networks it was going to.
    """

    incarnation: int
    acked: int
    runs: deque[Carried]
    #: (origin, subject) -> the networks those messages were going to
    targets: dict[tuple[str, str], list[str]]
    at: float

    def networks(self) -> set[str]:
        out = {t for ts in self.targets.values() for t in ts}
        out.update(r.target for r in self.runs if isinstance(r, LossReport) and r.target)
        return out
