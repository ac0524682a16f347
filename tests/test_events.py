"""Events through queues: timer ticks and I/O readiness dispatched like messages.

Timers run on the virtual clock of tests/test_timers.py (exact counts, instant
tests); I/O events on a real socket pair of this process. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
from virtualclock import virtual_clock  # noqa: F401  (the ``clock`` fixture)

import rvasync as rv

WAIT = 1000.0  # virtual seconds where the clock fixture runs


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


# -- timers with a queue ----------------------------------------------------------------------


async def test_each_interval_puts_one_event_in_the_queue(clock) -> None:
    queue = rv.Queue()
    timer = rv.Timer(1.0, queue=queue, closure="c")
    async with asyncio.timeout(WAIT):
        events = [await queue.get() for _ in range(3)]
    assert [e.ticks for e in events] == [1, 2, 3]
    assert all(isinstance(e, rv.TimerEvent) and e.timer is timer for e in events)
    assert {e.closure for e in events} == {"c"}
    clock.advance(5.0)  # a busy program: five intervals pass without the loop running
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [e.ticks for e in (queue.poll() for _ in range(len(queue)))] == [4, 5, 6, 7, 8]
    timer.destroy()


async def test_ticks_wait_in_order_with_the_queues_messages(clock) -> None:
    transport = rv.process_transport()
    queue = rv.Queue()
    transport.listen("NEWS", queue=queue)
    timer = rv.Timer(1.0, queue=queue)
    try:
        await transport.send(rv.Message("NEWS", {"n": 1}))
        async with asyncio.timeout(WAIT):
            await asyncio.sleep(1.5)
            await transport.send(rv.Message("NEWS", {"n": 2}))
            got = [await queue.get() for _ in range(3)]
        assert [type(x).__name__ for x in got] == ["Message", "TimerEvent", "Message"]
    finally:
        timer.destroy()
        transport.shutdown()


async def test_a_timer_queue_of_higher_priority_dispatches_first(clock) -> None:
    transport = rv.process_transport()
    timers = rv.Queue(priority=30, name="timers")
    messages = rv.Queue(priority=10, name="messages")
    group = rv.QueueGroup(messages, timers)
    transport.listen("X", queue=messages)
    timer = rv.Timer(1.0, queue=timers)
    try:
        for n in range(3):
            await transport.send(rv.Message("X", {"n": n}))
        async with asyncio.timeout(WAIT):
            await asyncio.sleep(1.5)
        first = group.poll()
        assert isinstance(first, rv.TimerEvent)
        assert [group.poll()["n"] for _ in range(3)] == [0, 1, 2]
    finally:
        timer.destroy()
        transport.shutdown()


async def test_dispatch_runs_the_callback_and_sets_ticks(clock) -> None:
    queue = rv.Queue()
    seen: list[int] = []

    async def beat(timer: rv.Timer) -> None:
        seen.append(timer.ticks)

    timer = rv.Timer(1.0, queue=queue, callback=beat)
    async with asyncio.timeout(WAIT):
        for _ in range(3):
            await (await queue.get()).dispatch()
    assert seen == [1, 2, 3] and timer.ticks == 3
    timer.destroy()


async def test_a_queue_dispatched_by_callback_listeners_runs_timer_callbacks(clock) -> None:
    transport = rv.process_transport()
    queue = rv.Queue()
    heard: list[object] = []
    done = asyncio.Event()

    def tick(timer: rv.Timer) -> None:
        heard.append(timer.ticks)
        if timer.ticks == 2:
            done.set()

    transport.listen("Y", queue=queue, callback=lambda msg: heard.append(msg["n"]))
    timer = rv.Timer(1.0, queue=queue, callback=tick)
    try:
        await transport.send(rv.Message("Y", {"n": "first"}))
        async with asyncio.timeout(WAIT):
            await done.wait()
        assert heard == ["first", 1, 2]
    finally:
        timer.destroy()
        transport.shutdown()


async def test_destroy_and_reset_drop_queued_ticks(clock) -> None:
    queue = rv.Queue()
    calls: list[int] = []
    timer = rv.Timer(1.0, queue=queue, callback=lambda t: calls.append(t.ticks))
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(2.5)
    assert len(queue) == 2
    stale = queue.poll()
    timer.reset()
    assert len(queue) == 0
    await stale.dispatch()  # from the sequence before the reset: no callback
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(1.5)
    fresh = queue.poll()
    assert fresh.ticks == 1
    timer.destroy()
    await fresh.dispatch()  # destroyed: no callback
    assert calls == [] and len(queue) == 0


async def test_a_queue_timer_is_not_iterated_itself(clock) -> None:
    timer = rv.Timer(1.0, queue=rv.Queue())
    with pytest.raises(rv.NotPermitted, match="iterate the queue"):
        await anext(timer)
    timer.destroy()
    with pytest.raises(rv.InvalidArgument, match="queue"):
        rv.Timer(1.0, queue=rv.QueueGroup())  # type: ignore[arg-type]


async def test_a_destroyed_queue_stops_its_timer(clock) -> None:
    queue = rv.Queue()
    timer = rv.Timer(1.0, queue=queue)
    queue.destroy()
    async with asyncio.timeout(WAIT):
        await asyncio.sleep(1.5)
    assert timer.destroyed


# -- I/O events ---------------------------------------------------------------------------------


async def test_a_queued_io_event_waits_for_its_dispatch_before_the_next(pair) -> None:
    a, b = pair
    queue = rv.Queue()
    read: list[bytes] = []
    io = rv.IOEvent(a, rv.IOKind.READ, queue=queue, callback=lambda e: read.append(a.recv(100)))
    try:
        b.send(b"one")
        async with asyncio.timeout(WAIT):
            occurrence = await queue.get()
        assert isinstance(occurrence, rv.IOOccurrence) and occurrence.io is io
        b.send(b"two")
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert len(queue) == 0  # deactivated while its occurrence waits: no flood
        await occurrence.dispatch()
        assert read == [b"onetwo"] or read == [b"one"]
        async with asyncio.timeout(WAIT):
            while b"".join(read) != b"onetwo":
                await (await queue.get()).dispatch()
        assert io.ticks >= 1
    finally:
        io.destroy()


async def test_a_self_dispatching_io_event(pair) -> None:
    a, b = pair
    got = asyncio.Queue[bytes]()

    async def on_readable(event: rv.IOEvent) -> None:
        got.put_nowait(a.recv(100))

    async with rv.IOEvent(a, rv.IOKind.READ, callback=on_readable, closure="x") as io:
        assert io.closure == "x" and io.kind is rv.IOKind.READ
        for chunk in (b"a", b"b"):
            b.send(chunk)
            async with asyncio.timeout(WAIT):
                assert await got.get() == chunk
    assert io.destroyed


async def test_an_iterated_io_event_and_write_readiness(pair) -> None:
    a, b = pair
    async with rv.IOEvent(a, rv.IOKind.WRITE) as writable, asyncio.timeout(WAIT):
        occurrence = await anext(writable)
        assert occurrence.ticks == 1 and occurrence.io is writable
    async with rv.IOEvent(a.fileno(), rv.IOKind.READ) as readable:
        b.send(b"z")
        async with asyncio.timeout(WAIT):
            async for _occurrence in readable:
                assert a.recv(10) == b"z"
                break
        readable.destroy()
        with pytest.raises(StopAsyncIteration):
            await anext(readable)


async def test_destroy_drops_a_queued_occurrence(pair) -> None:
    a, b = pair
    queue = rv.Queue()
    io = rv.IOEvent(a, rv.IOKind.READ, queue=queue)
    b.send(b"x")
    async with asyncio.timeout(WAIT):
        while not len(queue):
            await asyncio.sleep(0.01)
    io.destroy()
    assert len(queue) == 0


@pytest.mark.parametrize(
    ("fileobj", "kind", "words"),
    [
        ("not a file", rv.IOKind.READ, "fileno"),
        (-1, rv.IOKind.READ, ">= 0"),
        (True, rv.IOKind.READ, "bool"),
        (0, 3, "IOKind.READ or IOKind.WRITE"),
    ],
)
async def test_bad_io_arguments(fileobj: object, kind: object, words: str) -> None:
    with pytest.raises(rv.InvalidArgument, match=words):
        rv.IOEvent(fileobj, kind)  # type: ignore[arg-type]


async def test_a_closed_socket_is_refused(pair) -> None:
    a, _ = pair
    closed = socket.socket()
    closed.close()
    with pytest.raises(rv.InvalidArgument, match="file descriptor"):
        rv.IOEvent(closed, rv.IOKind.READ, queue=rv.Queue())
    with pytest.raises(rv.NotPermitted):
        await anext(rv.IOEvent(a, rv.IOKind.READ, queue=rv.Queue()))


async def test_an_io_queue_of_higher_priority_dispatches_first(pair) -> None:
    a, b = pair
    transport = rv.process_transport()
    io_queue = rv.Queue(priority=30, name="io")
    messages = rv.Queue(priority=10, name="messages")
    group = rv.QueueGroup(messages, io_queue)
    transport.listen("X", queue=messages)
    io = rv.IOEvent(a, rv.IOKind.READ, queue=io_queue)
    try:
        for n in range(2):
            await transport.send(rv.Message("X", {"n": n}))
        b.send(b"x")
        async with asyncio.timeout(WAIT):
            while len(messages) < 2 or not len(io_queue):
                await asyncio.sleep(0.01)
        first = group.poll()
        assert isinstance(first, rv.IOOccurrence) and first.io is io
        assert [group.poll()["n"] for _ in range(2)] == [0, 1]
    finally:
        io.destroy()
        transport.shutdown()


async def test_a_bounded_queue_is_refused(pair) -> None:
    # Its limit policy could discard the one occurrence the inactive event waits on:
    # the event would never fire again (before, the occurrence was dropped and it stalled).
    a, _ = pair
    bounded = rv.Queue(limit=1, policy=rv.LimitPolicy.DISCARD_NEW)
    with pytest.raises(rv.InvalidArgument, match="without a limit"):
        rv.IOEvent(a, rv.IOKind.READ, queue=bounded)
