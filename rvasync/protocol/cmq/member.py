"""The state machine of one distributed queue member: worker always, scheduler when elected.

Spec chapter 12. The member embeds a fault tolerance core
(:class:`~rvasync.protocol.ft.FtMemberCore`, active goal 1, weight = the
scheduler weight) that elects the one scheduler; the rest is this module.

Inputs (each takes ``now`` and returns :class:`QueueOutputs`): :meth:`join`,
:meth:`withdraw`, :meth:`receive_ft`, :meth:`receive`, :meth:`task_arrived`,
:meth:`complete`, :meth:`peer_gone`, the ``set_*`` methods and :meth:`handle_timer` (call it when
``now`` reaches :meth:`next_deadline`).

Scheduling rules ("Assigning Tasks to Workers"): a task goes to the available
worker of greatest worker weight, round-robin among equal weights; a worker
is available while it holds fewer tasks than its capacity; the scheduler's
own worker only when no other is available; a dedicated scheduler (capacity
0) never works. With no worker available the task waits in the backlog; a
backlog limit makes the scheduler discard (and report, OVERFLOW) beyond it.

Exceptional situations ("Reassigning Tasks in Exceptional Situations"):

* worker exit: a member silent for the activation interval, or that said BYE,
  loses its tasks to other workers;
* slow worker: an assignment not accepted within the activation interval is
  moved; with complete time > 0 an accepted certified task not completed in
  that time is moved too;
* refusal: a worker's program refuses a task (``listener.refuse``); it goes
  to a worker that has not refused it, and is never given again to one that
  has (by this scheduler);
* scheduler replacement: the certified sender retransmits what the old
  scheduler had not confirmed. The new scheduler confirms at once the tasks a
  worker reports completed, *adopts* the tasks a live worker reports holding
  (they are moved only if that worker exits, or after the complete time when
  it is > 0), and assigns the rest. Adopting instead of reassigning every
  incomplete task departs from the letter of the specification (which
  reassigns all of them when complete time is 0) in favour of fewer
  duplicates; no task is lost by it, since worker exit still moves them.

Every worker remembers the tasks it completed for a while and never hands the
same task to its program twice, so a duplicate assignment costs a message,
not a second processing; a second processing happens only when the task
reaches *another* worker through one of the exceptions above.

Poison tasks: every move of a task from one worker to another after an
attempt (worker exit, no acceptance, complete time, refusal) counts, and the
move past ``reassign_limit`` dead-letters the task instead: the scheduler
confirms it to its sender, presents SCHEDULER.DEAD_LETTER and hands it to the
driver (``QueueOutputs.dead_letters``) for the dead-letter subject. So does a
refusal by every worker there is.

Leaving: a closing worker first stops working (:meth:`stop_working`: task
capacity 0, and the tasks its program never started go back to the scheduler
at once, uncounted), lets its program finish what it started, and only then
withdraws; what it still holds then is moved as for a worker exit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from heapq import heapify, heappop, heappush

from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.protocol.cmq.book import Assignment, PeerView, SchedulerBook, SchedulerStats
from rvasync.protocol.cmq.outputs import DeadLetter, QueueAdvisory, QueueOutputs, Task
from rvasync.protocol.cmq.params import (
    DEFAULT_REASSIGN_LIMIT,
    DONE_MEMORY_FACTOR,
    RECENT_DONE_FACTOR,
    RECENT_DONE_LIMIT,
    SETTLE_HEARTBEATS,
    group_of,
    validate_backlog_limit,
    validate_complete_time,
    validate_queue_name,
    validate_reassign_limit,
    validate_worker_tasks,
    validate_worker_weight,
)
from rvasync.protocol.cmq.records import GROUP, SCHEDULER, QueueRecord, RecordKind, TaskId
from rvasync.protocol.ft import FtAction, FtMemberCore, FtOutputs, FtRecord

# FtAction members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_FT_ACTIVATE, _FT_DEACTIVATE = (FtAction.ACTIVATE, FtAction.DEACTIVATE)


# RecordKind members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_ACCEPT, _ACK, _ASSIGN, _BYE, _COMPLETE, _REFUSE, _RELEASE, _STATUS = (
    RecordKind.ACCEPT,
    RecordKind.ACK,
    RecordKind.ASSIGN,
    RecordKind.BYE,
    RecordKind.COMPLETE,
    RecordKind.REFUSE,
    RecordKind.RELEASE,
    RecordKind.STATUS,
)


__all__ = ["PLAIN_PREFIX", "QueueMemberCore"]

PLAIN_PREFIX = "plain:"
"""Sender part of the id the scheduler gives an uncertified task."""

OVERFLOW_REASON = "Task backlog limit reached."
DEACTIVATED_REASON = "Scheduler deactivated before assigning this uncertified task."
NOT_SCHEDULER_REASON = "Uncertified task reached a member that is no longer the scheduler."
CLOSED_REASON = "Worker closed before its program took this uncertified task."
REASSIGN_LIMIT_REASON = "Task moved between workers more often than the reassignment limit."
REFUSED_REASON = "Every worker of the queue refused this task."
DUPLICATE_REASON = "Another worker reports a task this worker completed: it ran twice."


class QueueMemberCore:
    """One member of distributed queue ``name`` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        member_id: str,
        worker_weight: int = 1,
        worker_tasks: int = 1,
        scheduler_weight: int = 1,
        scheduler_heartbeat: float = 1.0,
        scheduler_activation: float = 3.5,
        complete_time: float = 0.0,
        backlog_limit: int = 0,
        reassign_limit: int = DEFAULT_REASSIGN_LIMIT,
    ) -> None:
        self.name = validate_queue_name(name)
        self._worker_weight = validate_worker_weight(worker_weight)
        self._worker_tasks = validate_worker_tasks(worker_tasks)
        self._complete_time = validate_complete_time(complete_time)
        self._backlog_limit = validate_backlog_limit(backlog_limit)
        self._reassign_limit = validate_reassign_limit(reassign_limit)
        self._ft = FtMemberCore(
            group_of(self.name),
            weight=scheduler_weight,
            active_goal=1,
            heartbeat=scheduler_heartbeat,
            activation=scheduler_activation,
            member_id=member_id,
        )
        self.member_id = self._ft.member_id
        self.heartbeat = self._ft.heartbeat
        self.activation = self._ft.activation
        self._memory = DONE_MEMORY_FACTOR * self.activation
        self._recent_window = RECENT_DONE_FACTOR * self.activation
        self._joined = False
        self._left = False
        self._now = -math.inf
        self._status_seq = 0
        self._next_status = math.inf
        self._next_sweep = math.inf
        self._peers: dict[str, PeerView] = {}
        #: every task some peer's latest STATUS reports held or done, or None when a
        #: STATUS or a departure changed those (rebuilt on demand, see _reported_ids)
        self._reported: set[TaskId] | None = set()
        self._gone: dict[str, float] = {}
        self._held: dict[TaskId, Task] = {}
        #: who assigned each held task (a member id; this member's own for its own book)
        self._assigner: dict[TaskId, str] = {}
        self._done_unacked: dict[TaskId, tuple[bool, float]] = {}
        self._done_memory: dict[TaskId, float] = {}
        #: completions reported in STATUS ``recent`` (oldest first): id -> (certified, when)
        self._recent: dict[TaskId, tuple[bool, float]] = {}
        #: tasks already presented as WORKER.DUPLICATE: id -> when
        self._duplicates_told: dict[TaskId, float] = {}
        #: tasks given back to another scheduler, not yet acknowledged:
        #: id -> (certified, refused (else released), when)
        self._returned: dict[TaskId, tuple[bool, bool, float]] = {}
        self._leaving = False
        self._book: SchedulerBook | None = None
        self.stats = SchedulerStats()

    # -- views ---------------------------------------------------------------

    @property
    def is_scheduler(self) -> bool:
        return self._book is not None

    @property
    def ft_group(self) -> str:
        return self._ft.group

    @property
    def worker_weight(self) -> int:
        return self._worker_weight

    @property
    def worker_tasks(self) -> int:
        return self._worker_tasks

    @property
    def complete_time(self) -> float:
        return self._complete_time

    @property
    def backlog_limit(self) -> int:
        return self._backlog_limit

    @property
    def reassign_limit(self) -> int:
        return self._reassign_limit

    @property
    def leaving(self) -> bool:
        """True once :meth:`stop_working` was called: the member takes no more tasks."""
        return self._leaving

    @property
    def held(self) -> tuple[TaskId, ...]:
        """Tasks this member's worker holds (delivered, not completed)."""
        return tuple(self._held)

    def holds(self, tid: TaskId) -> bool:
        """True while this member's worker holds ``tid``."""
        return tid in self._held

    @property
    def backlog(self) -> int:
        """Tasks the scheduler has not been able to assign yet (0 when not the scheduler)."""
        book = self._book
        return 0 if book is None else sum(1 for a in book.tasks.values() if a.worker is None)

    def workers(self) -> list[tuple[str, int, int]]:
        """(member, worker weight, task capacity) of every other member heard recently."""
        return [(p.member, p.weight, p.capacity) for p in self._peers.values()]

    def next_deadline(self) -> float | None:
        if not self._joined or self._left:
            return None
        candidates = [self._next_status, self._next_sweep]
        ft = self._ft.next_deadline()
        if ft is not None:
            candidates.append(ft)
        candidates.extend(p.heard + self.activation for p in self._peers.values())
        book = self._book
        if book is not None:
            candidates.append(book.next_due())
            if book.settling:
                candidates.append(book.settle_until)
        return min(candidates)

    # -- inputs --------------------------------------------------------------

    def join(self, now: float) -> QueueOutputs:
        """Join the queue: announce the worker and enter the scheduler election."""
        if self._joined:
            raise NotPermitted(
                f"member {self.member_id!r} of queue {self.name!r} cannot join twice"
            )
        now = self._clock(now)
        self._joined = True
        out = QueueOutputs()
        self._absorb_ft(self._ft.join(now), now, out)
        self._send_status(now, out)
        self._next_sweep = now + self.activation
        return out

    def withdraw(self, now: float) -> QueueOutputs:
        """Leave: stop scheduling, tell the others (they reassign what this worker held).

        The BYE lists the tasks this member released and no scheduler has
        acknowledged yet: a scheduler that hears the BYE first still knows
        they were never started, and does not count their move.
        """
        out = QueueOutputs()
        if not self._joined or self._left:
            return out
        now = self._clock(now)
        self._absorb_ft(self._ft.withdraw(now), now, out)
        released = tuple((tid, c) for tid, (c, refused, _) in self._returned.items() if not refused)
        out.records.append(QueueRecord(_BYE, self.name, self.member_id, tasks=released))
        self._left = True
        return out

    def receive_ft(self, record: FtRecord, now: float) -> QueueOutputs:
        """A fault tolerance record of the scheduler election group."""
        out = QueueOutputs()
        if self._active_input():
            now = self._clock(now)
            self._absorb_ft(self._ft.receive(record, now), now, out)
        return out

    def receive(self, rec: QueueRecord, now: float) -> QueueOutputs:
        """A queue record from another member (others' queues and own echoes are ignored)."""
        out = QueueOutputs()
        if not self._active_input() or rec.queue != self.name or rec.member == self.member_id:
            return out
        if rec.to not in (GROUP, SCHEDULER, self.member_id):
            return out
        now = self._clock(now)
        kind = rec.kind
        book = self._book
        if kind is _STATUS:
            self._on_status(rec, now, out)
        elif kind is _ASSIGN:
            if rec.done:
                # Acknowledgements riding on the ASSIGN (coalesce): as in an ACK.
                self._acknowledged(rec.done)
            for (tid, certified), payload in zip(rec.tasks, rec.task_payloads(), strict=False):
                self._accept(Task(tid, certified, payload), rec.member, now, out)
        elif kind is _ACCEPT:
            if book is not None:
                for tid, _ in rec.tasks:
                    a = book.tasks.get(tid)
                    if a is not None and a.worker == rec.member and not a.accepted:
                        self._mark_accepted(book, a, now)
        elif kind is _COMPLETE:
            if book is not None:
                for tid, certified in rec.tasks:
                    self._completed(book, tid, certified, rec.member, now, out)
                self._drain_backlog(book, now, out)
        elif kind is _ACK:
            self._acknowledged(rec.tasks)
        elif kind is _REFUSE or kind is _RELEASE:
            if book is not None:
                self._given_back(book, rec, kind is _REFUSE, now, out)
        elif kind is _BYE:
            self._gone[rec.member] = now
            self._peer_left(rec.member, now, out, released={tid for tid, _ in rec.tasks})
        return out

    def peer_gone(self, member: str, now: float) -> QueueOutputs:
        """Independent confirmation that a member ended: drop it and move its tasks now."""
        out = QueueOutputs()
        if not self._active_input() or member == self.member_id:
            return out
        now = self._clock(now)
        self._absorb_ft(self._ft.peer_gone(member, now), now, out)
        self._peer_left(member, now, out)
        return out

    def task_arrived(
        self, tid: TaskId | None, subject: str, payload: bytes, now: float
    ) -> QueueOutputs:
        """A task reached this member as the queue's listening correspondent.

        ``tid`` is the certified identity (sender, subject, sequence), or None
        for a message without a certified agreement (it gets a fresh id). A
        member that is not the scheduler (any more) ignores a certified task,
        which its sender retransmits to the next scheduler, and reports an
        uncertified one lost (SCHEDULER.OVERFLOW, ``stats.dropped_uncertified``).
        """
        out = QueueOutputs()
        if self._active_input():
            self._arrived(tid, subject, payload, self._clock(now), out)
        return out

    def tasks_arrived(
        self, arrivals: Iterable[tuple[TaskId | None, str, bytes]], now: float
    ) -> QueueOutputs:
        """:meth:`task_arrived` for each (tid, subject, payload) in order, as one input.

        The outputs are those of the calls one by one, merged field by field
        (a driver feeding a slice of arrivals carries them out together).
        """
        out = QueueOutputs()
        if self._active_input():
            now = self._clock(now)
            arrived = self._arrived
            for tid, subject, payload in arrivals:
                arrived(tid, subject, payload, now, out)
        return out

    def _arrived(
        self, tid: TaskId | None, subject: str, payload: bytes, now: float, out: QueueOutputs
    ) -> None:
        book = self._book
        if book is None:
            if tid is None:
                # Nothing can send it again: its loss is reported, never silent. (The
                # driver feeds arrivals in slices, so the role can end between a task's
                # arrival and its turn.)
                self.stats.dropped_uncertified += 1
                lost = Task(TaskId(PLAIN_PREFIX + self.member_id, subject, 0), False, payload)
                out.advisories.append(self._overflow(lost, NOT_SCHEDULER_REASON))
            return
        if tid is None:
            book.plain_counter += 1
            plain = TaskId(PLAIN_PREFIX + self.member_id, subject, book.plain_counter)
            task = Task(plain, False, payload)
        else:
            task = Task(tid, True, payload)
        self._new_task(book, task, now, out)

    def complete(self, tid: TaskId, now: float) -> QueueOutputs:
        """This member's program finished task ``tid`` (it confirmed the message).

        Completing a task this worker does not hold raises
        :class:`~rvasync.errors.NotPermitted`.
        """
        task = self._held.get(tid)
        if task is None:
            raise NotPermitted(f"task {tid} is not held by this worker of queue {self.name!r}")
        now = self._clock(now)
        out = QueueOutputs()
        self._complete_held(tid, task, now, out)
        return out

    def complete_held(self, tids: Iterable[TaskId], now: float) -> QueueOutputs:
        """:meth:`complete` for each of ``tids`` this worker still holds, as one input.

        Tasks it does not hold (any more: reassigned, or completed already) are
        skipped. The outputs are those of the calls one by one, merged.
        """
        now = self._clock(now)
        out = QueueOutputs()
        held = self._held
        for tid in tids:
            task = held.get(tid)
            if task is not None:
                self._complete_held(tid, task, now, out)
        return out

    def refuse(self, tid: TaskId, now: float) -> QueueOutputs:
        """This member's program refuses task ``tid``: it goes to another worker.

        The scheduler that assigned it gives it to a worker that has not
        refused it, and never again to this one; the refusal counts towards
        the reassignment limit, and a task every worker refused is
        dead-lettered. Refusing a task this worker does not hold raises
        :class:`~rvasync.errors.NotPermitted`.
        """
        task = self._held.get(tid)
        if task is None:
            raise NotPermitted(
                f"task {tid} is not held by this worker of queue {self.name!r} "
                "(completed, refused or never assigned to it): it cannot be refused"
            )
        now = self._clock(now)
        out = QueueOutputs()
        self._give_back(tid, task, True, now, out)
        return out

    def stop_working(
        self, unstarted: Iterable[TaskId], now: float, *, dropped_uncertified: Iterable[str] = ()
    ) -> QueueOutputs:
        """The member is about to leave: it takes no more tasks and gives back ``unstarted``.

        Its task capacity drops to 0 (announced at once), tasks assigned from
        now on are given back as they arrive, and each held task of
        ``unstarted`` (delivered, but never started by the program) goes back
        to the scheduler, which moves it without counting it as a reassignment.
        ``dropped_uncertified`` names the subjects of uncertified tasks the
        program had not taken: nothing can send them again, and each loss is
        an OVERFLOW advisory. The member keeps scheduling, if it is the
        scheduler, until :meth:`withdraw`.
        """
        out = QueueOutputs()
        if not self._active_input():
            return out
        now = self._clock(now)
        self._leaving = True
        self._worker_tasks = 0
        for subject in dropped_uncertified:
            self.stats.dropped_uncertified += 1
            lost = Task(TaskId(PLAIN_PREFIX + self.member_id, subject, 0), False, b"")
            out.advisories.append(self._overflow(lost, CLOSED_REASON))
        for tid in unstarted:
            task = self._held.get(tid)
            if task is not None:
                self._give_back(tid, task, False, now, out)
        self._send_status(now, out)
        return out

    def _give_back(
        self, tid: TaskId, task: Task, refused: bool, now: float, out: QueueOutputs
    ) -> None:
        """Hand a held task back to its scheduler: refused by the program, or released."""
        del self._held[tid]
        assigner = self._assigner.pop(tid, self.member_id)
        book = self._book
        if book is not None and assigner == self.member_id:
            self._take_back(book, tid, self.member_id, refused, now, out)
            self._drain_backlog(book, now, out)
            return
        # Reported again with every STATUS until a scheduler acknowledges it.
        self._returned[tid] = (task.certified, refused, now)
        kind = _REFUSE if refused else _RELEASE
        out.records.append(
            QueueRecord(kind, self.name, self.member_id, SCHEDULER, tasks=((tid, task.certified),))
        )

    def _acknowledged(self, tasks: Iterable[tuple[TaskId, bool]]) -> None:
        """A scheduler acknowledged these completions (or tasks given back): forget them."""
        done, returned = self._done_unacked, self._returned
        for tid, _ in tasks:
            done.pop(tid, None)
            if returned:
                returned.pop(tid, None)

    def _complete_held(self, tid: TaskId, task: Task, now: float, out: QueueOutputs) -> None:
        del self._held[tid]
        assigner = self._assigner.pop(tid, self.member_id)
        self._done_memory[tid] = now
        self._remember_recent(tid, task.certified, now)
        book = self._book
        if book is not None:
            self._completed(book, tid, task.certified, self.member_id, now, out)
            self._drain_backlog(book, now, out)
        if book is None or assigner != self.member_id:
            # The scheduler that assigned it waits for word of it. Also when this member
            # is scheduler now, if another one assigned the task (two schedulers for a
            # moment): that one keeps it as accepted until a COMPLETE reaches it, and its
            # sender's retransmissions go to it. Reported (STATUS ``done``) until a
            # scheduler other than this member acknowledges it.
            self._done_unacked[tid] = (task.certified, now)
            out.records.append(
                QueueRecord(
                    _COMPLETE,
                    self.name,
                    self.member_id,
                    SCHEDULER,
                    tasks=((tid, task.certified),),
                )
            )

    def _remember_recent(self, tid: TaskId, certified: bool, now: float) -> None:
        """Report ``tid`` as completed in every STATUS for the recent window (LOST_CONFIRM).

        The newest RECENT_DONE_LIMIT only: one pushed out before its time is
        counted (``stats.unreported``); a second run of it is then detected
        by :meth:`_check_duplicates` instead of prevented.
        """
        recent = self._recent
        recent[tid] = (certified, now)
        if len(recent) > RECENT_DONE_LIMIT:
            oldest = next(iter(recent))
            _, when = recent.pop(oldest)
            if when > now - self._recent_window:
                self.stats.unreported += 1

    def _recent_to_report(self, now: float) -> tuple[tuple[TaskId, bool], ...]:
        """STATUS ``recent``: the window's completions (the unacknowledged go in ``done``)."""
        recent, horizon = self._recent, now - self._recent_window
        while recent:
            oldest = next(iter(recent))
            if recent[oldest][1] > horizon:
                break
            del recent[oldest]
        unacked = self._done_unacked
        return tuple((tid, c) for tid, (c, _) in recent.items() if tid not in unacked)

    def _check_duplicates(self, rec: QueueRecord, now: float, out: QueueOutputs) -> None:
        """Present WORKER.DUPLICATE for each task this worker completed that ``rec``'s sender
        also holds or completed: a second run nothing prevented (see RECENT_DONE_LIMIT)."""
        memory = self._done_memory
        tasks = {tid: c for tid, c in (*rec.tasks, *rec.done, *rec.recent)}
        if memory.keys().isdisjoint(tasks):
            return
        told = self._duplicates_told
        for tid, certified in tasks.items():
            if tid in memory and tid not in told:
                told[tid] = now
                self.stats.duplicates += 1
                task = Task(tid, certified, b"")
                out.advisories.append(
                    self._task_advisory(
                        "WORKER.DUPLICATE", task, DUPLICATE_REASON, ("worker", rec.member)
                    )
                )

    def set_worker_weight(self, weight: int, now: float) -> QueueOutputs:
        self._worker_weight = validate_worker_weight(weight)
        return self._changed(now)

    def set_worker_tasks(self, tasks: int, now: float) -> QueueOutputs:
        self._worker_tasks = validate_worker_tasks(tasks)
        return self._changed(now)

    def set_complete_time(self, seconds: float, now: float) -> QueueOutputs:
        """New complete time; it applies to tasks accepted from now on."""
        self._complete_time = validate_complete_time(seconds)
        return self._changed(now)

    def set_backlog_limit(self, limit: int, now: float) -> QueueOutputs:
        self._backlog_limit = validate_backlog_limit(limit)
        return self._changed(now)

    def set_reassign_limit(self, limit: int, now: float) -> QueueOutputs:
        """New reassignment limit (0: none); it applies to the next move of every task."""
        self._reassign_limit = validate_reassign_limit(limit)
        return self._changed(now)

    def handle_timer(self, now: float) -> QueueOutputs:
        out = QueueOutputs()
        if not self._active_input():
            return out
        now = self._clock(now)
        self._absorb_ft(self._ft.handle_timer(now), now, out)
        for member, peer in list(self._peers.items()):
            if peer.heard + self.activation <= now:
                self._peer_left(member, now, out)
        book = self._book
        if book is not None:
            if book.settling and now >= book.settle_until:
                self._settled(book, now, out)
            self._run_due(book, now, out)
        if now >= self._next_status:
            self._send_status(now, out)
        if now >= self._next_sweep:
            self._sweep(now)
        return out

    # -- worker half -----------------------------------------------------------

    def _accept(self, task: Task, scheduler: str, now: float, out: QueueOutputs) -> None:
        tid = task.id
        if tid in self._held:
            if scheduler != self.member_id:
                self._reply(_ACCEPT, scheduler, tid, task.certified, out)
            return
        if tid in self._done_memory:
            if scheduler != self.member_id:
                self._reply(_COMPLETE, scheduler, tid, task.certified, out)
            return
        if (self._returned or self._leaving) and self._give_back_again(task, scheduler, now, out):
            return
        self._held[tid] = task
        self._assigner[tid] = scheduler
        out.deliveries.append(task)
        if scheduler != self.member_id:
            self._reply(_ACCEPT, scheduler, tid, task.certified, out)

    def _give_back_again(self, task: Task, scheduler: str, now: float, out: QueueOutputs) -> bool:
        """Answer an ASSIGN with a refusal or release instead of delivering; True if it did.

        For a task given back and not acknowledged yet (the ASSIGN crossed the
        refusal), and for every task once this member is leaving. An
        assignment by this member's own book is delivered: the earlier refusal
        went to another scheduler, and the program decides again.
        """
        tid = task.id
        if scheduler == self.member_id:
            self._returned.pop(tid, None)
            return False
        back = self._returned.get(tid)
        if back is None:
            if not self._leaving:
                return False
            back = self._returned[tid] = (task.certified, False, now)
        self._reply(_REFUSE if back[1] else _RELEASE, scheduler, tid, task.certified, out)
        return True

    def _reply(
        self, kind: RecordKind, to: str, tid: TaskId, certified: bool, out: QueueOutputs
    ) -> None:
        out.records.append(
            QueueRecord(kind, self.name, self.member_id, to, tasks=((tid, certified),))
        )

    def _send_status(self, now: float, out: QueueOutputs) -> None:
        self._status_seq += 1
        out.records.append(
            QueueRecord(
                _STATUS,
                self.name,
                self.member_id,
                GROUP,
                seq=self._status_seq,
                weight=self._worker_weight,
                capacity=self._worker_tasks,
                tasks=tuple((tid, t.certified) for tid, t in self._held.items()),
                done=tuple((tid, c) for tid, (c, _) in self._done_unacked.items()),
                recent=self._recent_to_report(now),
            )
        )
        if self._returned:
            self._resend_returned(out)
        self._next_status = now + self.heartbeat

    def _resend_returned(self, out: QueueOutputs) -> None:
        """Tasks given back and not acknowledged: told to the scheduler again (as ``done`` is)."""
        for kind, refused in ((_REFUSE, True), (_RELEASE, False)):
            tasks = tuple((tid, c) for tid, (c, r, _) in self._returned.items() if r is refused)
            if tasks:
                out.records.append(
                    QueueRecord(kind, self.name, self.member_id, SCHEDULER, tasks=tasks)
                )

    def _changed(self, now: float) -> QueueOutputs:
        out = QueueOutputs()
        if not self._active_input():
            return out
        now = self._clock(now)
        self._send_status(now, out)
        if self._book is not None:
            self._drain_backlog(self._book, now, out)
        return out

    def _sweep(self, now: float) -> None:
        horizon = now - self._memory
        for tid in [k for k, t in self._done_memory.items() if t < horizon]:
            del self._done_memory[tid]
        for member in [k for k, t in self._gone.items() if t < horizon]:
            del self._gone[member]
        for tid in [k for k, t in self._duplicates_told.items() if t < horizon]:
            del self._duplicates_told[tid]
        for tid in [k for k, (_, t) in self._done_unacked.items() if t < horizon]:
            del self._done_unacked[tid]
        for tid in [k for k, (_, _, t) in self._returned.items() if t < horizon]:
            del self._returned[tid]
        book = self._book
        if book is not None:
            for tid in [k for k, t in book.confirmed.items() if t < horizon]:
                del book.confirmed[tid]
            for tid in [k for k, (_, t) in book.early_done.items() if t < horizon]:
                del book.early_done[tid]
        self._next_sweep = now + self.activation

    # -- membership ------------------------------------------------------------

    def _on_status(self, rec: QueueRecord, now: float, out: QueueOutputs) -> None:
        if rec.member in self._gone:
            return
        peer = self._peers.get(rec.member)
        if peer is not None and rec.seq <= peer.seq:
            return
        held = {tid for tid, _ in rec.tasks}
        done = dict(rec.done)
        recent = {tid for tid, _ in rec.recent}
        self._reported = None
        if peer is None:
            peer = PeerView(rec.member, rec.seq, rec.weight, rec.capacity, held, done, now)
            self._peers[rec.member] = peer
        else:
            peer.seq, peer.weight, peer.capacity = rec.seq, rec.weight, rec.capacity
            peer.held, peer.done, peer.heard = held, done, now
        peer.recent = recent
        if self._done_memory:
            self._check_duplicates(rec, now, out)
        book = self._book
        if book is None:
            return
        peer.unknown = _unknown(book, held)
        for tid in held:
            a = book.tasks.get(tid)
            if a is not None and a.worker == rec.member and not a.accepted:
                self._mark_accepted(book, a, now)
        for tid, certified in done.items():
            self._completed(book, tid, certified, rec.member, now, out)
        self._drain_backlog(book, now, out)

    def _peer_left(
        self, member: str, now: float, out: QueueOutputs, released: set[TaskId] | None = None
    ) -> None:
        """``member`` is gone: move its tasks (``released``: those it never started)."""
        if self._peers.pop(member, None) is None and member not in self._gone:
            return
        self._reported = None
        book = self._book
        if book is None:
            return
        for tid in list(book.by_worker.get(member, ())):
            a = book.tasks[tid]
            if released and tid in released:
                self.stats.released += 1
                self._move(book, a, now, out, exclude=member, counted=False)
                continue
            self.stats.reassigned_exit += 1
            self._move(book, a, now, out, exclude=member)
        book.by_worker.pop(member, None)
        self._drain_backlog(book, now, out)

    # -- scheduler half ----------------------------------------------------------

    def _absorb_ft(self, ft: FtOutputs, now: float, out: QueueOutputs) -> None:
        out.ft_records.extend(ft.records)
        out.advisories.extend(ft.advisories)
        for action in ft.actions:
            if action is _FT_ACTIVATE and self._book is None:
                self._activate(now, out)
            elif action is _FT_DEACTIVATE and self._book is not None:
                self._deactivate(now, out)

    def _activate(self, now: float, out: QueueOutputs) -> None:
        book = self._book = SchedulerBook()
        if any(m.active and not m.is_self for m in self._ft.ranking()):
            # A preemption: the member stepping down keeps assigning until it hears
            # this one, and a worker reports an assignment in its next STATUS only. A
            # task arriving now (a retransmission of one the other has just assigned)
            # waits until those reports are in, then is adopted, confirmed or assigned.
            book.settle_until = now + SETTLE_HEARTBEATS * self.heartbeat
        for peer in self._peers.values():
            peer.unknown = _unknown(book, peer.held)
        out.roles.append(True)
        out.advisories.append(self._role_advisory("SCHEDULER.ACTIVE"))
        # Own completions no scheduler acknowledged: their tasks will come back from
        # their senders (unconfirmed), and are confirmed then without new processing.
        # They stay reported until another scheduler acknowledges them (or the sweep):
        # the scheduler that assigned them may still be alive and waiting (see _ack).
        for tid, (certified, _) in list(self._done_unacked.items()):
            self._completed(book, tid, certified, self.member_id, now, out)

    def _deactivate(self, now: float, out: QueueOutputs) -> None:
        book = self._book
        assert book is not None
        self._book = None
        out.roles.append(False)
        out.advisories.append(self._role_advisory("SCHEDULER.INACTIVE"))
        for a in book.tasks.values():
            # Certified tasks come back to the next scheduler from their senders;
            # an uncertified one that no worker holds cannot: report its loss.
            if a.worker is None and not a.task.certified:
                self.stats.dropped_uncertified += 1
                out.advisories.append(self._overflow(a.task, DEACTIVATED_REASON))
        for task in book.settling.values():
            if not task.certified:
                self.stats.dropped_uncertified += 1
                out.advisories.append(self._overflow(task, DEACTIVATED_REASON))

    def _role_advisory(self, condition: str) -> QueueAdvisory:
        return QueueAdvisory("INFO", condition, self.name, (("name", self.name),))

    def _overflow(self, task: Task, reason: str) -> QueueAdvisory:
        return self._task_advisory("SCHEDULER.OVERFLOW", task, reason)

    def _task_advisory(
        self, condition: str, task: Task, reason: str, *more: tuple[str, str | int]
    ) -> QueueAdvisory:
        """A WARN advisory about one task: the queue, the task's identity, why, and ``more``."""
        tid = task.id
        fields = (("name", self.name), ("subject", tid.subject), ("sender", tid.sender))
        return QueueAdvisory(
            "WARN", condition, self.name, (*fields, ("seqno", tid.seq), ("reason", reason), *more)
        )

    def _new_task(self, book: SchedulerBook, task: Task, now: float, out: QueueOutputs) -> None:
        tid = task.id
        if tid in book.tasks:
            return
        if tid in book.confirmed:
            out.confirms.append(task)
            return
        if now < book.settle_until:
            book.settling.setdefault(tid, task)
            return
        # Already completed by a worker (heard in its COMPLETE or STATUS)?
        early = book.early_done.pop(tid, None)
        doer = early[0] if early is not None else None
        # Whether a peer reports the task (held or done) is known from one set
        # look-up; only a reported task needs the scan of every peer's sets.
        ids = self._reported
        reported = tid in (self._reported_ids() if ids is None else ids)
        if doer is None:
            if tid in self._done_memory and tid not in self._held:
                doer = self.member_id
            elif reported:
                # Completed: unacknowledged (done), or acknowledged by a scheduler whose
                # confirmation the sender may never have had (recent, LOST_CONFIRM).
                doer = next(
                    (p.member for p in self._peers.values() if tid in p.done or tid in p.recent),
                    None,
                )
        self.stats.tasks += 1
        if doer is not None:
            book.confirmed[tid] = now
            self.stats.completed += 1
            out.confirms.append(task)
            self._ack(doer, tid, task.certified, out)
            return
        holder = self.member_id if tid in self._held else None
        if holder is None and reported:
            holder = next((p.member for p in self._peers.values() if tid in p.held), None)
        if (
            holder is None
            and self._backlog_limit
            and self._pick(book, None) is None
            and self.backlog >= self._backlog_limit
        ):
            self.stats.overflow += 1
            out.advisories.append(self._overflow(task, OVERFLOW_REASON))
            return
        a = book.tasks[tid] = Assignment(task)
        if holder is not None:
            self.stats.adopted += 1
            book.place(a, holder)
            self._mark_accepted(book, a, now)
            return
        if book.backlog:
            # Tasks wait already, so no worker was free when the backlog was last
            # drained, and every input that frees a worker drains it (the timer
            # too, every heartbeat): the new task queues behind them without a
            # search that would find nobody (a burst used to search twice per task).
            book.place(a, None)
            book.backlog.append(tid)
            return
        self._assign(book, a, now, out)

    def _settled(self, book: SchedulerBook, now: float, out: QueueOutputs) -> None:
        """The settling after a preemption is over: decide the tasks that waited for it."""
        waiting = list(book.settling.values())
        book.settling.clear()
        for task in waiting:
            self._new_task(book, task, now, out)

    def _reported_ids(self) -> set[TaskId]:
        reported: set[TaskId] = set()
        for p in self._peers.values():
            reported.update(p.held)
            reported.update(p.done)
            reported.update(p.recent)
        self._reported = reported
        return reported

    def _pick(
        self, book: SchedulerBook, exclude: str | None, avoid: set[str] | None = None
    ) -> str | None:
        # Once per assignment and per backlog step. A peer's load: what this book
        # gave it plus what it holds that the book does not know (PeerView.unknown).
        # The best is the least (-weight, last pick, member), compared field by field
        # without building the tuples (this runs per task).
        best: str | None = None
        best_weight = best_last = 0
        by_worker, last_pick = book.by_worker, book.last_pick
        for p in self._peers.values():
            member = p.member
            if member == exclude or (avoid is not None and member in avoid):
                continue
            mine = by_worker.get(member)
            if p.capacity <= (len(mine) if mine else 0) + p.unknown:
                continue
            weight = p.weight
            last = last_pick.get(member, -1)
            if (
                best is None
                or weight > best_weight
                or (
                    weight == best_weight
                    and (last < best_last or (last == best_last and member < best))
                )
            ):
                best, best_weight, best_last = member, weight, last
        if best is not None:
            return best
        me = self.member_id
        if exclude != me and len(self._held) < self._worker_tasks and not (avoid and me in avoid):
            return me
        return None

    def _assign(
        self,
        book: SchedulerBook,
        a: Assignment,
        now: float,
        out: QueueOutputs,
        exclude: str | None = None,
        picked: str | None = None,
    ) -> None:
        """Give ``a`` to a worker (``picked``, if the caller just picked one) or the backlog."""
        worker = picked if picked is not None else self._pick(book, exclude)
        book.place(a, worker)
        a.accepted = False
        a.complete_by = math.inf
        if worker is None:
            book.backlog.append(a.task.id)
            return
        self.stats.assigned += 1
        book.tick += 1
        book.last_pick[worker] = book.tick
        out.assigned.append((a.task.id, worker))
        if worker == self.member_id:
            self._accept(a.task, self.member_id, now, out)
            self._mark_accepted(book, a, now)
            return
        self._send_assign(a, out)
        a.resend_at = now + self.heartbeat
        a.accept_by = now + self.activation
        book.schedule(a.resend_at, a.task.id, a.version)

    def _move(
        self,
        book: SchedulerBook,
        a: Assignment,
        now: float,
        out: QueueOutputs,
        *,
        exclude: str | None,
        counted: bool = True,
    ) -> None:
        """Move ``a`` away from its worker ``exclude``: to another worker, or dead-letter it.

        ``counted``: the move follows an attempt (all but a release), and the
        one past the reassignment limit dead-letters the task instead.
        """
        if counted:
            a.moves += 1
            limit = self._reassign_limit
            if limit and a.moves > limit:
                self._dead_letter(book, a, REASSIGN_LIMIT_REASON, now, out)
                return
        if a.refused_by:
            self._place_refused(book, a, exclude, now, out)
        else:
            self._assign(book, a, now, out, exclude=exclude)

    def _place_refused(
        self, book: SchedulerBook, a: Assignment, exclude: str | None, now: float, out: QueueOutputs
    ) -> None:
        """Give a refused task to a free worker that never refused it, or let it wait for one.

        With no such worker left in the queue at all, nobody will take it:
        it is dead-lettered.
        """
        refused = a.refused_by or set()
        worker = self._pick(book, exclude, refused)
        if worker is not None:
            self._assign(book, a, now, out, picked=worker)
            return
        others = [p.member for p in self._peers.values() if p.capacity]
        if self._worker_tasks:
            others.append(self.member_id)
        if all(member in refused for member in others):
            self._dead_letter(book, a, REFUSED_REASON, now, out)
            return
        book.place(a, None)
        a.accepted = False
        a.complete_by = math.inf
        book.refused_waiting.append(a.task.id)

    def _given_back(
        self, book: SchedulerBook, rec: QueueRecord, refused: bool, now: float, out: QueueOutputs
    ) -> None:
        """A worker's REFUSE or RELEASE: take its tasks back, and acknowledge them."""
        for tid, certified in rec.tasks:
            self._take_back(book, tid, rec.member, refused, now, out)
            self._ack(rec.member, tid, certified, out)
        self._drain_backlog(book, now, out)

    def _take_back(
        self,
        book: SchedulerBook,
        tid: TaskId,
        worker: str,
        refused: bool,
        now: float,
        out: QueueOutputs,
    ) -> None:
        """``worker`` gave ``tid`` back; move it if it is still that worker's (else a repeat)."""
        a = book.tasks.get(tid)
        if a is None or a.worker != worker:
            return
        if refused:
            if a.refused_by is None:
                a.refused_by = set()
            a.refused_by.add(worker)
            self.stats.refused += 1
        else:
            self.stats.released += 1
        self._move(book, a, now, out, exclude=worker, counted=refused)

    def _dead_letter(
        self, book: SchedulerBook, a: Assignment, reason: str, now: float, out: QueueOutputs
    ) -> None:
        """Give up on ``a``: confirmed to its sender, counted by an advisory, out to the driver.

        Retransmissions of a certified task are then confirmed at once (it
        stays among the confirmed ids), and a worker that still runs it may
        still complete it: that completion is only acknowledged.
        """
        task = a.task
        book.finish(task.id)
        book.confirmed[task.id] = now
        self.stats.dead_lettered += 1
        if task.certified:
            out.confirms.append(task)
        out.dead_letters.append(DeadLetter(task, reason, a.moves))
        out.advisories.append(
            self._task_advisory("SCHEDULER.DEAD_LETTER", task, reason, ("moves", a.moves))
        )

    def _send_assign(self, a: Assignment, out: QueueOutputs) -> None:
        assert a.worker is not None
        out.records.append(
            QueueRecord(
                _ASSIGN,
                self.name,
                self.member_id,
                a.worker,
                tasks=((a.task.id, a.task.certified),),
                payload=a.task.payload,
            )
        )

    def _mark_accepted(self, book: SchedulerBook, a: Assignment, now: float) -> None:
        a.accepted = True
        a.version += 1
        if self._complete_time and a.task.certified:
            a.complete_by = now + self._complete_time
            book.schedule(a.complete_by, a.task.id, a.version)

    def _run_due(self, book: SchedulerBook, now: float, out: QueueOutputs) -> None:
        for tid, version in book.pop_due(now):
            a = book.tasks.get(tid)
            if a is None or a.version != version or a.worker is None:
                continue
            if a.accepted:
                if now >= a.complete_by:
                    self.stats.reassigned_complete_time += 1
                    self._move(book, a, now, out, exclude=a.worker)
            elif now >= a.accept_by:
                self.stats.reassigned_unaccepted += 1
                self._move(book, a, now, out, exclude=a.worker)
            else:
                self._send_assign(a, out)
                a.resend_at = now + self.heartbeat
                book.schedule(min(a.resend_at, a.accept_by), tid, a.version)
        self._drain_backlog(book, now, out)

    def _drain_backlog(self, book: SchedulerBook, now: float, out: QueueOutputs) -> None:
        # The picks _pick(book, None) would make one by one, from a heap of the
        # available peers built once: an assignment changes only its worker's
        # load and last pick, so that worker goes back in with its new key
        # (-weight, last pick, member) while it has room. A busy scheduler assigns
        # most tasks here, and the scan of every peer per task was its dearest step.
        if book.refused_waiting:
            self._drain_refused(book, now, out)
        backlog = book.backlog
        tasks = book.tasks
        heap: list[tuple[int, int, str, int]] | None = None
        while backlog:
            a = tasks.get(backlog[0])
            if a is None or a.worker is not None:
                backlog.popleft()
                continue
            if heap is None:
                heap = self._available(book)
            if heap:
                worker = heap[0][2]
            elif len(self._held) < self._worker_tasks:
                worker = self.member_id
            else:
                return
            backlog.popleft()
            self._assign(book, a, now, out, picked=worker)
            if heap:
                weight, _, member, room = heappop(heap)
                if room > 1:
                    heappush(heap, (weight, book.tick, member, room - 1))

    def _drain_refused(self, book: SchedulerBook, now: float, out: QueueOutputs) -> None:
        """Give each waiting refused task to a free worker that has not refused it."""
        waiting = book.refused_waiting
        for _ in range(len(waiting)):
            a = book.tasks.get(waiting.popleft())
            if a is None or a.worker is not None:
                continue
            self._place_refused(book, a, None, now, out)

    def _available(self, book: SchedulerBook) -> list[tuple[int, int, str, int]]:
        """(-weight, last pick, member, room) of each peer _pick could choose, as a heap."""
        by_worker, last_pick = book.by_worker, book.last_pick
        heap = []
        for p in self._peers.values():
            member = p.member
            mine = by_worker.get(member)
            room = p.capacity - (len(mine) if mine else 0) - p.unknown
            if room > 0:
                heap.append((-p.weight, last_pick.get(member, -1), member, room))
        heapify(heap)
        return heap

    def _completed(
        self,
        book: SchedulerBook,
        tid: TaskId,
        certified: bool,
        worker: str,
        now: float,
        out: QueueOutputs,
    ) -> None:
        a = book.finish(tid)
        if a is not None:
            book.confirmed[tid] = now
            self.stats.completed += 1
            if a.task.certified:
                out.confirms.append(a.task)
        elif tid not in book.confirmed and certified:
            # Completed under an earlier scheduler and not yet retransmitted by
            # its sender: confirm it when it arrives. The worker keeps reporting
            # it until then, so the knowledge survives this scheduler too.
            book.early_done[tid] = (worker, now)
            return
        self._ack(worker, tid, certified, out)

    def _ack(self, worker: str, tid: TaskId, certified: bool, out: QueueOutputs) -> None:
        # This member's own completions are not acknowledged by its own book: what it
        # still reports as done is owed to another scheduler (complete(), _activate).
        if worker != self.member_id:
            out.records.append(
                QueueRecord(_ACK, self.name, self.member_id, worker, tasks=((tid, certified),))
            )

    # -- plumbing ----------------------------------------------------------------

    def _active_input(self) -> bool:
        return self._joined and not self._left

    def _clock(self, now: float) -> float:
        if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
            raise InvalidArgument(f"now must be a number of seconds, got {now!r}")
        if now > self._now:
            self._now = float(now)
        return self._now


def _unknown(book: SchedulerBook, held: set[TaskId]) -> int:
    """How many of ``held`` the scheduler neither assigned nor confirmed (PeerView.unknown)."""
    tasks, confirmed = book.tasks, book.confirmed
    return sum(1 for tid in held if tid not in tasks and tid not in confirmed)
