"""Event queues and queue groups: where delivered messages wait for the program.

A transport places each delivery on a :class:`Queue`; the program takes them
with ``async for``, ``await q.get()`` or ``q.poll()``. A queue may be bounded:
when a delivery would overflow the limit, its :class:`LimitPolicy` decides
what is lost, and the limit-exceeded reporter is told (by default a logged
warning; the first process transport made installs one that presents
``_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED``, see :func:`install_limit_exceeded_reporter`).

A :class:`QueueGroup` is one place to wait on several queues: it always takes
from the non-empty member of highest priority, rotating among members of
equal priority. Removing a queue from a group suspends its dispatch there;
its items keep accumulating until it is added back.

The storage and the per-item fast paths live in the ``queuecore`` hot path
(compiled when built, see :mod:`rvasync._accel`); this module adds naming,
validation, waiting, groups and reporting. Queues belong to the event loop
thread: ``deliver`` and every consumer call must run in it.
"""

from __future__ import annotations

import asyncio
import enum
import math
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from rvasync import _accel
from rvasync._logging import stderr_logger
from rvasync.advlimit import Coalescer
from rvasync.errors import InvalidArgument, QueueDestroyed

__all__ = [
    "DEFAULT_QUEUE_NAME",
    "LimitPolicy",
    "Queue",
    "QueueGroup",
    "default_queue",
    "install_limit_exceeded_reporter",
    "log_limit_exceeded",
    "set_limit_exceeded_reporter",
]

if TYPE_CHECKING:
    # Both twins have one interface; type checkers see the annotated pure one.
    from rvasync.fallback import queuecore as _core
else:
    _core = _accel.load("queuecore")

#: The name of a queue created without one; it is what the QUEUE.LIMIT_EXCEEDED
#: advisory carries in ``ADV_DESC`` for such a queue (the Rendezvous default).
DEFAULT_QUEUE_NAME = "tibrvQueue"


class LimitPolicy(enum.IntEnum):
    """What a bounded queue discards when a new item would overflow its limit."""

    #: Never discard; only for unbounded queues (``limit=0``).
    DISCARD_NONE = 0
    #: Discard ``discard_amount`` items from the head (the oldest, next to be taken).
    DISCARD_FIRST = 1
    #: Discard ``discard_amount`` items from the tail (the most recent already queued).
    DISCARD_LAST = 2
    #: Discard the new item itself.
    DISCARD_NEW = 3


# -- limit-exceeded reporting ---------------------------------------------------------


def log_limit_exceeded(queue: Queue) -> None:
    """The default reporter: a structured warning on stderr naming the queue, at most one
    per queue per second (rvasync.advlimit): ``count`` says how many items it discarded
    since the previous line, ``discarded_total`` how many in all."""
    _log_coalescer.report(queue, queue.take_discarded(), lambda n: _log_discards(queue, n))


def _log_discards(queue: Queue, count: int) -> None:
    stderr_logger().warning(
        "QUEUE.LIMIT_EXCEEDED: queue discarded items",
        queue=queue.name,
        limit=queue.limit,
        policy=queue.policy.name,
        count=count,
        discarded_total=queue.discarded,
    )


_log_coalescer = Coalescer()


LimitExceededReporter = Callable[["Queue"], object]

_reporter: LimitExceededReporter = log_limit_exceeded


def set_limit_exceeded_reporter(
    reporter: LimitExceededReporter | None,
) -> LimitExceededReporter:
    """Install ``reporter(queue)``, called once per put that made ``queue`` discard.

    A reporter that presents or logs an advisory should do so at most once per
    queue per interval, as the two rvasync installs do (rvasync.advlimit.Coalescer,
    with ``queue.take_discarded()`` for the count).

    ``None`` restores the default (a structlog warning on stderr). Returns the
    reporter that was installed before, so a caller can restore it. The
    reporter runs inside the producer's put: it must not block; an exception
    it raises is logged and swallowed, never seen by the producer.
    """
    global _reporter
    previous = _reporter
    if reporter is None:
        reporter = log_limit_exceeded
    elif not callable(reporter):
        raise InvalidArgument(f"reporter must be callable or None, got {type(reporter).__name__}")
    _reporter = reporter
    return previous


def install_limit_exceeded_reporter(reporter: LimitExceededReporter) -> bool:
    """Install ``reporter`` unless a reporter other than the default is installed.

    The registration point for a component that takes over reporting when it
    comes into being, without overriding a program's own choice: creating the
    first :class:`~rvasync.ProcessTransport` installs the reporter presenting
    ``_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED`` on it (nothing does so at import).
    Returns True if ``reporter`` is now installed.
    """
    if _reporter is log_limit_exceeded:
        set_limit_exceeded_reporter(reporter)
    return _reporter is reporter


