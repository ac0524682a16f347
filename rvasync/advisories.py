"""Advisory messages: how rvasync reports on itself.

An advisory is an ordinary message on ``_RV.<class>.<source>.<name>``: class is
ERROR, WARN or INFO; source is SYSTEM for the transports and daemon (RVCM and
RVFT for certified delivery and fault tolerance); name may span several
elements. Programs receive advisories by listening, like any message. An
ERROR or WARN advisory that no listener takes is logged to stderr instead, so
a serious condition never vanishes silently; INFO advisories nobody listens
to are dropped.

Messages are built by :mod:`rvasync.advmsg`, the one builder (a data-layer
leaf the protocol cores use too); this module re-exports it and adds what
presenting needs.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

from rvasync._logging import stderr_logger
from rvasync.advlimit import UnheardLimiter
from rvasync.advmsg import (
    ADVISORY_PREFIX,
    SYSTEM,
    AdvisoryClass,
    AdvisoryFields,
    advisory_subject,
    make_advisory,
    parse_advisory_subject,
)
from rvasync.fieldtypes import FieldType
from rvasync.message import Message

__all__ = [
    "ADVISORY_PREFIX",
    "AdvisoryClass",
    "advisory_subject",
    "build_advisory",
    "count_field",
    "fast_producer",
    "host_field",
    "log_unheard",
    "make_advisory",
    "msg_too_large",
    "parse_advisory_subject",
]


class Presenter(Protocol):
    """Anything that can present an advisory to its listeners (a transport)."""

    def _present(self, msg: Message) -> int: ...


def build_advisory(
    adv_class: AdvisoryClass | str,
    name: str,
    fields: AdvisoryFields = None,
    *,
    source: str = "SYSTEM",
) -> Message:
    """A SYSTEM (by default) advisory: :func:`~rvasync.advmsg.make_advisory` with the
    source as a keyword, the form the transports call."""
    return make_advisory(adv_class, source, name, fields=fields)


def log_unheard(msg: Message) -> None:
    """Log an advisory no listener took, if it is an ERROR or a WARN (INFO is dropped).

    At most one line per subject (and ``ADV_DESC``, the queue a QUEUE.LIMIT_EXCEEDED
    names) per second (rvasync.advlimit.UnheardLimiter): the
    lines not written are counted, and the count goes with the next line
    (``suppressed``) or on a line of its own at the second's end.
    """
    parsed = parse_advisory_subject(msg.subject or "")
    if parsed is None or parsed[0] is AdvisoryClass.INFO:
        return
    # One cause, one line a second: the subject, and the queue a LIMIT_EXCEEDED names.
    desc = msg.get("ADV_DESC")
    subject = msg.subject or ""
    write, suppressed = _unheard.allow(subject if desc is None else f"{subject} {desc}")
    if not write:
        return
    details = {f.name: _printable(f.value) for f in msg if f.name}
    log = stderr_logger()
    method = log.error if parsed[0] is AdvisoryClass.ERROR else log.warning
    if suppressed:
        method("unheard advisory", subject=msg.subject, fields=details, suppressed=suppressed)
    else:
        method("unheard advisory", subject=msg.subject, fields=details)


def _log_suppressed(subject: str, count: int) -> None:
    stderr_logger().warning("unheard advisories not logged", subject=subject, suppressed=count)


_unheard = UnheardLimiter(_log_suppressed)


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


def count_field(value: int) -> int:
    """A count as an advisory's U32 field holds it: clamped to 0 .. 2**32 - 1."""
    return max(0, min(int(value), _U32_MAX))


def host_field(ip: str) -> ipaddress.IPv4Address:
    """A host address as an advisory's IPADDR32 field holds it."""
    return ipaddress.IPv4Address(ip)


def msg_too_large(host: str, lost: int, size: int | None, *, messages: int = 1) -> Message:
    """``_RV.ERROR.SYSTEM.DATALOSS.MSG_TOO_LARGE``: a client sent a message over 64 MiB.

    ``lost`` is how many packets the message would have taken; ``size`` its wire
    size when known; ``messages`` (more than 1: the ``messages`` field) how many
    such sends, one advisory a second standing for them all (rvasync.advlimit).
    """
    items = [
        ("host", host_field(host), FieldType.IPADDR32),
        ("lost", count_field(lost), FieldType.U32),
    ]
    if size is not None:
        items.append(("size", size, FieldType.U64))
    if messages != 1:
        items.append(("messages", count_field(messages), FieldType.U32))
    return make_advisory(AdvisoryClass.ERROR, SYSTEM, "DATALOSS.MSG_TOO_LARGE", fields=items)


def fast_producer(waiting: int) -> Message:
    """``_RV.WARN.SYSTEM.CLIENT.FASTPRODUCER``: outbound data has waited too long."""
    return make_advisory(
        AdvisoryClass.WARN,
        SYSTEM,
        "CLIENT.FASTPRODUCER",
        fields=[("waiting", count_field(waiting), FieldType.U32)],
    )
