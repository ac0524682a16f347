"""What the distributed queue core returns after each input."""

from __future__ import annotations

from dataclasses import dataclass, field

from rvasync.advmsg import advisory_message, advisory_subject
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.cmq.records import QueueRecord, TaskId
from rvasync.protocol.ft import FtAdvisory, FtRecord

__all__ = ["DeadLetter", "QueueAdvisory", "QueueOutputs", "Task"]


@dataclass(slots=True)
class Task:
    """A task: its identity, whether a certified agreement covers it, the encoded message.

    A value: nothing changes one once built. Not declared frozen, as the
    scheduler and the worker build one per task and a frozen dataclass's
    ``__init__`` costs three times as much (see QueueRecord).
    """

    id: TaskId
    certified: bool
    payload: bytes


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task the scheduler gave up on, for the driver to publish on the dead-letter subject.

    ``reason`` says why (the reassignment limit, or every worker refused it),
    ``moves`` how often it had been moved from worker to worker. The core has
    already confirmed a certified one to its sender and presented the
    SCHEDULER.DEAD_LETTER advisory that counts it.
    """

    task: Task
    reason: str
    moves: int


@dataclass(frozen=True, slots=True)
class QueueAdvisory:
    """A RVCM.QUEUE advisory (appendix B) for the driver to present on its transport."""

    adv_class: str
    condition: str
    name: str
    fields: tuple[tuple[str, str | int], ...]

    @property
    def subject(self) -> str:
        return advisory_subject(self.adv_class, "RVCM", "QUEUE." + self.condition, self.name)

    def to_message(self) -> Message:
        """The advisory message: string fields, and ``seqno`` as a U64 as appendix B lists it."""
        msg = advisory_message(self.subject)
        for name, value in self.fields:
            if isinstance(value, int):
                msg.add(name, value, FieldType.U64)
            else:
                msg.add(name, value)
        return msg


@dataclass(slots=True)
class QueueOutputs:
    """Everything one input produced, in the order a driver carries it out.

    ``ft_records`` and ``records`` go out first, then ``roles`` (True: this
    member became the scheduler and must start listening as the queue's
    certified correspondent; False: it stopped), then ``confirms`` (tasks the
    scheduler now confirms to their senders), then ``deliveries`` (tasks for
    this member's own worker), then ``dead_letters`` (tasks given up on, to
    publish on the dead-letter subject), then ``advisories``. ``assigned``
    only informs.
    """

    ft_records: list[FtRecord] = field(default_factory=list)
    records: list[QueueRecord] = field(default_factory=list)
    roles: list[bool] = field(default_factory=list)
    confirms: list[Task] = field(default_factory=list)
    deliveries: list[Task] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    advisories: list[QueueAdvisory | FtAdvisory] = field(default_factory=list)
    assigned: list[tuple[TaskId, str]] = field(default_factory=list)
    """(task, worker) of each assignment decision: for logs and tests, nothing to carry out."""

    def extend(self, other: QueueOutputs) -> None:
        """Append ``other``'s outputs after these, field by field (one input made of
        several steps, such as a slice of arrivals, carried out as one)."""
        self.ft_records += other.ft_records
        self.records += other.records
        self.roles += other.roles
        self.confirms += other.confirms
        self.deliveries += other.deliveries
        self.dead_letters += other.dead_letters
        self.advisories += other.advisories
        self.assigned += other.assigned

    def __bool__(self) -> bool:
        return bool(
            self.ft_records
            or self.records
            or self.roles
            or self.confirms
            or self.deliveries
            or self.dead_letters
            or self.advisories
        )
