"""Property tests of the queue core against a reference model, for both twins.

The model is a plain list with the limit policies written out longhand; every
implementation of ``queuecore`` (pure and, when built, compiled) must agree
with it on random sequences of puts, polls, pushes back and filtered discards.
"""

from __future__ import annotations

import asyncio
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync import _accel
from rvasync.queues import LimitPolicy

IMPLEMENTATIONS = _accel.implementations("queuecore")
SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda m: m.__name__)
def impl(request):
    return request.param


def probe(impl, limit: int, policy: int, amount: int):
    """A core whose hooks only count: reports (discarding puts) and notifications."""

    class Probe(impl.QueueCore):
        def __init__(self) -> None:
            super().__init__(limit, policy, amount)
            self.reports = 0
            self.notified = 0

        def _limit_exceeded(self) -> None:
            self.reports += 1

        def _notify(self) -> None:
            self.notified += 1

    return Probe()


class Model:
    def __init__(self, limit: int, policy: int, amount: int) -> None:
        self.items: list[int] = []
        self.limit, self.policy, self.amount = limit, policy, amount
        self.discarded = 0
        self.reports = 0

    def put(self, item: int) -> None:
        if self.limit and len(self.items) >= self.limit:
            self.reports += 1
            if self.policy == LimitPolicy.DISCARD_NEW:
                self.discarded += 1
                return
            count = min(self.amount, len(self.items))
            if self.policy == LimitPolicy.DISCARD_FIRST:
                del self.items[:count]
            else:
                del self.items[len(self.items) - count :]
            self.discarded += count
        self.items.append(item)

    def poll(self):
        return self.items.pop(0) if self.items else None


@st.composite
def configurations(draw):
    limit = draw(st.integers(0, 12))
    if limit == 0:
        return 0, int(LimitPolicy.DISCARD_NONE), 1
    policy = draw(
        st.sampled_from(
            [LimitPolicy.DISCARD_FIRST, LimitPolicy.DISCARD_LAST, LimitPolicy.DISCARD_NEW]
        )
    )
    return limit, int(policy), draw(st.integers(1, limit))


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 10**6)),
        st.tuples(st.just("poll"), st.none()),
        st.tuples(st.just("push_front"), st.integers(-1000, -1)),
        st.tuples(st.just("discard_odd"), st.none()),
    ),
    max_size=150,
)


@SETTINGS
@given(config=configurations(), ops=operations)
def test_core_matches_model(impl, config, ops):
    core, model = probe(impl, *config), Model(*config)
    for op, value in ops:
        if op == "put":
            core.deliver(value)
            model.put(value)
        elif op == "poll":
            assert core.poll() == model.poll()
        elif op == "push_front":
            # Only ever gives back an item just taken, so it never overflows.
            if model.items:
                taken = core.poll()
                assert taken == model.poll()
                core._push_front(taken)
                model.items.insert(0, taken)
        else:
            removed = core.discard_where(lambda n: n % 2 == 1)
            kept = [n for n in model.items if n % 2 == 0]
            assert removed == len(model.items) - len(kept)
            model.items = kept
        assert len(core) == len(model.items)
        assert core.discarded == model.discarded
        assert core.reports == model.reports
    drained = []
    while len(core):
        drained.append(core.poll())
    assert drained == model.items


@SETTINGS
@given(ops=st.lists(st.booleans(), max_size=3000))
def test_ring_buffer_grows_and_shrinks_in_order(impl, ops):
    # Long runs of puts then polls move the compiled ring buffer through
    # several resizes; order must survive every one.
    core, model = probe(impl, 0, 0, 1), Model(0, 0, 1)
    counter = 0
    for is_put in ops:
        for _ in range(7 if is_put else 5):
            if is_put:
                counter += 1
                core.deliver(counter)
                model.put(counter)
            else:
                assert core.poll() == model.poll()
    assert [core.poll() for _ in range(len(core))] == model.items


def test_notify_only_while_watched(impl):
    core = probe(impl, 0, 0, 1)
    core.deliver(1)
    assert core.notified == 0
    core._watched = True
    core.deliver(2)
    core._push_front(0)
    assert core.notified == 2


def test_closed_core_drops_everything(impl):
    core = probe(impl, 2, int(LimitPolicy.DISCARD_NEW), 1)
    core.deliver(1)
    assert core._close_core() == 1
    core.deliver(2)
    core.deliver(3)
    core._push_front(4)
    assert len(core) == 0 and core.poll() is None
    assert (core.discarded, core.reports) == (0, 0)


def test_async_iteration_drains_then_defers_to_the_subclass(impl):
    core = probe(impl, 0, 0, 1)
    for n in range(100):
        core.deliver(n)

    async def collect():
        # The core's own _wait_item ends iteration: the subclass would wait.
        return [item async for item in core]

    assert asyncio.run(collect()) == list(range(100))


def test_unawaited_anext_gives_its_item_back(impl):
    core = probe(impl, 0, 0, 1)
    core.deliver("head")
    core.deliver("tail")
    pending = core.__anext__()
    if hasattr(pending, "close"):
        pending.close()
    del pending
    assert [core.poll(), core.poll()] == ["head", "tail"]


def test_resizes_keep_order_with_a_wrapped_head(impl):
    core = probe(impl, 0, 0, 1)
    expected: deque[int] = deque()
    counter = 0
    for puts, polls in [(5, 3), (20_000, 19_990), (3, 0), (40_000, 39_000), (0, 1_000)]:
        for _ in range(puts):
            counter += 1
            core.deliver(counter)
            expected.append(counter)
        for _ in range(polls):
            assert core.poll() == expected.popleft()
        core._push_front(-counter)
        expected.appendleft(-counter)
    assert [core.poll() for _ in range(len(core))] == list(expected)
