"""A task must reach at most one live worker across a scheduler handover (lab chaos defect).

The lab chaos tier saw a task completed by two workers right after the active
scheduler was killed -9 and restarted: a standby took over, and the restarted,
heavier scheduler then took the role back while the standby still held
assignments. These tests replay both directions of that handover on the
simulated network (tests/cmq_sim.py): dedicated schedulers (no worker of
their own, as in the lab), three workers that never die, a steady stream of
certified tasks, so a duplicate can only come from the handover itself.
"""

from __future__ import annotations

from collections import Counter

import pytest
from cmq_sim import MemberSpec, QueueSim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync.protocol.cmq import QueueMemberCore

WORKERS = ("m2", "m3", "m4")


def _queue(seed: int, loss: float, delay: float, work: float) -> QueueSim:
    return QueueSim(
        [
            MemberSpec(worker_tasks=0, scheduler_weight=9),  # m0: the heavy scheduler
            MemberSpec(worker_tasks=0, scheduler_weight=5),  # m1: the standby
            MemberSpec(worker_tasks=2),
            MemberSpec(worker_tasks=2),
            MemberSpec(worker_tasks=2),
        ],
        seed=seed,
        loss=loss,
        delay=(0.001, delay),
        work=(work / 4, work),
        heartbeat=0.3,
        activation=1.2,
        resend=0.5,
    )


def _restart(sim: QueueSim, old: str, new: str) -> None:
    """``old`` comes back as a fresh process (a new member id, the same heavy weight)."""
    core = QueueMemberCore(
        "WORK.Q",
        member_id=new,
        worker_tasks=0,
        scheduler_weight=9,
        scheduler_heartbeat=sim.members[old].heartbeat,
        scheduler_activation=sim.members[old].activation,
    )
    sim.members[new] = core
    sim.specs[new] = MemberSpec(worker_tasks=0, scheduler_weight=9)
    sim.alive.add(new)
    sim._carry(new, core.join(sim.now))


def _run(sim: QueueSim, kill_at: float, restart_after: float, tasks: int) -> None:
    for i in range(tasks):
        sim.task_at(2.0 + 0.05 * i, i + 1)
    sim.kill_at(kill_at, "m0")
    sim.run_until(kill_at + restart_after)
    _restart(sim, "m0", "m9")
    sim.run_until(kill_at + restart_after + 30.0, stop_when_confirmed=True)


def _twice(sim: QueueSim) -> dict[object, list[str]]:
    """Tasks completed by more than one worker (every worker lives throughout)."""
    return {
        tid: done for tid, done in sim.obs.completions.items() if len(set(done) & set(WORKERS)) > 1
    }


def _check(sim: QueueSim, *, reported_ok: bool = False) -> None:
    """No task completed by two live workers; with ``reported_ok``, unless WORKER.DUPLICATE
    reported it (the project's rule: run once, or the second run is counted)."""
    twice = {
        tid: (done, sim.obs.assignments[tid])
        for tid, done in _twice(sim).items()
        if not (reported_ok and sim.obs.duplicates.get(tid))
    }
    assert twice == {}, f"completed by two live workers (completions, assignments): {twice}"
    assert sim.unconfirmed == set()
    assert sim.obs.confirmed_unprocessed == []
    for members in sim.obs.deliveries.values():
        assert [m for m, n in Counter(members).items() if n > 1] == []


def test_handover_there_and_back_on_a_perfect_network() -> None:
    # Kill the active scheduler mid-stream; the standby takes over; the heavy one
    # comes back while tasks keep flowing and the standby holds assignments.
    sim = _queue(seed=1, loss=0.0, delay=0.01, work=0.6)
    _run(sim, kill_at=4.0, restart_after=3.0, tasks=160)
    assert [m for _, m, active in sim.obs.roles if active][-3:] == ["m0", "m1", "m9"]
    _check(sim)


