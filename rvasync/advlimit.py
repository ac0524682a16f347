"""Advisories under overload: one per cause per interval, and a log that stays readable.

Some advisories can fire once per message: a bounded queue discarding
(QUEUE.LIMIT_EXCEEDED), a send to an inbox of an unknown daemon
(DATALOSS.OUTBOUND.PTP), a client publishing where it may not
(CLIENT.ILLEGAL_PUBLISH), a message over 64 MiB (DATALOSS.MSG_TOO_LARGE). A
queue of limit 10 given 100,000 messages presented 99,990 advisories, and
when nobody listened, logged 99,990 lines, exactly while the process was
overloaded. Two tools keep that to a trickle without losing a count:

* :class:`Coalescer`: per cause (a key: the queue, the session and address ...)
  the first event is presented at once; the events of the next
  :data:`ADVISORY_INTERVAL` seconds are counted and presented together at its
  end, as one advisory carrying the count. Nothing is dropped: the counts of
  the advisories presented add up to the events.
* :class:`UnheardLimiter`: an ERROR or WARN advisory no listener takes is
  logged (rvasync.advisories.log_unheard) at most once per subject per
  interval; the lines not written are counted, and the count is logged
  (``suppressed``) with the next line or at the interval's end.

Both need the event loop for their end-of-interval timer; outside one they
present (or log) every event, as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["ADVISORY_INTERVAL", "Coalescer", "UnheardLimiter"]

#: Seconds over which events of one cause are presented as one advisory, and unheard
#: advisories of one subject logged as one line.
ADVISORY_INTERVAL = 1.0


@dataclass(slots=True)
class _Pending:
    amount: int = 0  # events counted since, not presented yet
    emit: Callable[[int], None] | None = None  # presents ``amount`` events


class Coalescer:
    """Per key, one presentation per interval carrying the count (see the module doc)."""

    def __init__(self, interval: float = ADVISORY_INTERVAL) -> None:
        self.interval = interval
        self._keys: dict[Hashable, _Pending] = {}

    def report(self, key: Hashable, amount: int, emit: Callable[[int], None]) -> None:
        """``amount`` events of cause ``key``; ``emit(n)`` presents the advisory for ``n``
        events (now, or with the others at the interval's end: the latest ``emit``)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            emit(amount)  # no loop, no timer: every event on its own
            return
        state = self._keys.get(key)
        if state is not None:
            state.amount += amount
            state.emit = emit
            return
        self._keys[key] = _Pending()
        loop.call_later(self.interval, self._due, loop, key)
        emit(amount)

    def _due(self, loop: asyncio.AbstractEventLoop, key: Hashable) -> None:
        state = self._keys.get(key)
        if state is None:
            return
        if not state.amount or state.emit is None:
            del self._keys[key]  # a quiet interval: the next event is presented at once
            return
        amount, emit = state.amount, state.emit
        state.amount, state.emit = 0, None
        loop.call_later(self.interval, self._due, loop, key)
        emit(amount)

    def pending(self, key: Hashable) -> int:
        """Events of ``key`` counted and not presented yet."""
        state = self._keys.get(key)
        return 0 if state is None else state.amount


class UnheardLimiter:
    """At most one log line per subject per interval; the others counted (see module doc).

    :meth:`allow` says whether to write a line now and how many lines of that
    subject were suppressed since the last one; ``flush(subject, n)`` (given
    when made) writes the count of suppressed lines at the interval's end if no
    line came to carry it. At most ``max_subjects`` subjects are followed; past
    that the oldest are forgotten (their next line is written, with no count
    lost: a forgotten subject's pending count is flushed first).
    """

    def __init__(
        self,
        flush: Callable[[str, int], None],
        interval: float = ADVISORY_INTERVAL,
        max_subjects: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_subjects = max_subjects
        self._flush = flush
        self._clock = clock
        #: subject -> [end of its interval, lines suppressed in it]
        self._subjects: dict[str, list[float]] = {}

    def allow(self, subject: str) -> tuple[bool, int]:
        """(write a line now, lines suppressed before it)."""
        now = self._clock()
        state = self._subjects.get(subject)
        if state is not None and now < state[0]:
            if not state[1]:
                self._arm(subject, state[0] - now)
            state[1] += 1
            return False, 0
        suppressed = int(state[1]) if state is not None else 0
        if state is None and len(self._subjects) >= self.max_subjects:
            self._forget_oldest()
        self._subjects[subject] = [now + self.interval, 0]
        return True, suppressed

    def _arm(self, subject: str, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # carried by the subject's next line instead
        loop.call_later(delay, self._due, subject)

    def _due(self, subject: str) -> None:
        state = self._subjects.get(subject)
        if state is None or not state[1]:
            return
        count = int(state[1])
        state[1] = 0
        self._flush(subject, count)

    def _forget_oldest(self) -> None:
        subject = next(iter(self._subjects))
        state = self._subjects.pop(subject)
        if state[1]:
            self._flush(subject, int(state[1]))
