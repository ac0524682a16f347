"""Poison tasks and refusals in the distributed queue core (issue 44 item 9).

A task that never completes, kills every worker it reaches, or that every
worker refuses, used to circulate for ever (11 reassignments in 6 s, no
advisory). Now each move of a task from one worker to another after an
attempt counts, the move past ``reassign_limit`` dead-letters it (confirmed
to its sender, SCHEDULER.DEAD_LETTER, handed to the driver for the
dead-letter subject), and a worker's program can refuse a task, which then
goes to a worker that has not refused it. On the simulated network and clock
of ``cmq_sim``; the last test is a hypothesis property with faults.
"""

from __future__ import annotations

from collections import Counter

from cmq_sim import MemberSpec, QueueSim
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.protocol.cmq import DEFAULT_REASSIGN_LIMIT, QueueMemberCore, TaskId
from rvasync.protocol.cmq.member import REASSIGN_LIMIT_REASON, REFUSED_REASON

DEAD_LETTER = "_RV.WARN.RVCM.QUEUE.SCHEDULER.DEAD_LETTER.WORK.Q"


def _specs(workers: int, **worker: object) -> list[MemberSpec]:
    """A dedicated scheduler and ``workers`` workers (fresh specs: they are mutable)."""
    scheduler = {**worker, "scheduler_weight": 9, "worker_tasks": 0}
    specs = [MemberSpec(**scheduler)]  # type: ignore[arg-type]
    specs += [MemberSpec(**worker) for _ in range(workers)]  # type: ignore[arg-type]
    return specs


def _seq(tid: TaskId) -> int:
    return tid.seq


def test_a_task_that_never_completes_stops_circulating_by_default() -> None:
    """With complete_time set, it was reassigned at every expiry, for ever."""
    sim = QueueSim(_specs(2, complete_time=0.5), poison=frozenset({1}), work=(0.05, 0.05))
    for n in range(1, 6):
        sim.task_at(3.0 + 0.1 * n, n)
    sim.run_until(120.0, stop_when_confirmed=True)
    assert sim.unconfirmed == set()
    ((sched, tid, reason, moves),) = sim.obs.dead_letters
    assert (sched, tid.seq, reason) == ("m0", 1, REASSIGN_LIMIT_REASON)
    assert moves == DEFAULT_REASSIGN_LIMIT + 1
    # Moved back and forth between the two workers, each of which still holds it
    # (a worker's program gets a task once: a second ASSIGN is only acknowledged).
    assert sorted(sim.obs.deliveries[tid]) == ["m1", "m2"]
    assert sim.members["m0"].stats.reassigned_complete_time == DEFAULT_REASSIGN_LIMIT + 1
    assert ("m0", DEAD_LETTER) in sim.obs.advisories
    assert sim.members["m0"].stats.dead_lettered == 1
    # The other tasks ran once each; the poison one was never completed.
    assert {t.seq: len(w) for t, w in sim.obs.completions.items()} == {2: 1, 3: 1, 4: 1, 5: 1}


def test_a_task_that_kills_every_worker_is_dead_lettered_after_the_limit() -> None:
    specs = _specs(6, reassign_limit=2)
    sim = QueueSim(specs, poison=frozenset({1}), work=(0.05, 0.05))
    sim.task_at(3.0, 1)
    original = sim._carry

    def crash_on_poison(mid: str, out):  # the worker's process dies as it gets the task
        original(mid, out)
        if any(task.id.seq == 1 for task in out.deliveries):
            sim.kill(mid)

    sim._carry = crash_on_poison  # type: ignore[method-assign]
    sim.run_until(120.0, stop_when_confirmed=True)
    assert sim.unconfirmed == set()
    ((_, tid, reason, moves),) = sim.obs.dead_letters
    assert (reason, moves) == (REASSIGN_LIMIT_REASON, 3)
    assert len(sim.obs.deliveries[tid]) == 3  # three workers died of it, three survive
    assert len(sim.alive) == 4
    assert sim.members["m0"].stats.reassigned_exit == 3


def test_a_refused_task_goes_to_a_worker_that_has_not_refused_it() -> None:
    specs = _specs(3)
    specs[1].worker_weight = specs[2].worker_weight = 5  # they get the task first
    specs[1].refuses = specs[2].refuses = frozenset({1})
    sim = QueueSim(specs)
    sim.task_at(3.0, 1)
    sim.run_until(60.0, stop_when_confirmed=True)
    tid = sim.tasks[0]
    assert sorted(sim.obs.refusals[tid]) == ["m1", "m2"]
    assert sim.obs.deliveries[tid][-1] == "m3"
    assert sim.obs.completions[tid] == ["m3"]
    assert Counter(sim.obs.deliveries[tid]) == {"m1": 1, "m2": 1, "m3": 1}
    assert sim.members["m0"].stats.refused == 2
    assert sim.obs.dead_letters == []


def test_a_task_every_worker_refuses_is_dead_lettered() -> None:
    specs = _specs(2)
    for spec in specs[1:]:
        spec.refuses = frozenset({1})
    sim = QueueSim(specs)
    sim.task_at(3.0, 1)
    sim.task_at(3.0, 2)
    sim.run_until(60.0, stop_when_confirmed=True)
    assert sim.unconfirmed == set()
    ((_, tid, reason, moves),) = sim.obs.dead_letters
    assert (tid.seq, reason, moves) == (1, REFUSED_REASON, 2)
    assert sim.obs.completions[sim.tasks[1]]  # the other task is unaffected


