"""Advisory messages: how rvasync reports on itself.

An advisory is an ordinary message on ``_RV.<class>.<source>.<name>``: class is
ERROR, WARN or INFO; source is SYSTEM for the transports and daemon (RVCM and
RVFT for certified delivery and fault tolerance); name may span several
elements. Programs receive advisories by listening, like any message. An ERROR
or WARN advisory that no listener takes is logged to stderr instead, so a
serious condition never vanishes silently; INFO advisories nobody listens to
are dropped.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from rvasync._logging import stderr_logger
from rvasync.fieldtypes import FieldType
from rvasync.message import Message

__all__ = [
    "AdvisoryClass",
    "advisory_subject",
    "build_advisory",
    "fast_producer",
    "log_unheard",
    "msg_too_large",
    "parse_advisory_subject",
]

ADVISORY_PREFIX = "_RV."


class AdvisoryClass(enum.StrEnum):
    """Severity of an advisory: the second element of its subject."""

    ERROR = "ERROR"
    WARN = "WARN"
    INFO = "INFO"


class Presenter(Protocol):
    """Anything that can present an advisory to its listeners (a transport)."""

    def _present(self, msg: Message) -> int: ...


def advisory_subject(adv_class: AdvisoryClass | str, source: str, name: str) -> str:
    """``_RV.<class>.<source>.<name>``; ``name`` may contain dots (several elements)."""
    cls = AdvisoryClass(adv_class).value
    if not source or "." in source:
        raise ValueError(f"advisory source must be one element, got {source!r}")
    if not name or name.startswith(".") or name.endswith(".") or ".." in name:
        raise ValueError(f"advisory name must be dot-separated elements, got {name!r}")
    return f"{ADVISORY_PREFIX}{cls}.{source}.{name}"


def parse_advisory_subject(subject: str) -> tuple[AdvisoryClass, str, str] | None:
    """Split an advisory subject into (class, source, name); None if it is not one."""
    if not subject.startswith(ADVISORY_PREFIX):
        return None
    parts = subject.split(".", 3)
    if len(parts) != 4 or not parts[3]:
        return None
    try:
        cls = AdvisoryClass(parts[1])
    except ValueError:
        return None
    return cls, parts[2], parts[3]


def build_advisory(
    adv_class: AdvisoryClass | str,
    name: str,
    fields: Mapping[str, Any] | Iterable[Any] | None = None,
    *,
    source: str = "SYSTEM",
) -> Message:
    """Make the advisory message (fields given as a mapping of name to value, or Fields)."""
    return Message(advisory_subject(adv_class, source, name), fields)


def log_unheard(msg: Message) -> None:
    """Log an advisory no listener took, if it is an ERROR or a WARN (INFO is dropped)."""
    parsed = parse_advisory_subject(msg.subject or "")
    if parsed is None or parsed[0] is AdvisoryClass.INFO:
        return
    details = {f.name: _printable(f.value) for f in msg if f.name}
    log = stderr_logger()
    method = log.error if parsed[0] is AdvisoryClass.ERROR else log.warning
    method("unheard advisory", subject=msg.subject, fields=details)


def _printable(value: Any) -> Any:
    if isinstance(value, Message):
        return {f.name: _printable(f.value) for f in value}
    if isinstance(value, bytes):
        return value.hex() if len(value) <= 64 else f"<{len(value)} bytes>"
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


# -- typed system advisories (fields typed as in the specification's Appendix A) ----------------
# The daemon's are in rvasync.daemon.advisories; these two are presented by a client
# link to a standalone daemon as well as by the daemon.

_U32_MAX = 0xFFFFFFFF


def _message(adv_class: AdvisoryClass, name: str, items: list[tuple[str, Any, Any]]) -> Message:
    msg = Message(advisory_subject(adv_class, "SYSTEM", name))
    for field_name, value, ftype in items:
        msg.add(field_name, value, ftype)
    return msg


def _count(value: int) -> int:
    return max(0, min(int(value), _U32_MAX))


def _host(ip: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(ip)


def msg_too_large(host: str, lost: int, size: int | None) -> Message:
    """``_RV.ERROR.SYSTEM.DATALOSS.MSG_TOO_LARGE``: a client sent a message over 64 MiB.

    ``lost`` is how many packets the message would have taken; ``size`` its wire
    size when known.
    """
    items = [("host", _host(host), FieldType.IPADDR32), ("lost", _count(lost), FieldType.U32)]
    if size is not None:
        items.append(("size", size, FieldType.U64))
    return _message(AdvisoryClass.ERROR, "DATALOSS.MSG_TOO_LARGE", items)


def fast_producer(waiting: int) -> Message:
    """``_RV.WARN.SYSTEM.CLIENT.FASTPRODUCER``: outbound data has waited too long."""
    return _message(
        AdvisoryClass.WARN,
        "CLIENT.FASTPRODUCER",
        [("waiting", _count(waiting), FieldType.U32)],
    )
