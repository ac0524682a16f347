"""Issue 40's targets against what scale.json holds: one line each, met or missed by how much."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Doc = Mapping[str, Any]

#: The constants the page states for any number of hosts (simulated, see _bounded).
NAK_BOUND = 2.0
RESEND_BOUND = 2.0


def _sim_row(rows: list[Any], hosts: int, model: str, loss: float) -> Any:
    for r in rows:
        c = r["case"]
        if (c["hosts"], c["model"], c["loss"], c["size"]) == (hosts, model, loss, 128):
            return r
    return None


def _verdict(value: float | None, limit: float) -> str:
    if value is None:
        return "not measured"
    if value <= limit:
        return f"**met** ({value:.2f} ≤ {limit:g})"
    return f"**missed** by {value / limit - 1:.0%} ({value:.2f} > {limit:g})"


def _repair_targets(sim: Doc) -> list[str]:
    rows = sim.get("after", {}).get("rows", [])
    at32 = _sim_row(rows, 32, "independent", 1.0)
    lines = []
    if at32 is not None:
        q = at32["ratios"]
        lines.append(
            "- 32 hosts, 1 % loss, NAKs per lost datagram ≤ 2 (simulated): "
            + _verdict(q["naks_per_lost"], 2.0)
        )
        lines.append(
            "- 32 hosts, 1 % loss, resends per lost datagram ≤ 1.5 (simulated): "
            + _verdict(q["repairs_per_lost"], 1.5)
        )
    lines.extend(_bounded(rows))
    return lines


def _bounded(rows: list[Any]) -> list[str]:
    """The largest ratio at 100 hosts and more, over every loss model, against the bound,
    naming the case it came from (where a bound is missed, that says which loss does it)."""
    big = [r for r in rows if r["case"]["hosts"] >= 100 and r["lost_datagrams"]]
    if not big:
        return []
    most = max(r["case"]["hosts"] for r in big)
    out = []
    for key, what, bound, why in (
        ("naks_per_lost", "NAKs", NAK_BOUND, ""),
        ("repairs_per_lost", "resends", RESEND_BOUND,
         " (one to the first host that asks, one to the group)"),
    ):  # fmt: skip
        worst = max(big, key=lambda r: r["ratios"][key])
        out.append(
            f"- 100 to {most:,} simulated hosts, every loss model: {what} per lost datagram "
            f"bounded by {bound:g}{why}: "
            + _verdict(worst["ratios"][key], bound)
            + f", the most in {_case(worst['case'])}"
        )
    return out


def _case(case: Mapping[str, Any]) -> str:
    size = f", {case['size']:,} B" if case["size"] != 128 else ""
    return f"{case['model']}, {case['loss']:g} % loss, {case['hosts']:,} hosts{size}"


def _cpu_target(lab: Doc) -> list[str]:
    rows = lab.get("fanout", {}).get("rows", [])
    out = []
    for system in ("rvasync", "nats"):
        for size in sorted({r["size"] for r in rows}):
            for loss in sorted({r["loss"] for r in rows}):
                by_hosts = {
                    r["hosts"]: r.get("publisher_cpu_us_per_msg")
                    for r in rows
                    if (r["system"], r["size"], r["loss"]) == (system, size, loss)
                }
                low, high = min(by_hosts, default=0), max(by_hosts, default=0)
                if low == high or not by_hosts.get(low) or by_hosts.get(high) is None:
                    continue
                ratio = by_hosts[high] / by_hosts[low]
                what = "publisher daemon" if system == "rvasync" else "nats-server"
                verdict = _verdict(ratio, 1.2) if system == "rvasync" else f"{ratio:.2f}x"
                out.append(
                    f"  - {what} CPU per message, {size} B, {loss:g} % loss, {high} hosts ÷ "
                    f"{low} hosts (lab): {verdict}"
                )
    return out


def lines(document: Doc) -> list[str]:
    sim, lab = document.get("sim", {}), document.get("lab", {})
    out = ["### Targets\n"]
    out.extend(_repair_targets(sim))
    cpu = _cpu_target(lab)
    if cpu:
        load = (lab.get("fanout", {}).get("load_before") or [0])[0]
        quiet = (
            ""
            if load <= 1.5
            else (f", measured at load {load}: to be taken again on a quiet machine")
        )
        out.append(f"- Publisher CPU per message at the most hosts ÷ at the fewest (lab{quiet}):")
        out.extend(cpu)
    out.append("")
    return out
