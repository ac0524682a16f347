"""Asking the current value caches: ``request_retained`` and the ``retained=True`` hand-over.

Both are the requester's side of the cache protocol
(:mod:`rvasync.protocol.cvc`), built on a transport's public methods only:
an inbox listener gathers the answer parts of every cache on the network and
:class:`~rvasync.protocol.cvc.AnswerCollector` merges them (one message per
subject, the newest); :class:`RetainedHandOver` feeds a listener's live
deliveries and that answer through :class:`~rvasync.protocol.cvc.HandOver`
so the program sees the retained messages first, then the live stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rvasync._logging import stderr_logger
from rvasync.advisories import build_advisory
from rvasync.errors import (
    MalformedMessage,
    QueueDestroyed,
    RequestTimeout,
    RvError,
    TransportClosed,
)
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Message
from rvasync.protocol.cvc import (
    AnswerCollector,
    HandOver,
    Identity,
    origin_identity,
    unpack_entries,
)
from rvasync.protocol.cvc import names as cvc
from rvasync.subjects import check_listen_subject, subject_matches

if TYPE_CHECKING:
    from rvasync.transport.base import BaseTransport
    from rvasync.transport.listener import Listener

__all__ = [
    "RETAINED_TIMEOUT",
    "RetainedHandOver",
    "collect_retained",
    "publication_identity",
    "request_message",
]

#: How long ``listen(retained=True)`` waits for the caches' answers (seconds).
RETAINED_TIMEOUT = 5.0

_RUNNING: set[asyncio.Task[None]] = set()


class HandOverListener(Protocol):
    """What :class:`RetainedHandOver` needs of a listener that is not an ordinary one."""

    subject: str
    closure: Any

    @property
    def closed(self) -> bool: ...

    @property
    def queue(self) -> Any: ...

    def intercept(self, fn: Callable[[Message], None] | None) -> None: ...


def request_message(pattern: str, inbox: str) -> Message:
    """The request for the retained messages matching ``pattern``, answered to ``inbox``."""
    msg = Message(cvc.REQUEST_SUBJECT, reply_subject=inbox)
    msg.add(cvc.REQUEST_PATTERN, pattern)
    return msg


def _parse_part(
    msg: Message,
) -> tuple[str, list[str], int, bool, list[tuple[str, float, bytes]]]:
    values = msg.field_values()
    cache = values.get(cvc.ANSWER_CACHE)
    peers = values.get(cvc.ANSWER_PEERS, [])
    part = values.get(cvc.ANSWER_PART)
    last = values.get(cvc.ANSWER_LAST)
    entries = values.get(cvc.ANSWER_ENTRIES, b"")
    if (
        not isinstance(cache, str)
        or not isinstance(peers, list)
        or not isinstance(part, int)
        or not isinstance(last, bool)
        or not isinstance(entries, bytes | bytearray)
    ):
        raise MalformedMessage("not a cache answer part")
    return cache, [str(p) for p in peers], part, last, unpack_entries(bytes(entries))


async def collect_retained(transport: BaseTransport, pattern: str, timeout: float) -> list[Message]:
    """The merged answer of every cache to a request for ``pattern`` (see AnswerCollector).

    RequestTimeout if no cache answered completely within ``timeout``; with
    some caches answering and others named but silent, what was gathered is
    returned and a WARN advisory ``_RV.WARN.SYSTEM.RETAINED.INCOMPLETE``
    names the silent ones.
    """
    check_listen_subject(pattern)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    inbox = transport.create_inbox()
    # The inbox listener's own queue: closing the transport destroys it, which
    # ends the wait at once (TransportClosed) instead of at the timeout.
    listener = transport.listen(inbox)
    collector: AnswerCollector[bytes] = AnswerCollector()
    try:
        pending = transport.send_internal(request_message(pattern, inbox))
        if pending is not None:
            await pending
        while not collector.complete:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                part = await listener.get(remaining)
            except TimeoutError:
                break
            except QueueDestroyed:
                raise TransportClosed("the transport closed during a retained request") from None
            try:
                cache, peers, number, last, entries = _parse_part(part)
            except MalformedMessage as exc:
                stderr_logger().warning("ignored a bad cache answer part", reason=str(exc))
                continue
            collector.on_part(cache, peers, number, last, entries)
    finally:
        listener.close_now()
    if not collector.heard:
        raise RequestTimeout(f"no cache answered the request for {pattern!r} within {timeout} s")
    missing = collector.missing()
    if missing:
        transport.present(
            build_advisory(
                "WARN",
                "RETAINED.INCOMPLETE",
                [("pattern", pattern), ("missing", missing, FieldType.STRINGARRAY)],
            )
        )
    answer: list[Message] = []
    for wire in collector.result():
        msg = Message.from_bytes(wire)
        # A cache answers with what it stored for the subjects it named; anything
        # else (a damaged or foreign answer) is not what was asked for.
        if msg.subject is not None and subject_matches(pattern, msg.subject):
            answer.append(msg)
        else:
            stderr_logger().warning(
                "ignored a retained message outside the request", pattern=pattern
            )
    return answer


def publication_identity(msg: Message) -> Identity | None:
    """A message's publication identity: its origin (stamped by the sending transport)."""
    return origin_identity(msg.origin)


