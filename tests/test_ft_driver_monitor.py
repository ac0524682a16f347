"""FtMonitor over the intra-process transport: passive counting, every change, callbacks."""

from __future__ import annotations

import asyncio

import pytest
from test_ft_driver_support import FAST, WAIT, Journal, actives, until

import rvasync as rv
from rvasync.ftdriver import FtMember, FtMonitor
from rvasync.ftdriver.monitor import BACKLOG_LIMIT
from rvasync.protocol.ft import FtAction


async def next_count(monitor: FtMonitor) -> int:
    return await asyncio.wait_for(anext(monitor), WAIT)


async def test_monitor_counts_join_failover_and_exit(rv_process_transport):
    journal = Journal()
    called: list[int] = []

    async def on_count(monitor: FtMonitor, count: int) -> None:
        assert monitor.group == "SVC.MON"
        called.append(count)

    async with FtMonitor(
        rv_process_transport, "SVC.MON", lost_interval=FAST["activation"], callback=on_count
    ) as monitor:
        assert monitor.active_count == 0
        members = {
            name: FtMember(rv_process_transport, "SVC.MON", callback=journal.callback(name), **FAST)
            for name in "ab"
        }
        for member in members.values():
            await member.join()
        assert await next_count(monitor) == 1
        (first,) = actives(members)
        members[first]._halt()  # silent death: counted until the lost interval passes
        seen = [await next_count(monitor), await next_count(monitor)]
        assert sorted(seen) == [0, 1] or seen == [2, 1]  # loss and takeover race
        second = next(n for n in members if n != first)
        assert members[second].active
        await members[second].withdraw()  # BYE: dropped at once
        assert await next_count(monitor) == 0
        assert monitor.active_count == 0
        await members[first].withdraw()
    await until(lambda: len(called) == 4, what="the callback to see every change")
    assert called == [1, *seen, 0]
    with pytest.raises(StopAsyncIteration):
        await anext(monitor)


async def test_monitor_is_invisible_to_members(rv_process_transport):
    """Members hear nothing from a monitor: their view and actions are unchanged."""
    journal = Journal()
    monitor = FtMonitor(rv_process_transport, "SVC.INV", lost_interval=0.25)
    member = FtMember(rv_process_transport, "SVC.INV", callback=journal.callback("m"), **FAST)
    async with monitor, member:
        await until(lambda: monitor.active_count == 1, what="the monitor to count")
        assert [info.member for info in member._core.ranking()] == [member.member_id]
        assert journal.of("m") == [FtAction.ACTIVATE]


async def test_monitor_sees_active_goal_changes_one_at_a_time(rv_process_transport):
    journal = Journal()
    counts: list[int] = []
    async with FtMonitor(
        rv_process_transport,
        "SVC.GOAL",
        lost_interval=FAST["activation"],
        callback=lambda monitor, count: counts.append(count),
    ) as monitor:
        members = [
            FtMember(
                rv_process_transport,
                "SVC.GOAL",
                active_goal=3,
                callback=journal.callback(str(i)),
                **FAST,
            )
            for i in range(3)
        ]
        for member in members:
            await member.join()
        await until(lambda: monitor.active_count == 3, what="three active")
        for member in members:
            await member.withdraw()
        await until(lambda: monitor.active_count == 0, what="none active")
    assert counts == [1, 2, 3, 2, 1, 0]


async def test_monitor_with_callback_iterates_from_first_use(rv_process_transport):
    called: list[int] = []
    async with FtMonitor(
        rv_process_transport, "SVC.CB", lost_interval=0.25, callback=lambda m, c: called.append(c)
    ) as monitor:
        async with FtMember(rv_process_transport, "SVC.CB", callback=lambda m, a: None, **FAST):
            await until(lambda: called == [1], what="the callback")
            assert monitor._backlog == type(monitor._backlog)()  # nothing stored for iteration
            counts = aiter(monitor)  # from here on, changes wait for the iterator
        assert await next_count(counts) == 0


async def test_monitor_backlog_is_bounded(rv_process_transport, capsys):
    async with FtMonitor(rv_process_transport, "SVC.BIG", lost_interval=0.25) as monitor:
        monitor._report([1, 0] * (BACKLOG_LIMIT // 2 + 1))
        assert len(monitor._backlog) == BACKLOG_LIMIT
    assert "dropping the oldest" in capsys.readouterr().err


async def test_monitor_parameters_and_lifecycle(rv_process_transport):
    with pytest.raises(rv.InvalidArgument, match="lost interval must be positive"):
        FtMonitor(rv_process_transport, "G", lost_interval=0)
    with pytest.raises(rv.InvalidSubject):
        FtMonitor(rv_process_transport, "G.*", lost_interval=1.0)
    with pytest.raises(rv.InvalidArgument, match="callback"):
        FtMonitor(rv_process_transport, "G", lost_interval=1.0, callback=42)
    with pytest.raises(rv.InvalidArgument, match="rvasync transport"):
        FtMonitor(object(), "G", lost_interval=1.0)
    monitor = FtMonitor(rv_process_transport, "G", lost_interval=1.0)
    with pytest.raises(rv.NotPermitted, match="before iterating"):
        await anext(monitor)
    async with monitor:
        assert monitor.running and "G" in repr(monitor)
        assert monitor.lost_interval == 1.0
    with pytest.raises(rv.NotPermitted, match="already started"):
        await monitor.start()


async def test_monitor_with_the_heartbeat_as_lost_interval_does_not_flap(rv_process_transport):
    """A punctual member is never counted lost, even with lost_interval == heartbeat."""
    counts: list[int] = []
    journal = Journal()
    member = FtMember(rv_process_transport, "SVC.TIGHT", callback=journal.callback("m"), **FAST)
    monitor = FtMonitor(
        rv_process_transport,
        "SVC.TIGHT",
        lost_interval=FAST["heartbeat"],
        callback=lambda _monitor, count: counts.append(count),
    )
    async with monitor, member:
        await until(lambda: member.active and counts == [1], what="the member counted")
        await asyncio.sleep(12 * FAST["heartbeat"])  # twelve heartbeats, each due at a loss
        assert counts == [1]