#: Root cause of the 'lost-confirmation' case (found by the property; a strict xfail until
#: fixed): m0 assigns task 1 to m2,
#: m2 completes it, m0 confirms it to the sender and acknowledges m2 (on the next
#: ASSIGN's ``done``), so m2 stops reporting it. The confirmation is lost on the way to
#: the sender, and m0 is killed before the sender's next retransmission, which would
#: have been confirmed again from m0's ``confirmed`` book. The sender retransmits task
#: 1 to the restarted scheduler m9; no member reports it (m2's ``done`` list only
#: carries unacknowledged completions, and m2's done memory is only consulted when the
#: task is assigned to m2 itself), so m9 assigns it afresh to m4: a completed task runs
#: a second time, silently. This is the specification's "scheduler replacement" case
#: (a task in flight, from its sender's point of view, during the change), but nothing
#: counts or reports it. The fix: a worker keeps reporting what it completed (STATUS
#: ``recent``, RECENT_DONE_FACTOR activation intervals, acknowledged or not), and a
#: scheduler confirms a task some worker reports completed instead of assigning it.


#: Root cause of the lab's defect (the 'preempting-scheduler' case, with no loss at all): the
#: standby m1 is scheduler; the restarted, heavier m9 activates at 8.4716 and m1 steps
#: down on hearing it, at 8.4737. m1's last ASSIGN of task 43 (made as it stepped
#: down) reaches m3 at 8.484, and m3 accepts it: a worker takes an assignment from
#: whichever member sends it. m3 reports it in its next STATUS, one heartbeat later
#: (8.709-8.71). Meanwhile the sender's retransmission of the unconfirmed task 43
#: reaches m9, which has no report of it yet and assigns it afresh to m2 (ASSIGN at
#: m2 8.712). Both run it at once (completions 9.12 and 9.45). A new scheduler adopts
#: only what its workers' latest STATUS already lists; for up to one heartbeat (plus
#: delays, plus a lost STATUS) after a handover it cannot see the previous scheduler's
#: last assignments, and nothing stops a worker accepting an outranked scheduler's.
#: The fix: a scheduler that activates while it still sees another active (a
#: preemption) holds the tasks that arrive for SETTLE_HEARTBEATS heartbeats, then
#: adopts, confirms or assigns them on what its workers have reported by then.


@pytest.mark.parametrize(
    ("seed", "loss", "delay", "work", "kill_at", "restart_after", "tasks", "roles"),
    [
        pytest.param(
            0, 0.05, 0.03125, 1.0, 4.0, 1.0, 120, ["m0", "m9"],
            id="lost-confirmation",
        ),
        pytest.param(
            439760661, 0.0, 0.010720096090188978, 0.9701289356210071,
            3.3937580878520652, 3.877837368310212, 80, ["m0", "m1", "m9"],
            id="preempting-scheduler",
        ),
    ],
)  # fmt: skip
def test_found_handover_cases(
    seed: int,
    loss: float,
    delay: float,
    work: float,
    kill_at: float,
    restart_after: float,
    tasks: int,
    roles: list[str],
) -> None:
    sim = _queue(seed, loss, delay, work)
    _run(sim, kill_at, restart_after, tasks)
    assert [m for _, m, active in sim.obs.roles if active] == roles
    _check(sim)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from([0.0, 0.02, 0.05]),
    delay=st.floats(0.002, 0.05),
    work=st.floats(0.05, 1.0),
    kill_at=st.floats(3.0, 5.0),
    restart_after=st.floats(0.5, 4.0),
)
def test_handover_never_gives_a_task_to_two_live_workers(
    seed: int, loss: float, delay: float, work: float, kill_at: float, restart_after: float
) -> None:
    sim = _queue(seed, loss, delay, work)
    _run(sim, kill_at, restart_after, tasks=120)
    # With loss, a worker's silence or a lost acceptance can move a task (the counted
    # exceptions); a second run of a completed task must then be reported.
    _check(sim, reported_ok=loss > 0)
