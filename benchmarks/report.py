"""The results page (docs/performance.md) from a results document.

The page is generated: a hand-written header (``benchmarks/page_header.md``,
explaining the method), the run's machine and command, a headline table of
ratios, and per scenario a table (median over repetitions, min-max, ratio,
secondary metrics) with a chart. Everything is computed from the JSON alone, so
``python -m benchmarks report`` can regenerate the page without measuring.

A partial run (``--only``) can replace its scenarios in a full run's
document (:func:`merge`, ``python -m benchmarks report --update PARTIAL``):
each replaced scenario keeps the date and command of the run that measured
it, and the page names them, so every figure still comes with the run it
was measured in and every row of one table with its peers of the same run.

Ratios are rvasync's headline row over each row: for "higher is better"
metrics a ratio above 1 means rvasync is ahead, for "lower is better" ones a
ratio below 1 does; every table says which.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import charts
from benchmarks.stats import ratio

HEADER = Path(__file__).resolve().parent / "page_header.md"
#: The scale sweeps' results (python -m benchmarks.scale): the page's "Scale" section.
SCALE = Path(__file__).resolve().parent / "results" / "scale.json"

Row = Mapping[str, Any]
ScenarioDoc = Mapping[str, Any]


def fmt(value: float | None) -> str:
    """A number for a table: thousands separators when large, 3 significant digits when small."""
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude == 0:
        return "0"
    return f"{value:.3g}"


def fmt_ratio(value: float | None) -> str:
    """A ratio such as ``0.42x``; below 0.01 as ``1/1,234x`` rather than in exponent form."""
    if value is None:
        return "—"
    if 0 < value < 0.01:
        return f"1/{1 / value:,.0f}x"
    return f"{value:.3g}x" if value < 10 else f"{value:,.0f}x"


def median_of(row: Row, key: str) -> float | None:
    """The row's median for metric ``key``, if it ran and reported it."""
    if row.get("status") != "ok":
        return None
    summary = row.get("summary", {}).get(key)
    return None if summary is None else float(summary["median"])


def headline_row(scenario: ScenarioDoc) -> Row | None:
    """rvasync's row the ratios use: the first that ran among those marked headline,
    else the first rvasync row that ran."""
    ran = [
        r
        for r in scenario["rows"]
        if r["kind"] == "rvasync" and median_of(r, scenario["primary"]["key"]) is not None
    ]
    marked = [r for r in ran if r.get("headline", True)]
    return (marked or ran or [None])[0]


def row_ratio(scenario: ScenarioDoc, row: Row) -> float | None:
    """rvasync's headline median over this row's median (None for the headline itself)."""
    head = headline_row(scenario)
    if head is None or head is row:
        return None
    key = scenario["primary"]["key"]
    return ratio(median_of(head, key), median_of(row, key))


def _better(metric: Mapping[str, Any]) -> str:
    return "higher is better" if metric["better"] == "higher" else "lower is better"


