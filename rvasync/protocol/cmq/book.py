"""What a member knows of the others as workers, and what the scheduler tracks per task.

Every member keeps the worker table (STATUS records reach everyone), so a
member that becomes scheduler knows at once who holds which task. Only the
active scheduler keeps a :class:`SchedulerBook`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from rvasync.protocol.cmq.outputs import Task
from rvasync.protocol.cmq.records import TaskId

__all__ = ["Assignment", "PeerView", "SchedulerBook", "SchedulerStats"]


@dataclass(slots=True)
class PeerView:
    """Another member as its latest STATUS described it.

    ``unknown`` counts the held tasks the scheduler had no assignment or
    confirmation for when that STATUS arrived (tasks of an earlier
    scheduler): part of the worker's load, counted once per STATUS rather
    than at every pick. Until the next STATUS it can only overstate the load
    (a task adopted or confirmed meanwhile is still counted), which delays
    an assignment by at most a heartbeat and never overfills a worker.
    """

    member: str
    seq: int
    weight: int
    capacity: int
    held: set[TaskId]
    done: dict[TaskId, bool]
    heard: float
    unknown: int = 0
    #: tasks it completed recently, acknowledged ones too (STATUS ``recent``)
    recent: set[TaskId] = field(default_factory=set)


@dataclass(slots=True)
class Assignment:
    """A task the scheduler is responsible for until a worker completes it.

    ``worker`` is None while the task waits in the backlog. An unaccepted
    assignment is re-sent every heartbeat and moved to another worker after
    an activation interval; an accepted one is moved once ``complete_by``
    passes (complete time > 0, certified tasks only). ``moves`` counts the
    moves from worker to worker that may follow an attempt (all but a closing
    worker's release of a task it never started), against the reassignment
    limit; ``refused_by`` names the workers whose program refused the task,
    which this scheduler never gives it again.
    """

    task: Task
    worker: str | None = None
    accepted: bool = False
    resend_at: float = math.inf
    accept_by: float = math.inf
    complete_by: float = math.inf
    version: int = 0
    moves: int = 0
    refused_by: set[str] | None = None


@dataclass(slots=True)
class SchedulerStats:
    """Counters of the scheduler's decisions; the exceptional ones can cause duplicates."""

    tasks: int = 0
    assigned: int = 0
    adopted: int = 0
    completed: int = 0
    reassigned_exit: int = 0
    reassigned_unaccepted: int = 0
    reassigned_complete_time: int = 0
    overflow: int = 0
    dropped_uncertified: int = 0
    refused: int = 0
    """Tasks a worker's program refused, moved to another worker."""
    released: int = 0
    """Tasks a closing worker gave back unstarted, moved to another worker."""
    dead_lettered: int = 0
    """Tasks given up on (SCHEDULER.DEAD_LETTER): moved too often, or refused by every worker."""
    duplicates: int = 0
    """Tasks this worker completed that another worker reported holding or completing
    (WORKER.DUPLICATE): each task run twice, counted once, by the worker that ran it first."""
    unreported: int = 0
    """Completions this worker stopped reporting early (more than RECENT_DONE_LIMIT recent)."""

    @property
    def reassigned(self) -> int:
        """Reassignments of tasks a worker may already have processed (possible duplicates)."""
        return self.reassigned_exit + self.reassigned_unaccepted + self.reassigned_complete_time


@dataclass(slots=True)
class SchedulerBook:
    """The active scheduler's tasks, backlog, round-robin state and timers."""

    tasks: dict[TaskId, Assignment] = field(default_factory=dict)
    backlog: deque[TaskId] = field(default_factory=deque)
    #: refused tasks waiting for a worker that has not refused them (kept apart
    #: from the backlog, whose drain gives its head to whoever is free)
    refused_waiting: deque[TaskId] = field(default_factory=deque)
    confirmed: dict[TaskId, float] = field(default_factory=dict)
    early_done: dict[TaskId, tuple[str, float]] = field(default_factory=dict)
    last_pick: dict[str, int] = field(default_factory=dict)
    tick: int = 0
    plain_counter: int = 0
    due: list[tuple[float, int, TaskId, int]] = field(default_factory=list)
    due_counter: int = 0
    by_worker: dict[str, set[TaskId]] = field(default_factory=dict)
    #: until when arrivals wait in ``settling`` (a preemption: see QueueMemberCore._activate)
    settle_until: float = -math.inf
    settling: dict[TaskId, Task] = field(default_factory=dict)

    def place(self, a: Assignment, worker: str | None) -> None:
        """Move ``a`` to ``worker`` (None: the backlog), keeping per-worker loads current."""
        tid = a.task.id
        if a.worker is not None:
            held = self.by_worker.get(a.worker)
            if held is not None:
                held.discard(tid)
        a.worker = worker
        a.version += 1
        if worker is not None:
            self.by_worker.setdefault(worker, set()).add(tid)

    def finish(self, tid: TaskId) -> Assignment | None:
        """Forget ``tid`` (completed or dropped); returns its assignment if it had one."""
        a = self.tasks.pop(tid, None)
        if a is not None:
            self.place(a, None)
        return a

    def schedule(self, when: float, tid: TaskId, version: int) -> None:
        """Wake the scheduler at ``when`` for ``tid`` (ignored if its version moved on)."""
        if when < math.inf:
            self.due_counter += 1
            heapq.heappush(self.due, (when, self.due_counter, tid, version))

    def pop_due(self, now: float) -> list[tuple[TaskId, int]]:
        out = []
        while self.due and self.due[0][0] <= now:
            _, _, tid, version = heapq.heappop(self.due)
            out.append((tid, version))
        return out

    def next_due(self) -> float:
        # Entries of finished tasks or old versions are dropped here lazily.
        while self.due:
            _, _, tid, version = self.due[0]
            a = self.tasks.get(tid)
            if a is not None and a.version == version:
                return self.due[0][0]
            heapq.heappop(self.due)
        return math.inf

    def load(self, member: str) -> int:
        held = self.by_worker.get(member)
        return len(held) if held else 0
