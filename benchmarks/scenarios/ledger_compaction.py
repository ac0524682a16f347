"""Ledger compaction: how long the event loop stalls while a large ledger is rewritten.

One process: a persistent sender (ledger file) anticipates one listener that
never comes, so every message it sends stays in its ledger; it sends
``messages`` certified messages of ``size`` bytes (200,000 of 1 KB: a
~229 MB ledger), waits until they are written, then compacts the ledger
while a ticker task measures the loop: every ``tick`` seconds it notes how
much later than asked it woke up. A sender keeps sending on another subject
meanwhile, so appends go on during the rewrite.

Figures:

- ``worst_stall_ms``: the longest the loop was kept from running (the
  ticker's largest lateness) from the compaction call until it returned;
- ``p99_stall_ms``: the 99th percentile of the ticker's lateness meanwhile;
- ``compaction_s``: wall time of the compaction call;
- ``ledger_mb``: the ledger's size before the compaction;
- ``sent_during``: messages sent on the other subject while it ran.

Quick pass: 10,000 messages. Full size: the default (200,000), or set
``RVASYNC_BENCH_LEDGER_MESSAGES`` to another count.
"""

from __future__ import annotations

import abc
import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.stats import percentile
from benchmarks.worker import WorkerContext

TICK = 0.001
"""Seconds between the ticker's wake-ups."""


class LedgerCompaction(Adapter):
    """A certified sender with a ledger file that keeps every message it sends."""

    @abc.abstractmethod
    async def open_sender(self) -> None: ...

    @abc.abstractmethod
    async def store(self, count: int, size: int) -> int:
        """Send ``count`` messages that stay stored; returns the ledger's size once written."""

    @abc.abstractmethod
    async def send_other(self) -> None:
        """Send one message on another subject (traffic during the compaction)."""

    @abc.abstractmethod
    async def compact(self) -> None:
        """Compact the ledger; returns once the new file replaced the old."""


async def _ticker(lateness: list[float], stop: asyncio.Event) -> None:
    clock = time.perf_counter
    while not stop.is_set():
        asked = clock()
        await asyncio.sleep(TICK)
        lateness.append(clock() - asked - TICK)


async def _traffic(client: LedgerCompaction, stop: asyncio.Event) -> int:
    sent = 0
    while not stop.is_set():
        await client.send_other()
        sent += 1
        await asyncio.sleep(0.002)
    return sent


async def compactor(ctx: WorkerContext) -> dict[str, Any]:
    client = ctx.adapter
    assert isinstance(client, LedgerCompaction)
    count, size = int(ctx.params["messages"]), int(ctx.params["size"])
    env_count = os.environ.get("RVASYNC_BENCH_LEDGER_MESSAGES")
    if env_count and not ctx.params.get("quick"):
        count = int(env_count)
    timeout = float(ctx.params["timeout"]) - 10
    try:
        await client.open_sender()
        async with asyncio.timeout(timeout):
            ledger_bytes = await client.store(count, size)
        await ctx.ready()
        await ctx.go()
        lateness: list[float] = []
        stop = asyncio.Event()
        ticker = asyncio.ensure_future(_ticker(lateness, stop))
        traffic = asyncio.ensure_future(_traffic(client, stop))
        await asyncio.sleep(0.05)
        lateness.clear()
        t0 = time.perf_counter()
        async with asyncio.timeout(timeout):
            await client.compact()
        elapsed = time.perf_counter() - t0
        stop.set()
        await ticker
        sent = await traffic
    finally:
        await client.close()
    return {
        "count": count,
        "ledger_bytes": ledger_bytes,
        "elapsed": elapsed,
        "lateness": lateness or [0.0],
        "sent": sent,
    }


def layout(p: Params) -> Sequence[RoleGroup]:
    return (RoleGroup("compactor", 1),)


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    (run,) = results["compactor"]
    lateness = [float(x) for x in run["lateness"]]
    return {
        "worst_stall_ms": max(lateness) * 1e3,
        "p99_stall_ms": percentile(lateness, 99) * 1e3,
        "compaction_s": float(run["elapsed"]),
        "ledger_mb": int(run["ledger_bytes"]) / 1e6,
        "sent_during": float(run["sent"]),
    }


scenario(
    Scenario(
        name="certified-compaction",
        title="Certified ledger: event-loop stall while 200,000 stored 1 KB messages are compacted",
        description=(
            "A sender whose ledger file holds 200,000 unconfirmed 1 KB messages (~229 MB) "
            "compacts it while a ticker measures how late the event loop wakes (1 ms ticks) "
            "and the sender goes on sending on another subject. 'worst stall': the longest "
            "the loop was kept from running during the compaction. One process, ledger file "
            "on the work directory's disk. RVASYNC_BENCH_LEDGER_MESSAGES sets another size."
        ),
        capability="ledger",
        primary=Metric("worst_stall_ms", "worst stall", "ms", "lower"),
        extras=(
            Metric("p99_stall_ms", "p99 stall", "ms", "lower"),
            Metric("compaction_s", "compaction", "s", "lower"),
            Metric("ledger_mb", "ledger", "MB", "lower"),
            Metric("sent_during", "sent meanwhile", "msgs", "higher"),
        ),
        chart=("worst_stall_ms", "p99_stall_ms"),
        roles={"compactor": compactor},
        layout=layout,
        combine=combine,
        params={"size": 1024, "messages": 200_000},
        quick={"messages": 10_000},
        timeout=600.0,
        quick_timeout=120.0,
        order=48,
    )
)
