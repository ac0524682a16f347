"""Run the selected scenarios on the selected systems and build the results document.

For each (scenario, system, variant) row: enter the adapter's environment (a
broker, ports ...), then per repetition start the layout's worker processes group
by group, wait until all are ready, say ``go``, collect the active roles' results,
say ``stop`` to the passive ones, collect theirs, and combine. Every wait is
bounded, and every process is killed in ``finally`` blocks, also on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import math
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import machine
from benchmarks.procs import Worker, WorkerError, gather_or_fail
from benchmarks.registry import Params, Plan, Registry, Scenario, discover
from benchmarks.report import fmt
from benchmarks.stats import summarize_reps

#: Seconds a worker group may take to get ready (imports, connecting, subscribing).
READY_TIMEOUT = 90.0


@dataclass(frozen=True)
class RunOptions:
    """What to run; built by the command line."""

    quick: bool = False
    repeat: int = 5
    only: Sequence[str] | None = None
    systems: Sequence[str] | None = None
    #: Variant names: only those rows run (None: every row).
    variants: Sequence[str] | None = None
    command: str = "python -m benchmarks run"


class RunFailed(RuntimeError):
    """One repetition of one row failed; the message says where and why."""


@dataclass(frozen=True)
class _Started:
    role: str
    passive: bool
    worker: Worker


def _spec(plan: Plan, role: str, index: int, params: Params, env: dict[str, Any]) -> dict:
    return {
        "scenario": plan.scenario.name,
        "system": plan.system.name,
        "variant": plan.variant.name,
        "role": role,
        "index": index,
        "params": dict(params),
        "env": env,
    }


async def _start_layout(
    plan: Plan, params: Params, env: dict[str, Any], workdir: Path, rep: int, into: list[_Started]
) -> None:
    """Start the layout's groups in order, each fully ready before the next starts."""
    ready_timeout = float(params.get("ready_timeout", READY_TIMEOUT))
    prefix = f"{plan.scenario.name}.{plan.system.name}.{plan.variant.name or 'default'}.rep{rep}"
    for group in plan.scenario.layout(params):
        started = []
        for index in range(group.count):
            spec = _spec(plan, group.role, index, params, env)
            worker = Worker(f"{prefix}.{group.role}{index}", spec, plan.variant.env, workdir)
            await worker.start()
            into.append(_Started(group.role, group.passive, worker))
            started.append(worker)
        await gather_or_fail(w.expect("ready", ready_timeout) for w in started)


async def run_repetition(
    plan: Plan, params: Params, env: dict[str, Any], workdir: Path, rep: int
) -> dict[str, float]:
    """One repetition of ``plan``: start its processes, let them run, combine their reports.

    Active roles report when they are done; passive ones (repliers, publishers that
    must stay up for retransmissions) are then told to stop and report.
    """
    started: list[_Started] = []
    try:
        await _start_layout(plan, params, env, workdir, rep, started)
        for s in started:
            await s.worker.tell("go")
        active = [s for s in started if not s.passive]
        passive = [s for s in started if s.passive]
        limit = float(params["timeout"]) + 10.0
        reports = await gather_or_fail(s.worker.expect("result", limit) for s in active)
        for s in passive:
            await s.worker.tell("stop")
        reports += await gather_or_fail(s.worker.expect("result", 30.0) for s in passive)
        await gather_or_fail(s.worker.finish() for s in started)
        results: dict[str, list[dict[str, Any]]] = {}
        for s, report in zip(active + passive, reports, strict=True):
            results.setdefault(s.role, []).append(report)
        return plan.scenario.combine(results, params)
    finally:
        await asyncio.gather(*(s.worker.kill() for s in started), return_exceptions=True)


def _check_numbers(scenario: Scenario, metrics: dict[str, float]) -> None:
    value = metrics.get(scenario.primary.key)
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise RunFailed(
            f"{scenario.name}: no finite {scenario.primary.key!r} in the combined result {metrics}"
        )


