"""Behaviour every transport shares: sending rules, request/reply, inboxes, listeners.

A concrete transport supplies ``_route`` (where an outbound message goes) and
``_open_listener``/``_close_listener`` hooks (how interest reaches its
delivery mechanism); everything users call is here so the rules are the same
on the process transport and on network transports.

Drivers built on transports (certified delivery, fault tolerance, and the
ones to come: distributed queues, relay, circuits, remote operations) use the
*driver-facing* methods below (:meth:`BaseTransport.send_internal`,
:meth:`~BaseTransport.present`, :meth:`~BaseTransport.interested`,
:meth:`~BaseTransport.attach_queue`, :meth:`~BaseTransport.detach_queue`,
:meth:`~BaseTransport.check_open`)
and never a transport's private attributes (tests/test_layering.py).
"""

from __future__ import annotations

import abc
import itertools
import math
import os
from collections.abc import Awaitable
from typing import Any

from rvasync.advisories import log_unheard
from rvasync.correlation import (
    CorrelationId,
    check_publisher_correlation,
    check_subscription,
)
from rvasync.errors import InvalidArgument, RequestTimeout, TransportClosed
from rvasync.message import Message, Origins
from rvasync.queues import Queue
from rvasync.sendpace import CHECK_EVERY
from rvasync.subjects import (
    check_listen_subject,
    check_send_subject,
    is_inbox,
    validate_subject,
)
from rvasync.transport.dispatch import Dispatcher
from rvasync.transport.listener import Callback, Listener
from rvasync.transport.retained import RETAINED_TIMEOUT, RetainedHandOver, collect_retained
from rvasync.transport.router import Router

__all__ = ["DEFAULT_PENDING_LIMIT", "BaseTransport", "check_pending_limit"]


def not_a_message(what: str, value: object) -> InvalidArgument:
    """The error for a send call given something other than a Message as ``what``.

    Send paths read ``msg.subject`` inside ``try``: a Message costs nothing
    extra, anything else gets this error instead of an AttributeError.
    """
    return InvalidArgument(f"{what} must be an rvasync Message, got {type(value).__name__}")


def check_reply_subject(reply_subject: object) -> None:
    """Check a message's reply subject before it is sent (it is a subject a reply goes to).

    Only messages that carry one pay for it; the inboxes send_request makes
    are rvasync's own and skip it.
    """
    if reply_subject.__class__ is not str:
        raise InvalidArgument(
            f"reply_subject must be a str or None, got {type(reply_subject).__name__}"
        )
    validate_subject(reply_subject, wildcards=True)


