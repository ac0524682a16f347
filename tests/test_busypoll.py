"""Busy polling: a loop kept turning for a window after network activity, and who asks for it."""

from __future__ import annotations

import asyncio
import math

import pytest
from netutil import WAIT

import rvasync as rv
from rvasync.busypoll import MAX_WINDOW, BusyPoller, check_window, poller_for
from rvasync.cli import main
from rvasync.daemon.engine import Daemon
from rvasync.message import Message
from rvasync.transport.network import REPLY_POLL, Transport


@pytest.mark.parametrize("bad", [True, "0.1", None, -0.001, math.nan, math.inf, MAX_WINDOW + 0.5])
def test_windows_are_checked_and_named(bad):
    with pytest.raises(rv.InvalidArgument, match="busy_poll"):
        check_window("busy_poll", bad)
    with pytest.raises(rv.InvalidArgument, match="busy_poll"):
        Daemon(busy_poll=bad)
    if bad is not None:
        with pytest.raises(rv.InvalidArgument, match="busy_poll"):
            Transport(busy_poll=bad)
        with pytest.raises(rv.InvalidArgument, match="reply_poll"):
            Transport(reply_poll=bad)


def test_the_daemon_command_refuses_a_bad_window(capsys):
    with pytest.raises(SystemExit) as exited:  # the argument parser refuses it
        main(["daemon", "--listen", "0", "--busy-poll", "5"])
    assert exited.value.code == 2
    assert "--busy-poll" in capsys.readouterr().err


async def test_a_touch_keeps_the_loop_turning_for_the_window_only():
    poller = BusyPoller(asyncio.get_running_loop())
    poller.touch()
    assert not poller.spinning, "window 0: a touch does nothing"
    poller.want(0.05)
    poller.want(0.01)
    assert poller.window == 0.05, "the largest request wins and is never lowered"
    poller.touch()
    assert poller.spinning
    await asyncio.sleep(0.02)
    assert poller.spinning, "still inside the window"
    async with asyncio.timeout(WAIT):
        while poller.spinning:
            await asyncio.sleep(0.01)
    poller.touch()
    poller.touch()
    assert poller.spinning


async def test_a_hold_keeps_the_loop_turning_until_released_or_past_its_bound():
    poller = BusyPoller(asyncio.get_running_loop())
    poller.hold(5.0)
    assert poller.spinning and poller.held == 1
    await asyncio.sleep(0.02)
    assert poller.spinning, "held: no window needed"
    poller.release()
    await asyncio.sleep(0.01)
    assert not poller.spinning and poller.held == 0, "released: the loop may sleep again"
    poller.hold(0.02)
    poller.hold(0.01)
    async with asyncio.timeout(WAIT):
        while poller.spinning:
            await asyncio.sleep(0.005)
    assert poller.held == 2, "past every bound polling stops, though not released"
    poller.release()
    poller.release()
    assert poller.held == 0


async def test_send_request_polls_for_its_reply_and_always_releases(rv_service):
    service = rv_service[0]
    assert Transport().reply_poll == REPLY_POLL and Transport(reply_poll=0).reply_poll == 0
    async with Transport(service, reply_poll=1.0) as a, Transport(service) as b:
        poller = poller_for()
        slow = b.listen("BP.SLOW")
        seen: list[tuple[int, bool]] = []

        async def serve() -> None:
            async for request in slow:
                await asyncio.sleep(0.02)  # the requester polls meanwhile
                seen.append((poller.held, poller.spinning))
                await b.send_reply(Message(fields={"n": request["n"]}), request)

        server = asyncio.create_task(serve())
        try:
            reply = await a.send_request(Message("BP.SLOW", {"n": 1}), WAIT)
            assert reply["n"] == 1
            assert seen == [(1, True)], "held and polling while the reply was due"
            assert poller.held == 0, "released once the reply came"
            with pytest.raises(rv.RequestTimeout):
                await a.send_request(Message("BP.NOBODY"), 0.05)
            assert poller.held == 0, "released on timeout"
            pending = asyncio.create_task(a.send_request(Message("BP.NOBODY"), WAIT))
            await asyncio.sleep(0.01)
            assert poller.held == 1
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            assert poller.held == 0, "released on cancellation"
        finally:
            server.cancel()


def test_reply_poll_default_is_off_on_one_cpu(monkeypatch):
    import os

    from rvasync.transport.network import REPLY_POLL_SECONDS, default_reply_poll

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert default_reply_poll() == 0.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_reply_poll() == REPLY_POLL_SECONDS > 0


async def test_reply_poll_zero_sleeps_while_waiting(rv_service):
    service = rv_service[0]
    async with Transport(service, reply_poll=0) as a, Transport(service) as b:
        poller = poller_for()
        slow = b.listen("BP.SLOW0")
        seen: list[int] = []

        async def serve() -> None:
            async for request in slow:
                await asyncio.sleep(0.02)
                seen.append(poller.held)
                await b.send_reply(Message(fields={}), request)

        server = asyncio.create_task(serve())
        try:
            await a.send_request(Message("BP.SLOW0"), WAIT)
            assert seen == [0]
        finally:
            server.cancel()


async def test_one_poller_per_loop():
    loop = asyncio.get_running_loop()
    assert poller_for() is poller_for(loop)


async def test_a_transport_asks_for_busy_polling_and_its_daemon_spins_after_traffic(rv_service):
    service = rv_service[0]
    async with Transport(service, busy_poll=0.2) as a, Transport(service) as b:
        poller = poller_for()
        assert poller.window >= 0.2
        assert b.busy_poll == 0.0 and a.busy_poll == 0.2
        echo = b.listen("BP.ECHO")

        async def serve() -> None:
            async for request in echo:
                await b.send_reply(Message(fields={"n": request["n"]}), request)

        server = asyncio.create_task(serve())
        try:
            for n in range(20):
                reply = await a.send_request(Message("BP.ECHO", {"n": n}), WAIT)
                assert reply["n"] == n
                assert poller.spinning, "a datagram just went out and came back"
        finally:
            server.cancel()


async def test_a_configured_daemon_spins_for_its_transports(rv_service):
    daemon = Daemon(busy_poll=0.1)
    await daemon.start()
    try:
        assert daemon.poller.window >= 0.1
        async with Transport(rv_service[0]) as t:
            on = t.listen("BP.ONE")
            await t.send(Message("BP.ONE", {"x": 1}))
            assert daemon.poller.spinning
            assert (await on.get(WAIT))["x"] == 1
    finally:
        await daemon.stop()
    with pytest.raises(rv.DaemonUnavailable):
        daemon.poller  # noqa: B018