class RetainedHandOver:
    """Drives one listener's hand-over from retained messages to its live stream.

    ``listener``: anything with ``subject``, ``closed``, ``closure``, ``queue``
    and ``intercept(fn)`` (an ordinary listener, or a certified one).
    ``deliver`` puts a message where the listener's program takes it (the
    listener's queue by default); ``discard`` is told of each live message
    the hand-over does not deliver (a certified listener confirms it).
    ``certified``: retained messages are handed over uncertified (a CM label
    keeps its sender, without a sequence), as they did not come from the
    sender's certified stream.
    """

    __slots__ = (
        "_certified",
        "_core",
        "_deliver_one",
        "_discard",
        "_listener",
        "_task",
        "_transport",
    )

    def __init__(
        self,
        transport: BaseTransport,
        listener: Listener | HandOverListener,
        *,
        timeout: float = RETAINED_TIMEOUT,
        deliver: Callable[[Message], None] | None = None,
        discard: Callable[[Message], None] | None = None,
        certified: bool = False,
    ) -> None:
        self._transport = transport
        self._listener = listener
        self._deliver_one = listener.queue.deliver if deliver is None else deliver
        self._discard = discard
        self._certified = certified
        self._core: HandOver[Message] = HandOver(publication_identity)
        listener.intercept(self._on_live)
        self._task = asyncio.get_running_loop().create_task(
            self._ask(timeout), name=f"rvasync-retained:{listener.subject}"
        )
        # The loop holds tasks weakly: keep this one until it ends, even if the
        # listener closes (and drops this object) meanwhile.
        _RUNNING.add(self._task)
        self._task.add_done_callback(_RUNNING.discard)

    @property
    def done(self) -> bool:
        return self._core.done

    def _deliver(self, messages: list[Message]) -> None:
        if self._listener.closed:
            return
        deliver = self._deliver_one
        for msg in messages:
            deliver(msg)

    def _on_live(self, msg: Message) -> None:
        core = self._core
        self._deliver(core.on_live(msg))
        if core.answered:
            self._settle()

    async def _ask(self, timeout: float) -> None:
        listener = self._listener
        try:
            answer = await collect_retained(self._transport, listener.subject, timeout)
        except RequestTimeout:
            answer = []
            if not listener.closed:
                self._transport.present(
                    build_advisory("WARN", "RETAINED.NO_ANSWER", {"subject": listener.subject})
                )
        except RvError as exc:  # the transport closed under us, or alike
            answer = []
            if not listener.closed:
                stderr_logger().warning("retained request failed", reason=str(exc))
        closure = listener.closure
        for msg in answer:
            msg.listener = listener
            msg.closure = closure
            label = msg.cm
            if self._certified and label is not None and label.sequence is not None:
                msg.cm = CmLabel(label.sender, None, label.time_limit)
        self._deliver(self._core.on_answer(answer))
        self._settle()

    def _settle(self) -> None:
        core = self._core
        dropped = core.take_dropped()
        discard = self._discard
        if discard is not None:
            for msg in dropped:
                discard(msg)
        superseded = core.take_superseded()
        if superseded and not self._listener.closed:
            self._transport.present(
                build_advisory(
                    "WARN",
                    "RETAINED.SUPERSEDED",
                    [
                        ("subject", self._listener.subject),
                        ("superseded", superseded, FieldType.U64),
                    ],
                )
            )
        if core.done:
            # No retained publication awaits its live copy: plain queue delivery again.
            self._listener.intercept(None)
