"""Terminal progress for long recordings: counts and rates, redrawn in place.

rich draws a live status line when it is installed and stderr is a terminal;
without rich a plain line is rewritten with ``\\r``. When stderr is not a
terminal (a pipe, a log file, CI) nothing is drawn unless asked for, so logs
stay clean.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Progress", "RecorderStats", "format_bytes"]


@dataclass
class RecorderStats:
    """Running totals of a recorder (read them at any time from the event loop thread)."""

    received: int = 0
    committed_rows: int = 0
    committed_files: int = 0
    written_bytes: int = 0
    skipped: int = 0
    #: Committed files copied to the upload target, and uploads that failed (retried).
    uploaded_files: int = 0
    upload_errors: int = 0
    started: float = 0.0
    last_commit: float | None = None

    def rate(self, now: float | None = None) -> float:
        """Average messages per second since the recorder started."""
        elapsed = (time.monotonic() if now is None else now) - self.started
        return self.received / elapsed if elapsed > 0 else 0.0


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} GiB"


class Progress:
    """Draws a recorder's stats at most a few times per second."""

    def __init__(self, title: str, *, enabled: bool | None = None, stream: Any = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = isatty if enabled is None else enabled
        self.title = title
        self._live: Any = None
        self._last_received = 0
        self._last_time = time.monotonic()
        self._recent_rate = 0.0
        self._plain_width = 0
        if self.enabled and isatty:
            try:
                from rich.console import Console
                from rich.live import Live
            except ImportError:
                pass
            else:
                self._live = Live(
                    "", console=Console(file=self.stream), refresh_per_second=4, transient=False
                )
                self._live.start()

    def line(self, stats: RecorderStats) -> str:
        now = time.monotonic()
        span = now - self._last_time
        if span >= 0.5:
            self._recent_rate = (stats.received - self._last_received) / span
            self._last_received = stats.received
            self._last_time = now
        since = "never" if stats.last_commit is None else f"{now - stats.last_commit:.1f} s ago"
        skipped = f", {stats.skipped:,} skipped" if stats.skipped else ""
        return (
            f"{self.title}: {stats.received:,} msgs ({self._recent_rate:,.0f}/s now, "
            f"{stats.rate(now):,.0f}/s avg), {stats.committed_rows:,} committed in "
            f"{stats.committed_files:,} files ({format_bytes(stats.written_bytes)}), "
            f"last commit {since}{skipped}"
        )

    def update(self, stats: RecorderStats) -> None:
        if not self.enabled:
            return
        text = self.line(stats)
        if self._live is not None:
            self._live.update(text)
            return
        padding = " " * max(0, self._plain_width - len(text))
        self._plain_width = len(text)
        self.stream.write(f"\r{text}{padding}")
        self.stream.flush()

    def close(self, stats: RecorderStats) -> None:
        if not self.enabled:
            return
        self.update(stats)
        if self._live is not None:
            self._live.stop()
        else:
            self.stream.write("\n")
            self.stream.flush()