def _note(row: Row) -> str:
    if row["status"] == "ok":
        return ""
    if row["status"] == "failed":
        first = (row.get("error") or "failed").splitlines()[0]
        return f"**failed**: {_escape(first)}"
    return f"{row['status']}: {_escape(row.get('reason') or '')}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def scenario_table(scenario: ScenarioDoc) -> list[str]:
    """The markdown table of one scenario."""
    primary = scenario["primary"]
    extras = scenario.get("extras", [])
    head = [
        "System",
        f"{primary['label']} ({primary['unit']}), median",
        "min - max",
        "rvasync ÷ row",
        *(f"{m['label']} ({m['unit']})" for m in extras),
        "note",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    headline = headline_row(scenario)
    for row in scenario["rows"]:
        summary = row.get("summary", {}).get(primary["key"]) if row["status"] == "ok" else None
        spread = f"{fmt(summary['min'])} - {fmt(summary['max'])}" if summary else "—"
        label = f"**{row['label']}**" if row is headline else row["label"]
        cells = [
            label,
            fmt(median_of(row, primary["key"])),
            spread,
            "(headline)" if row is headline else fmt_ratio(row_ratio(scenario, row)),
            *(fmt(median_of(row, m["key"])) for m in extras),
            _note(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def headline_table(document: Mapping[str, Any]) -> list[str]:
    """One line per scenario: rvasync's figure and its ratio to every other system."""
    columns: list[tuple[str, str]] = []  # (system name, label)
    for scenario in document["scenarios"]:
        for row in scenario["rows"]:
            if row["kind"] != "rvasync" and row["system"] not in [c[0] for c in columns]:
                columns.append((row["system"], row["label"].split(" (")[0]))
    head = ["Scenario", "rvasync", "better", *(f"rvasync ÷ {label}" for _, label in columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scenario in document["scenarios"]:
        primary = scenario["primary"]
        head_row = headline_row(scenario)
        value = median_of(head_row, primary["key"]) if head_row else None
        cells = [
            f"[{scenario['title']}](#{anchor(scenario)})",
            f"{fmt(value)} {primary['unit']}" if value is not None else _absent(scenario),
            "↑" if primary["better"] == "higher" else "↓",
        ]
        for system, _ in columns:
            rows = [r for r in scenario["rows"] if r["system"] == system]
            ratios = [row_ratio(scenario, r) for r in rows if r["status"] == "ok"]
            shown = [fmt_ratio(x) for x in ratios if x is not None]
            if shown:
                cells.append(" / ".join(shown))
            elif rows and all(r["status"] == "n/a" for r in rows):
                cells.append("n/a")
            else:
                cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _absent(scenario: ScenarioDoc) -> str:
    rows = [r for r in scenario["rows"] if r["kind"] == "rvasync"]
    if rows and all(r["status"] == "unavailable" for r in rows):
        return "not in this build"
    if any(r["status"] == "failed" for r in rows):
        return "failed"
    return "—"


def anchor(scenario: ScenarioDoc) -> str:
    """The heading anchor GitHub generates for a scenario's section."""
    return f"scenario-{scenario['name']}".lower()


def merge(full: Mapping[str, Any], partial: Mapping[str, Any]) -> dict[str, Any]:
    """``full`` with each scenario that ``partial`` measured replaced by ``partial``'s.

    A replaced scenario carries ``measured`` (the partial run's start, end and
    command), which the page shows under its table; the partial run must be a
    full-mode run on a machine of the same description, or the figures would
    not be comparable with the rest of the page (ValueError says which).
    """
    if partial.get("mode") != "full":
        raise ValueError(f"a {partial.get('mode')!r} run cannot update a page of full runs")
    keys = ("cpu_model", "cores", "python", "event_loop")
    mine, theirs = full.get("machine", {}), partial.get("machine", {})
    differ = [k for k in keys if mine.get(k) != theirs.get(k)]
    if differ:
        raise ValueError(f"the partial run's machine differs in {', '.join(differ)}")
    later = {s["name"]: s for s in partial.get("scenarios", [])}
    if not later:
        raise ValueError("the partial run measured no scenario")
    unknown = sorted(set(later) - {s["name"] for s in full.get("scenarios", [])})
    if unknown:
        raise ValueError(f"scenarios not in the full run: {', '.join(unknown)}")
    stamp = {
        "started": partial.get("started", "?"),
        "finished": partial.get("finished", "?"),
        "command": partial.get("command", "?"),
    }
    merged = dict(full)
    merged["scenarios"] = [
        {**later[s["name"]], "measured": stamp} if s["name"] in later else s
        for s in full["scenarios"]
    ]
    return merged


def _later_runs(document: Mapping[str, Any]) -> list[str]:
    runs: dict[tuple[str, str], list[str]] = {}
    for scenario in document["scenarios"]:
        stamp = scenario.get("measured")
        if stamp:
            key = (f"{stamp['started']} to {stamp['finished']}", stamp["command"])
            runs.setdefault(key, []).append(f"`{scenario['name']}`")
    return [
        f"- Re-measured {when} (UTC) with `{command}`: {', '.join(names)}"
        for (when, command), names in runs.items()
    ]


def machine_lines(document: Mapping[str, Any]) -> list[str]:
    """The run's machine, software and command."""
    m = document.get("machine", {})
    versions = m.get("versions", {})
    shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    native = ", ".join(m.get("rvasync_native", [])) or "none"
    lines = [
        f"- Date: {document.get('started', '?')} to {document.get('finished', '?')} (UTC)",
        f"- Command: `{document.get('command', '?')}`",
        f"- Mode: {document.get('mode', '?')}, {document.get('repeat', '?')} repetition(s) per "
        "row; tables show the median over repetitions and the min - max",
        f"- CPU: {m.get('cpu_model', '?')}, {m.get('cores', '?')} cores "
        f"({m.get('usable_cores', '?')} usable)",
        f"- Python: {m.get('python', '?')} on {m.get('platform', '?')}, "
        f"event loop {m.get('event_loop', '?')}",
        f"- Versions: {shown or '?'}",
        f"- rvasync native hot paths built: {native}",
    ]
    lines.extend(_later_runs(document))
    if document.get("mode") == "quick":
        lines.append(
            "- **Quick mode**: smoke-test sizes and one repetition; these numbers only show "
            "that everything runs, they are not for comparison."
        )
    return lines


def render(
    document: Mapping[str, Any],
    chart_links: Mapping[str, str] | None = None,
    scale: Mapping[str, Any] | None = None,
) -> str:
    """The whole page as markdown; ``chart_links`` maps scenario (or scale chart) name to
    image path; ``scale`` is the scale results document (its section ends the page)."""
    chart_links = chart_links or {}
    out: list[str] = []
    if HEADER.exists():
        out.append(HEADER.read_text().rstrip() + "\n")
    else:
        out.append("# Performance\n")
    out.append("## This run\n")
    out.extend(machine_lines(document))
    out.append("")
    out.append("## Headline: ratios\n")
    out.append(
        "rvasync's figure (its headline row) divided by each system's. ↑: higher is better, so "
        "a ratio above 1 means rvasync is ahead; ↓: lower is better, so below 1 means rvasync "
        "is ahead. Several figures in one cell are that system's rows in order.\n"
    )
    out.extend(headline_table(document))
    out.append("")
    for scenario in document["scenarios"]:
        out.append(f'<a id="{anchor(scenario)}"></a>\n')
        out.append(f"### {scenario['title']}\n")
        out.append(f"`{scenario['name']}`: {scenario['description']}\n")
        params = ", ".join(
            f"{k}={v}" for k, v in scenario.get("params", {}).items() if k != "timeout"
        )
        out.append(
            f"Primary metric: {scenario['primary']['label']} in {scenario['primary']['unit']}, "
            f"{_better(scenario['primary'])}. Parameters: {params}.\n"
        )
        stamp = scenario.get("measured")
        if stamp:
            out.append(
                f"Measured in a later run than the rest of the page: {stamp['started']} to "
                f"{stamp['finished']} (UTC), `{stamp['command']}`.\n"
            )
        link = chart_links.get(scenario["name"])
        if link:
            out.append(f"![{scenario['title']}]({link})\n")
        out.extend(scenario_table(scenario))
        out.append("")
    if scale:
        from benchmarks.scale import page as scale_page

        out.extend(scale_page.section(scale, chart_links))
    return "\n".join(out).rstrip() + "\n"


def write_page(
    document: Mapping[str, Any], page: Path, images: Path, scale: Path | None = None
) -> None:
    """Draw the charts into ``images`` and write the page to ``page``; with the scale
    results at ``scale`` (if that file exists), the "Scale" section and its charts too."""
    links: dict[str, str] = {}
    for scenario in document["scenarios"]:
        path = images / f"perf-{scenario['name']}.png"
        if charts.render(scenario, path):
            links[scenario["name"]] = Path(os.path.relpath(path, page.parent)).as_posix()
    scaled: Mapping[str, Any] = {}
    if scale is not None and scale.exists():
        from benchmarks.scale import page as scale_page

        scaled = json.loads(scale.read_text())
        for name, path in scale_page.charts(scaled, images).items():
            links[name] = Path(os.path.relpath(path, page.parent)).as_posix()
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(document, links, scaled))
