"""The charts of the "Scale" section (matplotlib, Agg backend), as curves over hosts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]
Series = list[tuple[float, float]]

#: (model, background loss) -> label, for the repair-traffic curves
CURVES = (
    (("independent", 1.0), "1 % independent"),
    (("independent", 5.0), "5 % independent"),
    (("burst", 0.0), "bursts on the publisher's link"),
    (("subnet", 1.0), "lossy subnet + 1 %"),
)


def _series(rows: Iterable[Row], model: str, loss: float, value: Callable[[Row], Any]) -> Series:
    points = []
    for r in rows:
        case = r["case"]
        if case["model"] == model and case["loss"] == loss and case["size"] == 128:
            y = value(r)
            if y is not None:
                points.append((float(case["hosts"]), float(y)))
    return sorted(points)


def _figure(title: str, ylabel: str, path: Path, draw: Callable[[Any], bool]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    try:
        if not draw(ax):
            return False
        ax.set_xscale("log")
        ax.set_xlabel("subscriber hosts", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        return True
    finally:
        plt.close(fig)


def _ratio_chart(
    after: list[Row], before: list[Row], key: str, title: str, target: float, path: Path
) -> bool:
    def draw(ax: Any) -> bool:
        drawn = False
        for index, ((model, loss), label) in enumerate(CURVES):
            colour = f"C{index}"
            for rows, style, when in ((before, "--", "before"), (after, "-", "after")):
                points = _series(rows, model, loss, lambda r: r["ratios"].get(key))
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, style, marker="o", ms=3, color=colour,
                            label=f"{label}, {when}")  # fmt: skip
                    drawn = True
        ax.axhline(target, color="#aa0000", lw=0.8, ls=":", label=f"target at 32 hosts: {target}")
        ax.set_yscale("log")
        return drawn

    return _figure(title, "per lost datagram (log)", path, draw)


def repairs(after: list[Row], before: list[Row], path: Path) -> bool:
    return _ratio_chart(
        after, before, "repairs_per_lost",
        "Resent datagrams per lost datagram (simulated)", 1.5, path,
    )  # fmt: skip


def naks(after: list[Row], before: list[Row], path: Path) -> bool:
    return _ratio_chart(
        after, before, "naks_per_lost", "NAKs per lost datagram (simulated)", 2.0, path
    )


def wire(after: list[Row], before: list[Row], path: Path) -> bool:
    """Datagrams on the wire and at the publisher per message, 1 % independent loss."""

    def draw(ax: Any) -> bool:
        drawn = False
        keys = (("datagrams_per_msg", "on the wire"), ("publisher_in_per_msg", "publisher in"),
                ("publisher_out_per_msg", "publisher out"))  # fmt: skip
        for index, (key, label) in enumerate(keys):
            for rows, style, when in ((before, "--", "before"), (after, "-", "after")):
                points = _series(rows, "independent", 1.0, lambda r, k=key: r["ratios"][k])
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, style, marker="o", ms=3, color=f"C{index}",
                            label=f"{label}, {when}")  # fmt: skip
                    drawn = True
        return drawn

    return _figure(
        "Datagrams per message at 1 % loss, 128 B (simulated; 0.1 = ten messages a datagram)",
        "datagrams per message", path, draw,
    )  # fmt: skip


def _lab_series(rows: Iterable[Row], system: str, size: int, loss: float, key: str) -> Series:
    points = []
    for r in rows:
        if r["system"] == system and r["size"] == size and r["loss"] == loss:
            value = r.get(key)
            if value is not None:
                points.append((float(r["hosts"]), float(value)))
    return sorted(points)


def _lab_chart(rows: list[Row], key: str, title: str, ylabel: str, path: Path) -> bool:
    def draw(ax: Any) -> bool:
        drawn = False
        combos = sorted({(r["system"], r["size"], r["loss"]) for r in rows})
        for index, (system, size, loss) in enumerate(combos):
            points = _lab_series(rows, system, size, loss, key)
            if points:
                xs, ys = zip(*points, strict=True)
                style = "-" if system == "rvasync" else "--"
                ax.plot(xs, ys, style, marker="o", ms=3, color=f"C{index % 10}",
                        label=f"{system} {size} B, {loss:g} % loss")  # fmt: skip
                drawn = True
        return drawn

    return _figure(title, ylabel, path, draw)


def lab_cpu(rows: list[Row], path: Path) -> bool:
    return _lab_chart(
        rows, "publisher_cpu_us_per_msg",
        "Publisher-side CPU per message: rvasync's daemon against nats-server (lab)",
        "µs of CPU per message", path,
    )  # fmt: skip


def lab_rate(rows: list[Row], path: Path) -> bool:
    return _lab_chart(
        rows, "per_subscriber_msg_s", "Delivered messages per second per subscriber (lab)",
        "msg/s per subscriber", path,
    )  # fmt: skip
