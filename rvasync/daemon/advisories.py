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
    count_field,
    fast_producer,
    host_field,
    msg_too_large,
)
from rvasync.advmsg import SYSTEM, AdvisoryClass, make_advisory
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


def _source(peer: tuple[str, int] | None, session: int | None) -> list[tuple[str, Any, Any]]:
    """The fields beyond the spec that name the other daemon exactly: its UDP ``port``
    and its reliable-protocol ``session`` id (one host runs many daemons, and a
    forger can claim any session: an application tells them apart by these)."""
    items: list[tuple[str, Any, Any]] = []
    if peer is not None:
        items.append(("port", int(peer[1]) & 0xFFFF, FieldType.U16))
    if session:
        items.append(("session", int(session) & 0xFFFFFFFFFFFFFFFF, FieldType.U64))
    return items


def data_loss(
    direction: str,
    ptp: bool,
    host: str,
    lost: int,
    *,
    peer: tuple[str, int] | None = None,
    session: int | None = None,
    **extra: int,
) -> Message:
    """``_RV.ERROR.SYSTEM.DATALOSS.<INBOUND|OUTBOUND>.<BCAST|PTP>``.

    ``host`` is the other daemon's address, ``lost`` the packets (datagrams) that
    will never arrive; ``extra`` adds unsigned fields (``messages=`` for inbound loss).
    ``peer`` (its UDP address) and ``session`` add the ``port`` and ``session`` fields.
    """
    kind = "PTP" if ptp else "BCAST"
    items = [
        ("host", host_field(host), FieldType.IPADDR32),
        ("lost", count_field(lost), FieldType.U32),
    ]
    items += [(name, count_field(value), FieldType.U32) for name, value in extra.items()]
    items += _source(peer, session)
    return make_advisory(AdvisoryClass.ERROR, SYSTEM, f"DATALOSS.{direction}.{kind}", fields=items)


def retransmission(
    name: str,
    host: str,
    lost: int,
    *,
    peer: tuple[str, int] | None = None,
    session: int | None = None,
) -> Message:
    """``_RV.INFO.SYSTEM.RETRANSMISSION.<name>`` (INBOUND.EXPECTED, OUTBOUND.SENT,
    OUTBOUND.SUPPRESSED, INBOUND.REQUEST_NOT_SENT) with the spec's ``host`` and
    ``lost`` fields, and the ``port`` and ``session`` fields of :func:`data_loss`."""
    return make_advisory(
        AdvisoryClass.INFO,
        SYSTEM,
        f"RETRANSMISSION.{name}",
        fields=[
            ("host", host_field(host), FieldType.IPADDR32),
            ("lost", count_field(lost), FieldType.U32),
            *_source(peer, session),
        ],
    )


def unreachable_transport(transport_id: str, description: str | None) -> Message:
    """``_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.<transport_id>``: a transport was closed."""
    items: list[tuple[str, Any, Any]] = [("tport", transport_id, FieldType.STRING)]
    if description:
        items.append(("descr", description, FieldType.STRING))
    return make_advisory(
        AdvisoryClass.INFO, SYSTEM, "UNREACHABLE.TRANSPORT", transport_id, fields=items
    )


def unreachable_daemon(
    address_hex: str, host: str, reason: str, *, session: int | None = None
) -> Message:
    """``_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.<daemon address>``: every transport of a
    peer daemon is gone (it closed the service, or fell silent: ``reason``); ``session``
    is the reliable-protocol session that went away."""
    return make_advisory(
        AdvisoryClass.INFO,
        SYSTEM,
        "UNREACHABLE.TRANSPORT",
        address_hex,
        fields=[
            ("tport", address_hex, FieldType.STRING),
            ("host", host_field(host), FieldType.IPADDR32),
            ("reason", reason, FieldType.STRING),
            *_source(None, session),
        ],
    )


def host_status(host: str, fields: list[tuple[str, Any, Any]]) -> Message:
    """``_RV.INFO.SYSTEM.HOST.STATUS.<hostid>`` (hostid: the host's IP address in hex)."""
    hostid = host_field(host).packed.hex().upper()
    return make_advisory(AdvisoryClass.INFO, SYSTEM, "HOST.STATUS", hostid, fields=fields)


def slow_consumer(waiting: int, dropped: int, bytes_dropped: int, reason: str) -> Message:
    """``_RV.ERROR.SYSTEM.CLIENT.SLOWCONSUMER``: the daemon discarded the oldest messages
    waiting for a client; ``reason`` is ``"size limit"`` or ``"time limit"``."""
    return make_advisory(
        AdvisoryClass.ERROR,
        SYSTEM,
        "CLIENT.SLOWCONSUMER",
        fields=[
            ("waiting", count_field(waiting), FieldType.U32),
            ("dropped", count_field(dropped), FieldType.U32),
            ("bytes_dropped", max(0, int(bytes_dropped)), FieldType.U64),
            ("reason", reason, FieldType.STRING),
        ],
    )