# -- argument checks ----------------------------------------------------------------


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgument(
            f"timeout must be a number of seconds or None, got {type(timeout).__name__}"
        )
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be >= 0 seconds, got {timeout}")
    return float(timeout)


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgument("name must not be empty")
    return name


def _check_policy(policy: LimitPolicy | int, limit: int, discard_amount: int) -> LimitPolicy:
    try:
        policy = LimitPolicy(policy)
    except ValueError:
        raise InvalidArgument(
            f"policy must be a LimitPolicy ({', '.join(p.name for p in LimitPolicy)}), "
            f"got {policy!r}"
        ) from None
    if limit == 0 and policy is not LimitPolicy.DISCARD_NONE:
        raise InvalidArgument(
            f"policy {policy.name} needs a limit > 0 (limit=0 means unbounded, "
            "which never discards)"
        )
    if limit > 0 and policy is LimitPolicy.DISCARD_NONE:
        raise InvalidArgument(
            f"limit={limit} needs a discard policy (DISCARD_FIRST, DISCARD_LAST or "
            "DISCARD_NEW): DISCARD_NONE is for unbounded queues"
        )
    if limit > 0 and discard_amount > limit:
        raise InvalidArgument(f"discard_amount must be <= limit ({limit}), got {discard_amount}")
    return policy


# -- queues -----------------------------------------------------------------------------


class Queue(_core.QueueCore):
    """An event queue: deliveries wait here, in arrival order, until the program takes them.

    ``limit`` bounds the number of waiting items (0: unbounded). When a new
    item finds the queue full, ``policy`` decides: ``DISCARD_FIRST`` drops
    ``discard_amount`` items from the head, ``DISCARD_LAST`` drops
    ``discard_amount`` from the tail, ``DISCARD_NEW`` drops the new item
    (``discard_amount`` is not used). Every put that discards is reported once
    (see :func:`set_limit_exceeded_reporter`).

    ``priority`` (1 = lowest, the default) orders queues inside a
    :class:`QueueGroup`. ``name`` identifies the queue in advisories and logs
    (default :data:`DEFAULT_QUEUE_NAME`).

    A queue is always truthy (``if queue:`` tests for None, not for emptiness);
    use ``len(queue)`` for the number of waiting items.
    """

    def __init__(
        self,
        *,
        limit: int = 0,
        policy: LimitPolicy = LimitPolicy.DISCARD_NONE,
        discard_amount: int = 1,
        priority: int = 1,
        name: str | None = None,
    ) -> None:
        limit = _check_int("limit", limit, 0)
        discard_amount = _check_int("discard_amount", discard_amount, 1)
        policy = _check_policy(policy, limit, discard_amount)
        self._priority = _check_int("priority", priority, 1)
        self._name = DEFAULT_QUEUE_NAME if name is None else _check_name(name)
        super().__init__(limit, int(policy), discard_amount)
        self._limit = limit
        self._policy_enum = policy
        self._discard_amount = discard_amount
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._groups: tuple[QueueGroup, ...] = ()
        self._destroyed = False
        self._reporting = False
        self._reported = 0  # self.discarded as of the last take_discarded()

    # -- driver API -------------------------------------------------------------
    #
    # Inherited from the core, public there (no alias, no extra call layer: hot path):
    #
    # ``queue.deliver(item)``: place ``item`` at the tail, as a transport's
    # delivery does (driver API: a driver's listener queues its deliveries
    # with it). Never blocks, never raises because of the queue's state: a
    # full queue applies its limit policy (and reports the discard), a
    # destroyed one drops the item; wakes one waiting consumer. Event loop
    # thread only.
    #
    # ``queue.discard_where(predicate) -> int``: drop every queued item for
    # which ``predicate(item)`` is true, keeping the others in order, and
    # return how many went (driver API: a closing listener removes its
    # deliveries from a queue it shared; a predicate that returns False scans
    # the queue without changing it). O(n); ``predicate`` must not touch the
    # queue. Discarded items are not counted in :attr:`discarded`.

    def take_discarded(self) -> int:
        """Items the limit policy discarded since this was last called (driver API).

        What a limit-exceeded reporter puts in the advisory it presents for
        several discards at once (rvasync.advlimit): each discard is counted in
        exactly one call.
        """
        count = self.discarded - self._reported
        self._reported += count
        return count

    # -- properties -------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's name, carried by QUEUE.LIMIT_EXCEEDED advisories as ``ADV_DESC``."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = _check_name(value)

    @property
    def priority(self) -> int:
        """Dispatch priority inside queue groups: larger is first, 1 is last."""
        return self._priority

    @priority.setter
    def priority(self, value: int) -> None:
        self._priority = _check_int("priority", value, 1)
        for group in self._groups:
            group._arrange()

    @property
    def limit(self) -> int:
        """The most items the queue holds (0: unbounded)."""
        return self._limit

    @property
    def policy(self) -> LimitPolicy:
        return self._policy_enum

    @property
    def discard_amount(self) -> int:
        return self._discard_amount

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        state = " destroyed" if self._destroyed else ""
        bound = f" limit={self._limit} {self._policy_enum.name}" if self._limit else ""
        return f"<Queue {self._name!r} priority={self._priority}{bound} len={len(self)}{state}>"

    # -- lifetime -------------------------------------------------------------------

    def destroy(self) -> None:
        """Destroy the queue: queued items are dropped and so is every later put.

        A consumer waiting in ``get`` gets :class:`~rvasync.QueueDestroyed`;
        ``async for`` over the queue ends. The queue leaves every group.
        Destroying twice is harmless.
        """
        if self._destroyed:
            return
        self._destroyed = True
        self._close_core()
        for group in self._groups:
            group._forget(self)
        self._groups = ()
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    close = destroy

    # -- hooks called by the core ----------------------------------------------------

    def _notify(self) -> None:
        """Wake one consumer that may be waiting for this queue, direct ones first."""
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        for group in self._groups:
            if group._wake(self):
                return
        # Nobody waits: the put path may skip calling us until someone does.
        self._watched = False

    def _limit_exceeded(self) -> None:
        # A reporter that puts into this same queue (an advisory listener on a
        # full queue) would discard again: report that nested discard no more.
        if self._reporting:
            return
        self._reporting = True
        try:
            _reporter(self)
        except Exception:
            stderr_logger().exception("limit-exceeded reporter raised", queue=self._name)
        finally:
            self._reporting = False

    def _check_timeout(self, timeout: float) -> float:
        return _check_timeout(timeout)

    async def _wait_item(self, iterating: bool, timeout: float | None) -> Any:
        if timeout is None:
            return await self._wait_forever(iterating)
        async with asyncio.timeout(timeout):
            return await self._wait_forever(iterating)

    async def _wait_forever(self, iterating: bool) -> Any:
        loop = asyncio.get_running_loop()
        while True:
            if len(self):
                item = self.poll()
                if self._watched and len(self):
                    # We were woken for one item; others remain: pass the wake on.
                    self._notify()
                return item
            if self._destroyed:
                if iterating:
                    raise StopAsyncIteration
                raise QueueDestroyed(f"queue {self._name!r} was destroyed")
            fut = loop.create_future()
            self._waiters.append(fut)
            self._watched = True
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    # Woken, then cancelled before taking: another consumer may.
                    if len(self):
                        self._notify()
                else:
                    try:
                        self._waiters.remove(fut)
                    except ValueError:
                        pass
                raise


