"""Listeners: a transport's interest in a subject, and the stream of what matches it.

A listener is an async iterator of its messages (``async for msg in listener``,
``await anext(listener)``) and an async context manager that closes it on exit. Messages wait in the
listener's own queue (bounded by its transport's ``pending_limit``: a slow
consumer costs at most that many messages, the oldest dropped and reported
past it), or in a queue the program gave (shared with other listeners, so one
consumer sees them all in arrival order; its own limit policy applies). With a callback the
listener dispatches itself: a task takes each message from the queue and calls
the callback, plain or async, so callbacks never run inside ``send``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rvasync.correlation import CorrelationId, check_correlation_id, new_correlation_id
from rvasync.errors import ListenerClosed, QueueDestroyed
from rvasync.queues import LimitPolicy, Queue

if TYPE_CHECKING:
    from rvasync.message import Message
    from rvasync.transport.base import BaseTransport

__all__ = ["Callback", "Listener"]

Callback = Callable[["Message"], Awaitable[None] | None]


def _dropped(_msg: Message) -> None:
    """What a closed listener does with a late delivery: nothing."""


async def _ended() -> Message:
    """``anext`` on a closed listener whose queue lives on (the program's): the end."""
    raise StopAsyncIteration


class Listener:
    """Interest in ``subject`` (wildcards allowed) on one transport."""

    #: ``listener.deliver(msg)``: queue one delivery for this listener (driver and
    #: transport API: the routers' per-message call). It *is* the queue's
    #: ``deliver`` while the listener is open (no extra call layer: hot path),
    #: and a function that drops the message once it is closed.
    deliver: Callable[[Message], None]

    __slots__ = (
        "__weakref__",
        "_correlation_id",
        "_own_queue",
        "_queue",
        "_transport",
        "closure",
        "deliver",
        "dispatch_callback",
        "dispatch_is_async",
        "subject",
        "subscription",
    )

    def __init__(
        self,
        transport: BaseTransport,
        subject: str,
        *,
        queue: Queue | None = None,
        closure: Any = None,
        callback: Callback | None = None,
        correlation_id: CorrelationId | None = None,
        limit: int = 0,
        subscription: str | None = None,
    ) -> None:
        self._transport = transport
        self.subject = subject
        #: The name of a named subscription (``listen(subscription=...)``), else None;
        #: ``msg.subscription`` of every delivery.
        self.subscription = subscription
        self.closure = closure
        # Checked now; a chosen one is made on first use (most listeners, the
        # inboxes of requests among them, never need one).
        self._correlation_id = (
            None if correlation_id is None else check_correlation_id(correlation_id)
        )
        #: What the transport's dispatcher calls for each message of a dispatched
        #: queue (rvasync.transport.dispatch), and whether to await it. Public so
        #: that every listener kind (CmListener too) offers the dispatcher the
        #: same two names; decided once here, not per message.
        self.dispatch_callback = callback
        self.dispatch_is_async = inspect.iscoroutinefunction(callback)
        self._own_queue = queue is None
        if queue is None:
            # A queue of its own holds at most ``limit`` messages (the transport's
            # pending_limit): past that the oldest go, counted and reported by
            # QUEUE.LIMIT_EXCEEDED (docs/daemon.md, "Slow consumers"). 0: unbounded.
            policy = LimitPolicy.DISCARD_FIRST if limit else LimitPolicy.DISCARD_NONE
            queue = Queue(limit=limit, policy=policy, name=f"listener:{subject}")
        self._queue = queue
        self.deliver = self._queue.deliver

    # -- public --------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """The queue this listener's messages wait in."""
        return self._queue

    @property
    def correlation_id(self) -> CorrelationId:
        """This subscription's identity among the users of its queue.

        Every message delivered through the listener answers
        ``msg.correlation_id`` with it: the program's choice, or one rvasync
        made unique in this process (rvasync.correlation).
        """
        if self._correlation_id is None:
            self._correlation_id = new_correlation_id()
        return self._correlation_id

    @property
    def transport(self) -> BaseTransport:
        return self._transport

    @property
    def callback(self) -> Callback | None:
        return self.dispatch_callback

    @property
    def closed(self) -> bool:
        return self.deliver is _dropped

    @property
    def own_queue(self) -> bool:
        """True when the listener made its queue itself (no ``queue=`` was given)."""
        return self._own_queue

    def __aiter__(self) -> AsyncIterator[Message]:
        # Iterating a listener is iterating its queue: no extra layer per message.
        return self._queue.__aiter__()

    def __anext__(self) -> Awaitable[Message]:
        """The next message (``await anext(listener)``); ``StopAsyncIteration`` once closed.

        A listener's own queue is destroyed when it closes, which ends its
        iteration; a queue the program shared lives on, so a closed listener
        on it ends here instead of waiting on other listeners' messages.
        """
        if self.deliver is _dropped and not self._own_queue:
            return _ended()
        result: Awaitable[Message] = self._queue.__anext__()
        return result

    async def get(self, timeout: float | None = None) -> Message:
        """The next message (``TimeoutError`` after ``timeout`` seconds).

        :class:`~rvasync.errors.ListenerClosed` (a ``TransportClosed``) once the
        listener is closed, or when it closes while this waits.
        """
        if self.deliver is _dropped:
            raise ListenerClosed(f"listener on {self.subject!r} is closed")
        try:
            msg: Message = await self._queue.get(timeout)
        except QueueDestroyed:
            if self.deliver is _dropped:
                raise ListenerClosed(f"listener on {self.subject!r} is closed") from None
            raise
        return msg

    def poll(self) -> Message | None:
        """The next message if one is waiting, else None at once (never blocks); None
        once closed. As ``Queue.poll``, on the queue this listener's messages wait in."""
        if self.deliver is _dropped:
            return None
        msg: Message | None = self._queue.poll()
        return msg

    def __len__(self) -> int:
        """Messages waiting in this listener's queue (a shared queue: everyone's in it);
        0 once closed."""
        return 0 if self.deliver is _dropped else len(self._queue)

    def __bool__(self) -> bool:
        # A listener is always truthy (``if listener:`` tests for None), as a Queue is:
        # __len__ would otherwise make an idle one false.
        return True

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening; messages already queued for this listener are discarded."""
        self.close_now()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Listener {self.subject!r} {state}>"

    def close_now(self) -> None:
        """Stop listening at once, from plain (non-async) code (driver API).

        What :meth:`close` does, for drivers that close their internal
        listeners from callbacks, cleanup paths and ``finally`` blocks.
        Closing twice is harmless.
        """
        if self.deliver is _dropped:
            return
        self.deliver = _dropped
        self._transport.remove_listener(self)
        if self._own_queue:
            self._queue.destroy()
        else:
            self._queue.discard_where(lambda item: getattr(item, "listener", None) is self)

    def intercept(self, deliver: Callable[[Message], None] | None) -> None:
        """Take this listener's deliveries through ``deliver`` instead of its queue (driver API).

        For drivers that must see each delivery before the program does (the
        retained hand-over of ``listen(retained=True)``, a cache's ingest):
        ``deliver`` is called where the queue's would be, and puts in the
        queue what it decides to. ``None`` gives the queue back. A closed
        listener stays closed (the call does nothing).
        """
        if self.deliver is _dropped:
            return
        self.deliver = self._queue.deliver if deliver is None else deliver

    _close_now = close_now  # the name the transports call
