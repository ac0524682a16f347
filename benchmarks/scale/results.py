"""The scale results document, ``benchmarks/results/scale.json``.

It has one part per command (``sim.after``, ``sim.before``, ``sim.routers``,
``lab.fanout``, ``lab.subjects``, ``lab.routers``); each run of a command
replaces only its own part, stamped with when, where (machine, load) and how
(command, commit) it was measured, so the page can say it beside every
figure.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.machine import describe

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "scale.json"


def load(path: Path = RESULTS) -> dict[str, Any]:
    if not path.exists():
        return {}
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def stamp(argv: list[str]) -> dict[str, Any]:
    """When, where and how a part was measured (its end is added by :func:`store`)."""
    return {
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python -m benchmarks.scale " + shlex.join(argv),
        "commit": _commit(),
        "machine": describe(),
        "load_before": _load(),
    }


def store(part: str, stamped: dict[str, Any], rows: Any, path: Path = RESULTS) -> None:
    """Put ``rows`` in part ``part`` (``"sim.after"``, ``"lab.fanout"`` ...) of the document."""
    document = load(path)
    group, name = part.split(".", 1)
    document.setdefault(group, {})[name] = {
        **stamped,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "load_after": _load(),
        "rows": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return done.stdout.strip() or "?"


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
