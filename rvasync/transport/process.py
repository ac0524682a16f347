"""The intra-process transport: one per event loop, delivering within the process.

Messages sent on it never leave the process and never touch a daemon or the
wire codec: each matching listener receives its own Message object sharing the
sender's fields (copy-on-write), which is what makes it fast enough to serve as
a user-event channel between tasks. It also presents the advisories that belong
to no particular transport, such as QUEUE.LIMIT_EXCEEDED: creating the first
process transport installs the queues' limit-exceeded reporter that presents it
(:func:`rvasync.queues.install_limit_exceeded_reporter`; a reporter the
program installed stays). Importing this module changes nothing elsewhere.
"""

from __future__ import annotations

import asyncio
import weakref

from rvasync import queues
from rvasync.advisories import AdvisoryClass, build_advisory, count_field, log_unheard
from rvasync.advlimit import Coalescer
from rvasync.correlation import CorrelationId, check_publisher_correlation
from rvasync.errors import NotPermitted
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.sendpace import pacer_for
from rvasync.subjects import check_send_subject
from rvasync.transport.base import BaseTransport, check_reply_subject, not_a_message

__all__ = ["ProcessTransport", "process_transport", "report_limit_exceeded"]

_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ProcessTransport] = (
    weakref.WeakKeyDictionary()
)


class ProcessTransport(BaseTransport):
    """Delivers messages to listeners of the same event loop; users never close it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(description="intra-process")
        # The documented registration point (no import side effect): from now
        # on queue discards are presented as QUEUE.LIMIT_EXCEEDED on the
        # process transport of the loop they happen in.
        queues.install_limit_exceeded_reporter(report_limit_exceeded)
        self._loop = loop
        self._presenting_limit_advisory = False
        self._limit_coalescer = Coalescer()
        self._match = self._router.match
        self._pacer = pacer_for(loop)
        self._ticks = self._pacer.ticks

    async def send(self, msg: Message, *, correlation_id: CorrelationId | None = None) -> None:
        """Deliver ``msg`` to every matching listener of this loop (see BaseTransport.send).

        The same rules as every transport, written out flat: this is the whole
        per-message cost of intra-process messaging. Messages within the
        process get no origin; a ``correlation_id`` given here is carried as
        ``msg.publisher_correlation`` all the same.
        """
        try:
            subject = msg.subject
        except AttributeError:
            raise not_a_message("msg", msg) from None
        if subject is None or self._closed:
            await super().send(msg)  # raises the right error
            return
        if correlation_id is not None:
            msg.publisher_correlation = check_publisher_correlation(correlation_id)
        check_send_subject(subject)
        if msg.reply_subject is not None:
            check_reply_subject(msg.reply_subject)
        # What msg._share() does, without the call: this per-message path cannot
        # afford one (tests/test_layering.py keeps _shared allowed here for it).
        msg._shared = True
        listeners = self._match(subject)
        if listeners:
            copy = msg.delivery_copy
            for listener in listeners:
                listener.deliver(copy(listener, listener.closure))
        # A long run of sends gives the loop (the listeners' tasks) a turn: rvasync.sendpace.
        if next(self._ticks) and (turn := self._pacer.look()) is not None:
            await turn

    def _route(self, msg: Message) -> None:
        self._router.deliver(msg)

    async def close(self) -> None:
        """The process transport lives as long as its event loop: closing it is a no-op."""

    def shutdown(self) -> None:
        """Close for real: the loop is going away (loop teardown, test fixtures).

        :meth:`close` is a no-op because programs share this transport; this
        is the call for whoever owns the loop's lifetime, such as the
        ``rv_process_transport`` fixture of :mod:`rvasync.pytest_plugin`. The
        next :func:`process_transport` in the loop makes a new one.
        """
        self._close_listeners()
        _by_loop.pop(self._loop, None)

    _shutdown = shutdown  # the name older tests call

    def present_limit_exceeded(self, queue: queues.Queue) -> None:
        """Present QUEUE.LIMIT_EXCEEDED for ``queue`` (it just discarded) to this transport:
        at once for the first discard, then at most once a second per queue, each
        advisory counting the items discarded since the one before (``count``)."""
        self._limit_coalescer.report(
            queue, queue.take_discarded(), lambda count: self._present_limit(queue, count)
        )

    def _present_limit(self, queue: queues.Queue, count: int) -> None:
        # A listener for this advisory whose queue itself overflows would make
        # every presentation cause another: present at most one level deep.
        if self._presenting_limit_advisory:
            return
        self._presenting_limit_advisory = True
        try:
            self._present(limit_exceeded_advisory(queue, count))
        finally:
            self._presenting_limit_advisory = False

    def __repr__(self) -> str:
        return f"<ProcessTransport listeners={len(self._router)}>"


def process_transport() -> ProcessTransport:
    """The intra-process transport of the running event loop (created on first use)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise NotPermitted(
            "process_transport() needs a running event loop: call it from async code"
        ) from None
    transport = _by_loop.get(loop)
    if transport is None:
        transport = _by_loop[loop] = ProcessTransport(loop)
    return transport


def limit_exceeded_advisory(queue: queues.Queue, count: int) -> Message:
    """``_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED`` for ``queue``, which has just discarded.

    ``ADV_DESC`` is the queue's name (the specification's field). rvasync adds
    ``count``, the items it discarded since its previous such advisory (one
    advisory stands for every discard of up to a second), ``discarded``, the
    queue's count of everything it has discarded so far, so a program can tell
    exactly how much its limit cost it even when it reads only the latest
    advisory, and ``limit``, the queue's limit.
    """
    return build_advisory(
        AdvisoryClass.WARN,
        "QUEUE.LIMIT_EXCEEDED",
        [
            ("ADV_DESC", queue.name, FieldType.STRING),
            ("count", count_field(count), FieldType.U32),
            ("discarded", count_field(queue.discarded), FieldType.U32),
            ("limit", count_field(queue.limit), FieldType.U32),
        ],
    )


def report_limit_exceeded(queue: queues.Queue) -> None:
    """Queue discard reporter: present QUEUE.LIMIT_EXCEEDED on the process transport."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        log_unheard(limit_exceeded_advisory(queue, queue.take_discarded()))
        return
    transport = _by_loop.get(loop)
    if transport is None:
        transport = _by_loop[loop] = ProcessTransport(loop)
    transport.present_limit_exceeded(queue)