def check_timeout(timeout: object) -> float:
    """``send_request``'s timeout: a finite number of seconds above zero."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (0 < timeout < math.inf)
    ):
        raise InvalidArgument(f"send_request timeout must be a positive number, got {timeout!r}")
    return float(timeout)


#: Messages a listener's own queue holds at most (``pending_limit``): what a consumer
#: slower than its messages may cost. Past it the oldest are dropped and reported
#: (QUEUE.LIMIT_EXCEEDED), and a standalone daemon's link stops reading at half of it,
#: so the backlog waits in the daemon (docs/daemon.md, "Slow consumers").
DEFAULT_PENDING_LIMIT = 20_000


def check_pending_limit(value: object) -> int:
    """``pending_limit``: None (the default), 0 (unbounded) or a positive number of messages."""
    if value is None:
        return DEFAULT_PENDING_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(
            f"pending_limit must be a number of messages >= 0 (0: unbounded) or None, got {value!r}"
        )
    return value


class BaseTransport(abc.ABC):
    """Common machinery of the process transport and network transports.

    ``pending_limit``: messages the own queue of each listener made from now on
    holds at most (None: DEFAULT_PENDING_LIMIT; 0: unbounded); settable.
    """

    def __init__(
        self,
        *,
        description: str | None = None,
        pending_limit: int | None = None,
        correlation_id: CorrelationId | None = None,
    ) -> None:
        self.description = description
        self._pending_limit = check_pending_limit(pending_limit)
        self._router = Router()
        self._closed = False
        self._dispatchers: dict[Queue, Dispatcher] = {}
        self._iterated_queues: dict[Queue, int] = {}
        # Unique across processes and restarts: 64 random bits plus a counter.
        self._inbox_prefix = f"_INBOX.{os.urandom(8).hex()}."
        #: Every prefix this transport's inboxes have had (a reconnection makes a new one).
        self._inbox_prefixes: list[str] = [self._inbox_prefix]
        self._inbox_counter = itertools.count(1)
        # Publication origins (Message.origin, docs/retained.md): 64 random bits naming
        # this transport in the high half, a send counter in the low half. A network
        # send's whole stamp is ``self._stamp(msg)``: one native call that marks the
        # message shared and writes its new origin (one int built, no copy).
        # ``self._stamp(msg)`` is also the send's pacing tick: True once every
        # CHECK_EVERY publications (rvasync.sendpace), counted where the send counts.
        self._publisher_id = int.from_bytes(os.urandom(8), "big")
        self._origins = Origins(
            self._publisher_id,
            tick=CHECK_EVERY,
            correlation=None
            if correlation_id is None
            else check_publisher_correlation(correlation_id),
        )
        self._stamp = self._origins.stamp
        #: Named subscriptions (listen(subscription=...)) live on this transport.
        self._subscriptions: dict[str, Listener] = {}

    # -- lifecycle -----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_limit(self) -> int:
        """Messages a listener's own queue holds at most (0: unbounded); applies to
        listeners made after it is set. See DEFAULT_PENDING_LIMIT."""
        return self._pending_limit

    @pending_limit.setter
    def pending_limit(self, value: int | None) -> None:
        self._pending_limit = check_pending_limit(value)

    def backlog(self) -> int:
        """The most messages waiting in one of this transport's listener queues that
        back-pressure applies to: the listeners' own queues and unbounded queues a
        program shared (a bounded queue of the program's keeps its own limit policy).
        A standalone daemon's link reads nothing more while it is at half the
        ``pending_limit`` (driver API)."""
        most = 0
        for listener in self._router.listeners():
            queue = listener.queue
            if listener.own_queue or not queue.limit:
                waiting = len(queue)
                if waiting > most:
                    most = waiting
        return most

    async def open(self) -> BaseTransport:
        """Make the transport usable (a no-op where creation already did it)."""
        self._check_open()
        return self

    async def close(self) -> None:
        """Close every listener and refuse further use."""
        if self._closed:
            return
        self._close_listeners()

    def _close_listeners(self) -> None:
        self._closed = True
        for listener in self._listeners():
            listener.close_now()
        for dispatcher in self._dispatchers.values():
            dispatcher.stop()
        self._dispatchers.clear()

    async def __aenter__(self) -> BaseTransport:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed(f"{type(self).__name__} is closed")

    def check_open(self) -> None:
        """Raise :class:`~rvasync.errors.TransportClosed` unless usable (driver API).

        Closed, or (a network transport) not open yet. A driver checks before
        it changes its own state, so that a refused start leaves it untouched.
        """
        self._check_open()

    @property
    def publisher_id(self) -> str:
        """This transport's identity as a publisher: what ``msg.publisher.publisher_id`` says
        of the messages it sends (16 hex digits, random, the high half of their origins)."""
        return f"{self._publisher_id:016x}"

    @property
    def correlation_id(self) -> CorrelationId | None:
        """The correlation id this transport's publications carry (``msg.publisher``), or None."""
        correlation: CorrelationId | None = self._origins.correlation
        return correlation

    @property
    def transport_id(self) -> str | None:
        """The id a daemon names this transport by (``UNREACHABLE.TRANSPORT.<id>``), if any.

        None here: a transport without a daemon can never be reported gone.
        Network transports override it.
        """
        return None

    # -- sending -------------------------------------------------------------

    async def send(self, msg: Message, *, correlation_id: CorrelationId | None = None) -> None:
        """Send ``msg`` to its subject (validated; reserved ``_`` subjects refused).

        ``correlation_id`` is the publisher's correlation id for this
        publication (over the transport's own), where the transport gives
        its publications an identity (network transports: ``msg.publisher``).
        """
        if correlation_id is not None:
            msg.publisher_correlation = check_publisher_correlation(correlation_id)
        try:
            subject = msg.subject
        except AttributeError:
            raise not_a_message("msg", msg) from None
        if subject is None:
            raise InvalidArgument("cannot send a message without a subject")
        if self._closed:
            raise TransportClosed(f"{type(self).__name__} is closed")
        check_send_subject(subject)
        if msg.reply_subject is not None:
            check_reply_subject(msg.reply_subject)
        msg.share()
        self._route(msg)

    async def send_reply(self, reply: Message, request: Message) -> None:
        """Send ``reply`` to the reply subject of ``request``."""
        try:
            reply_subject = request.reply_subject
        except AttributeError:
            raise not_a_message("request", request) from None
        if not reply_subject:
            raise InvalidArgument("the request has no reply subject to answer")
        if not isinstance(reply, Message):
            raise not_a_message("reply", reply)
        reply.subject = reply_subject
        await self.send(reply)

    async def send_request(self, msg: Message, timeout: float) -> Message:
        """Send ``msg`` with a fresh inbox as reply subject and return the first reply.

        The caller's message is not changed: a copy carries the inbox.
        """
        timeout = check_timeout(timeout)
        try:
            subject = msg.subject
        except AttributeError:
            raise not_a_message("msg", msg) from None
        if subject is None:
            raise InvalidArgument("cannot send a request without a subject")
        self._check_open()
        inbox = self.create_inbox()
        listener = self.listen(inbox)
        try:
            request = msg.delivery_copy(None, None)
            request.reply_subject = inbox
            await self.send(request)
            try:
                return await listener.get(timeout)
            except TimeoutError:
                raise RequestTimeout(f"no reply to {msg.subject!r} within {timeout} s") from None
        finally:
            listener.close_now()

    async def request_internal(self, msg: Message, timeout: float) -> Message:
        """:meth:`send_request` for a driver-made message on a reserved subject (driver API).

        The request goes out as :meth:`send_internal` sends (no subject rules:
        the driver made the subject) with a fresh inbox as reply subject; the
        first reply is returned, or :class:`~rvasync.errors.RequestTimeout`
        raised after ``timeout`` seconds. ``msg`` is handed over: it gets the
        inbox as its reply subject (a driver makes a fresh message per request).
        Remote operations send an invocation's first copy this way, so its
        answer takes the transport's reply path.
        """
        timeout = check_timeout(timeout)
        self._check_open()
        inbox = self.create_inbox()
        listener = self.listen(inbox)
        try:
            msg.reply_subject = inbox
            wait = self.send_internal(msg)
            if wait is not None:
                await wait
            try:
                return await listener.get(timeout)
            except TimeoutError:
                raise RequestTimeout(f"no reply to {msg.subject!r} within {timeout} s") from None
        finally:
            listener.close_now()

    def send_internal(self, msg: Message) -> Awaitable[None] | None:
        """Send a driver-made message on a reserved subject (driver API).

        Drivers carry their records on ``_``-prefixed subjects (``_RVCM.``,
        ``_RVFT.`` ...) that the user-facing :meth:`send` refuses; this is the
        path a validated user message takes after its checks, without the
        subject rules (the driver made the subject). ``msg`` is marked shared,
        so changing it afterwards cannot alter what listeners receive.

        Raises :class:`~rvasync.errors.TransportClosed` once the transport is
        closed; whatever else routing raises (a daemon link that is down)
        reaches the caller. Returns an awaitable when the transport's send
        backlog is full (await it before sending more), else None.
        """
        if self._closed:
            raise TransportClosed(f"{type(self).__name__} is closed")
        msg.share()
        return self._route(msg)

    def stamp(self, msg: Message) -> None:
        """Give ``msg`` a new origin: it becomes a new publication of this transport
        (driver API).

        The origin (``msg.origin``, an int: this transport's random id, then
        its send counter) is written in place; the encoder puts it on the
        wire. Receivers (a ``retained=True`` listener merging a cache's answer
        with its live stream) tell one publication from another with equal
        content by it, and which of two publications of one sender came first.
        Network transports stamp every message sent through :meth:`send`,
        :meth:`send_many`, :meth:`send_reply` and :meth:`send_request`; a
        driver sending its users' messages through :meth:`send_internal`
        stamps them with this (a retransmission keeps the origin it had).
        """
        msg.origin = self._origins.next()
        msg.publisher_correlation = self._origins.correlation

    def create_inbox(self) -> str:
        """A unique ``_INBOX.`` subject that only this transport receives."""
        self._check_open()
        return f"{self._inbox_prefix}{next(self._inbox_counter)}"

    def made_inbox(self, subject: str) -> bool:
        """True if ``subject`` is an inbox this transport made (now or before a reconnection)."""
        return any(subject.startswith(prefix) for prefix in self._inbox_prefixes)

    def _set_inbox_prefix(self, prefix: str) -> None:
        """New inboxes start with ``prefix`` (the daemon link opened or reconnected)."""
        self._inbox_prefix = prefix
        if prefix not in self._inbox_prefixes:
            self._inbox_prefixes.append(prefix)

    # -- listening -------------------------------------------------------------

    def listen(
        self,
        subject: str,
        *,
        queue: Queue | None = None,
        closure: Any = None,
        callback: Callback | None = None,
        correlation_id: CorrelationId | None = None,
        retained: bool = False,
        subscription: str | None = None,
    ) -> Listener:
        """Listen to ``subject`` (wildcards allowed); see :class:`Listener`.

        ``correlation_id`` names this subscription in what it delivers
        (``msg.correlation_id``); rvasync picks a unique one when None.
        ``subscription="NAME"`` names it instead (the MQ seed's named
        subscription): deliveries carry ``msg.subscription`` (and the name as
        their correlation id), and a second live subscription of that name on
        this transport raises InvalidArgument; with ``retained=True`` a
        restarted subscriber gets the retained values, then the live stream,
        under the same name. ``retained=True`` first delivers the messages the
        current value caches retain for ``subject``, then the live stream, with
        no gap and no duplicate (docs/retained.md).
        """
        if not isinstance(retained, bool):
            raise InvalidArgument(f"retained must be a bool, got {type(retained).__name__}")
        if subscription is not None:
            subscription = check_subscription(subscription)
            if correlation_id is not None:
                raise InvalidArgument(
                    "give a subscription name or a correlation_id, not both (the name is the "
                    "subscription's identity)"
                )
            if subscription in self._subscriptions:
                raise InvalidArgument(
                    f"a subscription named {subscription!r} is already live on this transport "
                    "(close it first, or choose another name)"
                )
            correlation_id = subscription
        self._check_open()
        check_listen_subject(subject)
        if is_inbox(subject) and not self.made_inbox(subject):
            # Point-to-point: only the transport that made an inbox is ever sent its
            # messages, so this listener would wait forever.
            raise InvalidArgument(
                f"inbox {subject!r} was made by another transport: only the transport that "
                "made an inbox receives its messages (listen on that one)"
            )
        if queue is not None and not isinstance(queue, Queue):
            raise InvalidArgument(f"queue must be an rvasync Queue, got {type(queue).__name__}")
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        listener = Listener(
            self,
            subject,
            queue=queue,
            closure=closure,
            callback=callback,
            correlation_id=correlation_id,
            limit=self._pending_limit,
            subscription=subscription,
        )
        self.attach_queue(listener.queue, dispatched=callback is not None, shared=queue is not None)
        self._router.add(listener)
        self._open_listener(listener)
        if subscription is not None:
            self._subscriptions[subscription] = listener
        if retained:
            RetainedHandOver(self, listener)
        return listener

    def listen_inboxes(self, *, callback: Callback) -> Listener:
        """Listen to every inbox of this transport, made now or later (driver API).

        A routing daemon writes reply subjects of its own under its inbox
        prefix (``<prefix>.<home network>.<original inbox>``) and must take
        every reply sent to them; :meth:`listen` refuses wildcard inboxes to
        programs. Replies a ``send_request`` waits for still go to it first.
        """
        self._check_open()
        if not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        prefix = self.create_inbox().rsplit(".", 1)[0]
        listener = Listener(self, prefix + ".>", callback=callback)
        self.attach_queue(listener.queue, dispatched=True, shared=False)
        self._router.add(listener)  # no daemon interest: the daemon routes inboxes by session
        return listener

    def listen_inbox_tree(self, inbox: str, *, queue: Queue, closure: Any = None) -> Listener:
        """Listen to every subject below ``inbox``, an inbox this transport made (driver API).

        A relay agent hands out many short-lived surrogate reply subjects
        ``<inbox>.<n>``; one listener takes replies to all of them, also
        those arriving after the agent forgot one (which it then reports).
        :meth:`listen` refuses wildcard inboxes to programs. No daemon
        interest is registered: the daemon routes inboxes by transport.
        """
        self._check_open()
        validate_subject(inbox)
        if not is_inbox(inbox):
            raise InvalidArgument(f"{inbox!r} is not an inbox")
        if not isinstance(queue, Queue):
            raise InvalidArgument(f"queue must be an rvasync Queue, got {type(queue).__name__}")
        listener = Listener(self, inbox + ".>", queue=queue, closure=closure)
        self.attach_queue(listener.queue, dispatched=False, shared=True)
        self._router.add(listener)
        return listener

    async def request_retained(
        self, pattern: str, timeout: float = RETAINED_TIMEOUT
    ) -> list[Message]:
        """The messages the current value caches retain for ``pattern`` (wildcards allowed).

        One message per subject, ordered by subject; every cache on the
        network answers and the answers are merged (docs/retained.md).
        :class:`~rvasync.errors.RequestTimeout` if no cache answered within
        ``timeout`` seconds; an empty list if the caches retain nothing
        matching.
        """
        timeout = check_timeout(timeout)
        self._check_open()
        return await collect_retained(self, pattern, timeout)

    def attach_queue(self, queue: Queue, *, dispatched: bool, shared: bool) -> None:
        """Register one more listener consuming ``queue`` (driver API).

        A driver whose listeners (a CM listener ...) put their deliveries in a
        queue follows the same rules as this transport's own listeners:
        ``dispatched`` (the listener has a callback) starts the queue's
        dispatcher task, or shares the running one, which calls each
        message's ``msg.listener.dispatch_callback``; otherwise a ``shared`` queue
        (the program's, not one the listener made for itself) is counted as
        iterated by the program. A queue is either dispatched or iterated:
        :class:`~rvasync.errors.InvalidArgument` if ``queue`` is already used
        the other way, raised before anything is registered. Undo with
        :meth:`detach_queue` (same arguments) when the listener closes.
        """
        if shared:
            self._check_queue_mode(queue, dispatched=dispatched)
        if dispatched:
            dispatcher = self._dispatchers.get(queue)
            if dispatcher is None:
                dispatcher = self._dispatchers[queue] = Dispatcher(queue)
            dispatcher.attach()
        elif shared:
            self._iterated_queues[queue] = self._iterated_queues.get(queue, 0) + 1

    def detach_queue(self, queue: Queue, *, dispatched: bool, shared: bool) -> None:
        """Undo :meth:`attach_queue` for a listener that closed (driver API).

        The last dispatched listener of a queue stops its dispatcher task.
        Detaching a queue this transport no longer tracks (it was closed
        meanwhile) does nothing.
        """
        if dispatched:
            dispatcher = self._dispatchers.get(queue)
            if dispatcher is not None and dispatcher.detach():
                del self._dispatchers[queue]
        elif shared and queue in self._iterated_queues:
            remaining = self._iterated_queues[queue] - 1
            if remaining:
                self._iterated_queues[queue] = remaining
            else:
                del self._iterated_queues[queue]

    def _check_queue_mode(self, queue: Queue, *, dispatched: bool) -> None:
        # A queue is either dispatched to callbacks or iterated by the program:
        # a dispatcher would otherwise steal messages meant for the iterator.
        if dispatched and self._iterated_queues.get(queue):
            raise InvalidArgument(
                f"queue {queue.name!r} is iterated by listeners without callbacks; "
                "a callback listener needs a queue of its own or one shared with callback listeners"
            )
        if not dispatched and queue in self._dispatchers:
            raise InvalidArgument(
                f"queue {queue.name!r} is dispatched to callbacks; "
                "a listener without callback cannot share it"
            )

    def remove_listener(self, listener: Listener) -> None:
        """Forget ``listener`` (it is closing): called by :meth:`Listener.close_now`.

        Public because the listener is another object; a program closes a
        listener with ``listener.close()`` instead. Removing a listener this
        transport does not hold (already removed) does nothing.
        """
        try:
            self._router.remove(listener)
        except (KeyError, ValueError):
            return
        name = listener.subscription
        if name is not None and self._subscriptions.get(name) is listener:
            del self._subscriptions[name]
        self.detach_queue(
            listener.queue, dispatched=listener.callback is not None, shared=not listener.own_queue
        )
        self._close_listener(listener)

    def _listeners(self) -> list[Listener]:
        return list(self._router.listeners())

    # -- advisories ----------------------------------------------------------

    def present(self, msg: Message) -> int:
        """Present an advisory to this transport's own listeners, never on the network (driver API).

        Drivers present their advisories (``_RV.<class>.RVCM...``,
        ``_RV.<class>.RVFT...``) on the transport they employ. Each matching
        listener gets its own delivery; an ERROR or WARN advisory nobody took
        is logged. Returns how many listeners took it (0 once closed).
        """
        taken = self._router.deliver(msg) if not self._closed else 0
        if not taken:
            log_unheard(msg)
        return taken

    _present = present  # the name links and subclasses call

    def interested(self, subject: str) -> bool:
        """True if at least one listener of this transport matches ``subject`` (driver API).

        Lets a driver skip building an INFO advisory nobody would hear.
        """
        return self._router.interested(subject)

    # -- hooks for concrete transports ---------------------------------------------

    @abc.abstractmethod
    def _route(self, msg: Message) -> Awaitable[None] | None:
        """Carry a validated outbound message towards its listeners.

        Returns an awaitable when the send backlog is full (see :meth:`send_internal`).
        """

    def _open_listener(self, listener: Listener) -> None:  # noqa: B027 (optional hook)
        """Called after a listener registers (network transports tell their daemon)."""

    def _close_listener(self, listener: Listener) -> None:  # noqa: B027 (optional hook)
        """Called after a listener is removed."""
