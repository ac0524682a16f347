"""One object per event loop, made on first use and gone with its loop.

Some helpers serve a whole event loop rather than one transport: the busy
poller (rvasync.busypoll) and the send pacer (rvasync.sendpace) are shared by
the in-process daemon and every transport of the loop, so that what they
count or keep awake is the loop's. :class:`PerLoop` holds them, keyed weakly
by the loop, so a closed and dropped loop takes its helper with it. For that
the helper must not hold its loop itself (the registry holds the helper, so
the loop would live as long as the program): it is made with a weak proxy of
the loop, which calls through to the loop while the loop lives.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")


class PerLoop(Generic[T]):
    """``make(proxy of loop)``'s result for each event loop, made the first time it is
    asked for."""

    __slots__ = ("_made", "_make")

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, loop: asyncio.AbstractEventLoop | None = None) -> T:
        """The object of ``loop`` (default: the running loop), made on first use."""
        if loop is None:
            loop = asyncio.get_running_loop()
        made = self._made.get(loop)
        if made is None:
            made = self._made[loop] = self._make(weakref.proxy(loop))
        return made
