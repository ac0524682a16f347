"""Events through queues: timer ticks and I/O readiness, dispatched like messages.

Rendezvous puts three kinds of event in its queues: messages, timer ticks and
I/O conditions. A program that gives a :class:`~rvasync.Timer` or an
:class:`IOEvent` a ``queue`` gets its occurrences in that queue, in arrival
order with the queue's messages and under its queue groups' priorities:
iterating the queue yields them (a :class:`TimerEvent` or an
:class:`IOOccurrence`), and ``await event.dispatch()`` runs the source's
callback, which is what a Rendezvous dispatch call does. A queue dispatched by
callback listeners (rvasync.transport.dispatch) runs those callbacks by
itself: each event names its source as its ``listener``, and the source has
the dispatcher's two names, ``dispatch_callback`` and ``dispatch_is_async``.

Without a queue, an :class:`IOEvent` is asyncio-shaped like a timer: it
dispatches itself to its callback, or is an async iterator of its
occurrences. docs/queues.md, "Events through queues", tells the rules.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.queues import Queue

__all__ = [
    "EventSource",
    "IOCallback",
    "IOEvent",
    "IOKind",
    "IOOccurrence",
    "TimerEvent",
    "check_queue",
]

IOCallback = Callable[["IOEvent"], Awaitable[object] | object]

# Self-dispatching I/O events run a task only they reference: kept alive here until destroyed.
_dispatching: set[IOEvent] = set()


def check_queue(queue: object) -> Queue | None:
    """``queue`` if it is None or an rvasync Queue, else InvalidArgument."""
    if queue is not None and not isinstance(queue, Queue):
        raise InvalidArgument(f"queue must be an rvasync Queue or None, got {type(queue).__name__}")
    return queue


async def run_callback(callback: Callable[[Any], object], source: Any, what: str) -> None:
    """``callback(source)``, awaited when it returns an awaitable; an exception is logged."""
    try:
        result = callback(source)
        if inspect.isawaitable(result):
            await result
    except asyncio.CancelledError:
        raise
    except Exception:
        stderr_logger().exception(f"{what} callback raised; the event goes on")


class TimerEvent:
    """One elapsed interval of a :class:`~rvasync.Timer` that has a queue.

    ``timer`` is the timer, ``ticks`` the number of this interval (1, 2, 3 ...
    counted from the timer's start or last reset), ``closure`` the timer's
    closure. ``await event.dispatch()`` runs the timer's callback (nothing
    when it has none, or when the timer was destroyed or reset since).
    """

    __slots__ = ("closure", "listener", "sequence", "ticks", "timer")

    #: Events have no subject; the dispatcher's log lines read it.
    subject = None

    def __init__(self, timer: Any, ticks: int, sequence: int) -> None:
        self.timer = timer
        self.listener = timer  # what a queue's dispatcher calls (rvasync.transport.dispatch)
        self.ticks = ticks
        self.closure = timer.closure
        self.sequence = sequence

    async def dispatch(self) -> None:
        """Run the timer's callback for this tick (what a Rendezvous dispatch does)."""
        await self.timer.dispatch_callback(self)

    def __repr__(self) -> str:
        return f"<TimerEvent ticks={self.ticks} of {self.timer!r}>"


class EventSource(abc.ABC):
    """What timers and I/O events share: their queue, callback and lifetime.

    A subclass sets ``_queue``, ``_callback``, ``_destroyed`` and ``_task``
    (its self-dispatching task, or None) and defines ``destroy()`` and
    ``dispatch_callback(event)``. It is an async context manager that destroys
    the source on exit, after letting a callback that is running finish.
    """

    #: A queue dispatcher logs the subject of what it dispatches; an event source has none.
    subject = None
    #: The queue dispatcher's second name (rvasync.transport.dispatch): it awaits
    #: ``dispatch_callback(event)`` for each of this source's events it takes.
    dispatch_is_async = True

    _queue: Queue | None
    _callback: Callable[[Any], object] | None
    _destroyed: bool
    _task: asyncio.Task[None] | None

    @property
    def queue(self) -> Queue | None:
        """The queue the events go to (None: iterated, or dispatching itself)."""
        return self._queue

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    @abc.abstractmethod
    def destroy(self) -> None:
        """Stop the source for good: no more events; what its queue holds is dropped."""

    async def __aenter__(self) -> Any:
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


