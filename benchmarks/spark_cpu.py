"""CPU seconds of the capture-spark-read plain query: the rvasync source against Parquet.

The machine the benchmarks run on has two cores and is shared, so wall time
of one Spark query moves by tens of percent between runs. This times the
"plain" query of ``capture-spark-read``
(``count(*), sum(length(data)), max(received_at)``) in one local[2] session,
the rvasync source and Spark's Parquet reader in turn, several times, and
reports CPU seconds (user + system, from ``/proc/PID/stat``, reaped children
included) of every process under this one: the driver JVM, which runs the
tasks in local mode, and the Python workers under it, named by their
module. Wall time is printed beside it.

The capture is written once, by the benchmark adapter's ``write_capture``
(250,000-row files), into ``--dir`` (default /tmp/rvasync-spark-cpu-ROWS)
and kept for the next run; warm-up is the benchmark's (a small capture, then
one pass over the full one, untimed). ``--rows-per-partition N`` adds rows
reading with ``option("rowsPerPartition", N)``, beside the default.
``--unchecked`` adds a row reading a copy of the capture (the same files,
hard-linked) whose marker is of format version 1, which has no checksums:
the cost of checking them, back to back. Usage::

    python -m benchmarks.spark_cpu [--rows 2500000] [--repeat 5]
        [--rows-per-partition 262144,524288] [--unchecked] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.systems.rvasync_capture import LOCAL, ParquetCaptureScan, RvCaptureScan

TICK = os.sysconf("SC_CLK_TCK")


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return "?"
    if b"pyspark.daemon" in args:
        return "python:" + args[-2].decode().rsplit(".", 1)[-1]
    return os.path.basename(args[0].decode()) or "?"


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system, reaped children included) of every process under
    ``root``, summed by process name."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        children.setdefault(int(fields[1]), []).append((int(entry), ticks))
    totals: dict[str, float] = {}
    stack = [root]
    while stack:
        for pid, ticks in children.get(stack.pop(), []):
            name = _name(pid)
            totals[name] = totals.get(name, 0.0) + ticks / TICK
            stack.append(pid)
    return totals


def _unchecked_copy(full: str, copy: str) -> str:
    """``full``'s files under a version-1 marker (no file entries, so no checksums)."""
    import json

    from rvasync.spark.capture import MARKER_NAME, file_name, read_marker

    marker = read_marker(full)
    os.makedirs(copy, exist_ok=True)
    for index in range(1, marker.committed + 1):
        target = os.path.join(copy, file_name(index))
        if not os.path.exists(target):
            os.link(os.path.join(full, file_name(index)), target)
    legacy = {"format": "rvasync-capture", "version": 1, "committed": marker.committed}
    with open(os.path.join(copy, MARKER_NAME), "w") as f:
        json.dump({**legacy, "rows": marker.rows}, f)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_500_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows-per-partition", default="")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--unchecked", action="store_true")
    args = parser.parse_args()
    directory = args.dir or f"/tmp/rvasync-spark-cpu-{args.rows}"
    rv = RvCaptureScan({}, {}, LOCAL)  # the adapter, outside the benchmark runner
    full, warm = f"{directory}/full", f"{directory}/warm"
    if not os.path.exists(full):
        rv.write_capture(full, args.rows)
        rv.write_capture(warm, 20_000)
    rv.start_engine()
    parquet = ParquetCaptureScan({}, {}, LOCAL)
    parquet.share_engine(rv)

    def with_rows(per_part: str) -> Callable[[], int]:
        return lambda: rv.scan(full, False, True, options={"rowsPerPartition": per_part})

    queries: dict[str, Callable[[], int]] = {
        "rvasync": lambda: rv.scan(full, False, True),
        "parquet": lambda: parquet.scan(full, False, True),
    }
    if args.unchecked:
        legacy = _unchecked_copy(full, f"{directory}/unchecked")
        queries["rvasync unchecked"] = lambda: rv.scan(legacy, False, True)
    for per_part in filter(None, args.rows_per_partition.split(",")):
        queries[f"rvasync rowsPerPartition={per_part}"] = with_rows(per_part)
    for engine in (rv, parquet):  # the benchmark's warm-up
        for project in (False, True):
            engine.scan(warm, project)
        engine.scan(full, False, False)
    for query in queries.values():
        query()
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in queries}
    me = os.getpid()
    for _ in range(args.repeat):
        for name, query in queries.items():
            before = tree_cpu(me)
            t0 = time.perf_counter()
            rows = query()
            wall = time.perf_counter() - t0
            after = tree_cpu(me)
            if rows != args.rows:
                raise SystemExit(f"{name} read {rows} of {args.rows} rows")
            spent = {k: v - before.get(k, 0.0) for k, v in after.items()}
            figures[name].append((sum(spent.values()), wall))
            split = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items()) if v >= 0.01)
            print(f"{name:40s} cpu {sum(spent.values()):6.2f} s  wall {wall:6.2f} s  ({split})")
    print(f"\n{args.rows:,} rows, {args.repeat} runs each: median (min)")
    base: Any = None
    for name, runs in figures.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        if name == "parquet":
            base = (cpu, wall)
        print(
            f"{name:40s} cpu {cpu:6.2f} s ({min(c for c, _ in runs):.2f})  "
            f"wall {wall:6.2f} s ({min(w for _, w in runs):.2f})"
        )
    for name, runs in figures.items():
        if name != "parquet" and base is not None:
            cpu = statistics.median(c for c, _ in runs) / base[0]
            wall = statistics.median(w for _, w in runs) / base[1]
            print(f"{name:40s} / parquet: cpu {cpu:.2f}x  wall {wall:.2f}x")
    asyncio.run(rv.close())


if __name__ == "__main__":
    main()