# -- queue groups ---------------------------------------------------------------------


class _Level:
    """The members of one priority inside a group, with their round-robin position."""

    __slots__ = ("next", "priority", "queues")

    def __init__(self, priority: int) -> None:
        self.priority = priority
        self.queues: list[Queue] = []
        self.next = 0


_EMPTY: Any = object()


class QueueGroup:
    """Several queues behind one wait: always the non-empty queue of highest priority first.

    Members of equal priority take turns (round robin): after an item comes
    from one of them, the next search at that priority starts at the member
    after it. A queue may belong to any number of groups, and may still be
    consumed directly. Removing a queue suspends its dispatch in this group;
    its items keep accumulating and flow again once it is added back.
    """

    def __init__(self, *queues: Queue) -> None:
        self._queues: list[Queue] = []
        self._levels: list[_Level] = []
        self._waiters: deque[asyncio.Future[Queue | None]] = deque()
        self._destroyed = False
        for queue in queues:
            self.add(queue)

    @property
    def queues(self) -> tuple[Queue, ...]:
        """The member queues, in the order they were added."""
        return tuple(self._queues)

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    def __contains__(self, queue: object) -> bool:
        return any(q is queue for q in self._queues)

    def __repr__(self) -> str:
        state = " destroyed" if self._destroyed else ""
        names = ", ".join(f"{q.name}:{q.priority}" for q in self._queues)
        return f"<QueueGroup [{names}]{state}>"

    # -- membership ---------------------------------------------------------------------

    def add(self, queue: Queue) -> None:
        """Add ``queue`` (adding a member again does nothing)."""
        if not isinstance(queue, Queue):
            raise InvalidArgument(f"queue must be an rvasync Queue, got {type(queue).__name__}")
        if self._destroyed:
            raise QueueDestroyed("cannot add a queue to a destroyed queue group")
        if queue.destroyed:
            raise QueueDestroyed(f"cannot add destroyed queue {queue.name!r} to a group")
        if queue in self:
            return
        self._queues.append(queue)
        queue._groups = (*queue._groups, self)
        self._arrange()
        if self._waiters:
            queue._watched = True
            if len(queue):
                self._wake(queue)

    def remove(self, queue: Queue) -> None:
        """Take ``queue`` out of the group; it keeps accumulating items meanwhile."""
        if queue not in self:
            name = getattr(queue, "name", type(queue).__name__)
            raise InvalidArgument(f"queue {name!r} is not in this group")
        self._forget(queue)
        queue._groups = tuple(g for g in queue._groups if g is not self)

    def _forget(self, queue: Queue) -> None:
        self._queues = [q for q in self._queues if q is not queue]
        self._arrange()

    def _arrange(self) -> None:
        """Rebuild the priority levels, keeping each surviving level's round-robin turn."""
        turns = {level.priority: level.next for level in self._levels}
        levels: dict[int, _Level] = {}
        for queue in self._queues:
            level = levels.get(queue.priority)
            if level is None:
                level = levels[queue.priority] = _Level(queue.priority)
            level.queues.append(queue)
        for level in levels.values():
            level.next = turns.get(level.priority, 0) % len(level.queues)
        self._levels = sorted(levels.values(), key=lambda lv: lv.priority, reverse=True)

    def destroy(self) -> None:
        """Dissolve the group: member queues are left intact; waiting consumers are released.

        ``get`` waiters get :class:`~rvasync.QueueDestroyed`; ``async for`` ends.
        """
        if self._destroyed:
            return
        self._destroyed = True
        for queue in self._queues:
            queue._groups = tuple(g for g in queue._groups if g is not self)
        self._queues = []
        self._levels = []
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    close = destroy

    # -- taking ----------------------------------------------------------------------------

    def _take(self) -> Any:
        for level in self._levels:
            members = level.queues
            count = len(members)
            start = level.next
            for offset in range(count):
                index = start + offset
                if index >= count:
                    index -= count
                queue = members[index]
                if len(queue):
                    index += 1
                    level.next = index if index < count else 0
                    return queue.poll()
        return _EMPTY

    def poll(self) -> Any:
        """The next item by priority and rotation, or None at once if every member is empty."""
        item = self._take()
        return None if item is _EMPTY else item

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        item = self._take()
        if item is not _EMPTY:
            return item
        return await self._wait_forever(True)

    async def get(self, timeout: float | None = None) -> Any:
        """The next item, waiting for one if needed (``TimeoutError`` after ``timeout`` s)."""
        if timeout is not None:
            timeout = _check_timeout(timeout)
        item = self._take()
        if item is not _EMPTY:
            return item
        if timeout is None:
            return await self._wait_forever(False)
        async with asyncio.timeout(timeout):
            return await self._wait_forever(False)

    def _wake(self, source: Queue) -> bool:
        """Called by a member that received an item: wake one waiting consumer, if any."""
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(source)
                return True
        return False

    async def _wait_forever(self, iterating: bool) -> Any:
        loop = asyncio.get_running_loop()
        source: Queue | None = None
        while True:
            item = self._take()
            if item is not _EMPTY:
                if source is not None and source._watched and len(source):
                    # The item that woke us may still be there (we took a more
                    # important one): let another consumer have it.
                    source._notify()
                return item
            if self._destroyed:
                if iterating:
                    raise StopAsyncIteration
                raise QueueDestroyed("queue group was destroyed")
            fut: asyncio.Future[Queue | None] = loop.create_future()
            self._waiters.append(fut)
            for queue in self._queues:
                queue._watched = True
            try:
                source = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    woken_by = fut.result()
                    if woken_by is not None and len(woken_by):
                        woken_by._notify()
                else:
                    try:
                        self._waiters.remove(fut)
                    except ValueError:
                        pass
                raise


# -- the default queue ----------------------------------------------------------------------

_default_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Queue] = (
    weakref.WeakKeyDictionary()
)


def default_queue() -> Queue:
    """The running loop's default queue: unbounded, never discards, priority 1.

    Created on first use, one per event loop, named :data:`DEFAULT_QUEUE_NAME`.
    It is the recommended home for advisories such as QUEUE.LIMIT_EXCEEDED.
    """
    loop = asyncio.get_running_loop()
    queue = _default_queues.get(loop)
    if queue is None or queue.destroyed:
        queue = _default_queues[loop] = Queue()
    return queue
