"""Argument rules of the circuit calls, each failing with an error that names the problem."""

from __future__ import annotations

import math

from rvasync.errors import InvalidArgument, InvalidSubject
from rvasync.protocol.vc import CircuitParams
from rvasync.subjects import validate_subject
from rvasync.transport.base import BaseTransport

__all__ = ["check_connect_subject", "check_params", "check_transport", "check_wait_timeout"]

INBOX_PREFIX = "_INBOX."


def check_transport(transport: object, terminal_class: type) -> BaseTransport:
    """The transport under a terminal: an open ordinary transport (not another circuit)."""
    if not isinstance(transport, BaseTransport):
        raise InvalidArgument(
            f"a virtual circuit needs an rvasync transport, got {type(transport).__name__}"
        )
    if isinstance(transport, terminal_class):
        raise InvalidArgument("a virtual circuit cannot run over another virtual circuit")
    transport.check_open()
    return transport


def check_connect_subject(subject: object) -> str:
    """A connect subject is the accept terminal's inbox: ``_INBOX.`` and no wildcards."""
    if not isinstance(subject, str):
        raise InvalidArgument(f"connect_subject must be a str, got {type(subject).__name__}")
    try:
        validate_subject(subject, wildcards=False)
    except InvalidSubject as exc:
        raise InvalidSubject(f"bad connect_subject {subject!r}: {exc}") from None
    if not subject.startswith(INBOX_PREFIX) or len(subject) == len(INBOX_PREFIX):
        raise InvalidSubject(
            f"connect_subject must be the accept terminal's inbox (_INBOX....), got {subject!r}:"
            " send it as the reply subject of the invitation and pass msg.reply_subject"
        )
    return subject


def check_params(heartbeat: object, silence: object) -> CircuitParams:
    """Heartbeat and disconnect time (seconds) as the core's parameters."""
    return CircuitParams(
        heartbeat=_seconds("heartbeat", heartbeat), silence=_seconds("silence", silence)
    )


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    return float(value)


def check_wait_timeout(timeout: object) -> float | None:
    """``wait_connected``'s timeout: None (forever), 0 (test now) or a positive number."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or math.isnan(timeout)
        or timeout < 0
    ):
        raise InvalidArgument(f"timeout must be None or a number >= 0, got {timeout!r}")
    return float(timeout)
