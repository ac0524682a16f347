"""Queues: arguments, order, limit policies, reporting, waiting, destruction."""

import asyncio

import pytest

import rvasync as rv
from rvasync import queues
from rvasync.queues import DEFAULT_QUEUE_NAME, LimitPolicy, Queue, default_queue

WAIT = 5.0


@pytest.fixture
def reports():
    """Install a recording reporter for the test; restore the previous one after."""
    seen: list[Queue] = []
    previous = queues.set_limit_exceeded_reporter(seen.append)
    try:
        yield seen
    finally:
        queues.set_limit_exceeded_reporter(previous)


def filled(*items, **kwargs) -> Queue:
    q = Queue(**kwargs)
    for item in items:
        q.deliver(item)
    return q


def drain(q: Queue) -> list:
    out = []
    while len(q):
        out.append(q.poll())
    return out


# -- arguments -------------------------------------------------------------------------


def test_defaults():
    q = Queue()
    assert q.name == DEFAULT_QUEUE_NAME == "tibrvQueue"
    assert (q.limit, q.policy, q.discard_amount, q.priority) == (0, LimitPolicy.DISCARD_NONE, 1, 1)
    assert len(q) == 0 and q.discarded == 0 and not q.destroyed
    assert bool(q) is True  # truthy even when empty: `queue or default` stays safe


def test_limit_policy_members():
    assert [p.name for p in LimitPolicy] == [
        "DISCARD_NONE",
        "DISCARD_FIRST",
        "DISCARD_LAST",
        "DISCARD_NEW",
    ]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": 1.5}, "limit"),
        ({"limit": True, "policy": LimitPolicy.DISCARD_NEW}, "limit"),
        ({"priority": 0}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"discard_amount": 0, "limit": 3, "policy": LimitPolicy.DISCARD_FIRST}, "discard_amount"),
        ({"discard_amount": 4, "limit": 3, "policy": LimitPolicy.DISCARD_LAST}, "discard_amount"),
        ({"limit": 3}, "DISCARD_NONE"),
        ({"policy": LimitPolicy.DISCARD_FIRST}, "limit"),
        ({"limit": 3, "policy": 9}, "policy"),
        ({"limit": 3, "policy": "DISCARD_NEW"}, "policy"),
        ({"name": ""}, "name"),
        ({"name": 5}, "name"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, named):
    with pytest.raises(rv.InvalidArgument, match=named):
        Queue(**kwargs)


def test_policy_accepts_its_int_value():
    assert Queue(limit=2, policy=3).policy is LimitPolicy.DISCARD_NEW


def test_name_and_priority_are_settable():
    q = Queue(name="orders", priority=3)
    q.name = "orders-eu"
    q.priority = 7
    assert (q.name, q.priority) == ("orders-eu", 7)
    with pytest.raises(rv.InvalidArgument, match="priority"):
        q.priority = 0
    assert "orders-eu" in repr(q)


# -- order and polling --------------------------------------------------------------------


def test_fifo_and_poll():
    q = filled(*range(5))
    assert len(q) == 5
    assert drain(q) == [0, 1, 2, 3, 4]
    assert q.poll() is None


def test_large_volume_keeps_order():
    q = filled(*range(10_000))
    assert [q.poll() for _ in range(5000)] == list(range(5000))
    for n in range(10_000, 12_000):
        q.deliver(n)
    assert drain(q) == list(range(5000, 12_000))


async def test_async_for_in_order():
    q = filled(*"abc")
    got = []
    async with asyncio.timeout(WAIT):
        async for item in q:
            got.append(item)
            if len(got) == 3:
                break
    assert got == ["a", "b", "c"]


async def test_tuple_and_exception_items_survive_delivery():
    # Values that an awaitable's StopIteration could misread.
    error = ValueError("an item, not an error")
    q = filled((1, 2), (), error, None)
    async with asyncio.timeout(WAIT):
        assert await anext(q) == (1, 2)
        assert await anext(q) == ()
        assert await anext(q) is error
        assert await anext(q) is None


async def test_discard_where_removes_matching_items_only():
    q = filled(*range(10))
    assert q.discard_where(lambda n: n % 3 == 0) == 4
    assert q.discard_where(lambda n: n > 100) == 0
    assert drain(q) == [1, 2, 4, 5, 7, 8]


