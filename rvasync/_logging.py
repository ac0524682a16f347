"""The one place rvasync makes its loggers.

Errors nobody else will see (unheard advisories, failing callbacks) go to
stderr through structlog. If the application configured structlog, its
configuration wins; otherwise a plain key=value renderer writes to whatever
``sys.stderr`` is at the moment of the write, so test runners and daemons that
replace stderr after import still capture it.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO, cast

import structlog

__all__ = ["stderr_logger"]


class _CurrentStderr:
    """A file-like object that forwards to the current ``sys.stderr``."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_default = structlog.wrap_logger(
    # PrintLogger only calls write() and flush(), which is all _CurrentStderr has.
    structlog.PrintLogger(cast(TextIO, _CurrentStderr())),
    processors=[
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        structlog.processors.KeyValueRenderer(
            key_order=["timestamp", "level", "event"], drop_missing=True
        ),
    ],
)


def stderr_logger() -> Any:
    """The application's structlog logger if it configured one, else rvasync's stderr logger."""
    if structlog.is_configured():
        return structlog.get_logger("rvasync")
    return _default