class IOKind(enum.IntEnum):
    """The condition an :class:`IOEvent` waits for (values as Rendezvous numbers them)."""

    #: The file descriptor has data to read (or end of file, or a connection to accept).
    READ = 1
    #: The file descriptor can take at least one byte without blocking.
    WRITE = 2


class IOOccurrence:
    """One readiness of an :class:`IOEvent` with a queue.

    ``io`` is the event, ``ticks`` how many times it has been ready so far,
    ``closure`` its closure. The event is not watched again until this
    occurrence is dispatched (``await occurrence.dispatch()``, or a queue
    dispatcher), so at most one of its occurrences waits in a queue.
    """

    __slots__ = ("closure", "io", "listener", "ticks")

    subject = None

    def __init__(self, io: IOEvent, ticks: int) -> None:
        self.io = io
        self.listener = io
        self.ticks = ticks
        self.closure = io.closure

    async def dispatch(self) -> None:
        """Run the event's callback, then watch the file descriptor again."""
        await self.io.dispatch_callback(self)

    def __repr__(self) -> str:
        return f"<IOOccurrence ticks={self.ticks} of {self.io!r}>"


def _file_descriptor(fileobj: object) -> int:
    if isinstance(fileobj, bool):
        raise InvalidArgument("fileobj must be a file descriptor or have fileno(), got a bool")
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        fileno = getattr(fileobj, "fileno", None)
        if fileno is None:
            raise InvalidArgument(
                f"fileobj must be a file descriptor or have fileno(), got {type(fileobj).__name__}"
            )
        try:
            fd = fileno()
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"fileobj has no usable file descriptor: {exc}") from None
    if not isinstance(fd, int) or fd < 0:
        raise InvalidArgument(f"fileobj's file descriptor must be an int >= 0, got {fd!r}")
    return fd


