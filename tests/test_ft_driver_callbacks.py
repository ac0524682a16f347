"""Fault tolerance callbacks: plain or async, in order, slow ones harmless, failures logged."""

from __future__ import annotations

import asyncio

from test_ft_driver_support import FAST, WAIT, Journal, actives, until

from rvasync.ftdriver import FtMember
from rvasync.ftdriver._serial import SerialCallback
from rvasync.protocol.ft import FtAction

A, D = FtAction.ACTIVATE, FtAction.DEACTIVATE


async def test_slow_async_callback_does_not_delay_heartbeats(rv_process_transport):
    """A callback busy for several activation intervals: nobody takes over meanwhile."""
    journal = Journal()
    timing = {"heartbeat": 0.05, "activation": 0.3}
    spans: list[tuple[str, FtAction, str]] = []
    release = asyncio.Event()

    async def slow(member: FtMember, action: FtAction) -> None:
        spans.append(("start", action, str(member.active)))
        if action is A:
            await release.wait()
        spans.append(("end", action, str(member.active)))

    busy = FtMember(rv_process_transport, "SVC.SLOW", weight=100, callback=slow, **timing)
    others = {
        name: FtMember(
            rv_process_transport, "SVC.SLOW", weight=50, callback=journal.callback(name), **timing
        )
        for name in "bc"
    }
    async with busy:
        for member in others.values():
            await member.join()
        try:
            await until(lambda: spans[:1] == [("start", A, "True")], what="ACTIVATE delivered")
            await asyncio.sleep(4 * timing["activation"])  # the callback is still running
            assert actives(others) == [] and journal.entries == []
            # A weight change while the ACTIVATE callback runs: the DEACTIVATE
            # waits its turn instead of running alongside.
            busy.weight = 1
            await until(lambda: len(actives(others)) == 1, what="a heavier member to take over")
            assert spans == [("start", A, "True")]
            release.set()
            await until(lambda: len(spans) == 4, what="both callbacks to finish")
            assert [s[:2] for s in spans] == [("start", A), ("end", A), ("start", D), ("end", D)]
        finally:
            for member in others.values():
                await member.withdraw()


async def test_raising_callback_is_logged_and_member_carries_on(rv_process_transport, capsys):
    journal = Journal()
    calls: list[FtAction] = []

    def broken(member: FtMember, action: FtAction) -> None:
        calls.append(action)
        raise ValueError(f"cannot handle {action.name}")

    timing = {"heartbeat": 0.05, "activation": 0.3}
    member = FtMember(rv_process_transport, "SVC.RAISE", weight=100, callback=broken, **timing)
    other = FtMember(rv_process_transport, "SVC.RAISE", callback=journal.callback("o"), **timing)
    async with member, other:
        await until(lambda: calls == [A], what="the ACTIVATE call")
        await asyncio.sleep(3 * timing["activation"])
        assert member.active and not other.active and journal.entries == []
        member.weight = 1  # the member still takes instructions
        await until(lambda: other.active, what="handover to the heavier member")
        assert calls == [A, D]
    err = capsys.readouterr().err
    assert err.count("fault tolerance callback raised") == 2
    assert "cannot handle ACTIVATE" in err and "cannot handle DEACTIVATE" in err


async def test_async_callback_exception_is_logged(rv_process_transport, capsys):
    calls: list[FtAction] = []

    async def broken(member: FtMember, action: FtAction) -> None:
        calls.append(action)
        await asyncio.sleep(0)
        raise RuntimeError("async failure")

    async with FtMember(rv_process_transport, "SVC.ARAISE", callback=broken, **FAST) as member:
        await until(lambda: member.active, what="activation")
    assert calls == [A, D]  # exit waited for the last callback
    assert capsys.readouterr().err.count("fault tolerance callback raised") == 2


async def test_exit_waits_for_the_deactivate_callback(rv_process_transport):
    done: list[FtAction] = []

    async def careful(member: FtMember, action: FtAction) -> None:
        await asyncio.sleep(0.05)
        done.append(action)

    async with FtMember(rv_process_transport, "SVC.WAIT", callback=careful, **FAST):
        await until(lambda: done == [A], what="activation handled")
    assert done == [A, D]


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[object, int]] = []

    def plain(self, owner: object, event: int) -> None:
        self.seen.append((owner, event))

    async def slow(self, owner: object, event: int) -> None:
        await asyncio.sleep(0.01 * (3 - event % 3))
        self.seen.append((owner, event))


async def test_serial_plain_runs_at_once_and_in_order():
    rec = Recorder()
    serial = SerialCallback("me", rec.plain, "test")
    serial.submit([1, 2])
    assert rec.seen == [("me", 1), ("me", 2)] and not serial.busy


async def test_serial_async_keeps_order_across_submissions():
    rec = Recorder()
    serial = SerialCallback("me", rec.slow, "test")
    serial.submit([1, 2])
    serial.submit([3])
    assert serial.busy and rec.seen == []
    async with asyncio.timeout(WAIT):
        await serial.wait_idle()
    assert [event for _, event in rec.seen] == [1, 2, 3]


async def test_serial_reentrant_plain_callback_queues_behind():
    seen: list[int] = []
    serial: SerialCallback

    def reentrant(owner: object, event: int) -> None:
        seen.append(event)
        if event == 1:
            serial.submit([10])  # caused by handling 1: runs after 2, not inside 1

    serial = SerialCallback(None, reentrant, "test")
    serial.submit([1, 2])
    assert seen == [1, 2, 10]


async def test_serial_plain_returning_awaitable_is_awaited_in_order():
    seen: list[str] = []

    def mixed(owner: object, event: int):
        seen.append(f"call {event}")
        if event == 1:

            async def later() -> None:
                await asyncio.sleep(0.01)
                seen.append("awaited 1")

            return later()
        return None

    serial = SerialCallback(None, mixed, "test")
    serial.submit([1, 2])
    assert seen == ["call 1"]
    async with asyncio.timeout(WAIT):
        await serial.wait_idle()
    assert seen == ["call 1", "awaited 1", "call 2"]


async def test_serial_cancel_drops_pending():
    rec = Recorder()
    serial = SerialCallback(None, rec.slow, "test")
    serial.submit([1, 2, 3])
    await asyncio.sleep(0)
    serial.cancel()
    async with asyncio.timeout(WAIT):
        await serial.wait_idle()
    await asyncio.sleep(0.05)
    assert rec.seen == [] and not serial.busy


async def test_serial_async_callable_object():
    seen: list[int] = []

    class Handler:
        async def __call__(self, owner: object, event: int) -> None:
            await asyncio.sleep(0)
            seen.append(event)

    serial = SerialCallback(None, Handler(), "test")
    serial.submit([5])
    assert seen == []
    async with asyncio.timeout(WAIT):
        await serial.wait_idle()
    assert seen == [5]


async def test_async_callback_may_withdraw_its_own_member(rv_process_transport):
    """No deadlock: the DEACTIVATE from the withdrawal runs after the callback returns."""
    seen: list[FtAction] = []

    async def leave_on_activate(member: FtMember, action: FtAction) -> None:
        seen.append(action)
        if action is A:
            await member.withdraw()
            assert not member.joined

    member = FtMember(rv_process_transport, "SVC.SELF", callback=leave_on_activate, **FAST)
    await member.join()
    await until(lambda: seen == [A, D], what="ACTIVATE then DEACTIVATE")
    await asyncio.wait_for(member.withdraw(), WAIT)
