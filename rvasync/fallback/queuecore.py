"""Pure-Python twin of ``rvasync_native.queuecore``: the storage and fast paths of a queue.

A :class:`QueueCore` holds items in arrival order, applies the limit policy on
the producer side (``deliver``) and hands items to consumers without suspending
when some are waiting (``poll``, ``__anext__``, ``get``). Everything that
involves waiting, naming, groups or reporting belongs to
:class:`rvasync.queues.Queue`, which subclasses the core and supplies three
hooks the core calls:

``_notify()``
    after an append while ``_watched`` is true (a consumer, or a group with a
    consumer, may be waiting);
``_limit_exceeded()``
    once per ``deliver`` that discarded anything;
``_wait_item(iterating, timeout)``
    the coroutine that waits when the queue is empty;
``_wait_forever(iterating)``
    the same with no timeout, which ``async for`` awaits directly (one coroutine
    fewer per wait); the core's own just calls ``_wait_item``.

Policies are plain ints here (``rvasync.queues.LimitPolicy`` values) so the
compiled twin needs no import from the package.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["DISCARD_FIRST", "DISCARD_LAST", "DISCARD_NEW", "DISCARD_NONE", "QueueCore"]

DISCARD_NONE = 0
DISCARD_FIRST = 1
DISCARD_LAST = 2
DISCARD_NEW = 3

_UNBOUNDED = sys.maxsize


class QueueCore:
    """Items in arrival order, bounded by an optional limit with a discard policy.

    ``limit`` 0 means unbounded. Arguments are trusted (``Queue`` validates
    them). ``deliver`` never blocks and never raises because of the queue's state:
    a full queue discards by its policy, a closed one drops the item.
    """

    __slots__ = ("_amount", "_cap", "_discarded", "_items", "_policy", "_watched")

    def __init__(self, limit: int = 0, policy: int = DISCARD_NONE, discard_amount: int = 1) -> None:
        self._items: deque[Any] = deque()
        # One comparison on the put path covers "bounded and full" and "closed":
        # an unbounded queue gets the largest capacity, a closed one -1.
        self._cap = limit if limit > 0 else _UNBOUNDED
        self._policy = policy
        self._amount = discard_amount
        self._discarded = 0
        self._watched = False

    # -- producer side ----------------------------------------------------------

    def deliver(self, item: Any) -> None:
        """Append ``item`` (O(1)); wake one waiting consumer if any might be waiting.

        Public: it is ``Queue.deliver`` (driver API) and what an open listener's
        ``deliver`` is bound to, so transports and drivers call it directly.
        """
        items = self._items
        if len(items) >= self._cap:
            self._overflow(item)
            return
        items.append(item)
        if self._watched:
            self._notify()

    def _overflow(self, item: Any) -> None:
        # Cold path: the queue is full, or closed.
        if self._cap < 0:
            return
        items = self._items
        policy = self._policy
        if policy == DISCARD_NEW:
            self._discarded += 1
        elif policy in (DISCARD_FIRST, DISCARD_LAST):
            count = min(self._amount, len(items))
            drop = items.popleft if policy == DISCARD_FIRST else items.pop
            for _ in range(count):
                drop()
            self._discarded += count
            items.append(item)
            if self._watched:
                self._notify()
        else:  # DISCARD_NONE never discards (Queue forbids pairing it with a limit).
            items.append(item)
            if self._watched:
                self._notify()
            return
        self._limit_exceeded()

    def _push_front(self, item: Any) -> None:
        """Give back an item taken but never delivered (its consumer was cancelled)."""
        if self._cap >= 0:
            self._items.appendleft(item)
            if self._watched:
                self._notify()

    # -- consumer side ------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def poll(self) -> Any:
        """The head item, or None at once if the queue is empty."""
        items = self._items
        if items:
            return items.popleft()
        return None

    def __aiter__(self) -> QueueCore:
        return self

    async def __anext__(self) -> Any:
        items = self._items
        if items:
            return items.popleft()
        return await self._wait_forever(True)

    async def get(self, timeout: float | None = None) -> Any:
        """The head item, waiting for one if needed (at most ``timeout`` seconds)."""
        if timeout is not None:
            timeout = self._check_timeout(timeout)
        items = self._items
        if items:
            return items.popleft()
        return await self._wait_item(False, timeout)

    # -- maintenance --------------------------------------------------------------

    @property
    def discarded(self) -> int:
        """How many items the limit policy has discarded so far."""
        return self._discarded

    def discard_where(self, predicate: Callable[[Any], bool]) -> int:
        """Drop every queued item for which ``predicate`` is true; return how many (O(n)).

        Public: it is ``Queue.discard_where`` (driver API: a closing listener's cleanup).
        """
        items = self._items
        kept = [item for item in items if not predicate(item)]
        removed = len(items) - len(kept)
        if removed:
            items.clear()
            items.extend(kept)
        return removed

    def _close_core(self) -> int:
        """Drop every item and every later ``deliver``; return how many items were dropped."""
        dropped = len(self._items)
        self._items.clear()
        self._cap = -1
        self._watched = False
        return dropped

    # -- hooks the subclass replaces --------------------------------------------------

    def _notify(self) -> None:
        self._watched = False

    def _limit_exceeded(self) -> None:
        pass

    def _check_timeout(self, timeout: float) -> float:
        return timeout

    async def _wait_item(self, iterating: bool, timeout: float | None) -> Any:
        if iterating:
            raise StopAsyncIteration
        raise LookupError("queue is empty")

    async def _wait_forever(self, iterating: bool) -> Any:
        return await self._wait_item(iterating, None)
