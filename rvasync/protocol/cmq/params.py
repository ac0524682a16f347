"""Distributed queue parameters and their checks (spec chapter 12, "Scheduler Parameters").

Scheduler weight, heartbeat and activation intervals are fault tolerance
parameters (the scheduler is elected by the fault tolerance core), so they are
checked by :func:`rvasync.protocol.ft.validate_member_parameters`. The worker
parameters and the complete time are the queue's own.
"""

from __future__ import annotations

import math

from rvasync.errors import InvalidArgument
from rvasync.protocol.cm.names import check_correspondent_name

__all__ = [
    "DEFAULT_REASSIGN_LIMIT",
    "DONE_MEMORY_FACTOR",
    "RECENT_DONE_FACTOR",
    "RECENT_DONE_LIMIT",
    "SETTLE_HEARTBEATS",
    "group_of",
    "validate_backlog_limit",
    "validate_complete_time",
    "validate_queue_name",
    "validate_reassign_limit",
    "validate_worker_tasks",
    "validate_worker_weight",
]

SETTLE_HEARTBEATS = 2.0
"""How long, in heartbeat intervals, a scheduler that preempts another holds arrivals.

The member stepping down assigns until it hears the newcomer, and its workers
report those last assignments in their next STATUS, one heartbeat later; the
second heartbeat covers network delays and one lost STATUS.
"""

DONE_MEMORY_FACTOR = 20.0
"""Completed task ids are remembered this many activation intervals.

A retransmitted assignment or task that arrives later than that is treated as
new. Twenty intervals outlast any retransmission the protocols make.
"""

RECENT_DONE_FACTOR = 4.0
"""A worker reports a completed task (STATUS ``recent``) this many activation intervals.

Even after a scheduler acknowledged it: the scheduler's confirmation to the
sender may be lost, and the scheduler killed before the sender asks again.
The sender then delivers the task to the next scheduler, which must learn
from the workers that it was done. That scheduler takes over one activation
interval after the kill, and the sender repeats an unconfirmed task within
its confirmation request interval (2 s by default); four activation
intervals (14 s by default) cover both, with room for lost records.
"""

RECENT_DONE_LIMIT = 2048
"""At most this many recent completions in one STATUS (the newest).

It bounds a STATUS's size for a fast worker (about 6 bytes a task). A
completion pushed out by newer ones before its time is up is no longer
reported: the worker counts it (``SchedulerStats.unreported``), and a
second run of that task by another worker is still detected and presented
as WORKER.DUPLICATE (see QueueMemberCore).
"""


DEFAULT_REASSIGN_LIMIT = 10
"""How many times a scheduler moves one task from worker to worker before it gives up.

A task that kills, hangs or is refused by every worker it reaches (a poison
task) would otherwise circulate for ever. Ten moves ride out a rolling
restart of the workers and a few slow runs past ``complete_time``; beyond
that the task is dead-lettered (docs/distributed-queues.md).
"""


def validate_queue_name(name: object) -> str:
    """The queue's name is a reusable correspondent name shared by every member."""
    if not isinstance(name, str):
        raise InvalidArgument(f"distributed queue name must be a str, got {type(name).__name__}")
    check_correspondent_name(name)
    return name


def group_of(name: str) -> str:
    """The fault tolerance group that elects the scheduler of queue ``name``.

    A prefix keeps it apart from an ordinary fault tolerance group of the same
    name (a program cannot be in both, chapter 12 "Fault Tolerance versus
    Distributed Queues", yet two programs may pick the same word).
    """
    return "_RVCMQ." + name


def _integer(what: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidArgument(f"{what} must be at least {minimum}, got {value}")
    return value


def validate_worker_weight(value: object) -> int:
    """Worker weight: a positive integer (default 1), higher gets tasks first."""
    return _integer("worker_weight", value, 1)


def validate_worker_tasks(value: object) -> int:
    """Task capacity: 0 (a dedicated scheduler that never works) or more."""
    return _integer("worker_tasks", value, 0)


def validate_backlog_limit(value: object) -> int:
    """Scheduler task backlog limit: 0 means unlimited (the queue never overflows)."""
    return _integer("backlog_limit", value, 0)


def validate_reassign_limit(value: object) -> int:
    """Reassignment limit: 0 (move a task however often) or the most moves of one task."""
    return _integer("reassign_limit", value, 0)


def validate_complete_time(value: object) -> float:
    """Complete time in seconds: 0 (wait for completion forever) or a positive finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"complete_time must be a number of seconds, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(
            f"complete_time must be zero or a positive finite number of seconds, got {value}"
        )
    return value
