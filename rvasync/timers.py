"""Timers: an event once per elapsed interval, counted exactly, never piled up.

A :class:`Timer` counts the intervals elapsed since it started (or was last
reset) on the event loop's clock. Each elapsed interval is delivered once:
as one step of ``async for tick in timer`` or as one call of its callback.
A consumer that falls behind is not sent copies; the timer remembers how many
intervals it owes and delivers that backlog promptly, one by one, when the
consumer comes back. Deadlines are computed from the start time
(``start + k * interval``), so a late wake-up never shifts the ones after it.

Destroying a timer halts it at once: intervals owed but not yet delivered are
dropped and iteration ends. Resetting it is destroying it and starting a new
one in its place, counting from that moment.

With a ``queue``, each elapsed interval puts one :class:`~rvasync.events.TimerEvent`
into that queue instead, where it waits in order with the queue's messages and
under its queue groups' priorities, and its dispatch runs the callback
(rvasync.events).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.events import EventSource, TimerEvent, check_queue, run_callback
from rvasync.queues import Queue

__all__ = ["Timer", "TimerCallback"]

TimerCallback = Callable[["Timer"], Awaitable[object] | object]

# Callback timers dispatch from a task that only the timer references; keep
# them alive here until destroyed (asyncio holds tasks weakly).
_dispatching: set[Timer] = set()


def _check_interval(interval: object) -> float:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise InvalidArgument(
            f"interval must be a number of seconds, got {type(interval).__name__}"
        )
    if not math.isfinite(interval) or interval <= 0:
        raise InvalidArgument(f"interval must be a finite number of seconds > 0, got {interval}")
    return float(interval)


_OnDeadline = weakref.WeakMethod[Callable[[int], None]]


def _tick(ref: _OnDeadline, index: int) -> None:
    # The loop holds the timer weakly (a weak reference to its bound
    # _on_deadline): an iterator timer the program dropped stops scheduling
    # itself once it is garbage.
    on_deadline = ref()
    if on_deadline is not None:
        on_deadline(index)


class Timer(EventSource):
    """A repeating timer on the running event loop.

    ``async for tick in Timer(interval)`` yields the tick number (1, 2, 3 ...
    counted from the start or the last :meth:`reset`), once per elapsed
    interval. With ``callback``, the timer dispatches itself instead: a task on
    the running loop calls ``callback(timer)`` once per elapsed interval, one
    call at a time, awaiting it when it returns an awaitable; an exception in
    the callback is logged to stderr and the timer goes on. ``closure`` is
    kept as ``timer.closure`` for the callback's use.

    With ``queue``, each elapsed interval puts one
    :class:`~rvasync.events.TimerEvent` (``.timer``, ``.ticks``, ``.closure``)
    in that queue, in order with its messages and under its queue groups'
    priorities; dispatching the event (``await event.dispatch()``, or the
    queue's dispatcher when callback listeners share it) runs the callback,
    and ``timer.ticks`` is then the number of the last tick dispatched. Such a
    timer is not iterated itself: its queue is. Destroying or resetting it
    drops its events still queued.

    The timer must be created inside a running event loop. It is an async
    context manager that destroys it on exit.
    """

    # Set by _start (from __init__ and reset).
    _origin: float
    _elapsed: int
    _delivered: int

    def __init__(
        self,
        interval: float,
        *,
        queue: Queue | None = None,
        callback: TimerCallback | None = None,
        closure: Any = None,
    ) -> None:
        self._interval = _check_interval(interval)
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        self._queue = check_queue(queue)
        self._dispatched = 0
        self._sequence = 0  # bumped by reset: events of an earlier sequence are stale
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("Timer must be created inside a running event loop") from None
        self.closure = closure
        self._callback = callback
        self._destroyed = False
        self._waiters: list[asyncio.Future[None]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._start()
        self._task: asyncio.Task[None] | None = None
        if self._queue is not None:
            _dispatching.add(self)  # the program keeps the queue, not necessarily the timer
        elif callback is not None:
            _dispatching.add(self)
            self._task = self._loop.create_task(self._dispatch(), name=f"rvasync-timer:{interval}")

    # -- state --------------------------------------------------------------------------

    @property
    def interval(self) -> float:
        """Seconds between ticks."""
        return self._interval

    @property
    def callback(self) -> TimerCallback | None:
        return self._callback

    @property
    def ticks(self) -> int:
        """Ticks delivered since the start or the last reset (with a queue: the last dispatched)."""
        return self._dispatched if self._queue is not None else self._delivered

    @property
    def pending(self) -> int:
        """Elapsed intervals not yet delivered (the backlog of a slow consumer)."""
        self._catch_up()
        return self._elapsed - self._delivered

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else f"ticks={self._delivered}"
        return f"<Timer interval={self._interval} {state}>"

    # -- control ------------------------------------------------------------------------------

    def reset(self, interval: float | None = None) -> None:
        """Start a new sequence now (with ``interval`` if given); the backlog is dropped.

        The same as destroying the timer and creating a new one in its place,
        except that consumers already iterating it, and its callback, carry on
        with the new sequence, whose ticks are numbered from 1 again.
        """
        if self._destroyed:
            raise NotPermitted("cannot reset a destroyed timer")
        if interval is not None:
            self._interval = _check_interval(interval)
        self._cancel_deadline()
        self._drop_queued()
        self._sequence += 1
        self._dispatched = 0
        self._start()

    def destroy(self) -> None:
        """Halt the timer at once: no further tick is delivered, iteration ends.

        A callback already running finishes; nothing owed is delivered after
        it. Destroying twice is harmless.
        """
        if self._destroyed:
            return
        self._destroyed = True
        self._elapsed = self._delivered  # nothing is owed any more
        self._cancel_deadline()
        _dispatching.discard(self)
        self._drop_queued()
        self._wake_all()

    close = destroy

    # -- iteration --------------------------------------------------------------------------

    def __aiter__(self) -> Timer:
        return self

    async def __anext__(self) -> int:
        if self._queue is not None:
            raise NotPermitted("this timer puts its ticks in its queue; iterate the queue")
        while True:
            if self._destroyed:
                raise StopAsyncIteration
            if self._delivered < self._elapsed or self._catch_up():
                self._delivered += 1
                return self._delivered
            fut = self._loop.create_future()
            self._waiters.append(fut)
            try:
                await fut
            finally:
                if not fut.done():
                    fut.cancel()
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass

    # -- internals -----------------------------------------------------------------------------

    def _start(self) -> None:
        self._origin = self._loop.time()
        self._elapsed = 0
        self._delivered = 0
        self._schedule(1)

    def _schedule(self, index: int) -> None:
        when = self._origin + index * self._interval
        on_deadline: _OnDeadline = weakref.WeakMethod(self._on_deadline)
        self._handle = self._loop.call_at(when, _tick, on_deadline, index)

    def _cancel_deadline(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _intervals_since_origin(self) -> int:
        return int((self._loop.time() - self._origin) // self._interval)

    def _catch_up(self) -> bool:
        """Count intervals that elapsed before their deadline callback ran; True if any."""
        if self._destroyed:
            return False
        elapsed = self._intervals_since_origin()
        if elapsed > self._elapsed:
            self._elapsed = elapsed
            return True
        return False

    def _on_deadline(self, index: int) -> None:
        self._handle = None
        if self._destroyed:
            return
        # The loop may run a deadline a hair early (clock resolution) or late
        # (busy loop): the deadline itself counts, and so does anything past it.
        elapsed = max(index, self._intervals_since_origin(), self._elapsed)
        self._elapsed = elapsed
        self._schedule(elapsed + 1)
        if self._queue is not None:
            self._enqueue()
        else:
            self._wake_all()

    # -- queued events (rvasync.events) ------------------------------------------------------

    def _enqueue(self) -> None:
        """One TimerEvent per interval elapsed since the last ones were queued."""
        queue = self._queue
        assert queue is not None
        if queue.destroyed:  # nobody can ever take them: the timer has no more use
            self.destroy()
            return
        while self._delivered < self._elapsed:
            self._delivered += 1
            queue.deliver(TimerEvent(self, self._delivered, self._sequence))

    def _drop_queued(self) -> None:
        if self._queue is not None:
            self._queue.discard_where(lambda item: getattr(item, "timer", None) is self)

    async def dispatch_callback(self, event: TimerEvent) -> None:
        """Dispatch one queued tick: run the callback (nothing once destroyed or reset)."""
        if event.timer is not self:
            raise InvalidArgument("this event belongs to another timer")
        if self._destroyed or event.sequence != self._sequence:
            return
        self._dispatched = event.ticks
        if self._callback is not None:
            await run_callback(self._callback, self, "timer")

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _dispatch(self) -> None:
        callback = self._callback
        assert callback is not None
        try:
            async for _tick_number in self:
                try:
                    result = callback(self)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    stderr_logger().exception(
                        "timer callback raised; the timer goes on", interval=self._interval
                    )
        finally:
            # Cancelled from outside (the loop shutting down, for instance):
            # nobody dispatches this timer any more, so it must stop counting.
            self.destroy()
