"""The system advisories a daemon presents, built with the specification's subjects and fields.

One function per advisory, shared by the engine (which presents most of
them) and the standalone server (which reports slow TCP consumers). Field
types follow Appendix A: ``host`` is an IPADDR32, counts are unsigned.
rvasync adds a few fields where it knows more than the spec asks for (the
exact message count of an inbound loss, for instance); they are documented in
docs/transports.md.
"""

from __future__ import annotations

from typing import Any

from rvasync.advisories import (  # the helpers, and the two a client link presents too
    AdvisoryClass,
    _count,
    _host,
    _message,
    fast_producer,
    msg_too_large,
)
from rvasync.fieldtypes import FieldType
from rvasync.message import Message

__all__ = [
    "data_loss",
    "fast_producer",
    "host_status",
    "msg_too_large",
    "retransmission",
    "slow_consumer",
    "unreachable_daemon",
    "unreachable_transport",
]


def data_loss(direction: str, ptp: bool, host: str, lost: int, **extra: int) -> Message:
    """``_RV.ERROR.SYSTEM.DATALOSS.<INBOUND|OUTBOUND>.<BCAST|PTP>``.

    ``host`` is the other daemon's address, ``lost`` the packets (datagrams) that
    will never arrive; ``extra`` adds unsigned fields (``messages=`` for inbound loss).
    """
    kind = "PTP" if ptp else "BCAST"
    items = [("host", _host(host), FieldType.IPADDR32), ("lost", _count(lost), FieldType.U32)]
    items += [(name, _count(value), FieldType.U32) for name, value in extra.items()]
    return _message(AdvisoryClass.ERROR, f"DATALOSS.{direction}.{kind}", items)


def retransmission(name: str, host: str, lost: int) -> Message:
    """``_RV.INFO.SYSTEM.RETRANSMISSION.<name>`` (INBOUND.EXPECTED, OUTBOUND.SENT,
    OUTBOUND.SUPPRESSED) with the spec's ``host`` and ``lost`` fields."""
    return _message(
        AdvisoryClass.INFO,
        f"RETRANSMISSION.{name}",
        [("host", _host(host), FieldType.IPADDR32), ("lost", _count(lost), FieldType.U32)],
    )


def unreachable_transport(transport_id: str, description: str | None) -> Message:
    """``_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.<transport_id>``: a transport was closed."""
    items: list[tuple[str, Any, Any]] = [("tport", transport_id, FieldType.STRING)]
    if description:
        items.append(("descr", description, FieldType.STRING))
    return _message(AdvisoryClass.INFO, f"UNREACHABLE.TRANSPORT.{transport_id}", items)


def unreachable_daemon(address_hex: str, host: str, reason: str) -> Message:
    """``_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.<daemon address>``: every transport of a
    peer daemon is gone (it closed the service, or fell silent: ``reason``)."""
    return _message(
        AdvisoryClass.INFO,
        f"UNREACHABLE.TRANSPORT.{address_hex}",
        [
            ("tport", address_hex, FieldType.STRING),
            ("host", _host(host), FieldType.IPADDR32),
            ("reason", reason, FieldType.STRING),
        ],
    )


def host_status(host: str, fields: list[tuple[str, Any, Any]]) -> Message:
    """``_RV.INFO.SYSTEM.HOST.STATUS.<hostid>`` (hostid: the host's IP address in hex)."""
    hostid = _host(host).packed.hex().upper()
    return _message(AdvisoryClass.INFO, f"HOST.STATUS.{hostid}", fields)


def slow_consumer(waiting: int, dropped: int, bytes_dropped: int, reason: str) -> Message:
    """``_RV.ERROR.SYSTEM.CLIENT.SLOWCONSUMER``: the daemon discarded the oldest messages
    waiting for a client; ``reason`` is ``"size limit"`` or ``"time limit"``."""
    return _message(
        AdvisoryClass.ERROR,
        "CLIENT.SLOWCONSUMER",
        [
            ("waiting", _count(waiting), FieldType.U32),
            ("dropped", _count(dropped), FieldType.U32),
            ("bytes_dropped", max(0, int(bytes_dropped)), FieldType.U64),
            ("reason", reason, FieldType.STRING),
        ],
    )
