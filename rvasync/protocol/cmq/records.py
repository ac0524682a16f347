"""Records the members of a distributed queue exchange, and the task identity.

The specification leaves the member-to-member protocol to the implementation;
this layout is rvasync's own. Scheduler election rides on the fault tolerance
records (:mod:`rvasync.protocol.ft`); these records carry the work:

``STATUS``   every member, every heartbeat interval, to the group: its worker
             weight and task capacity, the tasks it holds (accepted, not yet
             complete) and the tasks it completed that no scheduler has
             acknowledged yet (``done``), and the ids of the tasks it completed
             recently, acknowledged or not (``recent``, version 5: see
             :data:`~rvasync.protocol.cmq.params.RECENT_DONE_FACTOR`). State, not
             events: a lost record is repaired by the next one, and a new
             scheduler learns at once who holds what and what was done.
``ASSIGN``   scheduler to one worker: the task, its payload and whether it is
             certified. Repeated until accepted. Several tasks for the same
             worker may travel in one ASSIGN (``payloads``, one per task), and
             acknowledgements for that worker with them (``done``, as an ACK).
``ACCEPT``   worker to the scheduler that assigned: the worker has the task.
``COMPLETE`` worker to the scheduler: the worker's program finished tasks.
``ACK``      scheduler to a worker: these completions are confirmed to their
             senders, the worker may forget them; or these tasks it gave
             back (REFUSE, RELEASE) are taken back.
``REFUSE``   worker to the scheduler: its program refused these tasks; give
             them to other workers (each refusal counts towards the
             reassignment limit).
``RELEASE``  worker to the scheduler: a closing worker gives back tasks its
             program never started (they do not count towards the limit).
``BYE``      a member leaving the queue: its tasks are reassigned at once
             (``tasks``: those it released and never started).

REFUSE and RELEASE are repeated with every STATUS until acknowledged: state,
as the ``done`` list of a STATUS is.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rvasync.errors import MalformedMessage

__all__ = [
    "GROUP",
    "READABLE_VERSIONS",
    "RECORD_VERSION",
    "SCHEDULER",
    "QueueRecord",
    "RecordKind",
    "TaskId",
]

RECORD_VERSION = 5
"""2: task lists travel grouped by (sender, subject, certified), one run of sequence
numbers per group (version 1 spelled out every task in full). 3: an ASSIGN's
``done`` lists completions the scheduler acknowledges to that worker (an ACK
merged into it, see coalesce); version 2 ignored it. 4: REFUSE and RELEASE
(version 3 would drop them as malformed, and the tasks would stay with a
worker that no longer holds them). 5: a STATUS's ``recent`` list, a sixth
element of the body, written only when not empty; a version 4 record (which
has none) is still read. A version 4 member refuses version 5 records by
name, so a queue is upgraded all at once. Other versions are refused by name."""

READABLE_VERSIONS = frozenset({4, RECORD_VERSION})
"""Record versions this implementation reads (4: a STATUS without ``recent``)."""

GROUP = ""
"""Destination of a record for every member."""

SCHEDULER = "*"
"""Destination of a record for whichever member is the active scheduler."""


class TaskId(NamedTuple):
    """A task is the certified message (sender name, subject, sequence number).

    Uncertified tasks get a sender of ``"plain:" + scheduler member id`` and a
    counter, unique for as long as workers remember completed ids.
    """

    sender: str
    subject: str
    seq: int


class RecordKind(enum.StrEnum):
    STATUS = "STATUS"
    ASSIGN = "ASSIGN"
    ACCEPT = "ACCEPT"
    COMPLETE = "COMPLETE"
    ACK = "ACK"
    REFUSE = "REFUSE"
    RELEASE = "RELEASE"
    BYE = "BYE"


#: A received kind text to its member: a dict look-up instead of calling the enum
#: (``RecordKind(text)`` costs about 0.9 us on Python 3.11, once per record).
_KIND_BY_TEXT: dict[object, RecordKind] = {kind.value: kind for kind in RecordKind}


@dataclass(slots=True)
class QueueRecord:
    """One record; fields a kind does not use keep their defaults.

    Treat a record as a value: nothing changes one after it is built. It is
    not declared frozen because a frozen dataclass's ``__init__`` sets each
    of the eleven fields through ``object.__setattr__`` (about 2.5 us a
    record on Python 3.11 against 0.3 us), and the scheduler and workers
    build two records per task.

    ``to`` is :data:`GROUP`, :data:`SCHEDULER` or a member id. ``tasks`` lists
    (task id, certified) pairs: the held tasks of a STATUS, the task of an
    ASSIGN or ACCEPT, the completions of a COMPLETE or ACK. ``done`` is the
    unacknowledged completions of a STATUS, or on an ASSIGN the completions
    the scheduler acknowledges to that worker (an ACK riding along, version
    3). An ASSIGN carries its task's message in ``payload``, or, listing
    several tasks, their messages in ``payloads`` (in the order of
    ``tasks``); :meth:`task_payloads` gives either as one tuple. ``recent``
    is a STATUS's recently completed tasks, acknowledged ones included
    (version 5), which a new scheduler confirms instead of assigning again.
    """

    kind: RecordKind
    queue: str
    member: str
    to: str = GROUP
    seq: int = 0
    weight: int = 0
    capacity: int = 0
    tasks: tuple[tuple[TaskId, bool], ...] = ()
    done: tuple[tuple[TaskId, bool], ...] = ()
    payload: bytes = b""
    payloads: tuple[bytes, ...] = ()
    recent: tuple[tuple[TaskId, bool], ...] = ()

    def task_payloads(self) -> tuple[bytes, ...]:
        """The payload of each task in ``tasks``, in order (an ASSIGN's)."""
        return self.payloads if self.payloads else (self.payload,)

    def to_fields(self) -> dict[str, str | int | bytes]:
        """A flat mapping of simple values, ready to become message fields."""
        # The text json.dumps(..., separators=(",", ":")) gives, written directly:
        # json.dumps builds a new encoder per call, most of a small record's cost.
        body = (
            f"[{_int_text(self.seq)},{_int_text(self.weight)},{_int_text(self.capacity)},"
            f"{_groups_text(_grouped(self.tasks))},{_groups_text(_grouped(self.done))}"
            + (f",{_groups_text(_grouped(self.recent))}]" if self.recent else "]")
        )
        fields: dict[str, str | int | bytes] = {
            "v": RECORD_VERSION,
            "k": self.kind.value,
            "q": self.queue,
            "m": self.member,
            "to": self.to,
            "b": body,
        }
        if self.payload:
            fields["p"] = self.payload
        if self.payloads:
            fields["ps"] = _frame(self.payloads)
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, object]) -> QueueRecord:
        """Rebuild a record; :class:`~rvasync.errors.MalformedMessage` names what is wrong."""
        try:
            version = fields["v"]
            kind = _KIND_BY_TEXT[fields["k"]]
            queue, member, to, body = fields["q"], fields["m"], fields["to"], fields["b"]
        except (KeyError, ValueError, TypeError) as exc:
            # KeyError: a missing field or an unknown kind (the text is in the message);
            # TypeError: an unhashable kind value.
            raise MalformedMessage(f"distributed queue record lacks or garbles {exc}") from None
        if (
            not isinstance(version, int)
            or isinstance(version, bool)
            or version not in READABLE_VERSIONS
        ):
            raise MalformedMessage(f"distributed queue record version {version!r} is not supported")
        if not (isinstance(queue, str) and isinstance(member, str) and member):
            raise MalformedMessage("distributed queue record needs string queue and member fields")
        if not isinstance(to, str) or not isinstance(body, str):
            raise MalformedMessage("distributed queue record needs string 'to' and 'b' fields")
        payload = fields.get("p", b"")
        if not isinstance(payload, bytes | bytearray):
            raise MalformedMessage("distributed queue record payload must be bytes")
        framed = fields.get("ps")
        payloads: tuple[bytes, ...] = ()
        if framed is not None:
            if not isinstance(framed, bytes | bytearray):
                raise MalformedMessage("distributed queue record payloads must be bytes")
            payloads = _unframe(bytes(framed))
        try:
            seq, weight, capacity, tasks, done, *more = json.loads(body)
            if len(more) > 1:
                _bad(f"{5 + len(more)} body elements, at most 6")
            recent = _tasks(more[0]) if more else ()
            counters = (seq, weight, capacity)
            ok = all(isinstance(x, int) and not isinstance(x, bool) for x in counters)
            rows = _tasks(tasks)
            if payloads and len(payloads) != len(rows):
                _bad(f"{len(payloads)} payloads for {len(rows)} tasks")
            return (
                cls(
                    kind,
                    queue,
                    member,
                    to,
                    seq,
                    weight,
                    capacity,
                    rows,
                    _tasks(done),
                    bytes(payload),
                    payloads,
                    recent,
                )
                if ok
                else _bad("counters must be integers")
            )
        except (ValueError, TypeError) as exc:
            raise MalformedMessage(f"distributed queue record body is malformed: {exc}") from None


