"""One PNG chart per scenario (matplotlib, Agg backend, no display needed).

Horizontal bars of each row's median with min-max whiskers. Metrics the
scenario lists in ``chart`` (p90/p99/p99.9 beside p50, encode and decode beside
the round trip) are drawn as grouped bars. A logarithmic axis is
used when the bars span more than two orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

_COLOURS = {"rvasync": "#1f6fb4", "peer": "#e08a1e", "floor": "#7a7a7a", "reference": "#9bbf6a"}


def _series(scenario: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    primary = scenario["primary"]
    wanted = scenario.get("chart") or [primary["key"]]
    metrics = {m["key"]: m for m in (primary, *scenario.get("extras", []))}
    return [metrics[key] for key in wanted if key in metrics] or [primary]


def render(scenario: Mapping[str, Any], path: Path) -> bool:
    """Draw ``scenario``'s chart to ``path``; False if nothing ran or matplotlib is missing."""
    rows = [
        r
        for r in scenario["rows"]
        if r["status"] == "ok" and scenario["primary"]["key"] in r.get("summary", {})
    ]
    if not rows:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False

    series = _series(scenario)
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.55 * len(rows) * max(1, len(series) * 0.6)))
    values: list[float] = []
    try:
        for s_index, metric in enumerate(series):
            for r_index, row in enumerate(rows):
                summary = row["summary"].get(metric["key"])
                if summary is None:
                    continue
                median = summary["median"]
                y = r_index + (s_index - (len(series) - 1) / 2) * height
                ax.barh(
                    y,
                    median,
                    height=height * 0.9,
                    color=_COLOURS.get(row["kind"], "#555555"),
                    alpha=1.0 - 0.18 * s_index,
                    xerr=[[median - summary["min"]], [summary["max"] - median]],
                    error_kw={"elinewidth": 0.8, "capsize": 2},
                    label=metric["label"] if r_index == 0 else None,
                )
                values.append(max(median, 1e-12))
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r["label"] for r in rows], fontsize=8)
        ax.invert_yaxis()
        primary = scenario["primary"]
        direction = "higher is better" if primary["better"] == "higher" else "lower is better"
        ax.set_xlabel(f"{primary['unit']} ({direction})", fontsize=8)
        ax.set_title(scenario["title"], fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        if values and max(values) / min(values) > 100:
            ax.set_xscale("log")
        if len(series) > 1:
            ax.legend(fontsize=7, loc="best")
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return True
