"""Publish/subscribe between processes: throughput, fan-in, and one very large message.

Layout: subscribers start first (each its own process) and report ready once
their interest is in effect; then the publishers (each its own process) wait
until the subscribers can receive, report ready, and on ``go`` publish their
messages followed by an end marker. Publishers are *passive*: they stay
connected until the subscribers have finished (a reliable transport may still
need them for retransmissions), then report.

Each send builds a new message (``message="new"``, what applications do), unless
the row says ``message="prebuilt"``: then one message made before the clock
starts is sent again and again, which times the send path alone.

Throughput is end to end: deliveries (messages x subscribers) divided by the time
from the first publisher's start to the last subscriber's last receipt.
"""

from __future__ import annotations

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
    publish_new_many,
)
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

SUBJECT = "bench.data"

#: The large-message payload: 64 MiB less 1 KiB, so the whole rvasync message
#: (payload, subject, field name, header) stays within its 64 MiB limit.
LARGE_PAYLOAD = 64 * 1024 * 1024 - 1024


async def subscriber(ctx: WorkerContext) -> dict[str, Any]:
    """Subscribe, then count what arrives until every message or end marker is in."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, PubSub)
    await client.connect()
    try:
        subscription = await client.subscribe(SUBJECT)
        sink = CountingSink(expected=p["messages"] * p["pubs"], publishers=p["pubs"])
        await ctx.ready()
        await ctx.go()
        complete = await consume_until_idle(
            client, subscription, sink, idle=float(p["idle"]), deadline=float(p["timeout"]) - 5
        )
        return {**sink.result(), "complete": complete}
    finally:
        await client.close()


async def publisher(ctx: WorkerContext) -> dict[str, Any]:
    """Publish ``messages`` payloads and an end marker; stay connected until told to stop."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, PubSub)
    await client.connect()
    try:
        await client.wait_subscribers(int(p["subs"]), timeout=float(p["timeout"]) / 2)
        data = payload(int(p["size"]))
        prebuilt = p.get("message", "new") == "prebuilt"
        handle = client.prepare(SUBJECT, data) if prebuilt else None
        end = client.prepare(SUBJECT, end_marker(ctx.index))
        await ctx.ready()
        await ctx.go()
        t_start = now_ns()
        if prebuilt:
            await publish_many(client, handle, int(p["messages"]))
        else:
            await publish_new_many(client, SUBJECT, data, int(p["messages"]))
        await client.publish(end)
        await client.flush()
        t_end = now_ns()
        await ctx.stopped()
        return {"sent": int(p["messages"]), "t_start": t_start, "t_end": t_end}
    finally:
        await client.close()


def layout(p: Params) -> Sequence[RoleGroup]:
    """Subscribers first, then the (passive) publishers."""
    return (RoleGroup("sub", int(p["subs"])), RoleGroup("pub", int(p["pubs"]), passive=True))


