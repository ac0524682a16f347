"""A simulated distributed queue: members, a certified sender and worker programs on one clock.

Drives :class:`~rvasync.protocol.cmq.QueueMemberCore` instances the way the
asyncio driver does, through a network that loses, duplicates and delays
(hence reorders) every copy independently, all from one seeded RNG:

* fault tolerance and queue records travel between members (records go
  through their field encoding, as on the wire);
* the sender models a certified sender: it multicasts each task, and keeps
  retransmitting every unconfirmed one to the queue's name at a fixed period
  (what a CM sender does for a listener that re-registers with require-old);
  only the member that is scheduler at arrival takes it (the driver listens as
  the queue's correspondent only while scheduler);
* a confirmation travels back to the sender over the same lossy network;
* each member's program completes a delivered task after a random processing
  time, unless the member died meanwhile; a poison task (``poison``) never
  completes, and a member's program refuses the tasks its spec lists in
  ``refuses`` (after a short processing time).

Members die (crash: no goodbye) at chosen times. Everything observed is kept
for the test's assertions.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from rvasync.protocol.cmq import (
    DEFAULT_REASSIGN_LIMIT,
    GROUP,
    SCHEDULER,
    QueueAdvisory,
    QueueMemberCore,
    QueueOutputs,
    QueueRecord,
    TaskId,
)
from rvasync.protocol.cmq.coalesce import MERGEABLE, coalesce
from rvasync.protocol.ft import FtRecord

SENDER = "SENDER"
SUBJECT = "JOBS.RUN"


@dataclass
class MemberSpec:
    worker_weight: int = 1
    worker_tasks: int = 1
    scheduler_weight: int = 1
    complete_time: float = 0.0
    reassign_limit: int = DEFAULT_REASSIGN_LIMIT
    refuses: frozenset[int] = frozenset()
    """Sequence numbers of the tasks this member's program refuses."""


