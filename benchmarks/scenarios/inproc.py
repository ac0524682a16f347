"""Intra-process publish/subscribe: a producer task sends, a consumer task receives.

Both tasks share one process and event loop. rvasync uses its process transport
and ``async for`` on a listener; peers use their in-process transport where they
have one (ZeroMQ ``inproc://``); the floor is a UDP socket pair inside the
process. Throughput counts from the first send to the last receipt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import PubSub
from benchmarks.measure import (
    CountingSink,
    consume_until_idle,
    end_marker,
    now_ns,
    payload,
    publish_many,
)
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

SUBJECT = "bench.local"


async def run(ctx: WorkerContext) -> dict[str, Any]:
    """Subscribe, then produce and consume concurrently in this one process."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, PubSub)
    await client.connect()
    try:
        subscription = await client.subscribe(SUBJECT)
        await client.wait_subscribers(1, timeout=10.0)
        count = int(p["messages"])
        handle = client.prepare(SUBJECT, payload(int(p["size"])))
        end = client.prepare(SUBJECT, end_marker(0))
        sink = CountingSink(expected=count, publishers=1)
        await ctx.ready()
        await ctx.go()
        t_start = now_ns()
        consumer = asyncio.ensure_future(
            consume_until_idle(
                client, subscription, sink, idle=float(p["idle"]), deadline=float(p["timeout"]) - 5
            )
        )
        try:
            await publish_many(client, handle, count)
            await client.publish(end)
            await client.flush()
            complete = await consumer
        finally:
            consumer.cancel()
        return {**sink.result(), "sent": count, "t_start": t_start, "complete": complete}
    finally:
        await client.close()


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Messages per second from first send to last receipt, and the loss."""
    (r,) = results["run"]
    if not r["count"]:
        raise RuntimeError("the consumer received nothing")
    seconds = (int(r["t_last"]) - int(r["t_start"])) / 1e9
    return {
        "delivered_per_s": int(r["count"]) / seconds,
        "mb_per_s": int(r["bytes"]) / seconds / 1e6,
        "loss_pct": 100.0 * (1.0 - int(r["count"]) / int(r["sent"])),
    }


scenario(
    Scenario(
        name="intraprocess",
        title="Intra-process send to async for, 128 B",
        description=(
            "One process: a task sends 128 B messages, another receives them (rvasync: process "
            "transport and `async for` on a Listener)."
        ),
        capability="inproc",
        primary=Metric("delivered_per_s", "delivered", "msg/s", "higher"),
        extras=(
            Metric("mb_per_s", "payload", "MB/s", "higher"),
            Metric("loss_pct", "lost", "%", "lower"),
        ),
        roles={"run": run},
        layout=lambda p: (RoleGroup("run", 1),),
        combine=combine,
        params={"size": 128, "messages": 200_000, "idle": 3.0},
        quick={"messages": 20_000, "idle": 2.0},
        timeout=120.0,
        quick_timeout=45.0,
        order=50,
    )
)
