"""``python -m benchmarks.scale sim | lab | report``: the scale sweeps and their page section.

``sim`` (deterministic, any machine): the fan-out of one publisher to 2 ...
1,000 simulated daemons under the loss models of benchmarks/scale/sim.py, and
8 and 100 networks joined by routers (benchmarks/scale/routers_sim.py).
``--as before`` files the run as the curve before a protocol change (run it
on the older commit). ``lab`` (root, network namespaces): the same fan-out
between real hosts, with nats-server beside it, many subjects, and routers
(benchmarks/scale/lab.py). ``report`` regenerates docs/performance.md from
benchmarks/results/latest.json and scale.json. Each command rewrites only
its own part of scale.json and then the page, unless ``--no-page``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.scale import results

SIM_HOSTS = (2, 4, 8, 16, 32, 100, 300, 1000)
QUICK_HOSTS = (2, 8, 32)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)
    sim = commands.add_parser("sim", help="simulate the fan-out and the routers")
    sim.add_argument("--quick", action="store_true", help="2, 8 and 32 hosts; 8 networks")
    sim.add_argument("--hosts", type=_ints, help="subscriber hosts (default 2 ... 1000)")
    sim.add_argument("--only", default="fanout,models,sizes,routers", help="parts to run")
    sim.add_argument("--as", dest="label", choices=("after", "before"), default="after")
    for cmd in (sim,):
        cmd.add_argument("--results", type=Path, default=results.RESULTS)
        cmd.add_argument("--no-page", action="store_true")
    from benchmarks.scale import lab as lab_module

    lab_module.add_arguments(commands.add_parser("lab", help="measure between lab hosts"))
    commands.add_parser("report", help="regenerate the page from the results")
    return top


def sim_cases(hosts: list[int], only: set[str]) -> Iterator[Any]:
    """The simulated fan-out cases: loss 0/1/5 % at 128 B, 1 % at 16 KiB, and the
    correlated and bad-host models at 32 hosts and up."""
    from benchmarks.scale.sim import Case

    if "fanout" in only:
        for n in hosts:
            for loss in (0.0, 1.0, 5.0):
                yield Case(hosts=n, loss=loss)
    if "sizes" in only:
        for n in hosts:
            if n <= 300:
                yield Case(hosts=n, size=16384, loss=1.0)
    if "models" in only:
        for n in [h for h in hosts if h >= 32] or hosts[-1:]:
            yield Case(hosts=n, loss=0.0, model="burst")
            for model in ("burst", "subnet", "slow", "lossy-host"):
                yield Case(hosts=n, loss=1.0, model=model)


def run_sim(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks.scale import routers_sim, sim

    hosts = args.hosts or list(QUICK_HOSTS if args.quick else SIM_HOSTS)
    only = set(args.only.split(","))
    stamped = results.stamp(argv)
    rows = []
    for case in sim_cases(hosts, only):
        run = sim.run(case)
        rows.append(run.as_dict())
        ratios = run.ratios()
        results.progress(
            f"{case.label()}: {run.wall_s} s, repairs/lost {_f(ratios['repairs_per_lost'])}, "
            f"naks/lost {_f(ratios['naks_per_lost'])}, errors {run.errors}"
        )
    if rows:
        results.store(f"sim.{args.label}", stamped, rows, args.results)
    if "routers" in only and args.label == "after":
        nets = [8] if args.quick else [8, 100]
        routed = []
        for topology in routers_sim.TOPOLOGIES:
            for n in nets:
                routed.append(routers_sim.run(topology, n))
                results.progress(f"routers {topology} x{n}: {routed[-1]['wall_s']} s")
        results.store("sim.routers", stamped, routed, args.results)
    return 0


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def write_page(scale_path: Path = results.RESULTS) -> Path:
    """docs/performance.md from latest.json and ``scale_path``."""
    import json

    from benchmarks import report
    from benchmarks.cli import DEFAULT_IMAGES, DEFAULT_OUT, DEFAULT_PAGE

    document = json.loads(DEFAULT_OUT.read_text())
    report.write_page(document, DEFAULT_PAGE, DEFAULT_IMAGES, scale=scale_path)
    return DEFAULT_PAGE


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.command == "sim":
        status = run_sim(args, argv)
    elif args.command == "lab":
        from benchmarks.scale import lab as lab_module

        status = lab_module.main(args, argv)
    else:
        status = 0
    if status == 0 and not getattr(args, "no_page", False):
        page = write_page(getattr(args, "results", results.RESULTS))
        results.progress(f"page: {page}")
    return status
