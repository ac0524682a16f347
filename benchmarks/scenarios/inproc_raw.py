"""Raw intra-process throughput: ``await send(msg)`` into ``async for`` and into a callback.

The ``intraprocess`` scenario runs every system through the shared
:class:`~benchmarks.measure.CountingSink` (a clock read and a size check per
message), which is fair between systems but hides what the transport itself
costs once the per-message work is tiny. Here the loops do nothing per message
but count: the producer awaits the system's own bound ``send`` on one message
built once (a 128-byte opaque field), yielding to the loop every
:data:`YIELD_EVERY` sends; the consumer is either an ``async for`` over a
listener or a plain callback. ``perf_counter_ns`` is read at the first send and
at the last receipt only.

Each repetition runs a short warm-up of both forms, then alternates them
``rounds`` times and reports the median of each and the ratio of the medians
(async for / callback), so both forms see the same machine conditions.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.stats import median
from benchmarks.worker import WorkerContext

#: The producer yields to the event loop every this many sends.
YIELD_EVERY = 1000

ITER_SUBJECT = "BENCH.RAW.ITER"
CALLBACK_SUBJECT = "BENCH.RAW.CALLBACK"


class RawInproc(Adapter):
    """The bare calls of an in-process transport, handed to the scenario's own loops."""

    @abc.abstractmethod
    def message(self, subject: str, size: int) -> Any:
        """Build, once, a message on ``subject`` with one opaque field of ``size`` bytes."""

    @abc.abstractmethod
    def sender(self) -> Callable[[Any], Awaitable[Any]]:
        """The system's own bound send coroutine function (no wrapper around it)."""

    @abc.abstractmethod
    def iterate(self, subject: str) -> AsyncIterator[Any]:
        """A listener on ``subject`` to consume with ``async for``; interest is in effect
        on return."""

    @abc.abstractmethod
    def listen(self, subject: str, callback: Callable[[Any], None]) -> None:
        """A listener on ``subject`` that calls ``callback`` (a plain function) per message."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Close every listener made so far (each round starts with fresh ones)."""


async def _produce(send: Callable[[Any], Awaitable[Any]], msg: Any, count: int) -> None:
    sleep = asyncio.sleep
    for i in range(count):
        await send(msg)
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await sleep(0)


async def iterate_round(raw: RawInproc, count: int, size: int, timeout: float) -> float:
    """Messages per second from the first send to the ``count``-th ``async for`` receipt."""
    listener = raw.iterate(ITER_SUBJECT)
    msg = raw.message(ITER_SUBJECT, size)
    send = raw.sender()
    clock = time.perf_counter_ns

    async def consume() -> int:
        n = 0
        async for _ in listener:
            n += 1
            if n == count:
                return clock()
        raise RuntimeError(f"the listener ended after {n} of {count} messages")

    consumer = asyncio.ensure_future(consume())
    try:
        async with asyncio.timeout(timeout):
            t0 = clock()
            await _produce(send, msg, count)
            t1 = await consumer
    finally:
        consumer.cancel()
        await raw.release()
    return count / ((t1 - t0) / 1e9)


async def callback_round(raw: RawInproc, count: int, size: int, timeout: float) -> float:
    """Messages per second from the first send to the ``count``-th callback."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    clock = time.perf_counter_ns
    n = 0

    def on_message(_: Any) -> None:
        nonlocal n
        n += 1
        if n == count:
            done.set_result(clock())

    raw.listen(CALLBACK_SUBJECT, on_message)
    msg = raw.message(CALLBACK_SUBJECT, size)
    send = raw.sender()
    try:
        async with asyncio.timeout(timeout):
            t0 = clock()
            await _produce(send, msg, count)
            t1 = await done
    finally:
        await raw.release()
    return count / ((t1 - t0) / 1e9)


async def run(ctx: WorkerContext) -> dict[str, Any]:
    """Warm up, then alternate the two forms ``rounds`` times."""
    p = ctx.params
    raw = ctx.adapter
    assert isinstance(raw, RawInproc)
    count, size, rounds = int(p["messages"]), int(p["size"]), int(p["rounds"])
    # Each round gets an equal share of the time left for the measuring.
    per_round = (float(p["timeout"]) - 10.0) / (2 * rounds + 2)
    try:
        warm = max(1, count // 10)
        await iterate_round(raw, warm, size, per_round)
        await callback_round(raw, warm, size, per_round)
        await ctx.ready()
        await ctx.go()
        iterated: list[float] = []
        called: list[float] = []
        for _ in range(rounds):
            iterated.append(await iterate_round(raw, count, size, per_round))
            called.append(await callback_round(raw, count, size, per_round))
    finally:
        await raw.close()
    return {"iterate": iterated, "callback": called}


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Median of each form over the rounds, and their ratio."""
    (r,) = results["run"]
    iterate, callback = median(r["iterate"]), median(r["callback"])
    return {
        "iterate_per_s": iterate,
        "callback_per_s": callback,
        "iterate_vs_callback": iterate / callback,
    }


scenario(
    Scenario(
        name="intraprocess-raw",
        title="Intra-process raw throughput: send to async for, and to a callback, 128 B",
        description=(
            "rvasync's process transport with no per-message harness work: `await t.send(msg)` "
            "of one prebuilt message (a 128 B opaque field), yielding every 1,000 sends, into "
            "`async for msg in listener` (counting only) and into a plain callback (counting "
            "only); perf_counter_ns at the first send and the last receipt. Median of the "
            "rounds of each form, alternated, and async for / callback. Target: async for at "
            "least 1,000,000 msg/s and within 10% of the callback."
        ),
        capability="inproc-raw",
        primary=Metric("iterate_per_s", "async for", "msg/s", "higher"),
        extras=(
            Metric("callback_per_s", "callback", "msg/s", "higher"),
            Metric("iterate_vs_callback", "async for / callback", "x", "higher"),
        ),
        chart=("iterate_per_s", "callback_per_s"),
        roles={"run": run},
        layout=lambda p: (RoleGroup("run", 1),),
        combine=combine,
        params={"size": 128, "messages": 500_000, "rounds": 3},
        quick={"messages": 50_000, "rounds": 1},
        timeout=120.0,
        quick_timeout=45.0,
        order=51,
    )
)