_U32 = struct.Struct(">I")
_ESCAPED = json.encoder.encode_basestring_ascii  # json.dumps's string writer (ensure_ascii)
_int_text = int.__repr__  # json.dumps's integer writer


def _groups_text(groups: list[list[Any]]) -> str:
    """``json.dumps(groups, separators=(",", ":"))`` for :func:`_grouped`'s output."""
    return (
        "["
        + ",".join(
            [
                f"[{_ESCAPED(sender)},{_ESCAPED(subject)},{'true' if certified else 'false'},"
                f"[{','.join(map(_int_text, seqs))}]]"
                for sender, subject, certified, seqs in groups
            ]
        )
        + "]"
    )


def _frame(payloads: tuple[bytes, ...]) -> bytes:
    """Payloads one after another, each after its length (4 bytes, big-endian)."""
    pack = _U32.pack
    parts = []
    for p in payloads:
        parts.append(pack(len(p)))
        parts.append(p)
    return b"".join(parts)


def _unframe(data: bytes) -> tuple[bytes, ...]:
    out = []
    at, end = 0, len(data)
    unpack = _U32.unpack_from
    while at < end:
        if at + 4 > end:
            raise MalformedMessage("distributed queue record payloads are truncated")
        (size,) = unpack(data, at)
        at += 4
        if at + size > end:
            raise MalformedMessage("distributed queue record payloads are truncated")
        out.append(data[at : at + size])
        at += size
    return tuple(out)


