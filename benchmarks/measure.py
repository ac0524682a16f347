"""Measuring code shared by every system: the clock, the receiving sink, the send pump.

Timestamps taken in different processes are compared (publisher start against
subscriber's last receipt), so they come from ``CLOCK_MONOTONIC``, which Linux
keeps system-wide.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from benchmarks.interfaces import PubSub

_END_PREFIX = b"\x00END:"

#: Publishers yield to the event loop every this many sends, so background
#: tasks (flushers, readers) of every system get the loop on the same schedule.
YIELD_EVERY = 256


def now_ns() -> int:
    """Nanoseconds on the system-wide monotonic clock (comparable across processes)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def end_marker(publisher: int) -> bytes:
    """The payload publisher ``publisher`` sends after its data: short, so never data."""
    return _END_PREFIX + str(publisher).encode()


def payload(size: int) -> bytes:
    """A data payload of ``size`` bytes (at least 16, so it never looks like an end marker)."""
    if size < 16:
        raise ValueError(f"payload size {size} is below the 16-byte minimum")
    return b"x" * size


class CountingSink:
    """Counts data payloads and notices end markers; the same code for every system.

    Done when ``expected`` data payloads arrived or every publisher's end marker did
    (messages lost on the way then show as loss, not as a hang).
    """

    __slots__ = ("bytes", "count", "ended", "expected", "publishers", "t_first", "t_last")

    def __init__(self, expected: int, publishers: int) -> None:
        self.expected = expected
        self.publishers = publishers
        self.count = 0
        self.bytes = 0
        self.t_first = 0
        self.t_last = 0
        self.ended: set[bytes] = set()

    def __call__(self, data: bytes) -> bool:
        now = now_ns()
        size = len(data)
        if size < 16 and data.startswith(_END_PREFIX):
            self.ended.add(bytes(data))
            return len(self.ended) >= self.publishers or self.count >= self.expected
        if not self.count:
            self.t_first = now
        self.count += 1
        self.bytes += size
        self.t_last = now
        return self.count >= self.expected

    def result(self) -> dict[str, Any]:
        """What a subscriber reports."""
        return {
            "count": self.count,
            "bytes": self.bytes,
            "t_first": self.t_first,
            "t_last": self.t_last,
            "ends": len(self.ended),
        }


async def consume_until_idle(
    client: PubSub,
    subscription: Any,
    sink: CountingSink,
    *,
    idle: float,
    deadline: float,
) -> bool:
    """Run ``client.consume`` until the sink is done, nothing arrived for ``idle``
    seconds after the first message, or ``deadline`` seconds passed.

    Returns True if the sink finished on its own (rather than by idling out).
    """
    task = asyncio.ensure_future(client.consume(subscription, sink))
    started = time.monotonic()
    seen = -1
    quiet_since = time.monotonic()
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.05)
            now = time.monotonic()
            progress = sink.count + len(sink.ended)
            if progress != seen:
                seen = progress
                quiet_since = now
            elif sink.count and now - quiet_since >= idle:
                return False
            if now - started >= deadline:
                return False
        task.result()
        return True
    finally:
        if not task.done():
            task.cancel()
            try:
                await asyncio.wait_for(task, timeout=5)
            except (asyncio.CancelledError, TimeoutError):
                pass


async def publish_many(client: PubSub, handle: Any, count: int) -> None:
    """Publish ``handle`` ``count`` times, yielding to the loop every :data:`YIELD_EVERY`."""
    publish = client.publish
    for i in range(count):
        await publish(handle)
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)


async def publish_new_many(client: PubSub, subject: str, data: bytes, count: int) -> None:
    """Build and publish ``count`` new messages, yielding to the loop every :data:`YIELD_EVERY`."""
    publish_new = client.publish_new
    for i in range(count):
        await publish_new(subject, data)
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)


def timed_batches(
    run_batch: Callable[[int], int], seconds: float, min_batch_seconds: float = 0.02
) -> list[float]:
    """Nanoseconds per operation, one figure per batch, for a synchronous micro-benchmark.

    ``run_batch(n)`` performs ``n`` operations and returns the nanoseconds they took.
    The batch size doubles until one batch lasts ``min_batch_seconds`` (so timer
    resolution and loop overhead do not matter), then batches run until ``seconds``
    have been spent measuring. The median of the result is the figure to report.
    """
    n = 1
    while True:
        elapsed = run_batch(n)
        if elapsed >= min_batch_seconds * 1e9 or n >= 1 << 30:
            break
        n *= 2
    figures = [elapsed / n]
    spent = elapsed
    while spent < seconds * 1e9 or len(figures) < 5:
        elapsed = run_batch(n)
        figures.append(elapsed / n)
        spent += elapsed
    return figures


async def deliver_through(
    client: PubSub,
    subscription: Any,
    subject: str,
    data: bytes,
    count: int,
    *,
    idle: float,
    deadline: float,
) -> int:
    """Publish ``count`` payloads and an end marker on ``subject`` from this process while
    consuming ``subscription`` here too; return how many payloads arrived."""
    sink = CountingSink(expected=count, publishers=1)
    consumer = asyncio.ensure_future(
        consume_until_idle(client, subscription, sink, idle=idle, deadline=deadline)
    )
    try:
        await publish_many(client, client.prepare(subject, data), count)
        await client.publish(client.prepare(subject, end_marker(0)))
        await client.flush()
        await consumer
    finally:
        consumer.cancel()
    return sink.count
