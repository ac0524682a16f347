"""Wildcard fan-out cost: N listeners on distinct wildcard subjects, one of them matching.

One process creates N listeners on ``bench.fan.<i>.>`` (timed: set-up cost per
listener), then sends messages to ``bench.fan.<N//2>.data``, which exactly one
listener matches, and counts deliveries. Comparing N = 1, 1,000 and 100,000
shows what an idle listener costs the delivery path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Fanout
from benchmarks.measure import now_ns, payload
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext


def patterns(count: int) -> list[str]:
    """The listeners' subjects: distinct, each with a trailing wildcard."""
    return [f"bench.fan.{i}.>" for i in range(count)]


async def run(ctx: WorkerContext) -> dict[str, Any]:
    """Create the listeners, then deliver ``messages`` to the one that matches."""
    p = ctx.params
    bench = ctx.adapter
    assert isinstance(bench, Fanout)
    listeners = int(p["listeners"])
    target = listeners // 2
    try:
        t0 = now_ns()
        await bench.setup(patterns(listeners))
        setup_ns = now_ns() - t0
        count = int(p["messages"])
        await ctx.ready()
        await ctx.go()
        t1 = now_ns()
        delivered = await bench.deliver(
            f"bench.fan.{target}.data", payload(int(p["size"])), count, target
        )
        t2 = now_ns()
        return {"delivered": delivered, "sent": count, "ns": t2 - t1, "setup_ns": setup_ns}
    finally:
        await bench.close()


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Deliveries per second with N listeners present, and set-up cost per listener."""
    (r,) = results["run"]
    if not r["delivered"]:
        raise RuntimeError("the matching listener received nothing")
    if int(r["delivered"]) > int(r["sent"]):
        raise RuntimeError(
            f"{r['delivered']} deliveries for {r['sent']} messages: more than one listener matched"
        )
    return {
        "delivered_per_s": int(r["delivered"]) / (int(r["ns"]) / 1e9),
        "setup_us_per_listener": int(r["setup_ns"]) / 1000.0 / int(p["listeners"]),
        "loss_pct": 100.0 * (1.0 - int(r["delivered"]) / int(r["sent"])),
    }


def _listeners(count: int) -> str:
    return "1 listener" if count == 1 else f"{count:,} listeners"


def _fanout(listeners: int, messages: int, quick: int, order: int) -> Scenario:
    return scenario(
        Scenario(
            name=f"fanout-{listeners}",
            title=f"Wildcard fan-out, {_listeners(listeners)}, one matching",
            description=(
                f"One process holds {_listeners(listeners)} on distinct `bench.fan.<i>.>` "
                "subjects and sends 128 B messages that exactly one of them matches (rvasync: "
                "process transport, no broker; NATS: one connection, matched by nats-server)."
            ),
            capability="fanout",
            primary=Metric("delivered_per_s", "delivered", "msg/s", "higher"),
            extras=(
                Metric("setup_us_per_listener", "set-up per listener", "µs", "lower"),
                Metric("loss_pct", "lost", "%", "lower"),
            ),
            roles={"run": run},
            layout=lambda p: (RoleGroup("run", 1),),
            combine=combine,
            params={
                "listeners": listeners,
                "messages": messages,
                "size": 128,
                "idle": 3.0,
                "ready_timeout": 230.0,
            },
            quick={"messages": quick, "idle": 2.0, "ready_timeout": 110.0},
            timeout=240.0,
            quick_timeout=120.0,
            order=order,
        )
    )


_fanout(1, 100_000, 10_000, 60)
_fanout(1_000, 100_000, 10_000, 61)
_fanout(100_000, 100_000, 10_000, 62)
