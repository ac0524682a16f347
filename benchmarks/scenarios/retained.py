"""Retained values: a cache's ingest rate, and the time to answer for 10,000 subjects.

Layout: a ``cache`` process (rvasync: ``rv.CurrentValueCache`` on its own
transport; NATS: nothing of its own, nats-server's KV bucket is the cache, the
process only watches the bucket's size), then a ``client`` process.

``retained-ingest-100k``: the client publishes one update on each of
``subjects`` subjects as fast as the system takes them (rvasync: ``t.send``;
NATS KV: ``put`` pipelined with ``publish_async``); the cache process notes
when it holds every subject (it polls its size every millisecond, the bucket's
status every 5 ms for NATS). Figure: updates per second from the first
publish to that moment.

``retained-answer-10k``: the client publishes ``subjects`` values, waits
until the cache answers with all of them, then times ``requests`` fetches of
the whole set (rvasync: ``request_retained("pattern.>")``; NATS KV: a
watcher on every key, until its initial values end). Figure: the median time
per fetch, and the subjects per second it amounts to.
"""

from __future__ import annotations

import abc
import asyncio
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.measure import now_ns, payload
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

PREFIX = "BENCHKV"


def subject_of(n: int) -> str:
    return f"{PREFIX}.S{n}"


class Retained(Adapter):
    """A last-value-per-subject store: fill it, and fetch every subject from it."""

    @abc.abstractmethod
    async def open_cache(self) -> None:
        """Start the cache side (retaining ``PREFIX.>``)."""

    @abc.abstractmethod
    async def cache_size(self) -> int:
        """How many subjects the cache holds now."""

    poll_interval: float = 0.001

    @abc.abstractmethod
    async def open_client(self) -> None:
        """Open the client side."""

    @abc.abstractmethod
    async def publish(self, subject: str, data: bytes) -> None:
        """One update (may return before it is stored: see :meth:`flush`)."""

    async def flush(self) -> None:
        """Wait until every update published so far was accepted."""

    @abc.abstractmethod
    async def fetch_all(self, pattern: str) -> int:
        """Fetch the last value of every subject matching ``pattern``; return how many."""


async def cache(ctx: WorkerContext) -> dict[str, Any]:
    """Start the cache; after go, note when it holds every subject."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, Retained)
    expected = int(p["subjects"])
    try:
        await client.open_cache()
        await ctx.ready()
        await ctx.go()
        async with asyncio.timeout(float(p["timeout"]) - 10):
            while await client.cache_size() < expected:
                await asyncio.sleep(client.poll_interval)
        t_stored = now_ns()
        if p["passive_cache"]:
            await ctx.stopped()
    finally:
        await client.close()
    return {"t_stored": t_stored}


async def client_role(ctx: WorkerContext) -> dict[str, Any]:
    """Publish one update per subject; for the answer scenario, then time fetches."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, Retained)
    count, requests = int(p["subjects"]), int(p["requests"])
    data = payload(int(p["size"]))
    subjects = [subject_of(n) for n in range(count)]
    times: list[float] = []
    try:
        await client.open_client()
        await ctx.ready()
        await ctx.go()
        t_start = now_ns()
        publish = client.publish
        for i, subject in enumerate(subjects):
            await publish(subject, data)
            if i % 1000 == 999:
                await asyncio.sleep(0)
        await client.flush()
        t_sent = now_ns()
        if requests:
            async with asyncio.timeout(float(p["timeout"]) - 10):
                while await client.fetch_all(f"{PREFIX}.>") < count:
                    await asyncio.sleep(0.05)
            for _ in range(requests):
                t0 = now_ns()
                got = await client.fetch_all(f"{PREFIX}.>")
                times.append((now_ns() - t0) / 1e9)
                if got != count:
                    raise RuntimeError(f"fetched {got} subjects, expected {count}")
    finally:
        await client.close()
    return {"t_start": t_start, "t_sent": t_sent, "times": times}


def layout(p: Params) -> Sequence[RoleGroup]:
    return (
        RoleGroup("cache", 1, passive=bool(p["passive_cache"])),
        RoleGroup("client", 1),
    )


def combine_ingest(
    results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params
) -> dict[str, float]:
    (c,) = results["client"]
    (k,) = results["cache"]
    count = int(p["subjects"])
    return {
        "ingest_per_s": count / ((int(k["t_stored"]) - int(c["t_start"])) / 1e9),
        "sent_per_s": count / ((int(c["t_sent"]) - int(c["t_start"])) / 1e9),
    }


def combine_answer(
    results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params
) -> dict[str, float]:
    (c,) = results["client"]
    times = [float(t) for t in c["times"]]
    median = statistics.median(times)
    return {
        "answer_ms": median * 1e3,
        "answer_min_ms": min(times) * 1e3,
        "subjects_per_s": int(p["subjects"]) / median,
    }


scenario(
    Scenario(
        name="retained-ingest-100k",
        title="Retained values: cache ingest, 100,000 subjects",
        description=(
            "One update on each of 100,000 subjects, published as fast as taken; updates per "
            "second from the first publish until the cache holds every subject. rvasync: "
            "rv.CurrentValueCache (memory) in its own process, in-process daemons; NATS: a KV "
            "bucket (JetStream, file store, history 1), puts pipelined with publish_async."
        ),
        capability="retained",
        primary=Metric("ingest_per_s", "ingested", "upd/s", "higher"),
        extras=(Metric("sent_per_s", "publish rate", "upd/s", "higher"),),
        chart=("ingest_per_s",),
        roles={"cache": cache, "client": client_role},
        layout=layout,
        combine=combine_ingest,
        params={
            "subjects": 100_000,
            "size": 64,
            "requests": 0,
            "passive_cache": False,
        },
        quick={"subjects": 10_000},
        timeout=180.0,
        quick_timeout=90.0,
        order=47,
    )
)

scenario(
    Scenario(
        name="retained-answer-10k",
        title="Retained values: answering for 10,000 subjects",
        description=(
            "A cache holding 10,000 subjects; the median time to fetch the last value of every "
            "one, over 10 fetches. rvasync: request_retained('BENCHKV.>') answered by "
            "rv.CurrentValueCache in another process; NATS: a KV watcher on every key, until "
            "its initial values end."
        ),
        capability="retained",
        primary=Metric("answer_ms", "answer", "ms", "lower"),
        extras=(
            Metric("answer_min_ms", "fastest", "ms", "lower"),
            Metric("subjects_per_s", "subjects", "subj/s", "higher"),
        ),
        chart=("answer_ms",),
        roles={"cache": cache, "client": client_role},
        layout=layout,
        combine=combine_answer,
        params={
            "subjects": 10_000,
            "size": 64,
            "requests": 10,
            "passive_cache": True,
        },
        quick={"requests": 3},
        timeout=180.0,
        quick_timeout=90.0,
        order=48,
    )
)
