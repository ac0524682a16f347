"""Property: whatever happened before, a stable network settles on the right actives.

Hypothesis drives a group through random joins, withdrawals, silent crashes
(with or without independent confirmation), weight changes, disablement,
partitions and message loss below 100%. Then the network heals and stays
loss-free; after a few activation intervals exactly min(active_goal,
functioning members) members must be active, they must carry the highest
weights (among equal weights the status quo may keep any of them), every
member must agree on the ranking, a passive monitor must count the same, and
nothing may change any more.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ft_core_sim import SimNet

ACTIVATION = 3.0
WEIGHTS = st.sampled_from([1, 50, 50, 100, 100, 200])
INDEX = st.integers(0, 1000)

OPERATION = st.one_of(
    st.tuples(st.just("join"), WEIGHTS),
    st.tuples(st.just("withdraw"), INDEX),
    st.tuples(st.just("kill"), INDEX, st.booleans()),
    st.tuples(st.just("weight"), INDEX, WEIGHTS),
    st.tuples(st.just("disable"), INDEX),
    st.tuples(st.just("partition"), st.sets(INDEX, max_size=4)),
    st.tuples(st.just("heal")),
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    goal=st.integers(1, 3),
    preparation=st.sampled_from([0.0, 2.5]),
    initial=st.lists(WEIGHTS, min_size=1, max_size=5),
    steps=st.lists(st.tuples(OPERATION, st.floats(0.0, 2.0)), max_size=20),
    loss=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**32 - 1),
)
def test_stable_network_converges_on_the_highest_weights(
    goal: int,
    preparation: float,
    initial: list[int],
    steps: list[tuple[tuple, float]],
    loss: float,
    seed: int,
) -> None:
    net = SimNet(seed=seed)
    params = {"active_goal": goal, "heartbeat": 1.0, "activation": ACTIVATION}
    params["preparation"] = preparation
    monitor = net.monitor("MON", lost_interval=ACTIVATION)
    functioning: list[str] = []
    counter = 0

    def join(weight: int) -> None:
        nonlocal counter
        name = f"m{counter}"
        counter += 1
        net.member(name, weight=weight, **params)
        net.join(name)
        functioning.append(name)

    for weight in initial:
        join(weight)
    net.loss = loss
    for op, pause in steps:
        kind = op[0]
        if kind == "join":
            join(op[1])
        elif kind == "partition":
            processes = sorted(net.nodes)
            net.partition({processes[i % len(processes)] for i in op[1]})
        elif kind == "heal":
            net.heal()
        elif functioning:
            name = functioning[op[1] % len(functioning)]
            if kind == "withdraw":
                net.withdraw(name)
                functioning.remove(name)
            elif kind == "kill":
                net.kill(name, confirm=op[2])
                functioning.remove(name)
            elif kind == "weight":
                net.set_weight(name, op[2])
            elif kind == "disable":
                net.disable(name)
        net.run_for(pause)

    # From here on the network is whole and loses nothing.
    net.heal()
    net.loss = 0.0
    net.run_for(5 * ACTIVATION)
    actions_then = sum(len(net.nodes[n].actions) for n in net.nodes)
    net.run_for(3 * ACTIVATION)
    actions_now = sum(len(net.nodes[n].actions) for n in net.nodes)
    assert actions_now == actions_then, "the group kept changing after it settled"

    active = net.active()
    expected = min(goal, len(functioning))
    assert len(active) == expected
    weights = {n: net.core(n).weight for n in functioning}
    top = sorted(weights.values(), reverse=True)[:expected]
    assert sorted((weights[n] for n in active), reverse=True) == top
    views = {
        n: [(m.member, m.weight, m.active) for m in net.core(n).ranking()] for n in functioning
    }
    assert len({tuple(v) for v in views.values()}) <= 1, "members disagree on the group"
    for view in views.values():
        assert sorted(m for m, _, _ in view) == sorted(functioning)
        assert {m for m, _, a in view if a} == active
    assert monitor.core.active_count == expected
    assert monitor.core.active_members() == sorted(active)