async def run_plan(plan: Plan, params: Params, repeat: int, workdir: Path) -> dict[str, Any]:
    """Every repetition of one row; returns the row as stored in the results JSON."""
    row: dict[str, Any] = {
        "system": plan.system.name,
        "kind": plan.system.kind,
        "variant": plan.variant.name,
        "label": plan.label,
        "headline": plan.variant.headline,
        "status": plan.status,
        "reason": plan.reason,
        "reps": [],
        "summary": {},
        "error": None,
        "seconds": 0.0,
    }
    if plan.status != "ok" or plan.adapter is None:
        return row
    started = time.monotonic()
    try:
        async with plan.adapter.environment(params, workdir, plan.variant) as env:
            for rep in range(repeat):
                metrics = await run_repetition(plan, params, env, workdir, rep)
                _check_numbers(plan.scenario, metrics)
                row["reps"].append(metrics)
    except (WorkerError, RunFailed) as exc:
        row["status"] = "failed"
        row["error"] = str(exc)
    except Exception as exc:  # a broken adapter or environment fails its row, not the run
        row["status"] = "failed"
        row["error"] = f"{type(exc).__name__}: {exc}\n" + "".join(
            traceback.format_exception(exc)[-4:]
        )
    row["summary"] = summarize_reps(row["reps"])
    row["seconds"] = round(time.monotonic() - started, 2)
    return row


def _format_row(scenario: Scenario, row: dict[str, Any]) -> str:
    head = f"  {row['label']:<34} {row['status']:<11}"
    if row["status"] == "ok":
        s = row["summary"][scenario.primary.key]
        return (
            f"{head} {fmt(s['median']):>12} {scenario.primary.unit:<6}"
            f" [{fmt(s['min'])} .. {fmt(s['max'])}]  ({row['seconds']:.1f}s)"
        )
    detail = row["error"] if row["status"] == "failed" else row["reason"]
    return f"{head} {(detail or '').splitlines()[0] if detail else ''}"


async def run(
    options: RunOptions,
    registry: Registry | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run what ``options`` selects; return the results document (see :mod:`benchmarks.report`)."""
    registry = registry or discover()
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    scenarios = registry.select_scenarios(options.only)
    systems = registry.select_systems(options.systems)
    document: dict[str, Any] = {
        "schema": 1,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": options.command,
        "mode": "quick" if options.quick else "full",
        "repeat": options.repeat,
        "machine": machine.describe(),
        "systems": [asdict(s) for s in systems],
        "scenarios": [],
    }
    with tempfile.TemporaryDirectory(prefix="rvasync-bench-") as tmp:
        workdir = Path(tmp)
        for scenario in scenarios:
            params = scenario.resolved_params(options.quick)
            say(f"{scenario.name}: {scenario.title}")
            rows = []
            for system in systems:
                for plan in registry.plans(scenario, system, params):
                    if options.variants is not None and plan.variant.name not in options.variants:
                        continue
                    row = await run_plan(plan, params, options.repeat, workdir)
                    say(_format_row(scenario, row))
                    rows.append(row)
            document["scenarios"].append(
                {
                    "name": scenario.name,
                    "title": scenario.title,
                    "description": scenario.description,
                    "capability": scenario.capability,
                    "params": {k: v for k, v in params.items() if k != "quick"},
                    "primary": asdict(scenario.primary),
                    "extras": [asdict(m) for m in scenario.extras],
                    "chart": list(scenario.chart or (scenario.primary.key,)),
                    "rows": rows,
                }
            )
    document["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    return document


def failures(document: dict[str, Any]) -> list[str]:
    """Rows that should have run and did not produce numbers, as ``scenario/label: error``."""
    bad = []
    for scenario in document["scenarios"]:
        for row in scenario["rows"]:
            if row["status"] == "failed":
                bad.append(f"{scenario['name']}/{row['label']}: {row['error']}")
            elif row["status"] == "ok" and not row["summary"]:
                bad.append(f"{scenario['name']}/{row['label']}: produced no numbers")
    return bad