class IOEvent(EventSource):
    """An event each time a file descriptor is ready to read or to write.

    ``IOEvent(fileobj, kind, *, callback=None, queue=None, closure=None)``:
    ``fileobj`` a file descriptor or an object with ``fileno()`` (a socket, a
    pipe), ``kind`` an :class:`IOKind`. With ``queue`` (one without a limit),
    each readiness puts an :class:`IOOccurrence` in it, and the descriptor is
    not watched again until that occurrence is dispatched (the callback has
    returned), as Rendezvous does; without a queue but with a ``callback``,
    the event dispatches itself from a task, one call at a time (the callback
    gets the event); with
    neither, ``async for occurrence in event`` yields each readiness. The
    callback may be a plain or an async function; an exception in it is
    logged and the event goes on. The event belongs to the running loop, whose
    readiness watch it uses (asyncio's ``add_reader``/``add_writer``): the
    descriptor must not be watched by anything else in that loop. ``destroy()``
    (or leaving ``async with``) stops it at once; an occurrence still queued
    is dropped.
    """

    def __init__(
        self,
        fileobj: object,
        kind: IOKind | int,
        *,
        callback: IOCallback | None = None,
        queue: Queue | None = None,
        closure: Any = None,
    ) -> None:
        try:
            self._kind = IOKind(kind)
        except ValueError:
            raise InvalidArgument(
                f"kind must be IOKind.READ or IOKind.WRITE, got {kind!r}"
            ) from None
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        self._queue = check_queue(queue)
        if self._queue is not None and self._queue.limit:
            # Inactive until its one occurrence is dispatched, the event would never fire
            # again if the queue's limit policy discarded that occurrence.
            raise InvalidArgument(
                f"an I/O event needs a queue without a limit, got {self._queue!r}: its limit "
                "policy could discard the event's one waiting occurrence, and the event, "
                "inactive until that occurrence is dispatched, would never fire again"
            )
        self._fd = _file_descriptor(fileobj)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("IOEvent must be created inside a running event loop") from None
        self.fileobj = fileobj
        self.closure = closure
        self._callback = callback
        self._destroyed = False
        self._armed = False
        self._ticks = 0
        self._ready: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        if self._queue is not None:
            self._arm()
        elif callback is not None:
            _dispatching.add(self)
            self._task = self._loop.create_task(self._dispatch(), name=f"rvasync-io:{self._fd}")

    # -- state -------------------------------------------------------------------------

    @property
    def kind(self) -> IOKind:
        return self._kind

    @property
    def fd(self) -> int:
        """The file descriptor watched."""
        return self._fd

    @property
    def callback(self) -> IOCallback | None:
        return self._callback

    @property
    def ticks(self) -> int:
        """How many times the descriptor has been ready (occurrences made) so far."""
        return self._ticks

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else f"ticks={self._ticks}"
        return f"<IOEvent fd={self._fd} {self._kind.name} {state}>"

    # -- the readiness watch -------------------------------------------------------------

    def _arm(self) -> None:
        if self._armed or self._destroyed:
            return
        add = self._loop.add_reader if self._kind is IOKind.READ else self._loop.add_writer
        try:
            add(self._fd, self._on_ready)
        except (OSError, ValueError) as exc:
            self.destroy()
            raise InvalidArgument(f"cannot watch file descriptor {self._fd}: {exc}") from None
        self._armed = True

    def _disarm(self) -> None:
        if not self._armed:
            return
        self._armed = False
        remove = self._loop.remove_reader if self._kind is IOKind.READ else self._loop.remove_writer
        remove(self._fd)

    def _on_ready(self) -> None:
        # Rendezvous deactivates an I/O event while it waits for dispatch: one at a time.
        self._disarm()
        self._ticks += 1
        if self._queue is not None:
            if self._queue.destroyed:
                self.destroy()
                return
            self._queue.deliver(IOOccurrence(self, self._ticks))
        elif self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    async def _next_ready(self) -> int:
        """Watch the descriptor until it is ready once; the readiness count then."""
        if self._destroyed:
            raise StopAsyncIteration
        self._ready = self._loop.create_future()
        self._arm()
        try:
            await self._ready
        finally:
            self._ready = None
            self._disarm()
        if self._destroyed:
            raise StopAsyncIteration
        return self._ticks

    # -- dispatch ------------------------------------------------------------------------

    async def dispatch_callback(self, occurrence: IOOccurrence) -> None:
        """Dispatch one queued occurrence: the callback, then the watch again."""
        if occurrence.io is not self:
            raise InvalidArgument("this occurrence belongs to another IOEvent")
        if self._destroyed:
            return
        try:
            if self._callback is not None:
                await run_callback(self._callback, self, "I/O event")
        finally:
            if not self._destroyed:
                self._arm()

    async def _dispatch(self) -> None:
        callback = self._callback
        assert callback is not None
        try:
            while not self._destroyed:
                try:
                    await self._next_ready()
                except StopAsyncIteration:
                    return
                await run_callback(callback, self, "I/O event")
        finally:
            self.destroy()

    # -- iteration -----------------------------------------------------------------------

    def __aiter__(self) -> IOEvent:
        return self

    async def __anext__(self) -> IOOccurrence:
        if self._queue is not None or self._callback is not None:
            raise NotPermitted(
                "this I/O event is dispatched (it has a queue or a callback); "
                "iterate its queue instead"
            )
        ticks = await self._next_ready()
        return IOOccurrence(self, ticks)

    # -- lifetime ------------------------------------------------------------------------

    def destroy(self) -> None:
        """Stop watching at once; a queued occurrence is dropped, iteration ends."""
        if self._destroyed:
            return
        self._destroyed = True
        self._disarm()
        _dispatching.discard(self)
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)
        if self._queue is not None:
            self._queue.discard_where(lambda item: getattr(item, "io", None) is self)

    close = destroy
