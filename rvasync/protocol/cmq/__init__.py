"""Distributed queue protocol core, sans-IO (spec chapter 12 "Distributed Queue").

:class:`QueueMemberCore` is one member: a worker always, the scheduler when
the fault tolerance core it embeds elects it. The asyncio driver
(``rv.CmQueueTransport``) feeds it records, tasks, completions and the time,
and carries out its :class:`QueueOutputs`. See docs/distributed-queues.md.

``params``   parameter checks and the election group name
``records``  :class:`QueueRecord`, :class:`TaskId`, destinations
``outputs``  :class:`QueueOutputs`, :class:`Task`, :class:`QueueAdvisory`
``book``     the worker table and the scheduler's per-task state
``member``   :class:`QueueMemberCore`
"""

from rvasync.protocol.cmq.book import SchedulerStats
from rvasync.protocol.cmq.member import PLAIN_PREFIX, QueueMemberCore
from rvasync.protocol.cmq.outputs import DeadLetter, QueueAdvisory, QueueOutputs, Task
from rvasync.protocol.cmq.params import (
    DEFAULT_REASSIGN_LIMIT,
    group_of,
    validate_backlog_limit,
    validate_complete_time,
    validate_queue_name,
    validate_reassign_limit,
    validate_worker_tasks,
    validate_worker_weight,
)
from rvasync.protocol.cmq.records import (
    GROUP,
    READABLE_VERSIONS,
    RECORD_VERSION,
    SCHEDULER,
    QueueRecord,
    RecordKind,
    TaskId,
)

__all__ = [
    "DEFAULT_REASSIGN_LIMIT",
    "GROUP",
    "PLAIN_PREFIX",
    "READABLE_VERSIONS",
    "RECORD_VERSION",
    "SCHEDULER",
    "DeadLetter",
    "QueueAdvisory",
    "QueueMemberCore",
    "QueueOutputs",
    "QueueRecord",
    "RecordKind",
    "SchedulerStats",
    "Task",
    "TaskId",
    "group_of",
    "validate_backlog_limit",
    "validate_complete_time",
    "validate_queue_name",
    "validate_reassign_limit",
    "validate_worker_tasks",
    "validate_worker_weight",
]
