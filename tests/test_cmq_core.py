"""The distributed queue core's rules, one at a time, on a fault-free simulated network."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
from cmq_sim import MemberSpec, QueueSim

from rvasync.errors import InvalidArgument, InvalidSubject, MalformedMessage, NotPermitted
from rvasync.protocol.cmq import QueueMemberCore, QueueRecord, RecordKind, TaskId


def sched() -> MemberSpec:
    """A member that wins the scheduler election (a fresh spec per test: specs are mutable)."""
    return MemberSpec(scheduler_weight=9)


def _workers_of(sim: QueueSim) -> list[str]:
    return [sim.obs.deliveries[t][0] for t in sim.tasks]


def test_greatest_weight_gets_the_task() -> None:
    sim = QueueSim(
        [sched(), MemberSpec(worker_weight=3), MemberSpec(worker_weight=1)], work=(0.01, 0.01)
    )
    for i in range(6):
        sim.task_at(3.0 + i, i + 1)  # one at a time: the heavy worker is always free
    sim.run_until(60, stop_when_confirmed=True)
    assert sim.schedulers() == ["m0"]
    assert _workers_of(sim) == ["m1"] * 6


def test_round_robin_among_equal_weights() -> None:
    sim = QueueSim([sched(), MemberSpec(), MemberSpec(), MemberSpec()], work=(0.01, 0.01))
    for i in range(9):
        sim.task_at(3.0 + i, i + 1)
    sim.run_until(60, stop_when_confirmed=True)
    got = _workers_of(sim)
    assert Counter(got) == {"m1": 3, "m2": 3, "m3": 3}
    assert got[:3] == got[3:6] == got[6:9]


def test_scheduler_works_only_when_all_others_are_busy() -> None:
    sim = QueueSim([sched(), MemberSpec(), MemberSpec()], work=(5.0, 5.0))
    for i in range(4):
        sim.task_at(3.0 + 0.01 * i, i + 1)
    sim.run_until(3.5)
    held = {m: sim.members[m].held for m in sim.members}
    assert len(held["m1"]) == len(held["m2"]) == 1
    assert len(held["m0"]) == 1  # the third task: the others are full
    assert sim.members["m0"].backlog == 1  # the fourth waits for a free worker
    sim.run_until(60, stop_when_confirmed=True)
    assert sim.unconfirmed == set()


def test_dedicated_scheduler_never_works_and_capacity_is_respected() -> None:
    sim = QueueSim(
        [MemberSpec(scheduler_weight=9, worker_tasks=0), MemberSpec(worker_tasks=2)],
        work=(1.0, 1.0),
    )
    for i in range(7):
        sim.task_at(3.0, i + 1)
    sim.run_until(3.5)
    assert len(sim.members["m1"].held) == 2
    assert sim.members["m0"].backlog == 5
    sim.run_until(60, stop_when_confirmed=True)
    assert set(_workers_of(sim)) == {"m1"}
    assert sim.unconfirmed == set()


def test_backlog_limit_discards_with_an_overflow_advisory() -> None:
    core = QueueMemberCore(
        "Q",
        member_id="a",
        worker_tasks=0,
        backlog_limit=1,
        scheduler_activation=1.0,
        scheduler_heartbeat=0.5,
    )
    core.join(0.0)
    core.handle_timer(2.0)
    assert core.is_scheduler
    first = core.task_arrived(TaskId("S", "X", 1), "X", b"p", 2.1)
    assert not first.advisories and core.backlog == 1
    second = core.task_arrived(TaskId("S", "X", 2), "X", b"p", 2.2)
    (adv,) = second.advisories
    assert adv.subject == "_RV.WARN.RVCM.QUEUE.SCHEDULER.OVERFLOW.Q"
    msg = adv.to_message()
    assert msg["seqno"] == 2 and msg["sender"] == "S" and msg["subject"] == "X"
    assert msg["reason"] == "Task backlog limit reached."
    assert core.stats.overflow == 1 and not second.confirms


def test_complete_time_reassigns_a_slow_task() -> None:
    specs = [sched(), MemberSpec(worker_weight=2), MemberSpec()]
    for s in specs:
        s.complete_time = 1.0
    sim = QueueSim(specs, work=(4.0, 4.0))
    sim.task_at(3.0, 1)
    sim.run_until(60, stop_when_confirmed=True)
    assert sim.members["m0"].stats.reassigned_complete_time >= 1
    assert len(set(sim.obs.deliveries[sim.tasks[0]])) >= 2  # the duplicate the spec allows
    assert sim.unconfirmed == set()


def test_worker_exit_reassigns_its_tasks() -> None:
    sim = QueueSim([sched(), MemberSpec(worker_weight=2), MemberSpec()], work=(3.0, 3.0))
    sim.task_at(3.0, 1)
    sim.kill_at(3.5, "m1")
    sim.run_until(60, stop_when_confirmed=True)
    assert sim.obs.deliveries[sim.tasks[0]] == ["m1", "m2"]
    assert sim.members["m0"].stats.reassigned_exit == 1
    assert sim.obs.completions[sim.tasks[0]] == ["m2"]


def test_scheduler_replacement_adopts_held_tasks_and_confirms_done_ones() -> None:
    sim = QueueSim(
        [sched(), MemberSpec(scheduler_weight=5), MemberSpec(), MemberSpec()], work=(2.0, 2.0)
    )
    for i in range(3):
        sim.task_at(3.0 + 0.01 * i, i + 1)
    sim.kill_at(3.5, "m0")
    sim.run_until(60, stop_when_confirmed=True)
    assert sim.schedulers() == ["m1"]
    assert ("m1", "_RV.INFO.RVCM.QUEUE.SCHEDULER.ACTIVE.WORK.Q") in sim.obs.advisories
    assert sim.unconfirmed == set()
    assert sim.members["m1"].stats.adopted >= 1
    # The old scheduler's worker died with its task: that one alone runs twice at most.
    dupes = [t for t in sim.tasks if len(set(sim.obs.deliveries[t])) > 1]
    assert all("m0" in sim.obs.deliveries[t] for t in dupes)


def test_heavier_member_takes_over_and_the_old_scheduler_reports_inactive() -> None:
    sim = QueueSim([MemberSpec(scheduler_weight=1), MemberSpec(scheduler_weight=1)])
    sim.run_until(5.0)
    (first,) = sim.schedulers()
    other = "m1" if first == "m0" else "m0"
    sim.members[other].set_worker_weight(2, sim.now)  # a worker parameter: no effect on election
    assert sim.schedulers() == [first]
    heavy = QueueMemberCore(
        "WORK.Q",
        member_id="m9",
        scheduler_weight=5,
        scheduler_heartbeat=0.5,
        scheduler_activation=1.5,
    )
    sim.members["m9"] = heavy
    sim.alive.add("m9")
    sim._carry("m9", heavy.join(sim.now))
    sim.run_until(15.0)
    assert sim.schedulers() == ["m9"]
    assert (first, "_RV.INFO.RVCM.QUEUE.SCHEDULER.INACTIVE.WORK.Q") in sim.obs.advisories


def test_mismatched_intervals_raise_param_mismatch() -> None:
    a = QueueMemberCore("Q", member_id="a", scheduler_heartbeat=1.0, scheduler_activation=3.0)
    b = QueueMemberCore("Q", member_id="b", scheduler_heartbeat=0.5, scheduler_activation=3.0)
    a.join(0.0)
    out_b = b.join(0.0)
    got = a.receive_ft(out_b.ft_records[0], 0.1)
    (adv,) = got.advisories
    assert adv.subject == "_RV.WARN.RVFT.PARAM_MISMATCH._RVCMQ.Q"
    assert adv.to_message()["RVADV_DESC"] == "Heartbeat interval differs"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"worker_weight": 0}, "worker_weight must be at least 1"),
        ({"worker_weight": 1.5}, "worker_weight must be an integer"),
        ({"worker_tasks": -1}, "worker_tasks must be at least 0"),
        ({"scheduler_weight": 0}, "weight must be at least 1"),
        ({"complete_time": -1}, "complete_time must be zero or a positive"),
        ({"complete_time": float("inf")}, "complete_time must be zero or a positive"),
        ({"scheduler_heartbeat": 4.0}, "strictly less than the activation"),
        ({"backlog_limit": True}, "backlog_limit must be an integer"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        QueueMemberCore("Q", member_id="a", **kwargs)  # type: ignore[arg-type]  # bad on purpose


def test_bad_names_and_misuse() -> None:
    with pytest.raises(InvalidSubject):
        QueueMemberCore("A.*", member_id="a")
    core = QueueMemberCore("Q", member_id="a")
    core.join(0.0)
    with pytest.raises(NotPermitted, match="cannot join twice"):
        core.join(1.0)
    with pytest.raises(NotPermitted, match="is not held"):
        core.complete(TaskId("S", "X", 1), 1.0)
    with pytest.raises(InvalidArgument, match="worker_tasks"):
        core.set_worker_tasks(-2, 1.0)


def test_records_round_trip_and_malformed_ones_are_named() -> None:
    rec = QueueRecord(
        RecordKind.STATUS,
        "Q",
        "a",
        seq=3,
        weight=2,
        capacity=1,
        tasks=((TaskId("S", "X", 1), True),),
        done=((TaskId("S", "X", 2), False),),
        payload=b"\x00\x01",
    )
    assert QueueRecord.from_fields(rec.to_fields()) == rec
    fields = rec.to_fields()
    assert fields["v"] == 5 and fields["b"].count("[[") == 2  # no ``recent``: 5 elements
    # Version 4 (no ``recent``) is still read.
    assert QueueRecord.from_fields({**fields, "v": 4}) == rec
    with_recent = QueueRecord(
        RecordKind.STATUS,
        "Q",
        "a",
        seq=4,
        recent=((TaskId("S", "X", 7), True), (TaskId("S", "X", 9), True)),
    )
    assert QueueRecord.from_fields(with_recent.to_fields()) == with_recent
    for broken in (
        {**fields, "v": 1},  # version 1 spelled tasks out one by one
        {**fields, "v": 2},  # version 2 had no acknowledgements on an ASSIGN
        {**fields, "v": 3},  # version 3 had no REFUSE or RELEASE
        {**fields, "v": 6},
        {**fields, "v": [5]},  # unhashable
        {**fields, "b": "[1,2,3,[],[],[],[]]"},  # a seventh element
        {**fields, "b": '[1,2,3,[],[],[["S","X",true,[]]]]'},  # an empty recent group
        {**fields, "k": "NOPE"},
        {**fields, "b": "[1,2"},
        {**fields, "b": '[1,2,3,[["S","X",true,["1"]]],[]]'},  # a sequence as text
        {**fields, "b": '[1,2,3,[["S","X",true,[true]]],[]]'},  # a sequence as a bool
        {**fields, "b": '[1,2,3,[["S","X",true,[]]],[]]'},  # an empty group
        {**fields, "b": '[1,2,3,[["S","X",1,[1]]],[]]'},  # certified as a number
        {**fields, "b": '[1,2,3,[["S","X","1",true]],[]]'},  # version 1's row
        {k: v for k, v in fields.items() if k != "m"},
    ):
        with pytest.raises(MalformedMessage):
            QueueRecord.from_fields(broken)


def test_uncertified_tasks_get_unique_ids_and_are_not_confirmed() -> None:
    core = QueueMemberCore("Q", member_id="a", scheduler_activation=1.0, scheduler_heartbeat=0.5)
    core.join(0.0)
    core.handle_timer(2.0)
    out1 = core.task_arrived(None, "X", b"1", 2.1)
    (task,) = out1.deliveries
    assert task.id.sender == "plain:a" and not task.certified
    done = core.complete(task.id, 2.2)
    assert done.confirms == []
    out2 = core.task_arrived(None, "X", b"2", 2.3)
    assert out2.deliveries[0].id != task.id


def test_an_uncertified_task_at_a_member_that_is_not_scheduler_is_reported_lost() -> None:
    """The driver feeds arrived tasks in slices, so the role can end between a task's
    arrival and its turn: a certified task is left to its sender's retransmission, an
    uncertified one cannot come back and its loss is an OVERFLOW advisory, never silence."""
    from rvasync.protocol.cmq.member import NOT_SCHEDULER_REASON

    core = QueueMemberCore("Q", member_id="m1", scheduler_heartbeat=1.0, scheduler_activation=3.0)
    core.join(0.0)
    assert not core.is_scheduler
    certified = core.task_arrived(TaskId("S", "JOBS.RUN", 1), "JOBS.RUN", b"x", 0.1)
    assert not certified and core.stats.dropped_uncertified == 0
    out = core.task_arrived(None, "JOBS.RUN", b"x", 0.2)
    (advisory,) = out.advisories
    assert advisory.subject == "_RV.WARN.RVCM.QUEUE.SCHEDULER.OVERFLOW.Q"
    assert dict(advisory.fields)["reason"] == NOT_SCHEDULER_REASON
    assert dict(advisory.fields)["subject"] == "JOBS.RUN"
    assert core.stats.dropped_uncertified == 1


def test_batched_inputs_equal_the_calls_one_by_one() -> None:
    # tasks_arrived and complete_held (the driver's per-turn inputs) against the
    # one-task calls, on copies of the same scheduler and of the same worker.
    sim = QueueSim([sched(), MemberSpec(worker_tasks=3), MemberSpec(worker_tasks=3)], work=(9, 9))
    for i in range(4):
        sim.task_at(3.0 + 0.01 * i, i + 1)
    sim.run_until(3.5)
    core = sim.members["m0"]
    assert core.is_scheduler
    arrivals = [(TaskId("S", "X", n), "X", b"p") for n in (2, 10, 11, 12, 13, 10)]
    arrivals.append((None, "X", b"plain"))
    one, many = copy.deepcopy(core), copy.deepcopy(core)
    merged = [one.task_arrived(tid, subject, payload, 4.0) for tid, subject, payload in arrivals]
    batched = many.tasks_arrived(arrivals, 4.0)
    for name in ("records", "confirms", "deliveries", "advisories", "assigned"):
        assert getattr(batched, name) == [x for out in merged for x in getattr(out, name)]
    worker = sim.members["m1"]
    held = list(worker.held)
    assert held
    one, many = copy.deepcopy(worker), copy.deepcopy(worker)
    merged = [one.complete(tid, 4.0) for tid in held]
    batched = many.complete_held([*held, TaskId("S", "X", 99), held[0]], 4.0)
    assert batched.records == [r for out in merged for r in out.records]
    assert one.held == many.held == ()
