"""Queue groups: priority, round robin, suspension by removal, wake-ups."""

import asyncio

import pytest

import rvasync as rv
from rvasync.queues import Queue, QueueGroup

WAIT = 5.0


def put_all(q: Queue, *items) -> Queue:
    for item in items:
        q.deliver(item)
    return q


def poll_all(group: QueueGroup) -> list:
    out = []
    while (item := group.poll()) is not None:
        out.append(item)
    return out


def test_highest_priority_first_figure_8():
    # Timer queue 30, important messages 20, regular messages 10, default queue 1.
    timers = put_all(Queue(priority=30, name="timers"), "timer A", "timer B")
    important = put_all(Queue(priority=20, name="important"), "imp 1", "imp 2")
    regular = put_all(Queue(priority=10, name="regular"), "reg 1", "reg 2", "reg 3")
    default = put_all(Queue(name="default"), "limit advisory")
    group = QueueGroup(default, regular, important, timers)
    assert group.poll() == "timer A"
    timers.deliver("timer C")  # arrives while dispatching: still goes first
    assert poll_all(group) == [
        "timer B",
        "timer C",
        "imp 1",
        "imp 2",
        "reg 1",
        "reg 2",
        "reg 3",
        "limit advisory",
    ]
    assert group.poll() is None


def test_round_robin_among_equal_priorities():
    a = put_all(Queue(priority=5), "a1", "a2", "a3")
    b = put_all(Queue(priority=5), "b1")
    c = put_all(Queue(priority=5), "c1", "c2")
    low = put_all(Queue(priority=1), "low")
    group = QueueGroup(a, b, c, low)
    assert poll_all(group) == ["a1", "b1", "c1", "a2", "c2", "a3", "low"]


def test_round_robin_resumes_after_the_last_served_queue():
    a, b = Queue(priority=2), Queue(priority=2)
    group = QueueGroup(a, b)
    put_all(a, "a1")
    assert group.poll() == "a1"
    put_all(a, "a2")
    put_all(b, "b1")
    assert poll_all(group) == ["b1", "a2"]


def test_removed_queue_accumulates_and_resumes_figure_9():
    first = put_all(Queue(priority=40, name="first"), "f1", "f2")
    second = put_all(Queue(priority=30, name="second"), "s1")
    third = put_all(Queue(priority=20, name="third"), "t1")
    group = QueueGroup(first, second, third)
    group.remove(first)  # suspend its dispatch
    assert first not in group
    put_all(first, "f3", "f4")
    assert poll_all(group) == ["s1", "t1"]
    assert len(first) == 4
    group.add(first)  # resume
    put_all(second, "s2")
    assert poll_all(group) == ["f1", "f2", "f3", "f4", "s2"]


def test_queue_in_several_groups_and_consumed_directly():
    shared = put_all(Queue(name="shared"), 1, 2, 3)
    g1, g2 = QueueGroup(shared), QueueGroup(shared)
    assert g1.poll() == 1
    assert g2.poll() == 2
    assert shared.poll() == 3
    assert g1.poll() is None and g2.poll() is None


def test_priority_change_reorders_groups():
    a = put_all(Queue(priority=1, name="a"), "a")
    b = put_all(Queue(priority=2, name="b"), "b")
    group = QueueGroup(a, b)
    a.priority = 3
    assert poll_all(group) == ["a", "b"]


def test_membership_rules():
    q = Queue(name="lonely")
    group = QueueGroup()
    with pytest.raises(rv.InvalidArgument, match="lonely"):
        group.remove(q)
    with pytest.raises(rv.InvalidArgument, match="Queue"):
        group.add("not a queue")
    group.add(q)
    group.add(q)  # idempotent
    assert group.queues == (q,)
    dead = Queue()
    dead.destroy()
    with pytest.raises(rv.QueueDestroyed):
        group.add(dead)


def test_destroyed_member_leaves_the_group():
    a, b = put_all(Queue(name="a"), 1), put_all(Queue(name="b"), 2)
    group = QueueGroup(a, b)
    a.destroy()
    assert group.queues == (b,)
    assert poll_all(group) == [2]


