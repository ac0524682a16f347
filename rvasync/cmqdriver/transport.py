"""``rv.CmQueueTransport``: one member of a distributed queue, driven on asyncio.

Every decision is the sans-IO core's (:class:`~rvasync.protocol.cmq.QueueMemberCore`);
this class connects it to the world. It joins the queue on creation, carries
the core's records on the transport (fault tolerance records through the
fault tolerance driver's group channel, queue records on ``_RVCMQ.<name>.``
subjects), runs the core's timer, embodies the queue's certified
correspondent while the core says this member is the scheduler
(:class:`~rvasync.cmqdriver.correspondent.SchedulerCorrespondent`), and hands
assigned tasks to the program through ordinary :class:`~rvasync.CmListener`
objects, whose confirmations (automatic or explicit) complete the tasks.

Members only listen: every sending call raises
:class:`~rvasync.errors.NotPermitted`, as chapter 12 prescribes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.cmdriver import CmListener
from rvasync.cmdriver.listener import CmCallback, ListenerHooks, present_in
from rvasync.cmdriver.wire import make_label
from rvasync.cmqdriver.correspondent import SchedulerCorrespondent
from rvasync.cmqdriver.leaving import (
    CLOSE_TIMEOUT,
    check_close_timeout,
    check_dead_letter_subject,
    dead_letter_message,
    take_unstarted,
)
from rvasync.cmqdriver.routes import PeerRoutes
from rvasync.cmqdriver.wire import QueueSubjects, record_message
from rvasync.driverkit.channel import ORIGIN_MEMORY, GroupChannel
from rvasync.driverkit.deadline import DeadlineTimer
from rvasync.errors import (
    InvalidArgument,
    MalformedMessage,
    NotPermitted,
    RvError,
    TransportClosed,
)
from rvasync.message import Message
from rvasync.protocol.cm.names import check_listen_pattern
from rvasync.protocol.cmq import (
    DEFAULT_REASSIGN_LIMIT,
    DeadLetter,
    QueueMemberCore,
    QueueOutputs,
    QueueRecord,
    RecordKind,
    Task,
    TaskId,
    validate_backlog_limit,
)
from rvasync.protocol.cmq.coalesce import MERGEABLE, coalesce
from rvasync.protocol.ft import FtRecord
from rvasync.queues import Queue
from rvasync.subjects import subject_matches
from rvasync.transport.base import BaseTransport
from rvasync.transport.listener import Listener

# RecordKind members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_BYE = RecordKind.BYE


__all__ = ["CmQueueTransport"]

_SWEEP_INTERVAL = 0.5

#: Task subjects whose listener a worker remembers (the cache starts over beyond).
_LISTENER_CACHE = 1024

ARRIVALS_PER_TURN = 256
"""Tasks the scheduler's core takes in one loop turn; the rest wait for the next turns.

