"""The one place rvasync makes its loggers.

Every rvasync log record goes through the standard library's :mod:`logging`,
on loggers named after the module that logs (``rvasync.advisories``,
``rvasync.rvrd.router`` ...), so an application sets levels, handlers and
filters on ``logging.getLogger("rvasync")`` (or through ``logging.config``)
as it does for everything else. The call sites use structlog's keyword style
(``log.warning("unheard advisory", subject=...)``); structlog turns the
keywords into the record's ``extra`` attributes, so a handler or formatter
sees each field as ``record.<field>``.

Nothing configured: :class:`_Fallback`, attached to the ``rvasync`` logger,
writes WARNING and above as one key=value line to whatever ``sys.stderr`` is
at the moment of the write (test runners and daemons that replace stderr
after import still capture it). It stands aside as soon as any other handler
would take the record, like the standard library's own last resort. The
``rvasync`` commands call :func:`configure_cli_logging`: INFO and above, the
same lines. An application that configured structlog itself keeps its
structlog configuration (``structlog.get_logger(name)``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure_cli_logging", "line_formatter", "stderr_handler", "stderr_logger"]

ROOT = "rvasync"

#: LogRecord attributes a field must not overwrite (``logging`` raises KeyError);
#: such a field is passed as ``field_<name>``.
_RESERVED = (frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}) - set(
    structlog.stdlib.LOG_KWARG_NAMES
)

_loggers: dict[str, Any] = {}


def _keep_record_attributes(_: object, __: str, event_dict: Any) -> Any:
    for key in [k for k in event_dict if k in _RESERVED]:
        event_dict[f"field_{key}"] = event_dict.pop(key)
    return event_dict


def stderr_logger(name: str | None = None) -> Any:
    """The logger for rvasync module ``name`` (default: the calling module).

    A structlog logger over ``logging.getLogger(name)``; the application's own
    structlog logger instead if it configured structlog. Cheap enough to call
    where something is logged, which is never per message.
    """
    if name is None:
        caller = sys._getframe(1).f_globals.get("__name__", ROOT)
        name = caller if caller.startswith(ROOT) else ROOT
    if structlog.is_configured():
        return structlog.get_logger(name)
    log = _loggers.get(name)
    if log is None:
        log = _loggers[name] = structlog.wrap_logger(
            logging.getLogger(name),
            processors=[
                structlog.stdlib.filter_by_level,  # the level set on the stdlib logger
                _keep_record_attributes,
                structlog.stdlib.render_to_log_kwargs,
            ],
            wrapper_class=structlog.stdlib.BoundLogger,
        )
    return log


def line_formatter() -> logging.Formatter:
    """A formatter writing a record as one key=value line: timestamp, level, event, fields."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.KeyValueRenderer(
                key_order=["timestamp", "level", "event"], drop_missing=True
            ),
        ],
    )


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes to the current ``sys.stderr``."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(line_formatter())

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


class _Fallback(_CurrentStderr):
    """rvasync's last resort: writes a record only if no other handler would take it."""

    def handle(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return False
            logger = logger.parent if logger.propagate else None
        return super().handle(record)


def stderr_handler() -> logging.Handler:
    """A handler writing :func:`line_formatter` lines to the current ``sys.stderr``."""
    return _CurrentStderr()


_FALLBACK = _Fallback()
logging.getLogger(ROOT).addHandler(_FALLBACK)


def configure_cli_logging() -> None:
    """Logging for the ``rvasync`` commands: INFO and above, one line each, on stderr.

    Leaves alone whatever the process configured already (a handler on the
    root logger, a level on ``rvasync``).
    """
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(stderr_handler())
    rv = logging.getLogger(ROOT)
    if rv.level == logging.NOTSET:
        rv.setLevel(logging.INFO)