def _bad(why: str) -> QueueRecord:
    raise MalformedMessage(f"distributed queue record: {why}")


def _grouped(tasks: tuple[tuple[TaskId, bool], ...]) -> list[list[object]]:
    """``tasks`` as ``[sender, subject, certified, [seq, ...]]`` groups, in order.

    A group runs while consecutive tasks share sender, subject and
    certification, as a merged record's tasks from one certified sender do:
    the names travel once per group instead of once per task, which made up
    most of a merged ASSIGN, COMPLETE or ACK after its payloads.
    """
    groups: list[list[object]] = []
    key: tuple[str, str, bool] | None = None
    seqs: list[int] = []
    for (sender, subject, seq), certified in tasks:
        if key is None or key[0] != sender or key[1] != subject or key[2] != certified:
            key = (sender, subject, certified)
            seqs = []
            groups.append([sender, subject, certified, seqs])
        seqs.append(seq)
    return groups


def _tasks(groups: object) -> tuple[tuple[TaskId, bool], ...]:
    """The (task id, certified) pairs of a grouped task list (see :func:`_grouped`)."""
    if not isinstance(groups, list):
        raise TypeError("task list must be a list")
    out: list[tuple[TaskId, bool]] = []
    new = tuple.__new__  # TaskId(...) runs a Python-level __new__, this does not
    for group in groups:
        sender, subject, certified, seqs = group
        if not (
            isinstance(sender, str)
            and isinstance(subject, str)
            and isinstance(certified, bool)
            and isinstance(seqs, list)
            and seqs
        ):
            raise TypeError(f"bad task group {group!r}")
        if {*map(type, seqs)} != _INT_ONLY:
            bad = next(seq for seq in seqs if seq.__class__ is not int)
            raise TypeError(f"bad sequence number {bad!r} in task group for {subject!r}")
        out += [(new(TaskId, (sender, subject, seq)), certified) for seq in seqs]
    return tuple(out)


_INT_ONLY = {int}