def test_a_limit_of_zero_never_dead_letters_and_bad_limits_are_named() -> None:
    sim = QueueSim(_specs(2, complete_time=0.5, reassign_limit=0), poison=frozenset({1}))
    sim.task_at(3.0, 1)
    sim.run_until(60.0)
    assert sim.obs.dead_letters == [] and sim.unconfirmed == {sim.tasks[0]}
    assert sim.members["m0"].stats.reassigned_complete_time > 50  # what limit 0 asks for
    for bad in (-1, 1.5, True):
        try:
            QueueMemberCore("Q", member_id="a", reassign_limit=bad)  # type: ignore[arg-type]
        except InvalidArgument as exc:
            assert "reassign_limit" in str(exc)
        else:
            raise AssertionError(f"reassign_limit={bad!r} accepted")


def test_refusing_a_task_the_worker_does_not_hold_is_not_permitted() -> None:
    core = QueueMemberCore("Q", member_id="a")
    core.join(0.0)
    try:
        core.refuse(TaskId("S", "X", 1), 1.0)
    except NotPermitted as exc:
        assert "cannot be refused" in str(exc)
    else:
        raise AssertionError("refused a task it does not hold")


def test_a_leaving_worker_gives_back_unstarted_tasks_uncounted() -> None:
    specs = _specs(2, worker_tasks=3)
    specs[1].worker_weight = 5
    sim = QueueSim(specs, work=(50.0, 50.0))
    for n in (1, 2, 3):
        sim.task_at(3.0, n)
    sim.run_until(3.5)
    leaving = sim.members["m1"]
    started, *unstarted = sorted(leaving.held, key=_seq)
    sim._carry("m1", leaving.stop_working(unstarted, sim.now))
    sim.run_until(4.0)
    assert leaving.held == (started,) and leaving.leaving
    for tid in unstarted:
        assert sim.obs.deliveries[tid] == ["m1", "m2"]
    stats = sim.members["m0"].stats
    assert (stats.released, stats.reassigned) == (2, 0)
    sim.task_at(4.5, 4)  # capacity 0 now: new work goes elsewhere
    sim.run_until(5.0)
    assert sim.obs.deliveries[TaskId("SENDER", "JOBS.RUN", 4)] in (["m2"], ["m0"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workers=st.integers(2, 4),
    limit=st.integers(1, 4),
    poison=st.sets(st.integers(1, 12), max_size=3),
    refusals=st.lists(st.sets(st.integers(1, 12), max_size=4), min_size=4, max_size=4),
    complete_time=st.sampled_from([0.0, 1.0]),  # a hang is noticed only with one
    seed=st.integers(0, 2**32 - 1),
    loss=st.floats(0.0, 0.2),
    deaths=st.lists(st.tuples(st.integers(1, 4), st.floats(3.0, 10.0)), max_size=2),
)
def test_poison_and_refusals_under_faults_end_confirmed_and_counted(
    workers: int,
    limit: int,
    poison: set[int],
    refusals: list[set[int]],
    complete_time: float,
    seed: int,
    loss: float,
    deaths: list[tuple[int, float]],
) -> None:
    specs = _specs(workers, complete_time=complete_time, reassign_limit=limit)
    for spec, refused in zip(specs[1:], refusals, strict=False):
        spec.refuses = frozenset(refused)
    # With complete time 0 the scheduler waits for a hung worker however long it
    # takes ("Slow Worker"): hangs would only block the capacity for ever.
    hangs = frozenset(poison) if complete_time else frozenset()
    sim = QueueSim(specs, seed=seed, loss=loss, poison=hangs, work=(0.05, 0.3))
    for n in range(1, 13):
        sim.task_at(3.0 + 0.2 * n, n)
    survivor = f"m{workers}"  # keeps the queue able to work
    for index, when in deaths:
        if f"m{index}" != survivor:
            sim.kill_at(when, f"m{index}")
    sim.run_until(15.0)
    sim.loss = 0.0
    sim.run_until(120.0, stop_when_confirmed=True)
    dead = {tid: (reason, moves) for _, tid, reason, moves in sim.obs.dead_letters}
    note(f"dead={dead} unconfirmed={sim.unconfirmed}")
    # Nothing lost: every task is confirmed, having been completed or dead-lettered.
    assert sim.unconfirmed == set()
    for tid in sim.obs.confirmed_at:
        assert sim.obs.completions.get(tid) or tid in dead, f"{tid} confirmed unprocessed"
    # Each dead letter is counted by an advisory, and is one for a reason.
    dead_advisories = sum(1 for _, subject in sim.obs.advisories if subject == DEAD_LETTER)
    assert dead_advisories == len(sim.obs.dead_letters)
    for tid, (reason, moves) in dead.items():
        if reason == REASSIGN_LIMIT_REASON:
            assert moves == limit + 1
        else:
            assert reason == REFUSED_REASON and sim.obs.refusals[tid]
    # A worker's program sees a task twice only after refusing it (to another scheduler).
    for tid, members in sim.obs.deliveries.items():
        for member, count in Counter(members).items():
            if count > 1:
                assert member in sim.obs.refusals[tid], f"{tid} handed twice to {member}"
