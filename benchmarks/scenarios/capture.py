"""The data pipeline: recording messages to disk, and Spark reading the captures back.

``capture-record``: one process publishes order messages on the process
transport while a recorder listening to them writes them to a capture
directory; throughput counts from the first send until the last message is
committed (closed, fsynced and in the marker), so it is messages per second
*to disk*.

``capture-spark-read``: a capture of N order messages is written first
(untimed), a Spark session starts in local[2] and warms up on a small
capture and once, untimed, on the full one, then a full scan of the N rows is
timed: once with the documented columns only, once with two message fields
projected into typed columns (which decodes every message), and once more
with the plain query but without telling the source which columns it uses.
"""

from __future__ import annotations

import abc
import asyncio
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

REGIONS = ("EU", "US", "ASIA")
#: The environment variable sizing the Spark read (10,000,000 is the issue's figure;
#: writing that capture takes minutes and about 2 GB of disk).
ROWS_ENV = "RVASYNC_BENCH_SPARK_ROWS"
SPARK_ROWS = int(os.environ.get(ROWS_ENV, "1000000"))


def order_fields(i: int) -> tuple[tuple[str, str, Any], ...]:
    """Order number ``i`` as (name, type tag, value) fields; values vary by order."""
    return (
        ("order_id", "i64", i),
        ("amount", "f64", round(5.0 + (i * 7919 % 100_000) / 100, 2)),
        ("qty", "i32", 1 + i % 97),
        ("symbol", "string", ("ACME", "GLOBEX", "INITECH", "UMBRELLA")[i % 4]),
    )


class Recording(Adapter):
    """A recorder capturing what this process publishes."""

    @abc.abstractmethod
    async def start(self, directory: str, pattern: str) -> None:
        """Start recording ``pattern`` into ``directory``."""

    @abc.abstractmethod
    def prepare(self, subject: str, fields: Sequence[tuple[str, str, Any]]) -> Any:
        """Build, once, a message the recorder will receive."""

    @abc.abstractmethod
    async def publish(self, handle: Any) -> None:
        """Publish one prepared message."""

    @abc.abstractmethod
    async def finish(self, count: int) -> dict[str, int]:
        """Wait for ``count`` messages, commit, stop; return rows committed and bytes on disk."""


class CaptureScan(Adapter):
    """An analytics engine reading capture directories."""

    @abc.abstractmethod
    def write_capture(self, directory: str, count: int) -> None:
        """Write a capture of ``count`` order messages (setup, not timed)."""

    @abc.abstractmethod
    def start_engine(self) -> None:
        """Start the engine (setup, not timed)."""

    @abc.abstractmethod
    def scan(self, directory: str, project: bool, prune: bool = True) -> int:
        """Read every row (with two fields projected when ``project``); return the row count.

        ``prune``: tell the engine which capture columns the query uses, where it
        cannot find out by itself (the rvasync source's ``columns`` option)."""


async def record_run(ctx: WorkerContext) -> dict[str, Any]:
    p = ctx.params
    recording = ctx.adapter
    assert isinstance(recording, Recording)
    count = int(p["messages"])
    # Distinct orders (ids and amounts vary), so the files hold realistic data
    # rather than three values Parquet's dictionary encoding shrinks to nothing.
    distinct = min(count, int(p["distinct"]))
    handles = [
        recording.prepare(f"ORDERS.{REGIONS[i % 3]}.NEW", order_fields(i)) for i in range(distinct)
    ]
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as directory:
        await recording.start(directory, "ORDERS.>")
        try:
            await ctx.ready()
            await ctx.go()
            t0 = time.perf_counter_ns()
            publish = recording.publish
            for i in range(count):
                await publish(handles[i % distinct])
                if i % 1000 == 999:
                    await asyncio.sleep(0)  # let the recorder take its batches
            written = await recording.finish(count)
            seconds = (time.perf_counter_ns() - t0) / 1e9
        finally:
            await recording.close()
    if written["rows"] != count:
        raise RuntimeError(f"recorded {written['rows']} of {count} messages")
    return {"seconds": seconds, "rows": written["rows"], "bytes": written["bytes"]}


def record_combine(
    results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params
) -> dict[str, float]:
    (r,) = results["run"]
    return {
        "msgs_per_s": r["rows"] / r["seconds"],
        "disk_mb_per_s": r["bytes"] / r["seconds"] / 1e6,
    }


