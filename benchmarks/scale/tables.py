"""Markdown tables of the "Scale" section (see benchmarks/scale/page.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from benchmarks.report import fmt

Row = Mapping[str, Any]


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return lines


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return fmt(value)
    return str(value)


def stamp_lines(part: Row, *, simulated: bool) -> list[str]:
    machine = part.get("machine", {})
    load = part.get("load_before") or []
    lines = [
        f"- Measured {part.get('started', '?')} to {part.get('finished', '?')} (UTC), commit "
        f"{part.get('commit', '?')}",
        f"- Command: `{part.get('command', '?')}`",
        f"- Machine: {machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('python', '?')}"
        + (f", load average {load[0]} at the start" if load else ""),
    ]
    if simulated:
        lines.append("- Simulated network and clock: the counts do not depend on the machine")
    elif load and load[0] > 1.5:
        lines.append(
            f"- **Shared machine** (load {load[0]}): rates and CPU per message here are not "
            "publishable, only the counts per message; see the command for a quiet run"
        )
    return lines


def _key(row: Row) -> tuple[str, float, int, int]:
    case = row["case"]
    return (case["model"], case["loss"], case["size"], case["hosts"])


def _index(rows: Iterable[Row]) -> dict[tuple[str, float, int, int], Row]:
    return {_key(r): r for r in rows}


def _pair(after: Row, before: Row | None, key: str) -> str:
    now = after["ratios"].get(key)
    if before is None:
        return _cell(now)
    was = before["ratios"].get(key)
    return f"{_cell(was)} → {_cell(now)}"


def _delivered(row: Row) -> bool:
    return bool(row["errors"] == 0)


def sim_table(after: list[Row], before: list[Row]) -> list[str]:
    """Independent loss at every host, 128 B: per hosts and loss, before → after."""
    old = _index(before)
    body = []
    for r in sorted(after, key=_key):
        case = r["case"]
        if case["model"] != "independent" or case["size"] != 128:
            continue
        b = old.get(_key(r))
        q = r["ratios"]
        body.append((
            case["hosts"], f"{case['loss']:g} %", r["lost_datagrams"], r["losses"],
            _pair(r, b, "naks_per_lost"), _pair(r, b, "repairs_per_lost"),
            q["naks_per_loss"], q["repairs_per_loss"], q["datagrams_per_msg"],
            q["bytes_per_msg"], q["publisher_in_per_msg"], q["publisher_out_per_msg"],
            r["latency_ms"]["p99"], _delivered(r),
        ))  # fmt: skip
    head = [
        "hosts", "loss", "lost datagrams", "losses", "NAKs / lost (before → after)",
        "resends / lost (before → after)", "NAKs / loss", "resends / loss",
        "datagrams / msg", "bytes / msg", "publisher in / msg", "publisher out / msg",
        "p99 latency (ms)", "each message once or counted",
    ]  # fmt: skip
    return [
        "Independent loss at every host, 128 B messages, 10,000 msg/s for 2 s (about 10 "
        "messages a datagram). Datagrams and bytes per message count everything on the "
        "wire but heartbeats (a multicast counts once); the publisher's in and out are "
        "the datagrams it received and sent.\n",
        *table(head, body),
    ]


def model_table(after: list[Row], before: list[Row]) -> list[str]:
    from benchmarks.scale.sim import MODELS

    old = _index(before)
    body = []
    for r in sorted(after, key=_key):
        case = r["case"]
        if case["model"] in ("independent", "slow", "lossy-host"):
            continue
        b = old.get(_key(r))
        body.append((
            case["model"], f"{case['loss']:g} %", case["hosts"], r["lost_datagrams"],
            _pair(r, b, "naks_per_lost"), _pair(r, b, "repairs_per_lost"),
            r["repairs_multicast"], r["latency_ms"]["p99"], _delivered(r),
        ))  # fmt: skip
    head = [
        "model", "background loss", "hosts", "lost datagrams", "NAKs / lost (before → after)",
        "resends / lost (before → after)", "resends to the group", "p99 latency (ms)",
        "each message once or counted",
    ]  # fmt: skip
    models = "; ".join(f"*{name}*: {text}" for name, text in MODELS.items())
    return [f"Correlated losses, 128 B. Models: {models}.\n", *table(head, body)]


def bad_host_table(after: list[Row]) -> list[str]:
    """The healthy hosts beside one slow or lossy host, and without it."""
    plain = {(r["case"]["hosts"], r["case"]["size"]): r for r in after
             if r["case"]["model"] == "independent" and r["case"]["loss"] == 1.0}  # fmt: skip
    body = []
    for r in sorted(after, key=_key):
        case = r["case"]
        if case["model"] not in ("slow", "lossy-host"):
            continue
        base = plain.get((case["hosts"], case["size"]))
        h = r["healthy"]
        body.append((
            case["model"], case["hosts"], h["rate_msg_s"],
            base["healthy"]["rate_msg_s"] if base else None, h["duplicates_per_msg"],
            base["healthy"]["duplicates_per_msg"] if base else None, r["latency_ms"]["p99"],
            base["latency_ms"]["p99"] if base else None, r["latency_ms"]["bad_p99"],
            _delivered(r),
        ))  # fmt: skip
    head = [
        "bad host",
        "hosts",
        "healthy hosts' rate (msg/s)",
        "… without it",
        "healthy hosts' duplicates / msg",
        "… without it",
        "healthy p99 (ms)",
        "… without it",
        "bad host's p99 (ms)",
        "each message once or counted",
    ]
    return [
        "One bad host among the others (1 % loss everywhere else; offered 10,000 msg/s): "
        "the healthy hosts' rate, the resends they receive for nothing (duplicates) and "
        "their latency, beside the same service without the bad host.\n",
        *table(head, body),
    ]


def size_table(after: list[Row]) -> list[str]:
    body = []
    for r in sorted(after, key=_key):
        case = r["case"]
        if case["model"] != "independent" or case["size"] == 128:
            continue
        q = r["ratios"]
        body.append((
            case["size"], case["hosts"], f"{case['loss']:g} %", q["naks_per_lost"],
            q["repairs_per_lost"], q["datagrams_per_msg"], q["bytes_per_msg"],
            r["latency_ms"]["p99"], _delivered(r),
        ))  # fmt: skip
    if not body:
        return []
    head = [
        "size (B)",
        "hosts",
        "loss",
        "NAKs / lost",
        "resends / lost",
        "datagrams / msg",
        "bytes / msg",
        "p99 latency (ms)",
        "each message once or counted",
    ]
    return ["Large messages (13 datagrams each), 500 msg/s.\n", *table(head, body)]


def routers_table(rows: list[Row]) -> list[str]:
    body = []
    for r in rows:
        change = r["interest"]
        fail = r.get("failover") or {}
        publishes = r["publish"]
        body.append((
            r["topology"], r["networks"], r["links"], r["build_frames"],
            max(c["frames_listen"] for c in change), max(c["hops"] for c in change),
            " / ".join(f"{p['data_frames']} for {p['listening']}" for p in publishes),
            all(p["exactly_once"] or p["losses"] for p in publishes),
            sum(p["losses"] for p in publishes),
            fail.get("frames"), fail.get("rerouted") if fail else None,
        ))  # fmt: skip
    head = [
        "topology",
        "networks",
        "links",
        "frames to build",
        "frames per interest change",
        "hops to the farthest router",
        "DATA frames per message (for k listening networks)",
        "each listener once, or counted lost",
        "counted lost",
        "frames to fail over",
        "rerouted",
    ]
    return [
        "One router per network. An interest change crosses every link about once (link "
        "state flooding), so its cost grows with links, not with networks squared; its "
        "propagation time is the hops to the farthest router times the latency of one hop. "
        "A message crosses only the links of the tree to the networks that listen.\n",
        *table(head, body),
    ]


def lab_fanout_table(rows: list[Row]) -> list[str]:
    from benchmarks.scale.labtables import fanout_lines

    return fanout_lines(rows)


def lab_subjects_table(rows: list[Row]) -> list[str]:
    from benchmarks.scale.labtables import subjects_lines

    return subjects_lines(rows)


def lab_routers_table(rows: list[Row]) -> list[str]:
    from benchmarks.scale.labtables import routers_lines

    return routers_lines(rows)


def overlap_table(sim_rows: list[Row], lab_rows: list[Row]) -> list[str]:
    from benchmarks.scale.labtables import overlap_lines

    return overlap_lines(sim_rows, lab_rows)
