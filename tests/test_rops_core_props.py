"""Property tests of the remote-operations core on a simulated network, clock and disk.

Every PDU may be lost, duplicated, delayed and reordered; either endpoint
may crash at any step (restarting from what it had written). Checked from
outside the cores (tests/rops_sim.py records what each handler really did):

* at most once: no invocation's handler takes effect twice;
* the invoker ends knowing the outcome of every invocation it recorded,
  and that knowledge is true: a result means performed once, a permanent
  error or "not executed" means never performed (not even by a late copy),
  "unknown" and "interrupted" are the only endings that admit either;
* exactly once when the network eventually delivers: every invocation ends
  with its result, performed once, and every 3-way result is acknowledged;
  except an invocation whose handler was running when its performer crashed,
  which ends with the permanent "interrupted" error (never performed again).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rops_sim import Config, World

from rvasync.protocol.rops import INTERRUPTED, Settled
from rvasync.protocol.rops.performer import PState

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_ARGS = st.lists(
    st.tuples(
        st.floats(0.0, 15.0),
        st.sampled_from(["ok", "perm", "trans"]),
        st.integers(0, 3),
        st.sampled_from([2, 3]),
    ),
    min_size=1,
    max_size=6,
)


def _start(world: World, calls: list[tuple[float, str, int, int]]) -> None:
    for n, (at, kind, k, hs) in enumerate(calls):
        arg = f"{kind}:{n}:{k}".encode()
        world.schedule_invoke(at, arg, hs)


def _check_truth(world: World) -> None:
    ids = world.all_ids
    assert len(ids) == len(set(ids)), "an invocation id was used twice"
    for invoke_id, count in world.effects.items():
        assert count <= 1, f"{invoke_id} performed {count} times"
    for invoke_id, arg in world.issued.items():
        # What the waiting application was told, or (when the invoker crashed before it
        # could tell) what its restarted successor holds for the application to ask.
        done = world.completions.get(invoke_id) or world.nodes["A"].core.invoker.settled(invoke_id)
        assert done is not None, f"{invoke_id} ({arg!r}) never settled for its invoker"
        effects = world.effects[invoke_id]
        if done.how is Settled.RESULT:
            assert done.outcome is not None and done.outcome.body == b"done:" + arg
            assert effects == 1
        elif done.how is Settled.ERROR:
            assert done.outcome is not None
            if done.outcome.code == INTERRUPTED:
                assert effects <= 1
            else:
                assert done.outcome.code == "refused" and effects == 0
                assert arg.startswith(b"perm")
        elif done.how is Settled.NOT_EXECUTED:
            assert effects == 0, f"{invoke_id} said not executed, yet was performed"
        elif done.how is Settled.ACKNOWLEDGED:
            assert effects == 1
        else:
            assert done.how is Settled.UNKNOWN
    # Effects of invocations never recorded by the invoker are impossible: nothing left unrecorded.
    for invoke_id in world.effects:
        assert invoke_id in world.issued


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    calls=_ARGS,
    loss=st.floats(0.0, 0.6),
    dup=st.floats(0.0, 0.4),
    crash=st.floats(0.0, 0.15),
    crash_before=st.floats(0.0, 0.1),
    crash_in_handler=st.floats(0.0, 0.3),
    straggle=st.floats(0.0, 0.3),
)
def test_at_most_once_and_outcome_known(
    seed: int,
    calls: list[tuple[float, str, int, int]],
    loss: float,
    dup: float,
    crash: float,
    crash_before: float,
    crash_in_handler: float,
    straggle: float,
) -> None:
    cfg = Config(
        loss=loss,
        duplicate=dup,
        crash=crash,
        crash_before_write=crash_before,
        crash_in_handler=crash_in_handler,
        crash_until=200.0,
        straggle=straggle,
    )
    world = World(seed, cfg)
    _start(world, calls)
    world.run(until=2000.0)
    _check_truth(world)


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    calls=_ARGS,
    loss=st.floats(0.0, 0.9),
    dup=st.floats(0.0, 0.5),
    loss_until=st.floats(0.0, 20.0),
    crash=st.floats(0.0, 0.1),
    straggle=st.floats(0.0, 0.2),
)
def test_exactly_once_when_the_network_eventually_delivers(
    seed: int,
    calls: list[tuple[float, str, int, int]],
    loss: float,
    dup: float,
    loss_until: float,
    crash: float,
    straggle: float,
) -> None:
    # Budgets outlast the lossy period (20 s) and the crashes: retries span ~90 s,
    # a 3-way result is offered for ~60 s before the performer gives up on its ack.
    from rvasync.protocol.rops import Retention, RetryPolicy

    cfg = Config(
        loss=loss,
        duplicate=dup,
        loss_until=loss_until,
        crash=crash,
        crash_before_write=crash / 2,
        crash_until=loss_until,
        straggle=straggle,
        straggle_max=10.0,
        policy=RetryPolicy(1.0, 30, 1.5, 4.0, 3),
        retention=Retention(window=1e6, ack_timeout=4.0, result_retries=10),
    )
    world = World(seed, cfg)
    _start(world, calls)
    world.run(until=2000.0)
    _check_truth(world)
    for invoke_id, arg in world.issued.items():
        done = world.completions.get(invoke_id) or world.nodes["A"].core.invoker.settled(invoke_id)
        assert done is not None
        if invoke_id in world.cut_short:
            # A crash cut its handler short: the one ending that admits either.
            assert done.how is Settled.ERROR and done.outcome is not None
            assert done.outcome.code == INTERRUPTED
            continue
        if arg.startswith(b"perm"):
            assert done.how is Settled.ERROR
            continue
        assert done.how is Settled.RESULT, (invoke_id, done)
        assert world.effects[invoke_id] == 1
        if world.handshake_of[invoke_id] == 3:
            assert world.nodes["B"].core.performer.state_of(invoke_id) is PState.ACKED
    assert not world.reports, world.reports


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), dup=st.floats(0.0, 0.3), loss=st.floats(0.0, 0.3))
def test_piggybacked_acknowledgments_settle_every_three_way_result(
    seed: int, dup: float, loss: float
) -> None:
    # Invocations close together: many acknowledgments ride on the next INVOKE.
    from rvasync.protocol.rops import Retention, RetryPolicy

    cfg = Config(
        loss=loss,
        duplicate=dup,
        loss_until=30.0,
        delay=(0.01, 0.1),
        handler_time=(0.0, 0.1),
        policy=RetryPolicy(1.0, 30, 1.5, 4.0, 3),
        retention=Retention(window=1e6, ack_timeout=4.0, result_retries=10),
    )
    world = World(seed, cfg)
    for n in range(40):
        world.schedule_invoke(n * 0.3, f"ok:{n}:0".encode(), 3)
    world.run(until=2000.0)
    _check_truth(world)
    assert world.piggybacked > 0
    for invoke_id in world.issued:
        assert world.effects[invoke_id] == 1
        assert world.nodes["B"].core.performer.state_of(invoke_id) is PState.ACKED
    assert not world.reports, world.reports
