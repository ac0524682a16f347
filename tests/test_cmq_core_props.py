"""Property tests of the distributed queue core on a simulated network and clock.

Random loss, duplication, reordering (random per-copy delays), slow workers
and member deaths (crashes, no goodbye). The properties (spec chapter 12):

* every task confirmed to the sender was processed (completed by a worker);
* no worker is handed the same task twice;
* once the faults stop, every task is confirmed (nothing lost) while any
  member with task capacity survives;
* a task reaches a second worker only through the named exceptional cases:
  the number of duplicated tasks never exceeds the reassignments the cores
  counted (worker exit, unaccepted, complete time) plus the assignments made
  by a replacement scheduler;
* with no fault at all, every task is processed exactly once.
"""

from __future__ import annotations

from collections import Counter

from cmq_sim import MemberSpec, QueueSim
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

member_specs = st.builds(
    MemberSpec,
    worker_weight=st.integers(1, 3),
    worker_tasks=st.integers(0, 3),
    scheduler_weight=st.integers(1, 3),
)


def _check_common(sim: QueueSim) -> tuple[int, int]:
    assert sim.obs.confirmed_unprocessed == []
    for tid, members in sim.obs.deliveries.items():
        repeated = [m for m, n in Counter(members).items() if n > 1]
        assert repeated == [], f"{tid} handed twice to {repeated}"
    duplicated = sum(1 for members in sim.obs.deliveries.values() if len(set(members)) > 1)
    return duplicated, sim.exceptional()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(
    # Found by this property: m2 held a task m0 assigned, was scheduler for a moment
    # (lossy heartbeats) when its program completed it, and only its own book learnt of
    # it; m0 kept the task as accepted by m2 for ever (complete time 0) and ignored the
    # sender's retransmissions. The worker now reports such a completion to the others.
    specs=[
        MemberSpec(worker_weight=1, worker_tasks=1, scheduler_weight=1),
        MemberSpec(worker_weight=1, worker_tasks=0, scheduler_weight=1),
        MemberSpec(worker_weight=1, worker_tasks=1, scheduler_weight=1),
    ],
    seed=39,
    loss=0.21875,
    duplicate=0.0,
    slow=0.125,
    complete_time=0.0,
    tasks=15,
    deaths=[(1, 2.0)],
)
@given(
    specs=st.lists(member_specs, min_size=3, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    loss=st.floats(0.0, 0.3),
    duplicate=st.floats(0.0, 0.3),
    slow=st.floats(0.0, 0.2),
    complete_time=st.sampled_from([0.0, 0.0, 1.0, 3.0]),
    tasks=st.integers(10, 40),
    deaths=st.lists(st.tuples(st.integers(0, 4), st.floats(2.0, 12.0)), min_size=1, max_size=3),
)
def test_faults_lose_no_task(
    specs: list[MemberSpec],
    seed: int,
    loss: float,
    duplicate: float,
    slow: float,
    complete_time: float,
    tasks: int,
    deaths: list[tuple[int, float]],
) -> None:
    for spec in specs:
        spec.complete_time = complete_time
    # At least one member with capacity survives every death.
    if not any(s.worker_tasks for s in specs):
        specs[0].worker_tasks = 1
    survivor = next(i for i, s in enumerate(specs) if s.worker_tasks)
    sim = QueueSim(specs, seed=seed, loss=loss, duplicate=duplicate, slow=slow)
    for i in range(tasks):
        sim.task_at(2.0 + i * 0.25, i + 1)
    for index, when in deaths:
        victim = index % len(specs)
        if victim != survivor:
            sim.kill_at(when, f"m{victim}")
    sim.run_until(20.0)
    sim.loss = sim.duplicate = 0.0
    sim.slow = 0.0
    sim.run_until(400.0, stop_when_confirmed=True)
    duplicated, exceptional = _check_common(sim)
    note(f"duplicated={duplicated} exceptional={exceptional} unconfirmed={sim.unconfirmed}")
    assert sim.unconfirmed == set(), f"lost: {sorted(sim.unconfirmed)}"
    assert duplicated <= exceptional
    # Once the network is sound again the election settles on one scheduler.
    sim.run_until(sim.now + 10.0)
    assert len(sim.schedulers()) == 1


@settings(max_examples=25, deadline=None)
@given(
    specs=st.lists(member_specs, min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    tasks=st.integers(1, 60),
    spacing=st.floats(0.0, 0.3),
)
def test_no_fault_processes_each_task_exactly_once(
    specs: list[MemberSpec], seed: int, tasks: int, spacing: float
) -> None:
    if not any(s.worker_tasks for s in specs):
        specs[-1].worker_tasks = 1
    sim = QueueSim(specs, seed=seed)
    for i in range(tasks):
        sim.task_at(3.0 + i * spacing, i + 1)
    sim.run_until(300.0, stop_when_confirmed=True)
    duplicated, exceptional = _check_common(sim)
    assert sim.unconfirmed == set()
    assert exceptional == 0
    assert duplicated == 0
    assert all(len(sim.obs.completions[t]) == 1 for t in sim.tasks)
