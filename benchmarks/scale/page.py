"""The "Scale" section of docs/performance.md, and its charts, from scale.json.

:func:`section` returns the section's markdown lines; :func:`charts` draws its
PNGs (docs/img/scale-*.png). ``benchmarks.report.write_page`` calls both, so
the section is regenerated with the rest of the page by ``python -m
benchmarks run | report`` and by every ``python -m benchmarks.scale``
command. Everything shown is computed from the JSON alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.scale import targets
from benchmarks.scale.tables import (
    bad_host_table,
    lab_fanout_table,
    lab_routers_table,
    lab_subjects_table,
    model_table,
    overlap_table,
    routers_table,
    sim_table,
    size_table,
    stamp_lines,
)

Doc = Mapping[str, Any]

INTRO = """\
How the cost grows with subscriber hosts, subjects and networks (issue 40).
With multicast, a publisher sends each datagram once however many hosts
listen, where a broker writes each message once per subscriber connection; and
reliable multicast must not drown in its own repair traffic when every host
loses a little. The figures below come from two sources:

- **Simulation** (`python -m benchmarks.scale sim`): the project's own
  reliable-multicast core and router core, thousands of them, on a simulated
  network and clock (tests/simnet.py, tests/rvrd_sim.py). A run is a pure
  function of its inputs, so these counts are the same on any machine.
- **Lab** (`sudo python -m benchmarks.scale lab`): real daemons in network
  namespaces on one machine (tests/lab/lab.py), real multicast on a bridge,
  nftables random loss on every host, nats-server in its own namespace with the
  same subscribers over TCP. Counts per message from the lab hardly depend on
  load; rates and CPU per message do, and the stamp under each table says how
  loaded the machine was.

"A lost datagram" is one datagram of the publisher's stream that at least one
host missed, counted once however many missed it; "a loss" is one host missing
one datagram. Repair traffic per lost datagram is what implodes as hosts are
added (every host that misses a datagram asking for it and getting its own
copy); per loss it is what each host costs.
"""


def section(document: Doc, links: Mapping[str, str]) -> list[str]:
    """The whole section (empty when there are no scale results)."""
    if not document:
        return []
    sim = document.get("sim", {})
    lab = document.get("lab", {})
    out = ["## Scale\n", INTRO]
    out.extend(targets.lines(document))
    out.extend(_sim_part(sim, links))
    out.extend(_lab_part(lab, links))
    if sim.get("after") and lab.get("fanout"):
        out.append("### Lab and simulation side by side\n")
        out.extend(overlap_table(sim["after"]["rows"], lab["fanout"]["rows"]))
        out.append("")
    return out


def _sim_part(sim: Doc, links: Mapping[str, str]) -> list[str]:
    after, before = sim.get("after"), sim.get("before")
    out: list[str] = []
    if after:
        out.append("### Simulation: one publisher, 2 to 1,000 daemons\n")
        out.extend(stamp_lines(after, simulated=True))
        if before:
            out.append(f"- Before the change: commit {before.get('commit', '?')}, "
                       f"`{before.get('command', '?')}`")  # fmt: skip
        out.append("")
        out.extend(_images(links, ("scale-repairs", "scale-naks", "scale-wire")))
        out.extend(sim_table(after["rows"], before["rows"] if before else []))
        out.append("")
        out.extend(model_table(after["rows"], before["rows"] if before else []))
        out.append("")
        out.extend(bad_host_table(after["rows"]))
        out.append("")
        out.extend(size_table(after["rows"]))
        out.append("")
    routers = sim.get("routers")
    if routers:
        out.append("### Simulation: networks joined by routers\n")
        out.extend(stamp_lines(routers, simulated=True))
        out.append("")
        out.extend(routers_table(routers["rows"]))
        out.append("")
    return out


def _lab_part(lab: Doc, links: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    parts: list[tuple[str, str, Callable[[list[Any]], list[str]], tuple[str, ...]]] = [
        ("fanout", "Lab: fan-out to N hosts, beside nats-server", lab_fanout_table,
         ("scale-lab-cpu", "scale-lab-rate")),
        ("subjects", "Lab: many subjects", lab_subjects_table, ()),
        ("routers", "Lab: networks joined by routing daemons", lab_routers_table, ()),
    ]  # fmt: skip
    for key, title, table, images in parts:
        part = lab.get(key)
        if not part:
            continue
        out.append(f"### {title}\n")
        out.extend(stamp_lines(part, simulated=False))
        out.append("")
        out.extend(_images(links, images))
        out.extend(table(part["rows"]))
        out.append("")
    return out


def _images(links: Mapping[str, str], names: Iterable[str]) -> list[str]:
    return [f"![{name}]({links[name]})\n" for name in names if name in links]


def charts(document: Doc, images: Path) -> dict[str, Path]:
    """Draw every chart the results allow; chart name -> file."""
    from benchmarks.scale import plots

    drawn: dict[str, Path] = {}
    sim = document.get("sim", {})
    lab = document.get("lab", {})
    if sim.get("after"):
        after = sim["after"]["rows"]
        before = sim.get("before", {}).get("rows", [])
        for name, draw in (
            ("scale-repairs", plots.repairs),
            ("scale-naks", plots.naks),
            ("scale-wire", plots.wire),
        ):
            path = images / f"{name}.png"
            if draw(after, before, path):
                drawn[name] = path
    if lab.get("fanout"):
        rows = lab["fanout"]["rows"]
        for name, draw_lab in (
            ("scale-lab-cpu", plots.lab_cpu),
            ("scale-lab-rate", plots.lab_rate),
        ):
            path = images / f"{name}.png"
            if draw_lab(rows, path):
                drawn[name] = path
    return drawn
