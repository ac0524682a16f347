"""What a distributed queue member does on its way out, and what it does with tasks given up on.

The rule (docs/distributed-queues.md, "Leaving"): one-of-n is exactly once
while the worker lives, and the worker lives until ``close()`` returns. So a
closing member first stops working: it takes no more tasks, and the tasks its
program never started (deliveries still waiting in its listeners' queues)
go back to the scheduler at once. It then lets its program finish what it
did start, for at most the close timeout, and only then leaves. A task still
unfinished at that point is moved to another worker (as for a worker that
dies) and may run twice; its callback is cancelled.

Tasks the scheduler gives up on (``QueueOutputs.dead_letters``) are published
on the member's dead-letter subject, when it has one, as
:func:`dead_letter_message` builds them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rvasync.cmdriver import CmListener
from rvasync.errors import InvalidArgument, RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.cmq import DeadLetter, TaskId
from rvasync.subjects import check_send_subject, validate_subject

__all__ = [
    "CLOSE_TIMEOUT",
    "check_close_timeout",
    "check_dead_letter_subject",
    "dead_letter_message",
    "take_unstarted",
]

CLOSE_TIMEOUT = 10.0
"""Seconds ``close()`` waits, by default, for the tasks the program has started."""


def check_close_timeout(timeout: object) -> float | None:
    """``close(timeout=...)``: None (wait as long as it takes) or zero or more seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgument(f"close timeout must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"close timeout must be zero or more seconds, got {timeout}")
    return float(timeout)


def check_dead_letter_subject(subject: object) -> str | None:
    """A subject a member may publish on: no wildcards, not reserved; or None."""
    if subject is None:
        return None
    if not isinstance(subject, str):
        raise InvalidArgument(
            f"dead_letter_subject must be a subject string or None, got {type(subject).__name__}"
        )
    validate_subject(subject, wildcards=False)
    check_send_subject(subject)
    return subject


def take_unstarted(listeners: Iterable[CmListener]) -> tuple[list[TaskId], list[str]]:
    """Remove the deliveries waiting in ``listeners``' queues: the tasks never started.

    Returns the certified ones' ids (to give back to the scheduler) and the
    subjects of the uncertified ones (complete once delivered, so their loss
    is reported). Other listeners' items in a shared queue stay.
    """
    certified: list[TaskId] = []
    uncertified: list[str] = []
    for listener in listeners:

        def ours(item: object, listener: CmListener = listener) -> bool:
            if not isinstance(item, Message) or item.listener is not listener:
                return False
            cm = item.cm
            if cm is None or cm.sequence is None:
                uncertified.append(item.subject or "")
            else:
                certified.append(TaskId(cm.sender, item.subject or "", cm.sequence))
            return True

        listener.queue.discard_where(ours)
    return certified, uncertified


def dead_letter_message(subject: str, queue_name: str, dead: DeadLetter) -> Message:
    """The message published on ``subject`` for a task the scheduler gave up on.

    Fields: ``name`` (the queue), ``subject``, ``sender`` and ``seqno`` (the
    task's identity), ``reason``, ``moves`` (how often it was moved between
    workers) and ``message``, the task's own message (``data``, its raw
    bytes, if it cannot be decoded).
    """
    tid = dead.task.id
    msg = Message(subject)
    msg.add("name", queue_name)
    msg.add("subject", tid.subject)
    msg.add("sender", tid.sender)
    msg.add("seqno", tid.seq, FieldType.U64)
    msg.add("reason", dead.reason)
    msg.add("moves", dead.moves, FieldType.U32)
    try:
        msg.add("message", Message.from_bytes(dead.task.payload))
    except RvError:
        msg.add("data", bytes(dead.task.payload))
    return msg
