"""Across two routers: pub/sub throughput and request/reply latency from network A to B.

The same measuring loops as the pub/sub and request/reply scenarios, but the
publisher (requester) is on one network and the subscriber (replier) on
another, joined by two routers: two rvasync routing daemons linked over TCP,
against two nats-servers joined as a cluster (see benchmarks/systems/routed.py).
"""

from __future__ import annotations

from typing import Any

from benchmarks.registry import Metric, Scenario, scenario
from benchmarks.scenarios import pubsub, reqrep
from benchmarks.worker import WorkerContext


def _far(role: Any) -> Any:
    async def run(ctx: WorkerContext) -> dict[str, Any]:
        ctx.adapter.side = 1  # type: ignore[attr-defined]  # read by the routed adapters
        result: dict[str, Any] = await role(ctx)
        return result

    return run


def _near(role: Any) -> Any:
    async def run(ctx: WorkerContext) -> dict[str, Any]:
        ctx.adapter.side = 0  # type: ignore[attr-defined]  # read by the routed adapters
        result: dict[str, Any] = await role(ctx)
        return result

    return run


scenario(
    Scenario(
        name="routed-pubsub-128B",
        title="Pub/sub across two routers, 128 B",
        description=(
            "One publisher process on network A sends 128 B messages to one subscriber "
            "process on network B; two routers join the networks (rvasync: two routing "
            "daemons over TCP; NATS: two servers in a cluster). 'delivered' is end to end."
        ),
        capability="routed-pubsub",
        primary=pubsub.DELIVERED,
        extras=pubsub.THROUGHPUT_EXTRAS,
        roles={"sub": _far(pubsub.subscriber), "pub": _near(pubsub.publisher)},
        layout=pubsub.layout,
        combine=pubsub.combine_throughput,
        params={"size": 128, "subs": 1, "pubs": 1, "messages": 100_000, "idle": 3.0},
        quick={"messages": 5_000, "idle": 2.0},
        timeout=180.0,
        quick_timeout=60.0,
        order=15,
    )
)

scenario(
    Scenario(
        name="routed-reqrep-latency",
        title="Request/reply across two routers, 128 B",
        description=(
            "One requester process on network A, one replier on network B, two routers "
            "between (rvasync: two routing daemons over TCP; NATS: two servers in a "
            "cluster); latency percentiles over every timed round trip."
        ),
        capability="routed-reqrep",
        primary=Metric("p50_us", "p50", "µs", "lower"),
        extras=(
            Metric("p90_us", "p90", "µs", "lower"),
            Metric("p99_us", "p99", "µs", "lower"),
            Metric("p999_us", "p99.9", "µs", "lower"),
            Metric("round_trips_per_s", "round trips", "/s", "higher"),
        ),
        chart=("p50_us", "p90_us", "p99_us", "p999_us"),
        roles={"server": _far(reqrep.replier), "client": _near(reqrep.requester)},
        layout=reqrep.layout,
        combine=reqrep.combine,
        params={"size": 128, "requests": 5_000, "warmup": 200, "request_timeout": 5.0},
        quick={"requests": 500, "warmup": 50},
        timeout=180.0,
        quick_timeout=60.0,
        order=41,
    )
)
