"""Request/reply latency between two processes.

A replier process echoes each request's payload; a requester process sends one
request at a time (after a warm-up) and times each round trip with
``perf_counter_ns``. Every request is a new message built for it, as a program
builds one (``ReqRep.request_new``; an rvasync row saying "prebuilt" re-sends
one message instead, beside the plain row). Reported: p50/p90/p99/p99.9 in
microseconds, and round trips per second for the whole sequential run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import ReqRep
from benchmarks.measure import payload
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.stats import percentiles
from benchmarks.worker import WorkerContext

SUBJECT = "bench.request"
QUANTILES = (50.0, 90.0, 99.0, 99.9)


async def replier(ctx: WorkerContext) -> dict[str, Any]:
    """Echo requests until the runner says stop."""
    client = ctx.adapter
    assert isinstance(client, ReqRep)
    await client.connect()
    try:
        await client.serve(SUBJECT)
        await ctx.ready()
        await ctx.go()
        await ctx.stopped()
        return {}
    finally:
        await client.close()


async def requester(ctx: WorkerContext) -> dict[str, Any]:
    """Warm up, then time ``requests`` sequential round trips."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, ReqRep)
    await client.connect()
    try:
        size = int(p["size"])
        data = payload(size)
        timeout = float(p["request_timeout"])
        await ctx.ready()
        await ctx.go()
        request_new = client.request_new
        for _ in range(int(p["warmup"])):
            await request_new(SUBJECT, data, timeout)
        count = int(p["requests"])
        samples = [0] * count
        clock = time.perf_counter_ns
        began = clock()
        for i in range(count):
            t0 = clock()
            reply = await request_new(SUBJECT, data, timeout)
            samples[i] = clock() - t0
            if len(reply) != size:
                raise RuntimeError(f"reply {i} has {len(reply)} bytes, expected {size}")
        total = clock() - began
        qs = percentiles([s / 1000.0 for s in samples], QUANTILES)
        return {
            "p50_us": qs[50.0],
            "p90_us": qs[90.0],
            "p99_us": qs[99.0],
            "p999_us": qs[99.9],
            "round_trips_per_s": count / (total / 1e9),
        }
    finally:
        await client.close()


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """The requester's figures are the result."""
    (client,) = results["client"]
    return {key: float(value) for key, value in client.items()}


def layout(p: Params) -> Sequence[RoleGroup]:
    """The replier first (passive), then the requester."""
    return (RoleGroup("server", 1, passive=True), RoleGroup("client", 1))


scenario(
    Scenario(
        name="reqrep-latency",
        title="Request/reply latency, 128 B",
        description=(
            "One requester process sends 128 B requests one at a time to a replier process "
            "that echoes them; latency percentiles over every timed round trip."
        ),
        capability="reqrep",
        primary=Metric("p50_us", "p50", "µs", "lower"),
        extras=(
            Metric("p90_us", "p90", "µs", "lower"),
            Metric("p99_us", "p99", "µs", "lower"),
            Metric("p999_us", "p99.9", "µs", "lower"),
            Metric("round_trips_per_s", "round trips", "/s", "higher"),
        ),
        chart=("p50_us", "p90_us", "p99_us", "p999_us"),
        roles={"server": replier, "client": requester},
        layout=layout,
        combine=combine,
        params={"size": 128, "requests": 20_000, "warmup": 1_000, "request_timeout": 5.0},
        quick={"requests": 2_000, "warmup": 200},
        timeout=180.0,
        quick_timeout=60.0,
        order=40,
    )
)
