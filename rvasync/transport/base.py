"""Behaviour every transport shares: sending rules, request/reply, inboxes, listeners.

A concrete transport supplies ``_route`` (where an outbound message goes) and
``_open_listener``/``_remove_listener`` hooks (how interest reaches its
delivery mechanism); everything users call is here so the rules are the same
on the process transport and on network transports.
"""

from __future__ import annotations

import abc
import itertools
import os
from typing import Any

from rvasync.advisories import log_unheard
from rvasync.errors import InvalidArgument, RequestTimeout, TransportClosed
from rvasync.message import Message
from rvasync.queues import Queue
from rvasync.subjects import check_listen_subject, check_send_subject
from rvasync.transport.dispatch import Dispatcher
from rvasync.transport.listener import Callback, Listener
from rvasync.transport.router import Router

__all__ = ["BaseTransport"]


class BaseTransport(abc.ABC):
    """Common machinery of the process transport and network transports."""

    def __init__(self, *, description: str | None = None) -> None:
        self.description = description
        self._router = Router()
        self._closed = False
        self._dispatchers: dict[Queue, Dispatcher] = {}
        self._iterated_queues: dict[Queue, int] = {}
        # Unique across processes and restarts: 64 random bits plus a counter.
        self._inbox_prefix = f"_INBOX.{os.urandom(8).hex()}."
        self._inbox_counter = itertools.count(1)

    # -- lifecycle -----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

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
            listener._close_now()
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

    # -- sending -------------------------------------------------------------

    async def send(self, msg: Message) -> None:
        """Send ``msg`` to its subject (validated; reserved ``_`` subjects refused)."""
        subject = msg.subject
        if subject is None:
            raise InvalidArgument("cannot send a message without a subject")
        if self._closed:
            raise TransportClosed(f"{type(self).__name__} is closed")
        check_send_subject(subject)
        msg._share()
        self._route(msg)

    async def send_reply(self, reply: Message, request: Message) -> None:
        """Send ``reply`` to the reply subject of ``request``."""
        reply_subject = request.reply_subject
        if not reply_subject:
            raise InvalidArgument("the request has no reply subject to answer")
        reply.subject = reply_subject
        await self.send(reply)

    async def send_request(self, msg: Message, timeout: float) -> Message:
        """Send ``msg`` with a fresh inbox as reply subject and return the first reply.

        The caller's message is not changed: a copy carries the inbox.
        """
        if timeout is None or timeout <= 0:
            raise InvalidArgument(
                f"send_request timeout must be a positive number, got {timeout!r}"
            )
        if msg.subject is None:
            raise InvalidArgument("cannot send a request without a subject")
        self._check_open()
        inbox = self.create_inbox()
        listener = self.listen(inbox)
        try:
            request = msg._delivery_copy(None, None)
            request.reply_subject = inbox
            await self.send(request)
            try:
                return await listener.get(timeout)
            except TimeoutError:
                raise RequestTimeout(f"no reply to {msg.subject!r} within {timeout} s") from None
        finally:
            listener._close_now()

    def create_inbox(self) -> str:
        """A unique ``_INBOX.`` subject that only this transport receives."""
        self._check_open()
        return f"{self._inbox_prefix}{next(self._inbox_counter)}"

    # -- listening -------------------------------------------------------------

    def listen(
        self,
        subject: str,
        *,
        queue: Queue | None = None,
        closure: Any = None,
        callback: Callback | None = None,
    ) -> Listener:
        """Listen to ``subject`` (wildcards allowed); see :class:`Listener`."""
        self._check_open()
        check_listen_subject(subject)
        if queue is not None and not isinstance(queue, Queue):
            raise InvalidArgument(f"queue must be an rvasync Queue, got {type(queue).__name__}")
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        if queue is not None:
            self._check_queue_mode(queue, dispatched=callback is not None)
        listener = Listener(self, subject, queue=queue, closure=closure, callback=callback)
        if callback is not None:
            dispatcher = self._dispatchers.get(listener.queue)
            if dispatcher is None:
                dispatcher = self._dispatchers[listener.queue] = Dispatcher(listener.queue)
            dispatcher.attach()
        elif queue is not None:
            self._iterated_queues[queue] = self._iterated_queues.get(queue, 0) + 1
        self._router.add(listener)
        self._open_listener(listener)
        return listener

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

    def _remove_listener(self, listener: Listener) -> None:
        try:
            self._router.remove(listener)
        except (KeyError, ValueError):
            return
        queue = listener.queue
        if listener.callback is not None:
            dispatcher = self._dispatchers.get(queue)
            if dispatcher is not None and dispatcher.detach():
                del self._dispatchers[queue]
        elif queue in self._iterated_queues:
            remaining = self._iterated_queues[queue] - 1
            if remaining:
                self._iterated_queues[queue] = remaining
            else:
                del self._iterated_queues[queue]
        self._close_listener(listener)

    def _listeners(self) -> list[Listener]:
        return list(self._router.listeners())

    # -- advisories ----------------------------------------------------------

    def _present(self, msg: Message) -> int:
        """Deliver an advisory to this transport's listeners; log it if nobody took it."""
        taken = self._router.deliver(msg) if not self._closed else 0
        if not taken:
            log_unheard(msg)
        return taken

    # -- hooks for concrete transports ---------------------------------------------

    @abc.abstractmethod
    def _route(self, msg: Message) -> None:
        """Carry a validated outbound message towards its listeners."""

    def _open_listener(self, listener: Listener) -> None:  # noqa: B027 (optional hook)
        """Called after a listener registers (network transports tell their daemon)."""

    def _close_listener(self, listener: Listener) -> None:  # noqa: B027 (optional hook)
        """Called after a listener is removed."""
