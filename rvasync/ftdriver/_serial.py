"""Ordered delivery of events to a user callback that may be plain or async.

Fault tolerance callbacks must see their actions in the order the core issued
them (a DEACTIVATE overtaking the ACTIVATE before it would leave the program in
the wrong state), yet an async callback that takes its time must not hold up
the member's own heartbeats. So events wait in a per-owner line: a plain
callback runs at once, inside the input that produced the event; an async one
(or a plain one that returns an awaitable) runs in a task of its own, and
events that arrive meanwhile wait behind it. Nothing here blocks the input
path, so records are always sent before any callback runs.

A callback that raises is logged and the next event is delivered as usual: a
broken callback must not stop the member from heartbeating or from being told
what to do next.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from rvasync._logging import stderr_logger

__all__ = ["SerialCallback"]


class SerialCallback:
    """Calls ``callback(owner, event)`` for each submitted event, one at a time, in order."""

    __slots__ = ("_callback", "_draining", "_is_async", "_label", "_owner", "_pending", "_task")

    def __init__(self, owner: object, callback: Callable[..., Any], label: str) -> None:
        self._owner = owner
        self._callback = callback
        self._is_async = _is_async_callable(callback)
        self._label = label
        self._pending: deque[Any] = deque()
        self._draining = False
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """True while events wait or an async callback is still running."""
        return bool(self._pending) or self._task is not None or self._draining

    def submit(self, events: list[Any]) -> None:
        """Queue ``events``; deliver now unless a delivery is already under way.

        Re-entrant: a plain callback that causes further events (by changing
        the weight, say) has them queued behind the events still pending.
        """
        if not events:
            return
        self._pending.extend(events)
        if self._task is not None or self._draining:
            return
        if self._is_async:
            self._start(None)
        else:
            self._drain()

    async def wait_idle(self) -> None:
        """Return once every submitted event has been delivered (async callbacks included).

        Called from inside the callback itself (a callback that withdraws its
        own member), it returns at once: waiting for itself would never end,
        and the events still pending run as soon as the callback returns.
        """
        while self._task is not None:
            if self._task is asyncio.current_task():
                return
            # asyncio.wait neither cancels the task when the waiter is
            # cancelled nor raises what the task raised.
            await asyncio.wait({self._task})

    def cancel(self) -> None:
        """Drop pending events and cancel a running async callback (the owner is going away)."""
        self._pending.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # -- internals ----------------------------------------------------------

    def _start(self, first: tuple[Any, Awaitable[Any]] | None) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(first), name=f"rvasync-ft-callback:{self._label}"
        )

    def _drain(self) -> None:
        """Deliver to a plain callback right away, until one hands back an awaitable."""
        self._draining = True
        try:
            while self._pending:
                event = self._pending.popleft()
                result = self._call(event)
                if result is not None:
                    self._start((event, result))
                    return
        finally:
            self._draining = False

    def _call(self, event: Any) -> Awaitable[Any] | None:
        """Run the callback for one event; return what must still be awaited, if anything."""
        try:
            result = self._callback(self._owner, event)
        except Exception:
            self._log(event)
            return None
        if result is not None and inspect.isawaitable(result):
            return result
        return None

    async def _run(self, first: tuple[Any, Awaitable[Any]] | None) -> None:
        """Await callbacks one after the other until no event waits."""
        try:
            if first is not None:
                await self._await(*first)
            while self._pending:
                event = self._pending.popleft()
                result = self._call(event)
                if result is not None:
                    await self._await(event, result)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _await(self, event: Any, awaitable: Awaitable[Any]) -> None:
        try:
            await awaitable
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log(event)

    def _log(self, event: Any) -> None:
        stderr_logger().exception(
            "fault tolerance callback raised; the member carries on",
            owner=self._label,
            action=str(getattr(event, "name", event)),
        )


def _is_async_callable(callback: Callable[..., Any]) -> bool:
    """True for ``async def`` functions and objects whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(callback):
        return True
    call = getattr(callback, "__call__", None)  # noqa: B004 (looking for an async __call__)
    return call is not None and inspect.iscoroutinefunction(call)