async def scan_run(ctx: WorkerContext) -> dict[str, Any]:
    p = ctx.params
    engine = ctx.adapter
    assert isinstance(engine, CaptureScan)
    rows = int(p["rows"])
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as work:
        full, warm = f"{work}/full", f"{work}/warm"
        await asyncio.to_thread(engine.write_capture, full, rows)
        await asyncio.to_thread(engine.write_capture, warm, 20_000)
        try:
            await asyncio.to_thread(engine.start_engine)
            for project in (False, True):  # starts the engine's workers, compiles the plans
                await asyncio.to_thread(engine.scan, warm, project)
            # One untimed pass over the full capture: the first scan of a large input
            # otherwise pays for JIT compilation of the hot loops (seen: the same query
            # 1.7x faster the second time), which would land on whichever row runs first.
            await asyncio.to_thread(engine.scan, full, False, False)
            await ctx.ready()
            await ctx.go()
            figures: dict[str, Any] = {}
            for key, project, prune in (
                ("plain", False, True),
                ("projected", True, True),
                ("unpruned", False, False),
            ):
                t0 = time.perf_counter_ns()
                seen = await asyncio.to_thread(engine.scan, full, project, prune)
                figures[f"{key}_seconds"] = (time.perf_counter_ns() - t0) / 1e9
                if seen != rows:
                    raise RuntimeError(f"scan ({key}) read {seen} of {rows} rows")
        finally:
            await engine.close()
    return {**figures, "rows": rows}


def scan_combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    (r,) = results["run"]
    return {
        "rows_per_s": r["rows"] / r["plain_seconds"],
        "projected_rows_per_s": r["rows"] / r["projected_seconds"],
        "unpruned_rows_per_s": r["rows"] / r["unpruned_seconds"],
    }


def _single(p: Params) -> Sequence[RoleGroup]:
    return (RoleGroup("run", 1),)


scenario(
    Scenario(
        name="capture-record",
        title="Recorder: messages per second to disk",
        description=(
            "One process publishes 4-field order messages on the process transport; a Recorder "
            "listening to them writes Parquet capture files. Timed from the first send until the "
            "last message is committed (file closed, fsynced, named in the marker)."
        ),
        capability="record",
        primary=Metric("msgs_per_s", "recorded", "msg/s", "higher"),
        extras=(Metric("disk_mb_per_s", "written (compressed)", "MB/s", "higher"),),
        roles={"run": record_run},
        layout=_single,
        combine=record_combine,
        params={"messages": 500_000, "distinct": 100_000},
        quick={"messages": 20_000, "distinct": 20_000},
        timeout=180.0,
        quick_timeout=60.0,
        order=90,
    )
)

scenario(
    Scenario(
        name="capture-spark-read",
        title=f"Spark batch read of {SPARK_ROWS:,} captured messages",
        description=(
            f"spark.read.format('rvasync') over a capture of {SPARK_ROWS:,} order messages, in "
            "local[2] and on a 2-worker standalone cluster on 127.0.0.1 (one core, 512 MiB "
            "each), beside Spark's own Parquet reader on the same files: a full scan of the "
            "documented columns, and one projecting two fields into typed columns (each message "
            "decoded; the Parquet reader takes them from the fields JSON). Spark does not tell a "
            "Python data source which columns a query uses, so the rvasync scans name them "
            "with option('columns', ...); the 'all columns' figure is the plain scan without "
            "it (every capture column crosses from the Python worker; Parquet prunes by "
            "itself, so its figure is the same query again). Session and cluster "
            f"start and a warm-up scan are not timed. Rows: {ROWS_ENV} (default 1,000,000)."
        ),
        capability="spark-read",
        primary=Metric("rows_per_s", "scan", "rows/s", "higher"),
        extras=(
            Metric("projected_rows_per_s", "scan + 2 fields", "rows/s", "higher"),
            Metric("unpruned_rows_per_s", "scan, all columns", "rows/s", "higher"),
        ),
        chart=("rows_per_s", "projected_rows_per_s"),
        roles={"run": scan_run},
        layout=_single,
        combine=scan_combine,
        # Setup (writing the capture, starting the JVM, warming up) takes a while.
        params={"rows": SPARK_ROWS, "ready_timeout": 300.0 + SPARK_ROWS / 20_000, "cluster": True},
        quick={"rows": 50_000, "ready_timeout": 240.0, "cluster": False},
        timeout=420.0 + SPARK_ROWS / 5_000,
        quick_timeout=180.0,
        order=91,
    )
)
