"""Command line: ``python -m benchmarks run | list | report``.

``run`` measures, writes ``benchmarks/results/latest.json`` (or ``--out``) plus a
timestamped copy beside it, and regenerates ``docs/performance.md`` and its charts.
It exits non-zero if any row that could run failed or produced no numbers;
"unavailable" and "n/a" rows are not failures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.registry import discover
from benchmarks.runner import RunOptions, failures, run
from benchmarks.scenarios.capture import ROWS_ENV as SPARK_ROWS_ENV

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
DEFAULT_OUT = RESULTS_DIR / "latest.json"
DEFAULT_PAGE = ROOT / "docs" / "performance.md"
DEFAULT_IMAGES = ROOT / "docs" / "img"
FULL_REPEAT = 3


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and --help)."""
    top = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)

    run_cmd = commands.add_parser("run", help="measure and write results and the page")
    run_cmd.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, one repetition: checks every available system completes",
    )
    run_cmd.add_argument(
        "--only", type=_csv, help="comma-separated scenario names or name prefixes"
    )
    run_cmd.add_argument("--systems", type=_csv, help="comma-separated system names")
    run_cmd.add_argument(
        "--variants",
        type=_csv,
        help="comma-separated variant (row) names: only those rows run (for A/B comparisons; "
        "a run of some rows is not one to fold into the page)",
    )
    run_cmd.add_argument(
        "--repeat",
        type=int,
        help=f"repetitions per row (default {FULL_REPEAT}, or 1 with --quick)",
    )
    run_cmd.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON path")
    run_cmd.add_argument("--page", type=Path, default=DEFAULT_PAGE, help="markdown page path")
    run_cmd.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="chart directory")
    run_cmd.add_argument("--no-page", action="store_true", help="write JSON only")

    commands.add_parser("list", help="scenarios, systems and what would run here")

    report_cmd = commands.add_parser("report", help="regenerate the page from a results JSON")
    report_cmd.add_argument("--results", type=Path, default=DEFAULT_OUT)
    report_cmd.add_argument("--page", type=Path, default=DEFAULT_PAGE)
    report_cmd.add_argument("--images", type=Path, default=DEFAULT_IMAGES)
    report_cmd.add_argument(
        "--update",
        type=Path,
        help="a partial run's results: its scenarios replace those in --results, which is "
        "rewritten, each marked with the run that measured it",
    )
    return top


def write_results(document: dict[str, Any], out: Path) -> Path:
    """Write ``out`` and a timestamped copy beside it; return the copy's path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1, sort_keys=False) + "\n"
    out.write_text(text)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    copy = out.parent / f"run-{stamp}-{document['mode']}.json"
    copy.write_text(text)
    return copy


def _list() -> int:
    registry = discover()
    for scenario in registry.ordered_scenarios():
        print(f"{scenario.name}: {scenario.title}")
        params = scenario.resolved_params(quick=False)
        for system in registry.ordered_systems():
            for plan in registry.plans(scenario, system, params):
                detail = f"  ({plan.reason})" if plan.reason else ""
                print(f"    {plan.label:<40} {plan.status}{detail}")
    return 0


async def _run_stoppable(options: RunOptions) -> dict[str, Any]:
    """:func:`run`, cancelled by SIGTERM as Ctrl-C cancels it, so that the ``finally``
    blocks stopping workers and brokers run in both cases (CI cancels with SIGTERM)."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await run(options)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


#: Environment variables that change what a run measures: a run's recorded command names
#: those that were set.
SIZING_ENV = (SPARK_ROWS_ENV,)


def _settings() -> str:
    """``NAME=value `` for each sizing variable set here, as a shell would prefix them."""
    return "".join(
        f"{name}={shlex.quote(os.environ[name])} " for name in SIZING_ENV if os.environ.get(name)
    )


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else FULL_REPEAT)
    if repeat < 1:
        print("--repeat must be at least 1", file=sys.stderr)
        return 2
    options = RunOptions(
        quick=args.quick,
        repeat=repeat,
        only=args.only,
        systems=args.systems,
        variants=args.variants,
        command=_settings() + "python -m benchmarks " + shlex.join(argv),
    )
    try:
        document = asyncio.run(_run_stoppable(options))
    except KeyError as exc:
        print(exc.args[0] if exc.args else exc, file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; every worker and broker was stopped", file=sys.stderr)
        return 130
    copy = write_results(document, args.out)
    print(f"results: {args.out} (copy {copy.name})", file=sys.stderr)
    if not args.no_page:
        report.write_page(document, args.page, args.images, scale=report.SCALE)
        print(f"page: {args.page}", file=sys.stderr)
    bad = failures(document)
    if bad:
        print(f"{len(bad)} row(s) failed:", file=sys.stderr)
        for line in bad:
            print(f"  {line.splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "report":
        document = json.loads(args.results.read_text())
        if args.update is not None:
            try:
                document = report.merge(document, json.loads(args.update.read_text()))
            except ValueError as exc:
                print(f"cannot update {args.results}: {exc}", file=sys.stderr)
                return 2
            args.results.write_text(json.dumps(document, indent=1) + "\n")
            print(f"results: {args.results} updated from {args.update}", file=sys.stderr)
        report.write_page(document, args.page, args.images, scale=report.SCALE)
        print(f"page: {args.page}", file=sys.stderr)
        return 0
    return _run(args, argv)
