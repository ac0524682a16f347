"""Timers, driven by a virtual loop clock so that counts are exact and tests instant.

The ``clock`` fixture makes the running loop's time virtual: whenever the loop
would sleep until its next deadline, virtual time jumps there instead. Every
wait is still bounded by ``asyncio.timeout``, which fires in virtual time too,
so a hang fails at once instead of stalling the run.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from virtualclock import virtual_clock  # noqa: F401  (the ``clock`` fixture)

import rvasync as rv
from rvasync.timers import Timer

WAIT = 1000.0  # virtual seconds


# -- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), "1", True, None])
async def test_bad_interval(interval):
    with pytest.raises(rv.InvalidArgument, match="interval"):
        Timer(interval)


async def test_bad_callback():
    with pytest.raises(rv.InvalidArgument, match="callback"):
        Timer(1, callback="not callable")


def test_needs_a_running_loop():
    with pytest.raises(RuntimeError, match="running event loop"):
        Timer(1)


# -- counting ----------------------------------------------------------------------------


async def test_ticks_at_each_interval_without_drift(clock):
    start = clock.now
    timer = Timer(0.1)
    seen = []
    async with asyncio.timeout(WAIT):
        async for tick in timer:
            seen.append((tick, clock.now - start))
            if tick == 1000:
                break
    assert [tick for tick, _ in seen] == list(range(1, 1001))
    for tick, at in seen:
        assert at == pytest.approx(tick * 0.1, abs=1e-6)
    timer.destroy()


async def test_slow_consumer_gets_the_backlog_promptly(clock):
    timer = Timer(1.0)
    async with asyncio.timeout(WAIT):
        assert await anext(timer) == 1
        await asyncio.sleep(5.5)  # ticks 2..6 elapse meanwhile
        assert timer.pending == 5
        before = clock.now
        assert [await anext(timer) for _ in range(5)] == [2, 3, 4, 5, 6]
        assert clock.now == before  # delivered without waiting
        assert timer.pending == 0
        assert await anext(timer) == 7
        assert timer.ticks == 7
    timer.destroy()


async def test_busy_consumer_counts_every_interval(clock):
    timer = Timer(2.0)
    clock.advance(7.0)  # the loop was blocked: no deadline callback has run yet
    assert timer.pending == 3
    async with asyncio.timeout(WAIT):
        assert [await anext(timer) for _ in range(3)] == [1, 2, 3]
        assert await anext(timer) == 4
    timer.destroy()


async def test_several_consumers_share_the_ticks(clock):
    timer = Timer(1.0)
    got = []

    async def consume(tag):
        async for tick in timer:
            got.append((tag, tick))

    async with asyncio.timeout(WAIT):
        tasks = [asyncio.create_task(consume(n)) for n in range(2)]
        await asyncio.sleep(10.5)
        timer.destroy()
        await asyncio.gather(*tasks)
    assert sorted(tick for _, tick in got) == list(range(1, 11))


# -- reset and destroy --------------------------------------------------------------------


async def test_reset_starts_a_new_sequence_now(clock):
    timer = Timer(1.0)
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(2.5)
        assert timer.pending == 2
        timer.reset()
        assert timer.pending == 0 and timer.ticks == 0
        reset_at = clock.now
        assert await anext(timer) == 1
        assert clock.now - reset_at == pytest.approx(1.0)
        timer.reset(0.25)
        reset_at = clock.now
        assert await anext(timer) == 1
        assert await anext(timer) == 2
        assert clock.now - reset_at == pytest.approx(0.5)
        assert timer.interval == 0.25
    with pytest.raises(rv.InvalidArgument, match="interval"):
        timer.reset(0)
    timer.destroy()
    with pytest.raises(rv.NotPermitted, match="destroyed"):
        timer.reset()


async def test_reset_keeps_a_waiting_consumer(clock):
    timer = Timer(10.0)
    async with asyncio.timeout(WAIT):
        waiter = asyncio.create_task(anext(timer))
        await asyncio.sleep(5)
        timer.reset(1.0)
        start = clock.now
        assert await waiter == 1
        assert clock.now - start == pytest.approx(1.0)
    timer.destroy()


async def test_destroy_mid_interval_ends_waiting_iteration(clock):
    timer = Timer(1.0)
    got = []

    async def consume():
        async for tick in timer:
            got.append(tick)

    async with asyncio.timeout(WAIT):
        task = asyncio.create_task(consume())
        await asyncio.sleep(2.5)
        timer.destroy()
        timer.destroy()  # harmless
        await task
        await asyncio.sleep(10)
    assert got == [1, 2]
    assert timer.destroyed and timer.pending == 0
    assert timer._handle is None


async def test_destroy_drops_the_backlog(clock):
    timer = Timer(1.0)
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(3.5)
        assert timer.pending == 3
        timer.close()
        assert [tick async for tick in timer] == []


async def test_context_manager_destroys(clock):
    async with Timer(1.0) as timer, asyncio.timeout(WAIT):
        assert await anext(timer) == 1
    assert timer.destroyed


async def test_dropped_iterator_timer_stops_scheduling(clock):
    loop = asyncio.get_running_loop()
    timer = Timer(1.0)
    handle = timer._handle
    del timer
    gc.collect()
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(1.5)  # its deadline runs, finds no timer, schedules nothing
    assert handle not in loop._scheduled
    live = [h for h in loop._scheduled if not h.cancelled()]
    assert not any(getattr(h._callback, "__name__", "") == "_tick" for h in live)


# -- callbacks -------------------------------------------------------------------------------


async def test_plain_callback_once_per_interval(clock):
    calls = []
    timer = Timer(0.5, callback=lambda t: calls.append((t.ticks, t.closure)), closure="ctx")
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(5.25)
    timer.destroy()
    assert calls == [(n, "ctx") for n in range(1, 11)]


async def test_async_callbacks_run_one_at_a_time_and_catch_up(clock):
    running = 0
    overlaps = []
    ticks = []

    async def slow(timer):
        nonlocal running
        running += 1
        overlaps.append(running)
        ticks.append(timer.ticks)
        await asyncio.sleep(2.5)  # longer than the interval
        running -= 1

    timer = Timer(1.0, callback=slow)
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(10.25)  # calls start at 1, 3.5, 6 and 8.5
    timer.destroy()
    assert set(overlaps) == {1}
    assert ticks == [1, 2, 3, 4]  # each call owed is made, in order, late
    assert timer.pending == 0  # destroyed: nothing owed any more


async def test_callback_exception_is_logged_and_timer_goes_on(clock, capsys):
    calls = []

    def flaky(timer):
        calls.append(timer.ticks)
        if timer.ticks == 1:
            raise RuntimeError("tick failed")

    timer = Timer(1.0, callback=flaky)
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(3.5)
    timer.destroy()
    assert calls == [1, 2, 3]
    assert "tick failed" in capsys.readouterr().err


async def test_context_exit_waits_for_a_running_callback(clock):
    finished = []

    async def work(timer):
        await asyncio.sleep(3)
        finished.append(timer.ticks)

    async with asyncio.timeout(WAIT):
        async with Timer(1.0, callback=work):
            await asyncio.sleep(1.5)  # the first callback is running
    assert finished == [1]


async def test_callback_may_destroy_its_timer(clock):
    calls = []

    def once(timer):
        calls.append(timer.ticks)
        timer.destroy()

    timer = Timer(1.0, callback=once)
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(5.5)
        await timer._task
    assert calls == [1]


async def test_cancelled_dispatch_task_destroys_the_timer(clock):
    timer = Timer(1.0, callback=lambda t: None)
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(1.5)
        timer._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await timer._task
    assert timer.destroyed