# -- limit policies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "amount", "kept", "discarded"),
    [
        (LimitPolicy.DISCARD_FIRST, 1, [2, 3, 4, 5, 6], 1),
        (LimitPolicy.DISCARD_FIRST, 2, [3, 4, 5, 6], 2),
        (LimitPolicy.DISCARD_FIRST, 5, [6], 5),
        (LimitPolicy.DISCARD_LAST, 1, [1, 2, 3, 4, 6], 1),
        (LimitPolicy.DISCARD_LAST, 3, [1, 2, 6], 3),
        (LimitPolicy.DISCARD_LAST, 5, [6], 5),
        (LimitPolicy.DISCARD_NEW, 1, [1, 2, 3, 4, 5], 1),
        (LimitPolicy.DISCARD_NEW, 4, [1, 2, 3, 4, 5], 1),
    ],
)
def test_overflow_by_policy(reports, policy, amount, kept, discarded):
    q = filled(1, 2, 3, 4, 5, 6, limit=5, policy=policy, discard_amount=amount)
    assert drain(q) == kept
    assert q.discarded == discarded
    assert reports == [q]


def test_discard_amount_when_fewer_items_remain(reports):
    # The queue is full only at its limit, so the amount never exceeds the
    # size there; after emptying it, filling again discards again in blocks.
    q = Queue(limit=3, policy=LimitPolicy.DISCARD_FIRST, discard_amount=3)
    for n in range(7):
        q.deliver(n)
    # 0 1 2 | put 3 -> drop all three -> 3 | 4 5 | put 6 -> drop 3 4 5 -> 6
    assert drain(q) == [6]
    assert q.discarded == 6
    assert reports == [q, q]


def test_reporter_once_per_discarding_put(reports):
    q = Queue(limit=2, policy=LimitPolicy.DISCARD_NEW, name="tiny")
    q.deliver(1)
    q.deliver(2)
    assert reports == []
    q.deliver(3)
    q.deliver(4)
    assert reports == [q, q]
    assert reports[0].name == "tiny"
    q.poll()
    q.deliver(5)
    assert len(reports) == 2
    assert drain(q) == [2, 5]


def test_reporter_exception_does_not_break_put(capsys):
    def broken(queue):
        raise RuntimeError("reporter is broken")

    previous = queues.set_limit_exceeded_reporter(broken)
    try:
        q = Queue(limit=1, policy=LimitPolicy.DISCARD_FIRST, name="sturdy")
        q.deliver("a")
        q.deliver("b")
        q.deliver("c")
    finally:
        queues.set_limit_exceeded_reporter(previous)
    assert drain(q) == ["c"]
    err = capsys.readouterr().err
    assert "reporter is broken" in err and "sturdy" in err


def test_reporter_that_overflows_the_same_queue_is_not_reentered():
    calls = []

    def echo(queue):
        calls.append(queue)
        queue.deliver("advisory")  # overflows again: counted, not reported again

    previous = queues.set_limit_exceeded_reporter(echo)
    try:
        q = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW)
        q.deliver("x")
        q.deliver("y")
    finally:
        queues.set_limit_exceeded_reporter(previous)
    assert calls == [q]
    assert q.discarded == 2


def test_default_reporter_logs_the_queue_name(capsys):
    previous = queues.set_limit_exceeded_reporter(None)
    try:
        q = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="overflowing")
        q.deliver(1)
        q.deliver(2)
    finally:
        queues.set_limit_exceeded_reporter(previous)
    err = capsys.readouterr().err
    assert "LIMIT_EXCEEDED" in err and "overflowing" in err


def test_reporter_must_be_callable():
    with pytest.raises(rv.InvalidArgument, match="callable"):
        queues.set_limit_exceeded_reporter("not a function")


# -- waiting ----------------------------------------------------------------------------------


async def test_get_waits_for_a_put():
    q = Queue()
    loop = asyncio.get_running_loop()
    loop.call_soon(q.deliver, "late")
    async with asyncio.timeout(WAIT):
        assert await q.get() == "late"