def _window(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[int, int, float]:
    subs, pubs = results["sub"], results["pub"]
    deliveries = sum(int(s["count"]) for s in subs)
    if deliveries == 0:
        raise RuntimeError("no message reached any subscriber")
    sent = sum(int(p["sent"]) for p in pubs)
    t0 = min(int(p["t_start"]) for p in pubs)
    t1 = max(int(s["t_last"]) for s in subs if s["count"])
    if t1 <= t0:
        raise RuntimeError(f"last receipt ({t1}) is not after the first send ({t0})")
    return deliveries, sent, (t1 - t0) / 1e9


def combine_throughput(
    results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params
) -> dict[str, float]:
    """Deliveries per second, MB/s, loss, and the publishers' own sending rate."""
    deliveries, sent, seconds = _window(results)
    pubs = results["pub"]
    publish_seconds = (
        max(int(x["t_end"]) for x in pubs) - min(int(x["t_start"]) for x in pubs)
    ) / 1e9
    return {
        "delivered_per_s": deliveries / seconds,
        "mb_per_s": deliveries * int(p["size"]) / seconds / 1e6,
        "loss_pct": 100.0 * (1.0 - deliveries / (sent * int(p["subs"]))),
        "published_per_s": sent / publish_seconds if publish_seconds > 0 else float("nan"),
    }


def combine_large(
    results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params
) -> dict[str, float]:
    """MB/s for one message: its size over the time from send to receipt."""
    _, _, seconds = _window(results)
    return {"mb_per_s": int(p["size"]) / seconds / 1e6, "seconds": seconds}


_ROLES = {"sub": subscriber, "pub": publisher}

DELIVERED = Metric("delivered_per_s", "delivered", "msg/s", "higher")
THROUGHPUT_EXTRAS = (
    Metric("mb_per_s", "payload", "MB/s", "higher"),
    Metric("loss_pct", "lost", "%", "lower"),
    Metric("published_per_s", "publish rate", "msg/s", "higher"),
)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es"


def _throughput(
    name: str,
    title: str,
    size: int,
    subs: int,
    pubs: int,
    messages: int,
    quick: int,
    order: int,
    message: str = "new",
) -> Scenario:
    how = (
        "a new message is built for every send"
        if message == "new"
        else "one message built beforehand is sent again and again (the send path alone)"
    )
    return scenario(
        Scenario(
            name=name,
            title=title,
            description=(
                f"{_count(pubs, 'publisher process')} send messages of {size:,} B on one subject "
                f"to {_count(subs, 'subscriber process')}; 'delivered' counts messages x "
                f"subscribers per second, end to end; {how}."
            ),
            capability="pubsub",
            primary=DELIVERED,
            extras=THROUGHPUT_EXTRAS,
            roles=_ROLES,
            layout=layout,
            combine=combine_throughput,
            params={
                "size": size,
                "subs": subs,
                "pubs": pubs,
                "messages": messages,
                "idle": 3.0,
                "message": message,
            },
            quick={"messages": quick, "idle": 2.0},
            timeout=180.0,
            quick_timeout=60.0,
            order=order,
        )
    )


_throughput("pubsub-128B-1sub", "Pub/sub, 128 B, 1 subscriber", 128, 1, 1, 200_000, 20_000, 10)
_throughput("pubsub-16KiB-1sub", "Pub/sub, 16 KiB, 1 subscriber", 16384, 1, 1, 20_000, 2_000, 11)
_throughput("pubsub-128B-10sub", "Pub/sub, 128 B, 10 subscribers", 128, 10, 1, 20_000, 2_000, 12)
_throughput("pubsub-16KiB-10sub", "Pub/sub, 16 KiB, 10 subscribers", 16384, 10, 1, 4_000, 400, 13)
_throughput("fanin-10pub", "Fan-in, 10 publishers to 1 subscriber", 128, 1, 10, 20_000, 2_000, 20)
# Secondary rows: the send path alone, one prebuilt message re-sent.
_throughput(
    "pubsub-128B-1sub-prebuilt",
    "Pub/sub, 128 B, 1 subscriber, one prebuilt message re-sent",
    128,
    1,
    1,
    200_000,
    20_000,
    14,
    message="prebuilt",
)
_throughput(
    "fanin-10pub-prebuilt",
    "Fan-in, 10 publishers to 1 subscriber, one prebuilt message re-sent",
    128,
    1,
    10,
    20_000,
    2_000,
    21,
    message="prebuilt",
)

scenario(
    Scenario(
        name="large-64MiB",
        title="One 64 MiB message end to end",
        description=(
            f"One publisher process sends a single {LARGE_PAYLOAD:,} B message (64 MiB less "
            "1 KiB, to fit rvasync's 64 MiB message limit) to one subscriber process; MB/s is "
            "its size over the time from the send call to its receipt."
        ),
        capability="pubsub",
        primary=Metric("mb_per_s", "throughput", "MB/s", "higher"),
        extras=(Metric("seconds", "time", "s", "lower"),),
        roles=_ROLES,
        layout=layout,
        combine=combine_large,
        params={"size": LARGE_PAYLOAD, "subs": 1, "pubs": 1, "messages": 1, "idle": 10.0},
        quick={"idle": 5.0},
        timeout=120.0,
        quick_timeout=60.0,
        order=30,
    )
)
