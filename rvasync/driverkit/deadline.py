"""One re-armable wake-up at an absolute loop time, for a sans-IO core's next deadline.

A sans-IO core says when it next needs to run (``next_deadline()``); its
driver re-arms this timer after every input (the fault tolerance members and
monitors, the distributed queue members and the virtual circuit terminals all
do). A ``loop.call_at`` handle costs nothing while it waits, and re-arming to
the same moment keeps the existing handle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["DeadlineTimer"]


class DeadlineTimer:
    """Calls ``fire(now)`` once the loop clock reaches the armed deadline."""

    __slots__ = ("_fire", "_handle", "_loop", "_when")

    def __init__(self, loop: asyncio.AbstractEventLoop, fire: Callable[[float], None]) -> None:
        self._loop = loop
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._when: float | None = None

    @property
    def when(self) -> float | None:
        """The armed deadline (loop time), or None."""
        return self._when

    def arm(self, deadline: float | None) -> None:
        """Wake at ``deadline`` (loop time) instead of any earlier arming; None disarms."""
        if deadline == self._when and self._handle is not None:
            return
        self.cancel()
        if deadline is None:
            return
        self._when = deadline
        self._handle = self._loop.call_at(deadline, self._on_time)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = None

    def _on_time(self) -> None:
        when = self._when
        self._handle = None
        self._when = None
        # asyncio may run a handle up to one clock tick early; the core must
        # see its deadline reached, or it would ask for the same one again.
        now = self._loop.time()
        self._fire(now if when is None or now >= when else when)