async def test_get_with_timeout():
    q = Queue()
    with pytest.raises(TimeoutError):
        await q.get(timeout=0.01)
    with pytest.raises(TimeoutError):
        await q.get(timeout=0)
    q.deliver(1)
    assert await q.get(timeout=0) == 1
    assert q._waiters == type(q._waiters)()  # timed-out waiters do not linger


@pytest.mark.parametrize("timeout", [-1, float("nan"), "1", True])
async def test_get_bad_timeout(timeout):
    q = filled(1)
    with pytest.raises(rv.InvalidArgument, match="timeout"):
        await q.get(timeout=timeout)
    assert len(q) == 1


async def test_each_put_wakes_one_consumer():
    q = Queue()
    got = []

    async def consume(tag):
        got.append((tag, await q.get()))

    async with asyncio.timeout(WAIT):
        tasks = [asyncio.create_task(consume(n)) for n in range(3)]
        await asyncio.sleep(0)
        q.deliver("first")
        q.deliver("second")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sorted(item for _, item in got) == ["first", "second"]
        assert len({tag for tag, _ in got}) == 2
        q.deliver("third")
        await asyncio.gather(*tasks)
    assert sorted(item for _, item in got) == ["first", "second", "third"]


async def test_woken_consumer_cancelled_passes_the_item_on():
    q = Queue()
    async with asyncio.timeout(WAIT):
        first = asyncio.create_task(q.get())
        second = asyncio.create_task(q.get())
        await asyncio.sleep(0)
        q.deliver("only")  # wakes `first` ...
        first.cancel()  # ... which is cancelled before it runs
        assert await second == "only"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_get_is_a_coroutine_usable_with_create_task():
    q = filled("ready")
    async with asyncio.timeout(WAIT):
        assert await asyncio.create_task(q.get()) == "ready"


async def test_anext_awaitable_dropped_unawaited_keeps_its_item():
    q = filled("a", "b")
    pending = q.__anext__()
    if hasattr(pending, "close"):  # the pure twin returns a coroutine
        pending.close()
    del pending
    assert drain(q) == ["a", "b"]


async def test_async_for_waits_then_ends_on_destroy():
    q = Queue()
    got = []

    async def consume():
        async for item in q:
            got.append(item)

    async with asyncio.timeout(WAIT):
        task = asyncio.create_task(consume())
        await asyncio.sleep(0)
        q.deliver(1)
        await asyncio.sleep(0)
        q.deliver(2)
        await asyncio.sleep(0)
        q.destroy()
        await task
    assert got == [1, 2]


# -- destruction -------------------------------------------------------------------------


async def test_destroy_wakes_getters_with_queue_destroyed():
    q = Queue(name="doomed")
    async with asyncio.timeout(WAIT):
        getter = asyncio.create_task(q.get())
        await asyncio.sleep(0)
        q.destroy()
        with pytest.raises(rv.QueueDestroyed, match="doomed"):
            await getter


async def test_destroyed_queue_drops_everything():
    q = filled(1, 2, 3, limit=3, policy=LimitPolicy.DISCARD_NEW)
    q.destroy()
    q.destroy()  # harmless
    assert q.destroyed and len(q) == 0
    q.deliver(4)
    assert len(q) == 0 and q.poll() is None
    assert q.discarded == 0  # drops after destruction are not limit discards
    with pytest.raises(rv.QueueDestroyed):
        await q.get(timeout=1)
    async with asyncio.timeout(WAIT):
        assert [item async for item in q] == []


def test_close_is_destroy():
    q = filled(1)
    q.close()
    assert q.destroyed


async def test_default_queue_is_per_loop_and_unbounded():
    q = default_queue()
    assert default_queue() is q
    assert (q.limit, q.priority, q.name) == (0, 1, DEFAULT_QUEUE_NAME)


@pytest.mark.parametrize("item", [(1, 2), (), ValueError("item"), None, "plain"])
def test_anext_through_the_iterator_protocol(item):
    # The path taken by awaiting code that does not use am_send (yield from).
    q = filled(item)
    step = q.__anext__().__await__()
    with pytest.raises(StopIteration) as stop:
        next(step)
    assert stop.value.value is item
    assert len(q) == 0
