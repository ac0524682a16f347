"""Completed tasks stay reported after acknowledgement (the LOST_CONFIRM defect's fix).

A scheduler's confirmation to the sender can be lost after it acknowledged the
worker; if the scheduler is then killed, the sender delivers the task to the
next scheduler. Workers therefore keep reporting their recent completions
(STATUS ``recent``), the next scheduler confirms such a task instead of
assigning it, and a second run nothing prevented (the window's count limit
exceeded) is presented as WORKER.DUPLICATE by the worker that ran it first.
The simulated failover case is in tests/test_cmq_core_handover.py.
"""

from __future__ import annotations

import pytest

from rvasync.protocol.cmq import QueueMemberCore, QueueOutputs, QueueRecord, RecordKind, TaskId
from rvasync.protocol.cmq import member as member_module

Q = "WORK.Q"
X = TaskId("SENDER", "JOBS.RUN", 1)


def _core(mid: str, **kwargs: object) -> QueueMemberCore:
    core = QueueMemberCore(
        Q, member_id=mid, scheduler_heartbeat=1.0, scheduler_activation=2.0, **kwargs
    )
    core.join(0.0)
    return core


def _status(out: QueueOutputs) -> QueueRecord:
    (status,) = [r for r in out.records if r.kind is RecordKind.STATUS]
    return status


def _assign(core: QueueMemberCore, tid: TaskId, now: float) -> None:
    rec = QueueRecord(RecordKind.ASSIGN, Q, "s", core.member_id, tasks=((tid, True),))
    (task,) = core.receive(rec, now).deliveries
    assert task.id == tid


def _ack(core: QueueMemberCore, tid: TaskId, now: float) -> None:
    core.receive(QueueRecord(RecordKind.ACK, Q, "s", core.member_id, tasks=((tid, True),)), now)


def test_an_acknowledged_completion_stays_reported_for_the_recent_window() -> None:
    worker = _core("w", scheduler_weight=1)
    _assign(worker, X, 0.1)
    worker.complete(X, 0.2)
    _ack(worker, X, 0.3)
    status = _status(worker.handle_timer(1.0))
    assert status.done == () and status.recent == ((X, True),)
    # Four activation intervals (8 s) after the completion it is no longer reported.
    now = 1.0
    while now < 8.0:
        now += 1.0
        assert _status(worker.handle_timer(now)).recent == ((X, True),)
    assert _status(worker.handle_timer(9.0)).recent == ()


def test_a_new_scheduler_confirms_a_task_a_worker_reports_recent() -> None:
    scheduler = _core("n", worker_tasks=0, scheduler_weight=5)
    recent = QueueRecord(
        RecordKind.STATUS, Q, "w", seq=1, weight=1, capacity=1, recent=((X, True),)
    )
    scheduler.receive(recent, 1.5)
    scheduler.handle_timer(2.0)  # nobody else: active after the activation interval
    assert scheduler.is_scheduler
    out = scheduler.task_arrived(X, X.subject, b"x", 2.1)
    assert [t.id for t in out.confirms] == [X]
    assert out.assigned == [] and scheduler.stats.completed == 1


def test_a_second_run_is_presented_once_as_worker_duplicate() -> None:
    worker = _core("w")
    _assign(worker, X, 0.1)
    worker.complete(X, 0.2)
    _ack(worker, X, 0.3)
    holds = QueueRecord(RecordKind.STATUS, Q, "v", seq=1, weight=1, capacity=1, tasks=((X, True),))
    (advisory,) = worker.receive(holds, 0.5).advisories
    assert advisory.subject == "_RV.WARN.RVCM.QUEUE.WORKER.DUPLICATE." + Q
    fields = dict(advisory.fields)
    assert (fields["seqno"], fields["worker"], fields["sender"]) == (1, "v", "SENDER")
    # The other worker completes it and reports it: still one task run twice, told once.
    done = QueueRecord(RecordKind.STATUS, Q, "v", seq=2, weight=1, capacity=1, done=((X, True),))
    assert worker.receive(done, 0.9).advisories == []
    assert worker.stats.duplicates == 1


def test_completions_beyond_the_limit_are_counted_unreported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(member_module, "RECENT_DONE_LIMIT", 3)
    worker = _core("w", worker_tasks=5)
    tids = [TaskId("SENDER", "JOBS.RUN", seq) for seq in range(1, 6)]
    for i, tid in enumerate(tids):
        _assign(worker, tid, 0.1 + i / 100)
    worker.complete_held(tids, 0.2)
    for tid in tids:
        _ack(worker, tid, 0.3)
    assert [tid for tid, _ in _status(worker.handle_timer(1.0)).recent] == tids[2:]
    assert worker.stats.unreported == 2
