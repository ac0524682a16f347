"""rvasync.perloop: one helper per event loop, and none kept once its loop is gone."""

from __future__ import annotations

import asyncio
import gc
import weakref

from rvasync.busypoll import poller_for
from rvasync.perloop import PerLoop
from rvasync.sendpace import pacer_for


class Helper:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop


def test_one_helper_per_loop_calling_through_to_its_loop() -> None:
    helpers = PerLoop(Helper)
    loops = [asyncio.new_event_loop() for _ in range(2)]
    first, second = (helpers.get(loop) for loop in loops)
    assert first is helpers.get(loops[0]) and first is not second
    assert not first.loop.is_closed()
    loops[0].close()
    assert first.loop.is_closed() and not second.loop.is_closed()
    loops[1].close()


def test_a_dropped_loop_takes_its_pacer_and_poller_with_it() -> None:
    """Before, each helper held its loop, and the registry held the helper: every loop a
    program (or a test run) ever ran stayed in memory with its pacer and poller."""
    loops = []

    async def use_them() -> None:
        pacer_for().look()  # schedules a marker on the loop, as a send does
        poller_for().touch()
        await asyncio.sleep(0)
        loops.append(weakref.ref(asyncio.get_running_loop()))

    for _ in range(3):
        asyncio.run(use_them())
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
