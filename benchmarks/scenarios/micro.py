"""Micro-benchmarks: the message codec and subject matching, in one process, no I/O.

Each runs the operation in calibrated batches for a fixed time and reports the
median time per operation over the batches (see :func:`benchmarks.measure.timed_batches`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Codec, Match
from benchmarks.measure import timed_batches
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.stats import median
from benchmarks.worker import WorkerContext

#: The 10-field mixed message: (name, type tag, value). Type tags are rvasync's
#: field type names in lower case; adapters map them to their own types.
CODEC_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("symbol", "string", "RVAS.L"),
    ("price", "f64", 101.25),
    ("quantity", "i64", 1500),
    ("buy", "bool", True),
    ("venue", "u16", 42),
    ("time", "datetime", (1_700_000_000, 123_456)),
    ("blob", "opaque", bytes(range(64))),
    ("levels", "f64array", [100.0 + i * 0.25 for i in range(8)]),
    ("tags", "stringarray", ["equity", "lse", "gbp"]),
    ("meta", "msg", [("trader", "string", "alice"), ("desk", "i32", 7)]),
)


async def codec_run(ctx: WorkerContext) -> dict[str, Any]:
    """Time encode, decode and the round trip of the 10-field message."""
    p = ctx.params
    codec = ctx.adapter
    assert isinstance(codec, Codec)
    message = codec.build(CODEC_FIELDS)
    data = codec.encode(message)
    codec.decode(data)
    await ctx.ready()
    await ctx.go()
    seconds = float(p["seconds"])
    encode, decode = codec.encode, codec.decode
    clock = time.perf_counter_ns

    def round_trips(n: int) -> int:
        t0 = clock()
        for _ in range(n):
            decode(encode(message))
        return clock() - t0

    def encodes(n: int) -> int:
        t0 = clock()
        for _ in range(n):
            encode(message)
        return clock() - t0

    def decodes(n: int) -> int:
        t0 = clock()
        for _ in range(n):
            decode(data)
        return clock() - t0

    return {
        "roundtrip_us": median(timed_batches(round_trips, seconds)) / 1000.0,
        "encode_us": median(timed_batches(encodes, seconds / 2)) / 1000.0,
        "decode_us": median(timed_batches(decodes, seconds / 2)) / 1000.0,
        "encoded_bytes": float(len(data)),
    }


def match_patterns(count: int) -> list[str]:
    """The indexed listener patterns: distinct, each with a trailing wildcard."""
    return [f"bench.match.{i}.>" for i in range(count)]


async def match_run(ctx: WorkerContext) -> dict[str, Any]:
    """Index N patterns (timed), then time matching a subject that exactly one matches."""
    p = ctx.params
    index = ctx.adapter
    assert isinstance(index, Match)
    count = int(p["listeners"])
    patterns = match_patterns(count)
    t0 = time.perf_counter_ns()
    index.build(patterns)
    build_ns = time.perf_counter_ns() - t0
    subject = f"bench.match.{count // 2}.data"
    found = index.match(subject)
    if found != 1:
        raise RuntimeError(f"{subject!r} matched {found} of {count} patterns, expected 1")
    await ctx.ready()
    await ctx.go()
    match = index.match
    clock = time.perf_counter_ns

    def matches(n: int) -> int:
        t0 = clock()
        for _ in range(n):
            match(subject)
        return clock() - t0

    return {
        "ns_per_match": median(timed_batches(matches, float(p["seconds"]))),
        "build_us_per_pattern": build_ns / 1000.0 / count,
    }


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """The single process's figures are the result."""
    (r,) = results["run"]
    return {key: float(value) for key, value in r.items()}


def _single(p: Params) -> Sequence[RoleGroup]:
    return (RoleGroup("run", 1),)


scenario(
    Scenario(
        name="micro-codec",
        title="Micro: encode + decode a 10-field mixed message",
        description=(
            "Encode then decode one message of 10 fields (string, f64, i64, bool, u16, datetime, "
            "64 B opaque, 8 x f64 array, 3 strings, nested 2-field message). rvasync's pure and "
            "native codecs; a msgpack dict holding the same values is the reference."
        ),
        capability="codec",
        primary=Metric("roundtrip_us", "encode+decode", "µs", "lower"),
        extras=(
            Metric("encode_us", "encode", "µs", "lower"),
            Metric("decode_us", "decode", "µs", "lower"),
            Metric("encoded_bytes", "size", "B", "lower"),
        ),
        chart=("roundtrip_us", "encode_us", "decode_us"),
        roles={"run": codec_run},
        layout=_single,
        combine=combine,
        params={"seconds": 2.0},
        quick={"seconds": 0.3},
        timeout=60.0,
        quick_timeout=30.0,
        order=80,
    )
)


def _match(listeners: int, order: int) -> Scenario:
    return scenario(
        Scenario(
            name=f"micro-match-{listeners}",
            title=f"Micro: subject matching against {listeners:,} listener patterns",
            description=(
                f"Index {listeners:,} distinct `bench.match.<i>.>` patterns, then match a subject "
                "exactly one of them matches. rvasync's SubjectIndex with its result cache off "
                "(the trie walk itself) and on (a repeated subject); a linear scan is the "
                "reference."
            ),
            capability="match",
            primary=Metric("ns_per_match", "per match", "ns", "lower"),
            extras=(Metric("build_us_per_pattern", "index build per pattern", "µs", "lower"),),
            roles={"run": match_run},
            layout=_single,
            combine=combine,
            params={"listeners": listeners, "seconds": 2.0},
            quick={"seconds": 0.3},
            timeout=120.0,
            quick_timeout=60.0,
            order=order,
        )
    )


_match(10, 90)
_match(100_000, 91)
