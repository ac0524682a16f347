"""CM listeners: the program's side of certified delivery on one subject.

A :class:`CmListener` is used like an ordinary listener (an async iterator
and async context manager, or a callback), and decides when each certified
message counts as *taken*, which is when the CM transport confirms it to the
sender:

* ``async for msg in listener``: when the loop moves past the message, i.e.
  when it asks for the next one (the body of the loop for this one has
  finished) or leaves the loop (``break``, an exception); or when the
  listener closes after handing it over.
* ``await listener.get()``: when the next ``get`` is called, or when the
  listener closes.
* a ``callback``: when the callback returns (an async callback: when its
  coroutine completes). A callback that raises has still taken the message;
  one cancelled because the listener closed has not.
* a ``queue`` of the program's, consumed straight from the queue (``async
  for msg in queue``, a queue group): rvasync cannot see the consumer, so a
  message counts as taken once it has left the queue, which the transport
  checks every half second and whenever the queue discards.
* a message a bounded queue's limit policy discards has been taken (by the
  policy).

With ``explicit_confirm=True`` none of this happens: the program calls
``await listener.confirm(msg)`` once it has finished with the message.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from rvasync.correlation import CorrelationId, check_correlation_id, new_correlation_id
from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.message import Message
from rvasync.queues import Queue

__all__ = ["CmCallback", "CmListener", "ListenerHooks", "present_in"]

CmCallback = Callable[[Message], Awaitable[None] | None]


def present_in(queue: Queue) -> set[int]:
    """Ids of the items waiting in ``queue``, for :meth:`CmListener.sweep` (driver API).

    O(n): it scans the queue without removing anything. The CM transports and
    the distributed queue members call it to find which tracked deliveries a
    program has consumed straight from its queue.
    """
    present: set[int] = set()

    def note(item: object) -> bool:
        present.add(id(item))
        return False

    queue.discard_where(note)
    return present


class ListenerHooks:
    """What a :class:`CmListener` calls on its CM transport; one per CM transport.

    Its attributes are the CM transport's own bound methods, bound once when
    the transport is made, so a listener's call costs no more than calling the
    transport directly did; and this module needs nothing from the
    transport's (no import cycle).

    ``transport``: the CM transport (:attr:`CmListener.transport`).
    ``confirm_later(listener_id, sender, subject, sequence)``: a message was
    taken; confirm it with the next batch (once per loop turn).
    ``confirm_now(listener_id, sender, subject, sequence)``: coroutine,
    confirm at once (explicit confirmation; waits for the ledger when synced).
    ``close_listener(listener, cancel_agreements)``: coroutine, close a listener.
    ``track(listener)``: the listener has certified deliveries waiting in a
    program's queue; check them until they leave it.
    ``queue_discarded(queue)``: a program's queue discarded items (certified
    ones among them count as taken).
    ``refuse(listener_id, sender, subject, sequence)``: coroutine, give a task
    back (distributed queue workers only; None elsewhere).
    """

    __slots__ = (
        "close_listener",
        "confirm_later",
        "confirm_now",
        "queue_discarded",
        "refuse",
        "track",
        "transport",
    )

    def __init__(
        self,
        transport: Any,
        *,
        confirm_later: Callable[[int, str, str, int], None],
        confirm_now: Callable[[int, str, str, int], Awaitable[None]],
        close_listener: Callable[[CmListener, bool], Awaitable[None]],
        track: Callable[[CmListener], None],
        queue_discarded: Callable[[Queue], None],
        refuse: Callable[[int, str, str, int], Awaitable[None]] | None = None,
    ) -> None:
        self.transport = transport
        self.refuse = refuse
        self.confirm_later = confirm_later
        self.confirm_now = confirm_now
        self.close_listener = close_listener
        self.track = track
        self.queue_discarded = queue_discarded


class CmListener:
    """A CM listener on ``subject`` (wildcards allowed) of one :class:`CmTransport`.

    Created by :meth:`CmTransport.listen`. Messages from certified senders
    carry ``msg.cm`` with the sender's name and the sequence number; others
    (unlabeled messages, or labeled ones not certified to this listener)
    arrive too, with ``msg.cm`` None or ``msg.cm.sequence`` None.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_correlation_id",
        "_got",
        "_holding",
        "_hooks",
        "_id",
        "_intercept",
        "_own_queue",
        "_queue",
        "_tracked",
        "_user_callback",
        "closure",
        "dispatch_callback",
        "dispatch_is_async",
        "explicit_confirm",
        "subject",
    )

    def __init__(
        self,
        hooks: ListenerHooks,
        listener_id: int,
        subject: str,
        *,
        explicit_confirm: bool,
        queue: Queue,
        own_queue: bool,
        closure: Any,
        callback: CmCallback | None,
        correlation_id: CorrelationId | None = None,
    ) -> None:
        self._hooks = hooks
        self._correlation_id = (
            None if correlation_id is None else check_correlation_id(correlation_id)
        )
        self._id = listener_id
        self.subject = subject
        self.closure = closure
        self.explicit_confirm = explicit_confirm
        self._own_queue = own_queue
        self._queue = queue
        self._closed = False
        self._intercept: Callable[[Message], None] | None = None
        # Certified messages handed out by iteration or get, not yet taken (id -> message).
        self._holding: dict[int, Message] = {}
        # The one the last get() returned, taken by the next get().
        self._got: Message | None = None
        # Certified deliveries waiting in a program's queue (id -> message), so
        # that ones consumed straight from the queue can be found and confirmed.
        self._tracked: dict[int, Message] | None = None if own_queue or explicit_confirm else {}
        self._user_callback = callback
        # The transport's dispatcher calls ``dispatch_callback`` (rvasync.transport.dispatch).
        self.dispatch_callback: Callable[[Message], Any] | None = (
            None if callback is None else self._dispatch
        )
        self.dispatch_is_async = False

    # --- public ---------------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """The queue this listener's messages wait in."""
        return self._queue

    @property
    def correlation_id(self) -> CorrelationId:
        """This subscription's identity among the users of its queue (``msg.correlation_id``).

        The program's choice, or one rvasync made unique (rvasync.correlation).
        """
        if self._correlation_id is None:
            self._correlation_id = new_correlation_id()
        return self._correlation_id

    @property
    def transport(self) -> Any:
        """The CM transport (:class:`~rvasync.CmTransport`) this listener belongs to."""
        return self._hooks.transport

    @property
    def callback(self) -> CmCallback | None:
        return self._user_callback

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def own_queue(self) -> bool:
        """True when the listener's queue was made for it (no ``queue=`` was given)."""
        return self._own_queue

    def __aiter__(self) -> AsyncIterator[Message]:
        """Iterate the messages; each is taken when the loop moves past it.

        That is when the loop asks for the next message, or leaves (``break``,
        an exception: the iteration is closed as soon as nothing refers to it
        any more), or when the listener closes.
        """
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        queue = self._queue
        holding = self._holding
        held: Message | None = None
        try:
            while True:
                if held is not None:
                    holding.pop(id(held), None)
                    held.listener.taken(held)
                    held = None
                try:
                    msg = await queue.__anext__()
                except StopAsyncIteration:
                    return
                listener = msg.listener
                # (an ordinary listener's message in a shared queue is not ours to take)
                if listener.__class__ is CmListener and listener.handed(msg):
                    held = msg
                    holding[id(msg)] = msg
                yield msg
        finally:
            if held is not None and holding.pop(id(held), None) is not None:
                held.listener.taken(held)

    async def get(self, timeout: float | None = None) -> Message:
        """The next message (``TimeoutError`` after ``timeout`` seconds).

        The message the previous ``get`` returned is taken (confirmed) now, or
        when the listener closes.
        """
        held = self._got
        if held is not None:
            self._got = None
            if self._holding.pop(id(held), None) is not None:
                held.listener.taken(held)
        msg: Message = await self._queue.get(timeout)
        listener = msg.listener
        if listener.__class__ is CmListener and listener.handed(msg):
            self._got = msg
            self._holding[id(msg)] = msg
        return msg

    async def confirm(self, msg: Message) -> None:
        """Confirm ``msg`` (delivered by this listener) to its sender.

        Meant for listeners made with ``explicit_confirm=True``. Confirming an
        uncertified message, or one already confirmed, does nothing. With a
        ``sync_ledger`` transport this returns once the confirmation is on
        disk. Confirmations reach the sender in sequence order: confirming 57
        while 55 and 56 are not yet confirmed sends nothing until they are.
        """
        self._check_own(msg, "confirm")
        cm = msg.cm
        if self._closed or cm is None or cm.sequence is None:
            return
        await self._hooks.confirm_now(self._id, cm.sender, msg.subject or "", cm.sequence)

    def _check_own(self, msg: object, what: str) -> None:
        """``msg`` must be a message this listener delivered (``what``: the call, for errors)."""
        if not isinstance(msg, Message):
            raise InvalidArgument(f"{what} takes a Message, not {type(msg).__name__}")
        if msg.listener is not self:
            raise InvalidArgument(
                f"{what} takes a message this listener delivered; "
                f"this one came from {msg.listener!r}"
            )

    async def refuse(self, msg: Message) -> None:
        """Refuse the task ``msg``: its scheduler gives it to another worker.

        For the listeners of a distributed queue member (``rv.CmQueueTransport``,
        an rvasync extension): the program will not process this task, so it
        is neither completed nor confirmed; the scheduler gives it to a worker
        that has not refused it, and a task refused too often, or by every
        worker, is dead-lettered (docs/distributed-queues.md). Call it instead
        of :meth:`confirm`; an automatic confirmation that follows (the callback
        returns, the loop moves on) then does nothing.

        Raises :class:`~rvasync.errors.NotPermitted` on other CM listeners, for
        an uncertified task (it was complete once delivered), and for a task
        this worker no longer holds (confirmed, refused, or the member closed).
        """
        self._check_own(msg, "refuse")
        refuse = self._hooks.refuse
        if refuse is None:
            raise NotPermitted(
                "only the workers of a distributed queue (rv.CmQueueTransport) refuse tasks; "
                "a certified listener that does not want a message leaves it unconfirmed"
            )
        cm = msg.cm
        if cm is None or cm.sequence is None:
            raise NotPermitted(
                f"an uncertified task on {msg.subject!r} cannot be refused: "
                "it was complete once delivered, and nothing could send it again"
            )
        await refuse(self._id, cm.sender, msg.subject or "", cm.sequence)

    def confirm_soon(self, msg: Message) -> None:
        """Confirm ``msg`` at the end of this loop turn, together with the turn's others.

        The batched twin of :meth:`confirm` for programs that confirm many
        messages from plain (non-async) code, such as a distributed queue's
        scheduler confirming completed tasks: one confirmation per sender and
        subject leaves per turn instead of one per message. It does not wait
        for a ``sync_ledger`` transport's disk (await :meth:`confirm` for that).
        """
        self._check_own(msg, "confirm_soon")
        cm = msg.cm
        if self._closed or cm is None or cm.sequence is None:
            return
        self._hooks.confirm_later(self._id, cm.sender, msg.subject or "", cm.sequence)

    async def close(self, cancel_agreements: bool = False) -> None:
        """Stop listening.

        The message handed over last is taken (confirmed) first. Messages
        still waiting in the listener's queue are dropped unconfirmed: the
        sender keeps them. With ``cancel_agreements`` the certified agreements
        no other open listener of this CM transport still needs end (the
        senders present REGISTRATION.CLOSED and stop storing messages for this
        correspondent); otherwise they stand and a later listener on the
        subject receives what this one did not confirm.
        """
        if self._closed:
            return
        await self._hooks.close_listener(self, bool(cancel_agreements))

    async def __aenter__(self) -> CmListener:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        mode = " explicit" if self.explicit_confirm else ""
        return f"<CmListener {self.subject!r}{mode} {state}>"

    # --- used by the CM transport (driver API, not for programs) -------------------------

    @property
    def listener_id(self) -> int:
        """The id the certified-delivery core knows this listener by."""
        return self._id

    @property
    def tracking(self) -> bool:
        """True while certified deliveries of this listener wait in a program's queue."""
        return bool(self._tracked)

    def mark_closed(self) -> None:
        """The CM transport has closed this listener: take nothing more, confirm nothing more."""
        self._closed = True

    def intercept(self, deliver: Callable[[Message], None] | None) -> None:
        """Take this listener's deliveries through ``deliver`` instead (driver API).

        For the retained hand-over of ``listen(retained=True)``: ``deliver``
        sees each delivery before the program does and passes on what it
        decides to through :meth:`enqueue` (and :meth:`discard` for the rest).
        ``None`` gives the plain path back.
        """
        self._intercept = deliver

    def deliver(self, msg: Message) -> None:
        """A delivery the transport made for this listener (``msg.listener is self``)."""
        intercept = self._intercept
        if intercept is not None:
            intercept(msg)
            return
        self.enqueue(msg)

    def discard(self, msg: Message) -> None:
        """A delivery the retained hand-over does not pass on (the live copy of a
        retained message it delivered, or an older one): confirmed if certified,
        as the program already has its value or a newer one."""
        cm = msg.cm
        if not self._closed and cm is not None and cm.sequence is not None:
            self._hooks.confirm_later(self._id, cm.sender, msg.subject or "", cm.sequence)

    def enqueue(self, msg: Message) -> None:
        """Queue a delivery for the program (certified ones tracked until taken)."""
        queue = self._queue
        tracked = self._tracked
        if tracked is None:
            queue.deliver(msg)
            return
        cm = msg.cm
        if cm is not None and cm.sequence is not None:
            tracked[id(msg)] = msg
            self._hooks.track(self)
        if queue.limit:
            before = queue.discarded
            queue.deliver(msg)
            if queue.discarded != before:
                self._hooks.queue_discarded(queue)
        else:
            queue.deliver(msg)

    def handed(self, msg: Message) -> bool:
        """``msg``, delivered by this listener, left the queue: True if it is to be taken later.

        Called on ``msg.listener`` by whichever CM listener's iteration or
        ``get`` took it from a (possibly shared) queue.
        """
        tracked = self._tracked
        if tracked:
            tracked.pop(id(msg), None)
        cm = msg.cm
        return cm is not None and cm.sequence is not None and not self.explicit_confirm

    def settle(self) -> None:
        """Everything handed over and not yet taken is taken now (the listener closes)."""
        self._got = None
        holding = list(self._holding.values())
        self._holding.clear()  # the same dict the iterations hold: they find nothing left
        for msg in holding:
            msg.listener.taken(msg)

    def taken(self, msg: Message) -> None:
        """The consumer has finished with ``msg``: confirm it (unless confirming explicitly)."""
        if self.explicit_confirm or self._closed:
            return
        cm = msg.cm
        if cm is not None and cm.sequence is not None:
            self._hooks.confirm_later(self._id, cm.sender, msg.subject or "", cm.sequence)

    def _dispatch(self, msg: Message) -> Any:
        """The callback as the dispatcher runs it: the user's, then the message is taken."""
        tracked = self._tracked
        if tracked:
            tracked.pop(id(msg), None)
        try:
            result = self._user_callback(msg)  # type: ignore[misc]  # not None: see __init__
        except BaseException:
            self.taken(msg)
            raise
        if result is not None and inspect.isawaitable(result):
            return self._finish(result, msg)
        self.taken(msg)
        return None

    async def _finish(self, result: Awaitable[Any], msg: Message) -> None:
        try:
            await result
        except asyncio.CancelledError:
            raise  # interrupted by a close: not taken, the sender keeps it
        except BaseException:
            self.taken(msg)
            raise
        self.taken(msg)

    def sweep(self, present: set[int]) -> None:
        """Confirm tracked deliveries no longer in the queue (``present``: ids still there)."""
        tracked = self._tracked
        if not tracked:
            return
        gone = [msg for key, msg in tracked.items() if key not in present]
        for msg in gone:
            del tracked[id(msg)]
            self.taken(msg)