async def test_group_get_and_timeout():
    group = QueueGroup(Queue())
    with pytest.raises(TimeoutError):
        await group.get(timeout=0.01)
    with pytest.raises(rv.InvalidArgument, match="timeout"):
        await group.get(timeout=-1)
    assert group._waiters == type(group._waiters)()


async def test_waiting_consumer_wakes_for_any_member_only():
    member, outsider = Queue(), Queue()
    group = QueueGroup(member)
    async with asyncio.timeout(WAIT):
        getter = asyncio.create_task(group.get())
        await asyncio.sleep(0)
        outsider.deliver("not for the group")
        for _ in range(3):
            await asyncio.sleep(0)
        assert not getter.done()
        member.deliver("for the group")
        assert await getter == "for the group"


async def test_removed_queue_does_not_wake_the_group_until_added_back():
    a = Queue(name="a")
    group = QueueGroup(a)
    group.remove(a)
    async with asyncio.timeout(WAIT):
        getter = asyncio.create_task(group.get())
        await asyncio.sleep(0)
        a.deliver("waiting")
        for _ in range(3):
            await asyncio.sleep(0)
        assert not getter.done()
        group.add(a)
        assert await getter == "waiting"


async def test_woken_group_prefers_higher_priority_that_arrived_meanwhile():
    low, high = Queue(priority=1), Queue(priority=9)
    group = QueueGroup(low, high)
    async with asyncio.timeout(WAIT):
        getter = asyncio.create_task(group.get())
        await asyncio.sleep(0)
        low.deliver("low")
        high.deliver("high")
        assert await getter == "high"
        assert group.poll() == "low"


async def test_wake_is_passed_on_when_the_woken_group_takes_another_item():
    # g1 is woken by q1 but takes q2's more important item; g2, waiting on q1,
    # must then be woken for q1's item instead of sleeping forever.
    q1, q2 = Queue(priority=1, name="q1"), Queue(priority=5, name="q2")
    g1, g2 = QueueGroup(q1, q2), QueueGroup(q1)
    async with asyncio.timeout(WAIT):
        first = asyncio.create_task(g1.get())
        await asyncio.sleep(0)
        second = asyncio.create_task(g2.get())
        await asyncio.sleep(0)
        q1.deliver("from q1")
        q2.deliver("from q2")
        assert await first == "from q2"
        assert await second == "from q1"


async def test_direct_and_group_consumers_share_a_queue():
    q = Queue()
    group = QueueGroup(q)
    async with asyncio.timeout(WAIT):
        direct = asyncio.create_task(q.get())
        grouped = asyncio.create_task(group.get())
        await asyncio.sleep(0)
        q.deliver(1)
        q.deliver(2)
        assert sorted(await asyncio.gather(direct, grouped)) == [1, 2]


async def test_cancelled_woken_group_consumer_passes_the_wake_on():
    q = Queue()
    group = QueueGroup(q)
    async with asyncio.timeout(WAIT):
        first = asyncio.create_task(group.get())
        second = asyncio.create_task(group.get())
        await asyncio.sleep(0)
        q.deliver("only")
        first.cancel()
        assert await second == "only"


async def test_async_for_over_group_and_destroy():
    hi, lo = Queue(priority=2), Queue(priority=1)
    group = QueueGroup(hi, lo)
    got = []

    async def consume():
        async for item in group:
            got.append(item)

    async with asyncio.timeout(WAIT):
        task = asyncio.create_task(consume())
        put_all(lo, "lo1")
        put_all(hi, "hi1")
        await asyncio.sleep(0)
        put_all(lo, "lo2")
        await asyncio.sleep(0)
        group.destroy()
        await task
    assert got == ["hi1", "lo1", "lo2"]
    assert hi._groups == () and lo._groups == ()
    assert not hi.destroyed  # dissolving a group leaves its queues alone


async def test_destroyed_group_get_raises():
    group = QueueGroup(Queue())
    async with asyncio.timeout(WAIT):
        getter = asyncio.create_task(group.get())
        await asyncio.sleep(0)
        group.close()
        with pytest.raises(rv.QueueDestroyed):
            await getter
    with pytest.raises(rv.QueueDestroyed):
        group.add(Queue())
