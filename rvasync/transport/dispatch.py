"""Callback dispatch: a task per queue that runs its listeners' callbacks.

Rendezvous runs a callback when its event is dispatched from a queue, never
inside the sending call. rvasync keeps that rule: a listener created with a
callback puts its messages in a queue like any other, and one asyncio task per
such queue takes each message and calls ``msg.listener``'s callback (awaiting
it when it is a coroutine function). An exception in a callback is logged and
dispatch goes on.
"""

from __future__ import annotations

import asyncio
import inspect

from rvasync._logging import stderr_logger
from rvasync.errors import QueueDestroyed
from rvasync.queues import Queue

__all__ = ["Dispatcher"]


class Dispatcher:
    """Runs the callbacks of the listeners whose messages wait in one queue."""

    __slots__ = ("_listeners", "_queue", "_task")

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._listeners = 0
        self._task: asyncio.Task[None] | None = None

    def attach(self) -> None:
        """One more callback listener uses this queue; start dispatching if needed."""
        self._listeners += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"rvasync-dispatch:{self._queue.name}"
            )

    def detach(self) -> bool:
        """One callback listener left; returns True when none remain (dispatcher stopped)."""
        self._listeners -= 1
        if self._listeners > 0:
            return False
        self.stop()
        return True

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        queue = self._queue
        try:
            async for msg in queue:
                listener = msg.listener
                if listener is None or listener.dispatch_callback is None:
                    continue
                try:
                    if listener.dispatch_is_async:
                        await listener.dispatch_callback(msg)
                    else:
                        result = listener.dispatch_callback(msg)
                        if result is not None and inspect.isawaitable(result):
                            await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    stderr_logger().exception(
                        "listener callback raised; dispatch continues",
                        subject=msg.subject,
                        listener=listener.subject,
                    )
        except QueueDestroyed:
            return
