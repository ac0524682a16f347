"""Busy polling: keep an event loop turning for a while after network activity.

When a process waits for a datagram or a frame, its event loop sleeps in the
selector, and the kernel must wake it when data arrives. On a virtual machine
that wake-up is most of a small message's one-way time: a ``sendto`` to a
sleeping receiver costs the sender about twice as much as one to a running
receiver, and the receiver then needs to be scheduled. A process that expects
an answer within microseconds (a request's reply, the next request of a
client in a tight loop) gains by not sleeping at all for a short while.

A :class:`BusyPoller` does that for one event loop: after each :meth:`touch`
(a datagram or frame sent or received) it keeps a callback scheduled on every
turn of the loop for ``window`` seconds, so the loop polls its sockets without
blocking and picks up the next datagram as soon as it lands. Other callbacks
and tasks run as usual. The price is a CPU core kept busy during the window,
which is why it is off (window 0) unless a transport or daemon asks for it;
see docs/transports.md, "Polling instead of sleeping".

One poller serves a loop, shared by the in-process daemon and every transport
of that loop; the window is the largest any of them asked for and is never
lowered (like a service's reliability).

Apart from the window, a caller that knows an answer is due can :meth:`hold`
the loop awake until it comes, for a bounded time: ``send_request`` does that
while it waits for its reply (``rv.Transport(reply_poll=...)``, on by
default). Such a hold costs CPU only while a request is outstanding, and ends
with the reply (:meth:`release`) or at its bound, whichever is first.
"""

from __future__ import annotations

import asyncio
import math
import time

from rvasync.errors import InvalidArgument
from rvasync.perloop import PerLoop

__all__ = ["MAX_WINDOW", "BusyPoller", "check_window", "poller_for"]

#: Largest window accepted: beyond this, a blocking wait costs nothing worth saving.
MAX_WINDOW = 1.0

_clock = time.perf_counter  # the loop's own clock may tick in milliseconds


def check_window(name: str, value: object) -> float:
    """``value`` as a window in seconds (0 .. MAX_WINDOW), or InvalidArgument naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= MAX_WINDOW:
        raise InvalidArgument(f"{name} must be within 0..{MAX_WINDOW} seconds, got {value!r}")
    return float(value)


class BusyPoller:
    """Keeps one event loop from sleeping for ``window`` seconds after each :meth:`touch`."""

    __slots__ = (
        "__weakref__",
        "_hold_until",
        "_holds",
        "_loop",
        "_spinning",
        "_until",
        "window",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: seconds of busy polling after activity (0: never)
        self.window = 0.0
        self._until = 0.0
        self._spinning = False
        #: holds not yet released, and the latest time any of them allows polling to
        self._holds = 0
        self._hold_until = 0.0

    def want(self, window: float) -> None:
        """Ask for at least ``window`` seconds (the largest request wins; never lowered)."""
        if window > self.window:
            self.window = window

    def touch(self) -> None:
        """Activity now: poll without sleeping until ``window`` seconds from now."""
        window = self.window
        if not window:
            return
        self._until = _clock() + window
        if not self._spinning and not self._loop.is_closed():
            self._spinning = True
            self._loop.call_soon(self._spin)

    def hold(self, seconds: float) -> None:
        """Poll without sleeping until :meth:`release`, or for ``seconds`` at most.

        For a caller expecting an answer very soon (a request's reply). Holds
        nest: polling goes on while any is held and not past its bound. Every
        hold must be released once, whatever happens to the wait.
        """
        self._holds += 1
        until = _clock() + seconds
        if until > self._hold_until:
            self._hold_until = until
        if not self._spinning and not self._loop.is_closed():
            self._spinning = True
            self._loop.call_soon(self._spin)

    def release(self) -> None:
        """End one :meth:`hold` (the answer came, or the wait ended otherwise)."""
        self._holds -= 1

    @property
    def held(self) -> int:
        """How many holds are not released yet."""
        return self._holds

    @property
    def spinning(self) -> bool:
        """Whether the loop is being kept busy right now."""
        return self._spinning

    def _spin(self) -> None:
        # A callback ready on every turn makes the loop poll with a zero timeout.
        now = _clock()
        if (now < self._until or (self._holds and now < self._hold_until)) and (
            not self._loop.is_closed()
        ):
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False


_pollers: PerLoop[BusyPoller] = PerLoop(BusyPoller)


def poller_for(loop: asyncio.AbstractEventLoop | None = None) -> BusyPoller:
    """The busy poller of ``loop`` (default: the running loop), created on first use."""
    return _pollers.get(loop)