A sender's burst reaches the scheduler thousands of tasks at a time. Taken
in one turn, they held its loop for a second on a loaded machine, the
scheduler's heartbeats stopped, another member took over, and every
sender retransmitted every unconfirmed task to each new scheduler in turn
(tests/cmq_bench.py under load: ten times the bytes, a fifth of the tasks
per second). Between two slices the loop sends heartbeats and reads
completions."""

_LISTENER_ADVISORIES = frozenset(
    {
        ("REGISTRATION", "CERTIFIED"),
        ("REGISTRATION", "NOT_CERTIFIED"),
        ("REGISTRATION", "NO_RESPONSE"),
        ("REGISTRATION", "DISCOVERY"),
        ("REGISTRATION", "MOVED"),
        ("REGISTRATION", "COLLISION"),
        ("DELIVERY", "UNAVAILABLE"),
    }
)
"""Certified delivery advisories a listening correspondent receives (appendix B, Table 45)."""

_SHARED_MEMORY = 5.0
"""Seconds an advisory the scheduler shared is not shared again."""


class CmQueueTransport:
    """A member of the distributed queue ``name`` on ``transport`` (chapter 12).

    All members share ``name`` (a reusable correspondent name) and must
    listen to the same subjects. ``worker_weight`` (>= 1) and ``worker_tasks``
    (task capacity, >= 0; 0 makes a dedicated scheduler) guide task
    assignment; ``scheduler_weight`` (>= 1), ``scheduler_heartbeat`` and
    ``scheduler_activation`` (seconds, heartbeat < activation, identical in
    every member or they present PARAM_MISMATCH) guide the scheduler
    election; ``complete_time`` (seconds, 0 = wait for ever) makes the
    scheduler reassign certified tasks a worker has not completed in time.
    ``backlog_limit`` (0 = none) bounds the tasks a scheduler keeps waiting
    for a free worker; beyond it a task is discarded with a
    SCHEDULER.OVERFLOW advisory (the certified sender still holds it).
    ``reassign_limit`` (0 = none) bounds how often a task is moved from
    worker to worker (a poison task); past it, and when every worker refused
    it (``await listener.refuse(msg)``), the task is dead-lettered: confirmed
    to its sender, counted by a SCHEDULER.DEAD_LETTER advisory, and published
    on ``dead_letter_subject`` when there is one.

    Needs a running event loop. The member joins at once; ``close()`` (or
    leaving ``async with``) lets the program finish the tasks it started,
    gives back the others, and withdraws (see :meth:`close`).
    """

    def __init__(
        self,
        transport: BaseTransport,
        name: str,
        *,
        worker_weight: int = 1,
        worker_tasks: int = 1,
        scheduler_weight: int = 1,
        scheduler_heartbeat: float = 1.0,
        scheduler_activation: float = 3.5,
        complete_time: float = 0.0,
        backlog_limit: int = 0,
        reassign_limit: int = DEFAULT_REASSIGN_LIMIT,
        dead_letter_subject: str | None = None,
    ) -> None:
        if not isinstance(transport, BaseTransport):
            raise InvalidArgument(
                f"CmQueueTransport needs an rvasync transport, got {type(transport).__name__}"
            )
        if transport.closed:
            raise TransportClosed(f"cannot create a distributed queue member on {transport!r}")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise NotPermitted(
                "CmQueueTransport needs a running event loop: create it from async code"
            ) from None
        self._transport = transport
        self._core = QueueMemberCore(
            name,
            member_id=uuid.uuid4().hex,
            worker_weight=worker_weight,
            worker_tasks=worker_tasks,
            scheduler_weight=scheduler_weight,
            scheduler_heartbeat=scheduler_heartbeat,
            scheduler_activation=scheduler_activation,
            complete_time=complete_time,
            backlog_limit=validate_backlog_limit(backlog_limit),
            reassign_limit=reassign_limit,
        )
        self._dead_letter_subject = check_dead_letter_subject(dead_letter_subject)
        self._subjects = QueueSubjects(self._core.name, self._core.member_id)
        self._channel = GroupChannel(
            transport,
            self._core.ft_group,
            memory=ORIGIN_MEMORY * self._core.activation,
            on_record=self._on_ft_record,
            on_gone=self._on_gone,
        )
        self._correspondent = SchedulerCorrespondent(transport, self._core.name, self._on_task)
        self._timer = DeadlineTimer(self._loop, self._on_timer)
        self._hooks = ListenerHooks(
            self,
            confirm_later=self._confirm_later,
            confirm_now=self._confirm_now,
            close_listener=self._close_listener,
            track=self._track,
            queue_discarded=self._queue_discarded,
            refuse=self._refuse,
        )
        self._listeners: list[CmListener] = []
        self._next_listener_id = 0
        self._unrouted: list[Task] = []
        #: task subject -> the listener _hand_over found for it (cleared when the
        #: listeners change; a cached one that closed is looked up again)
        self._listener_of: dict[str, CmListener] = {}
        self._tracking: set[CmListener] = set()
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._internal: list[Listener] = []
        self._scheduler_listener: Listener | None = None
        self._advisory_listener: Listener | None = None
        self._recently_shared: dict[tuple[str, tuple[tuple[str | None, str], ...]], float] = {}
        self._routes = PeerRoutes()
        self._inbox = ""
        self._waiting: list[QueueRecord] = []
        self._flush_handle: asyncio.Handle | None = None
        self._arm_handle: asyncio.Handle | None = None
        self._arrivals: deque[tuple[TaskId | None, str, bytes]] = deque()
        self._arrivals_handle: asyncio.Handle | None = None
        self._completions: dict[TaskId, None] = {}
        self._completions_handle: asyncio.Handle | None = None
        self._closed = False
        #: set while close() waits for the program's started tasks (then: core holds none)
        self._drained: asyncio.Event | None = None
        self.malformed = 0
        """Queue records dropped as malformed."""
        self._start()

    # -- public view -------------------------------------------------------------

    @property
    def name(self) -> str:
        """The distributed queue's name (the members' shared correspondent name)."""
        return self._core.name

    @property
    def transport(self) -> BaseTransport:
        return self._transport

    @property
    def member_id(self) -> str:
        return self._core.member_id

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_scheduler(self) -> bool:
        """True while this member is the queue's active scheduler."""
        return self._core.is_scheduler

    @property
    def worker_weight(self) -> int:
        return self._core.worker_weight

    @worker_weight.setter
    def worker_weight(self, value: int) -> None:
        self._input(lambda now: self._core.set_worker_weight(value, now))

    @property
    def worker_tasks(self) -> int:
        return self._core.worker_tasks

    @worker_tasks.setter
    def worker_tasks(self, value: int) -> None:
        self._input(lambda now: self._core.set_worker_tasks(value, now))

    @property
    def complete_time(self) -> float:
        return self._core.complete_time

    @complete_time.setter
    def complete_time(self, value: float) -> None:
        self._input(lambda now: self._core.set_complete_time(value, now))

    @property
    def backlog_limit(self) -> int:
        return self._core.backlog_limit

    @backlog_limit.setter
    def backlog_limit(self, value: int) -> None:
        self._input(lambda now: self._core.set_backlog_limit(value, now))

    @property
    def reassign_limit(self) -> int:
        """Moves of one task between workers before it is dead-lettered (0: no limit)."""
        return self._core.reassign_limit

    @reassign_limit.setter
    def reassign_limit(self, value: int) -> None:
        self._input(lambda now: self._core.set_reassign_limit(value, now))

    @property
    def dead_letter_subject(self) -> str | None:
        """Where this member, as scheduler, publishes the tasks it gives up on (or None)."""
        return self._dead_letter_subject

    @property
    def stats(self) -> Any:
        """The scheduler's counters (tasks, assignments, reassignments by cause, overflows)."""
        return self._core.stats

    @property
    def held(self) -> int:
        """Tasks this member's worker holds (handed to the program, not yet completed)."""
        return len(self._core.held)

    def __repr__(self) -> str:
        role = "scheduler" if self.is_scheduler else "worker"
        state = "closed" if self._closed else role
        return f"<CmQueueTransport {self.name!r} {state}>"

    # -- listening ---------------------------------------------------------------

    def listen(
        self,
        subject: str,
        *,
        explicit_confirm: bool = False,
        queue: Queue | None = None,
        closure: Any = None,
        callback: CmCallback | None = None,
    ) -> CmListener:
        """A CM listener for the tasks on ``subject`` that the scheduler assigns to this worker.

        Confirmation (automatic when the program has taken the message, or
        ``await listener.confirm(msg)`` with ``explicit_confirm``) completes
        the task; the scheduler then confirms it to its sender.
        """
        self._check_open()
        check_listen_pattern(subject)
        if not isinstance(explicit_confirm, bool):
            raise InvalidArgument(
                f"explicit_confirm must be a bool, not {type(explicit_confirm).__name__}"
            )
        if queue is not None and not isinstance(queue, Queue):
            raise InvalidArgument(f"queue must be an rvasync Queue, got {type(queue).__name__}")
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        own_queue = queue is None
        if queue is None:
            queue = Queue(name=f"cmqueue:{subject}")
        dispatched = callback is not None
        self._transport.attach_queue(queue, dispatched=dispatched, shared=not own_queue)
        self._next_listener_id += 1
        listener = CmListener(
            self._hooks,
            self._next_listener_id,
            subject,
            explicit_confirm=explicit_confirm,
            queue=queue,
            own_queue=own_queue,
            closure=closure,
            callback=callback,
        )
        self._listeners.append(listener)
        self._listener_of.clear()
        if self._correspondent.active:
            self._correspondent.add_subject(subject)
        waiting, self._unrouted = self._unrouted, []
        for task in waiting:
            self._hand_over(task)
        return listener

    # -- sending is not a member's business -------------------------------------------

    def _no_sending(self, what: str) -> NotPermitted:
        return NotPermitted(
            f"{what}: members of distributed queue {self.name!r} only listen; "
            "send tasks from an ordinary CmTransport or transport"
        )

    async def send(self, msg: Message, time_limit: float | None = None) -> int:
        raise self._no_sending("send")

    async def send_reply(self, reply: Message, request: Message) -> None:
        raise self._no_sending("send_reply")

    async def send_request(self, msg: Message, timeout: float | None = None) -> Message:
        raise self._no_sending("send_request")

    async def add_listener(self, name: str, subject: str) -> bool:
        raise self._no_sending("add_listener")

    async def remove_listener(self, name: str, subject: str) -> None:
        raise self._no_sending("remove_listener")

    async def disallow_listener(self, name: str) -> None:
        raise self._no_sending("disallow_listener")

    async def allow_listener(self, name: str) -> None:
        raise self._no_sending("allow_listener")

    async def expire_messages(self, subject: str, sequence: int) -> int:
        raise self._no_sending("expire_messages")

    # -- lifecycle -----------------------------------------------------------------

    def _start(self) -> None:
        transport = self._transport
        subjects = self._subjects
        self._channel.start()
        self._inbox = transport.create_inbox()
        for subject in (subjects.group, subjects.member, self._inbox):
            self._internal.append(transport.listen(subject, callback=self._on_queue_message))
        self._internal.append(transport.listen(subjects.advisories, callback=self._on_shared))
        self._input(self._core.join)

    async def close(self, timeout: float | None = CLOSE_TIMEOUT) -> None:
        """Leave the queue: finish what the program started, give back the rest, withdraw.

        One-of-n is exactly once while the worker lives, and it lives until
        this returns. First the member stops working: it takes no more tasks,
        and those its program has not started yet (still waiting in its
        listeners' queues) go back to the scheduler at once, for other
        workers; uncertified ones, which nothing can send again, are reported
        lost (SCHEDULER.OVERFLOW). Then it waits, at most ``timeout`` seconds
        (None: as long as it takes), for the program to complete or refuse the
        tasks it started: a running callback, a task an ``async for`` is on,
        one taken for explicit confirmation. Then it withdraws: the scheduler
        role passes on at once, and a task still unfinished is moved to
        another worker (its callback is cancelled; it may run twice).

        Awaited inside one of this member's own callbacks, it waits for that
        callback too (until the timeout): close from there with
        ``asyncio.create_task(member.close())``.
        """
        limit = check_close_timeout(timeout)
        if self._closed:
            return
        if self._drained is None:
            self._stop_working()
        assert self._drained is not None
        if not self._drained.is_set() and limit != 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), limit)
        if self._closed:
            return
        with contextlib.suppress(TransportClosed):
            # Tasks still waiting for their slice reach the core first: its withdrawal
            # then reports the uncertified ones nobody took, as it does for its backlog.
            self._take_arrivals(len(self._arrivals))
            self._take_completions()  # done tasks are reported done, not reassigned
            self._input(self._core.withdraw)
        self._closed = True
        self._disarm()
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        await self._correspondent.aclose()
        self._channel.stop()
        for internal in self._internal:
            internal.close_now()
        self._internal.clear()
        self._scheduling_listeners(False)
        for listener in list(self._listeners):
            self._drop_listener(listener)

    def _stop_working(self) -> None:
        """close()'s first step: take no more tasks, give back those never started."""
        self._drained = asyncio.Event()
        certified, uncertified = take_unstarted(self._listeners)
        # Tasks waiting for a listener were never started either.
        certified += [task.id for task in self._unrouted]
        self._unrouted.clear()
        with contextlib.suppress(TransportClosed):
            self._take_completions()
            self._input(
                lambda now: self._core.stop_working(certified, now, dropped_uncertified=uncertified)
            )
        self._check_drained()

    def _check_drained(self) -> None:
        """Wake close() once the program holds no task any more."""
        drained = self._drained
        if drained is not None and not self._core.held and not self._completions:
            drained.set()

    async def __aenter__(self) -> CmQueueTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed(f"distributed queue member {self.name!r} is closed")
        if self._transport.closed:
            raise TransportClosed(
                f"the transport of distributed queue member {self.name!r} is closed"
            )

    # -- inputs --------------------------------------------------------------------

    def _input(self, step: Any) -> None:
        if self._closed:
            return
        if self._transport.closed:
            # A closed transport ends the membership: this member can no longer
            # hear or be heard, and the others take over its role and tasks.
            self._closed = True
            self._disarm()
            self._correspondent.stop()
            return
        out: QueueOutputs = step(self._loop.time())
        self._carry_out(out)
        if self._drained is not None:
            self._check_drained()
        if self._arm_handle is None:
            # The core's next deadline is asked once per loop turn, after every input
            # of the turn, not after each one: a busy scheduler has an input per task,
            # and the question scans every peer (a tenth of its time, by cProfile). A
            # deadline that moved earlier is armed one turn late, which costs nothing.
            self._arm_handle = self._loop.call_soon(self._arm)

    def _arm(self) -> None:
        self._arm_handle = None
        if not self._closed:
            self._timer.arm(self._core.next_deadline())

    def _disarm(self) -> None:
        if self._completions_handle is not None:
            self._completions_handle.cancel()
            self._completions_handle = None
        if self._arrivals_handle is not None:
            self._arrivals_handle.cancel()
            self._arrivals_handle = None
        # Certified ones stay with their senders, who give them to the next scheduler.
        # close() fed them all to the core first; with the transport closed under us
        # nothing can be presented any more, as for the tasks the core itself held.
        self._arrivals.clear()
        self._timer.cancel()
        if self._arm_handle is not None:
            self._arm_handle.cancel()
            self._arm_handle = None

    def _on_timer(self, now: float) -> None:
        self._input(lambda _now: self._core.handle_timer(now))

    def _on_ft_record(self, record: FtRecord) -> None:
        self._input(lambda now: self._core.receive_ft(record, now))

    def _on_gone(self, members: list[str]) -> None:
        for member in members:
            self._routes.forget(member)
            self._input(lambda now, m=member: self._core.peer_gone(m, now))

    def _on_queue_message(self, msg: Message) -> None:
        try:
            record = QueueRecord.from_fields(msg.field_values())  # type: ignore[arg-type]  # records have named fields only
        except MalformedMessage as exc:
            self.malformed += 1
            if self.malformed == 1:
                stderr_logger().warning(
                    "dropped a malformed distributed queue record (further ones are only counted)",
                    queue=self.name,
                    problem=str(exc),
                )
            return
        if record.member != self._core.member_id:
            self._routes.heard(record, msg.reply_subject)
        self._input(lambda now: self._core.receive(record, now))

    def _on_task(self, tid: TaskId | None, msg: Message) -> None:
        self._arrivals.append((tid, msg.subject or "", msg.to_bytes()))
        if self._arrivals_handle is None and not self._closed:
            self._arrivals_handle = self._loop.call_soon(self._take_arrivals)

    def _take_arrivals(self, limit: int = ARRIVALS_PER_TURN) -> None:
        """Feed the core at most ``limit`` arrived tasks, in arrival order."""
        if self._arrivals_handle is not None:
            self._arrivals_handle.cancel()
            self._arrivals_handle = None
        arrivals = self._arrivals
        taken = [arrivals.popleft() for _ in range(min(len(arrivals), limit))]
        if taken:
            # One input for the slice: the outputs of each arrival, in order, merged.
            self._input(lambda now: self._core.tasks_arrived(taken, now))
        if arrivals and not self._closed:
            self._arrivals_handle = self._loop.call_soon(self._take_arrivals)

    # -- outputs -------------------------------------------------------------------

    def _carry_out(self, out: QueueOutputs) -> None:
        try:
            for ft in out.ft_records:
                self._channel.send(ft)
            for rec in out.records:
                if rec.kind in MERGEABLE:
                    # Sent merged at the end of the loop turn (coalesce's docstring).
                    self._waiting.append(rec)
                    if self._flush_handle is None:
                        self._flush_handle = self._loop.call_soon(self._flush_waiting)
                    continue
                if rec.kind is _BYE:
                    self._send_waiting()  # completions before the goodbye
                self._send_record(rec)
        except TransportClosed:
            pass
        except RvError as exc:
            # A record that could not leave is repaired by the periodic status and
            # the scheduler's resends; log the cause once per failure.
            stderr_logger().warning(
                "a distributed queue record could not be sent", queue=self.name, problem=str(exc)
            )
        for role in out.roles:
            self._scheduling_listeners(role)
        for task in out.confirms:
            self._correspondent.confirm(task.id)
        for task in out.deliveries:
            self._hand_over(task)
        for dead in out.dead_letters:
            self._publish_dead_letter(dead)
        for advisory in out.advisories:
            if advisory.subject.startswith("_RV.WARN.RVCM.QUEUE.SCHEDULER.OVERFLOW."):
                self._forget_overflow(advisory.to_message())
            with contextlib.suppress(TransportClosed):
                self._transport.present(advisory.to_message())

    def _publish_dead_letter(self, dead: DeadLetter) -> None:
        """A task the scheduler gave up on, to the dead-letter subject (if there is one)."""
        subject = self._dead_letter_subject
        if subject is None:
            return
        try:
            self._transport.send_internal(dead_letter_message(subject, self.name, dead))
        except TransportClosed:
            pass
        except RvError as exc:
            stderr_logger().warning(
                "a dead-lettered task could not be published; its SCHEDULER.DEAD_LETTER "
                "advisory still counts it",
                queue=self.name,
                subject=subject,
                problem=str(exc),
            )

    def _send_record(self, rec: QueueRecord) -> None:
        """Send ``rec``: to its peer's inbox when known (cmqdriver.routes), else its subject."""
        to = self._routes.inbox_of(rec.to) or self._subjects.destination(rec.to)
        msg = record_message(to, rec)
        msg.reply_subject = self._inbox
        self._transport.send_internal(msg)

    def _send_waiting(self) -> None:
        handle, self._flush_handle = self._flush_handle, None
        if handle is not None:
            handle.cancel()
        waiting, self._waiting = self._waiting, []
        if waiting:
            for rec in coalesce(waiting):
                self._send_record(rec)

    def _flush_waiting(self) -> None:
        self._flush_handle = None
        try:
            self._send_waiting()
        except TransportClosed:
            pass
        except RvError as exc:
            stderr_logger().warning(
                "distributed queue records could not be sent", queue=self.name, problem=str(exc)
            )

    def _forget_overflow(self, adv: Message) -> None:
        try:
            tid = TaskId(str(adv["sender"]), str(adv["subject"]), int(adv["seqno"]))
        except (KeyError, TypeError, ValueError):
            return
        self._correspondent.forget(tid)

    def _scheduling_listeners(self, active: bool) -> None:
        """Start or stop what only the scheduler does: be the correspondent, take completions."""
        if active:
            if self._scheduler_listener is None and not self._closed:
                self._scheduler_listener = self._transport.listen(
                    self._subjects.scheduler, callback=self._on_queue_message
                )
                self._advisory_listener = self._transport.listen(
                    "_RV.*.RVCM.>", callback=self._share_advisory
                )
            self._correspondent.start([listener.subject for listener in self._listeners])
            return
        for listener in (self._scheduler_listener, self._advisory_listener):
            if listener is not None:
                listener.close_now()
        self._scheduler_listener = self._advisory_listener = None
        self._correspondent.stop()

    def _share_advisory(self, msg: Message) -> None:
        """A certified listener advisory of the scheduler's correspondent: every member gets it.

        Chapter 12: the members act as one listening correspondent, so an
        advisory one of them receives, all receive (except SCHEDULER.OVERFLOW,
        which stays with the scheduler). Only listener-side conditions are
        shared, and each advisory once: members sharing one transport present
        the shared copies where this listener hears them again.
        """
        subject = msg.subject or ""
        parts = subject.split(".", 5)
        if len(parts) < 6 or (parts[3], parts[4]) not in _LISTENER_ADVISORIES:
            return
        if not self._correspondent.active:
            return
        key = (subject, tuple((f.name, repr(f.value)) for f in msg))
        now = self._loop.time()
        recent = self._recently_shared
        for old in [k for k, at in recent.items() if at < now - _SHARED_MEMORY]:
            del recent[old]
        if key in recent:
            return
        recent[key] = now
        shared = Message(self._subjects.advisories, {"subject": subject, "member": self.member_id})
        shared.add("advisory", msg)
        with contextlib.suppress(RvError):
            self._transport.send_internal(shared)

    def _on_shared(self, msg: Message) -> None:
        try:
            member, subject, advisory = msg["member"], msg["subject"], msg["advisory"]
        except KeyError:
            self.malformed += 1
            return
        if member == self.member_id or not isinstance(advisory, Message):
            return
        if not isinstance(subject, str) or not subject.startswith("_RV."):
            self.malformed += 1
            return
        copy = Message(subject)
        for field in advisory:
            copy.add(field.name, field.value, field.type, field.id)
        if self._correspondent.active:
            # Heard again by this member's own sharing listener: not to be sent back.
            self._recently_shared[subject, tuple((f.name, repr(f.value)) for f in copy)] = (
                self._loop.time()
            )
        with contextlib.suppress(TransportClosed):
            self._transport.present(copy)

    # -- tasks to the program ----------------------------------------------------------

    def _hand_over(self, task: Task) -> None:
        subject = task.id.subject
        listener = self._listener_of.get(subject)
        if listener is None or listener.closed:
            # The first open listener whose subject matches (listeners only ever
            # close, and the cache is cleared when one is added or dropped).
            listener = next(
                (
                    lst
                    for lst in self._listeners
                    if not lst.closed and subject_matches(lst.subject, subject)
                ),
                None,
            )
            if listener is not None:
                if len(self._listener_of) >= _LISTENER_CACHE:
                    self._listener_of.clear()
                self._listener_of[subject] = listener
        if listener is None:
            # The program has no listener for it (yet): keep it until one appears.
            self._unrouted.append(task)
            return
        try:
            base = Message.from_bytes(task.payload)
        except RvError as exc:
            self.malformed += 1
            stderr_logger().warning(
                "a distributed queue task could not be decoded; completing it unprocessed",
                queue=self.name,
                problem=str(exc),
            )
            self._complete(task.id)
            return
        base.subject = subject
        msg = base.delivery_copy(listener, listener.closure)
        if task.certified:
            msg.cm = make_label(task.id.sender, task.id.seq, 0.0)
            listener.deliver(msg)
        else:
            # No certified agreement: nothing to confirm to anyone; the task is
            # complete once it is in the program's hands.
            msg.cm = None
            listener.deliver(msg)
            self._complete(task.id)

    def _complete(self, tid: TaskId) -> None:
        if not self._core.holds(tid) or tid in self._completions:
            return  # already completed (a second confirmation of the same message)
        # The turn's completions reach the core together, as one input (their COMPLETE
        # records leave merged at the end of the turn anyway).
        self._completions[tid] = None
        if self._completions_handle is None and not self._closed:
            self._completions_handle = self._loop.call_soon(self._take_completions)

    def _take_completions(self) -> None:
        if self._completions_handle is not None:
            self._completions_handle.cancel()
            self._completions_handle = None
        taken, self._completions = self._completions, {}
        if taken:
            # Those the worker lost meanwhile (reassigned, withdrawn) are skipped.
            self._input(lambda now: self._core.complete_held(taken, now))

    def _confirm_later(self, listener_id: int, sender: str, subject: str, sequence: int) -> None:
        self._complete(TaskId(sender, subject, sequence))

    async def _confirm_now(self, listener_id: int, sender: str, subject: str, seq: int) -> None:
        self._complete(TaskId(sender, subject, seq))

    async def _refuse(self, listener_id: int, sender: str, subject: str, seq: int) -> None:
        tid = TaskId(sender, subject, seq)
        if self._closed or tid in self._completions or not self._core.holds(tid):
            raise NotPermitted(
                f"task {seq} from {sender!r} on {subject!r} is no longer held by this worker "
                f"of queue {self.name!r} (confirmed, refused, reassigned or closed): "
                "it cannot be refused"
            )
        self._input(lambda now: self._core.refuse(tid, now))

    async def _close_listener(self, listener: CmListener, cancel_agreements: bool) -> None:
        listener.settle()
        if listener.tracking:
            listener.sweep(present_in(listener.queue))
        self._drop_listener(listener)

    def _drop_listener(self, listener: CmListener) -> None:
        listener.mark_closed()
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)
        self._listener_of.clear()
        self._tracking.discard(listener)
        queue = listener.queue
        self._transport.detach_queue(
            queue, dispatched=listener.callback is not None, shared=not listener.own_queue
        )
        if listener.own_queue:
            queue.destroy()
        else:
            queue.discard_where(lambda item: getattr(item, "listener", None) is listener)

    def _track(self, listener: CmListener) -> None:
        self._tracking.add(listener)
        if self._sweep_handle is None and not self._closed:
            self._sweep_handle = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)

    def _sweep(self) -> None:
        self._sweep_handle = None
        for listener in list(self._tracking):
            if not listener.tracking:
                self._tracking.discard(listener)
            else:
                listener.sweep(present_in(listener.queue))
        if self._tracking and not self._closed:
            self._sweep_handle = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)

    def _queue_discarded(self, queue: Queue) -> None:
        present = present_in(queue)
        for listener in list(self._tracking):
            if listener.queue is queue:
                listener.sweep(present)