@dataclass
class Observed:
    deliveries: dict[TaskId, list[str]] = field(default_factory=lambda: defaultdict(list))
    completions: dict[TaskId, list[str]] = field(default_factory=lambda: defaultdict(list))
    assignments: dict[TaskId, list[tuple[str, int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    confirmed_at: dict[TaskId, float] = field(default_factory=dict)
    confirmed_unprocessed: list[TaskId] = field(default_factory=list)
    roles: list[tuple[float, str, bool]] = field(default_factory=list)
    advisories: list[tuple[str, str]] = field(default_factory=list)
    refusals: dict[TaskId, list[str]] = field(default_factory=lambda: defaultdict(list))
    dead_letters: list[tuple[str, TaskId, str, int]] = field(default_factory=list)
    """(scheduler, task, reason, moves) of every task given up on."""
    duplicates: dict[TaskId, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Members that presented WORKER.DUPLICATE for each task (a second run, reported)."""


class QueueSim:
    def __init__(
        self,
        specs: list[MemberSpec],
        *,
        seed: int = 0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        delay: tuple[float, float] = (0.001, 0.01),
        work: tuple[float, float] = (0.01, 0.2),
        slow: float = 0.0,
        resend: float = 1.0,
        heartbeat: float = 0.5,
        activation: float = 1.5,
        poison: frozenset[int] = frozenset(),
    ) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.duplicate = duplicate
        self.delay = delay
        self.work = work
        self.slow = slow
        self.resend = resend
        self.poison = poison
        self.specs: dict[str, MemberSpec] = {}
        self.now = 0.0
        self.events: list[tuple[float, int, str, Any]] = []
        self.counter = 0
        self.members: dict[str, QueueMemberCore] = {}
        self.alive: set[str] = set()
        self.epochs: Counter[str] = Counter()
        self.obs = Observed()
        self.tasks: list[TaskId] = []
        self.unconfirmed: set[TaskId] = set()
        self.pending_sends = 0
        for i, spec in enumerate(specs):
            mid = f"m{i}"
            core = QueueMemberCore(
                "WORK.Q",
                member_id=mid,
                worker_weight=spec.worker_weight,
                worker_tasks=spec.worker_tasks,
                scheduler_weight=spec.scheduler_weight,
                scheduler_heartbeat=heartbeat,
                scheduler_activation=activation,
                complete_time=spec.complete_time,
                reassign_limit=spec.reassign_limit,
            )
            self.members[mid] = core
            self.specs[mid] = spec
            self.alive.add(mid)
        for mid, core in self.members.items():
            self._carry(mid, core.join(self.now))
        self.schedule_resend(self.now + resend)

    # -- events --------------------------------------------------------------

    def _push(self, when: float, kind: str, item: Any) -> None:
        self.counter += 1
        heapq.heappush(self.events, (when, self.counter, kind, item))

    def _transmit(self, kind: str, item: Any, dests: list[str]) -> None:
        for dest in dests:
            if self.rng.random() < self.loss:
                continue
            copies = 2 if self.rng.random() < self.duplicate else 1
            for _ in range(copies):
                self._push(self.now + self.rng.uniform(*self.delay), kind, (dest, item))

    def send_task(self, seq: int) -> None:
        tid = TaskId(SENDER, SUBJECT, seq)
        self.tasks.append(tid)
        self.unconfirmed.add(tid)
        self._transmit("task", tid, sorted(self.members))

    def schedule_resend(self, when: float) -> None:
        self._push(when, "resend", None)

    def kill(self, mid: str) -> None:
        self.alive.discard(mid)

    def kill_at(self, when: float, mid: str) -> None:
        self._push(when, "kill", mid)

    def task_at(self, when: float, seq: int) -> None:
        self.pending_sends += 1
        self._push(when, "send", seq)

    # -- carrying out outputs ------------------------------------------------

    def _carry(self, mid: str, out: QueueOutputs) -> None:
        if mid not in self.alive:
            return
        everyone = sorted(self.members)
        for ft in out.ft_records:
            self._transmit("ft", ft.to_fields(), everyone)
        # As the driver does: records listing tasks for one destination go merged.
        records = [r for r in out.records if r.kind not in MERGEABLE]
        records += coalesce(r for r in out.records if r.kind in MERGEABLE)
        for rec in records:
            dests = everyone if rec.to in (GROUP, SCHEDULER) else [rec.to]
            self._transmit("rec", rec.to_fields(), dests)
        for role in out.roles:
            if role:
                self.epochs[mid] += 1
            self.obs.roles.append((self.now, mid, role))
        for task, worker in out.assigned:
            self.obs.assignments[task].append((mid, self.epochs[mid], worker))
        for task in out.confirms:
            self._transmit("confirm", task.id, [SENDER])
        for task in out.deliveries:
            self.obs.deliveries[task.id].append(mid)
            took = self.rng.uniform(*self.work)
            if self.slow and self.rng.random() < self.slow:
                took *= 20
            spec = self.specs.get(mid)
            if spec is not None and task.id.seq in spec.refuses:
                self._push(self.now + took / 10, "refuse", (mid, task.id))
            elif task.id.seq not in self.poison:
                self._push(self.now + took, "done", (mid, task.id))
        for dead in out.dead_letters:
            self.obs.dead_letters.append((mid, dead.task.id, dead.reason, dead.moves))
        for adv in out.advisories:
            self.obs.advisories.append((mid, adv.subject))
            if isinstance(adv, QueueAdvisory) and adv.condition == "WORKER.DUPLICATE":
                fields = dict(adv.fields)
                tid = TaskId(str(fields["sender"]), str(fields["subject"]), int(fields["seqno"]))
                self.obs.duplicates[tid].append(mid)

    def _deliver(self, kind: str, item: Any) -> None:
        if kind == "send":
            self.pending_sends -= 1
            self.send_task(item)
            return
        if kind == "resend":
            if self.unconfirmed:
                for tid in sorted(self.unconfirmed):
                    self._transmit("task", tid, sorted(self.members))
            self.schedule_resend(self.now + self.resend)
            return
        if kind == "kill":
            self.kill(item)
            return
        if kind == "done":
            mid, tid = item
            if mid in self.alive:
                self.obs.completions[tid].append(mid)
                self._carry(mid, self.members[mid].complete(tid, self.now))
            return
        if kind == "refuse":
            mid, tid = item
            if mid in self.alive and self.members[mid].holds(tid):
                self.obs.refusals[tid].append(mid)
                self._carry(mid, self.members[mid].refuse(tid, self.now))
            return
        dest, payload = item
        if kind == "confirm":
            if payload in self.unconfirmed:
                self.unconfirmed.discard(payload)
                self.obs.confirmed_at[payload] = self.now
                if not self.obs.completions.get(payload):
                    self.obs.confirmed_unprocessed.append(payload)
            return
        if dest not in self.alive:
            return
        core = self.members[dest]
        if kind == "task":
            if core.is_scheduler:
                self._carry(dest, core.task_arrived(payload, SUBJECT, b"x", self.now))
        elif kind == "ft":
            self._carry(dest, core.receive_ft(FtRecord.from_fields(payload), self.now))
        elif kind == "rec":
            self._carry(dest, core.receive(QueueRecord.from_fields(payload), self.now))

    # -- running ---------------------------------------------------------------

    def run_until(self, end: float, *, stop_when_confirmed: bool = False) -> None:
        while True:
            if stop_when_confirmed and not self.unconfirmed and not self.pending_sends:
                return
            deadline = None
            who = None
            for mid in sorted(self.alive):
                d = self.members[mid].next_deadline()
                if d is not None and (deadline is None or d < deadline):
                    deadline, who = d, mid
            event_at = self.events[0][0] if self.events else None
            if event_at is not None and (deadline is None or event_at <= deadline):
                if event_at > end:
                    self.now = end
                    return
                when, _, kind, item = heapq.heappop(self.events)
                self.now = max(self.now, when)
                self._deliver(kind, item)
            elif deadline is not None and who is not None:
                if deadline > end:
                    self.now = end
                    return
                self.now = max(self.now, deadline)
                self._carry(who, self.members[who].handle_timer(self.now))
            else:
                self.now = end
                return

    def schedulers(self) -> list[str]:
        return [m for m in sorted(self.alive) if self.members[m].is_scheduler]

    def exceptional(self) -> int:
        """Reassignments the cores counted, plus assignments of a task by a later scheduler."""
        counted = sum(core.stats.reassigned for core in self.members.values())
        replaced = 0
        for rows in self.obs.assignments.values():
            epochs = {(sched, epoch) for sched, epoch, _ in rows}
            replaced += len(epochs) - 1
        return counted + replaced
