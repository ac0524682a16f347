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
"""

from __future__ import annotations

import asyncio
import inspect
import math
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, NotPermitted

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


class Timer:
    """A repeating timer on the running event loop.

    ``async for tick in Timer(interval)`` yields the tick number (1, 2, 3 ...
    counted from the start or the last :meth:`reset`), once per elapsed
    interval. With ``callback``, the timer dispatches itself instead: a task on
    the running loop calls ``callback(timer)`` once per elapsed interval, one
    call at a time, awaiting it when it returns an awaitable; an exception in
    the callback is logged to stderr and the timer goes on. ``closure`` is
    kept as ``timer.closure`` for the callback's use.

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
        callback: TimerCallback | None = None,
        closure: Any = None,
    ) -> None:
        self._interval = _check_interval(interval)
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
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
        if callback is not None:
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
        """Ticks delivered since the start or the last reset."""
        return self._delivered

    @property
    def pending(self) -> int:
        """Elapsed intervals not yet delivered (the backlog of a slow consumer)."""
        self._catch_up()
        return self._elapsed - self._delivered

    @property
    def destroyed(self) -> bool:
        return self._destroyed

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
        self._wake_all()

    close = destroy

    async def __aenter__(self) -> Timer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            # Let a callback that is running finish before the block is left.
            await asyncio.wait({task})

    # -- iteration --------------------------------------------------------------------------

    def __aiter__(self) -> Timer:
        return self

    async def __anext__(self) -> int:
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
        self._wake_all()

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
