"""Counters of one service endpoint, and the HOST.STATUS statistics made from them.

Two sets of counters describe a service: the reliable core's
(:class:`~rvasync.protocol.reliable_events.ReliableStats`: datagrams, NAKs,
retransmissions, loss) and the driver's (:class:`ServiceCounters`: messages
and bytes through the service, what was dropped and why). HOST.STATUS maps
them onto the field names of the Rendezvous specification; see
:func:`host_status_fields` for the mapping (also tabled in docs/daemon.md).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields
from typing import Any

from rvasync.fieldtypes import FieldType
from rvasync.protocol.reliable_events import ReliableStats
from rvasync.rvdatetime import DateTime

__all__ = ["ServiceCounters", "host_status_fields"]

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF


@dataclass(slots=True)
class ServiceCounters:
    """What the driver counts on one service (cumulative since the service opened)."""

    #: Messages clients of this daemon sent to the network (multicast and point to point),
    #: and their wire bytes.
    messages_out: int = 0
    bytes_out: int = 0
    #: Messages received from the network (delivered in order by the reliable core), and bytes.
    messages_in: int = 0
    bytes_in: int = 0
    #: Received messages no client of this daemon listens to (dropped without decoding).
    messages_unwanted: int = 0
    #: Deliveries to clients (one message to three sessions counts three), local or remote.
    deliveries: int = 0
    #: Messages that stayed in this daemon (``_LOCAL.`` subjects, inboxes of this daemon).
    messages_local: int = 0
    #: Received messages dropped because they do not decode (corrupt or forged payloads).
    messages_malformed: int = 0
    #: Received messages dropped because they cannot be routed: ``_LOCAL.`` or inbox subjects
    #: multicast by a peer, point-to-point messages for an inbox that no longer exists here.
    messages_misrouted: int = 0
    #: Messages refused because they exceed 64 MiB (DATALOSS.MSG_TOO_LARGE).
    messages_too_large: int = 0
    #: Datagrams dropped by the loss injector (``Daemon(loss=...)``, tests only).
    datagrams_dropped_on_purpose: int = 0
    #: Our own multicast, looped back by the kernel, dropped before the core.
    own_datagrams: int = 0
    #: sendto() failures other than a full buffer (the datagram is lost; NAKs recover it).
    send_errors: int = 0
    #: recvfrom() failures.
    receive_errors: int = 0
    #: Datagrams that waited in the send backlog because the socket buffer was full.
    datagrams_backlogged: int = 0
    #: Unexpected exceptions contained by the driver (always 0 unless there is a bug).
    internal_errors: int = 0
    #: Datagrams dropped on arrival because the service has a key and their MAC was
    #: missing or wrong (forged, or from a daemon with another key or none).
    datagrams_unauthenticated: int = 0
    #: Point-to-point messages not sent: their inbox named an address this daemon has
    #: not heard from on the service (a crafted ``_INBOX.<address>`` subject).
    ptp_refused: int = 0

    def as_dict(self) -> dict[str, int]:
        """A snapshot of every counter by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _u32(value: float) -> int:
    return max(0, min(int(value), _U32_MAX))


def _u64(value: int) -> int:
    # Counters are Python ints and never wrap, but forged heartbeats can claim streams of
    # 2**64 datagrams, so loss counters may pass what a U64 field holds: saturate.
    return max(0, min(value, _U64_MAX))


def host_status_fields(
    *,
    host: str,
    core: ReliableStats,
    counters: ServiceCounters,
    uptime: float,
    clients: int,
    service: str,
    network: str,
    ipport: int,
    version: str,
) -> list[tuple[str, Any, FieldType]]:
    """The fields of ``_RV.INFO.SYSTEM.HOST.STATUS.<hostid>`` as (name, value, type).

    Spec field <- rvasync counter:

    ``ms``/``bs`` messages/bytes sent <- counters.messages_out/bytes_out;
    ``mr``/``br`` received <- counters.messages_in/bytes_in;
    ``ps``/``pr`` packets sent/received <- core datagrams_sent/datagrams_received
    (every datagram: data, heartbeats, NAKs, retransmissions);
    ``rx`` packets retransmitted <- core datagrams_retransmitted;
    ``pm`` packets missed <- core datagrams_missed;
    ``idl``/``odl`` inbound/outbound data loss in packets <- core
    datagrams_lost_inbound/datagrams_lost_outbound;
    ``irrs`` requests not sent by the receiver <- 0 (rvasync never censors its NAKs);
    ``orrs`` requests ignored by the sender <- core retransmissions_suppressed.
    Beyond the spec: ``malformed`` (bad datagrams plus undecodable messages),
    ``duplicates``, ``misrouted`` and ``unwanted`` message counts; ``unauth``
    (datagrams without a valid service-key MAC), ``refused`` (datagrams of sessions
    or streams beyond the core's bounds, or naming a session from a wrong address:
    core peers_refused + streams_refused + wrong_source) and ``ptprefused``
    (point-to-point messages to addresses the daemon does not know).
    """
    U64 = FieldType.U64
    return [
        ("hostaddr", ipaddress.IPv4Address(host), FieldType.IPADDR32),
        ("ver", version, FieldType.STRING),
        ("time", DateTime.now(), FieldType.DATETIME),
        ("up", _u32(uptime), FieldType.U32),
        ("cc", _u32(clients), FieldType.U32),
        ("ms", _u64(counters.messages_out), U64),
        ("bs", _u64(counters.bytes_out), U64),
        ("mr", _u64(counters.messages_in), U64),
        ("br", _u64(counters.bytes_in), U64),
        ("ps", _u64(core.datagrams_sent), U64),
        ("pr", _u64(core.datagrams_received), U64),
        ("rx", _u64(core.datagrams_retransmitted), U64),
        ("pm", _u64(core.datagrams_missed), U64),
        ("idl", _u64(core.datagrams_lost_inbound), U64),
        ("odl", _u64(core.datagrams_lost_outbound), U64),
        ("irrs", 0, U64),
        ("orrs", _u64(core.retransmissions_suppressed), U64),
        ("ipport", ipport, FieldType.IPPORT16),
        ("service", service, FieldType.STRING),
        ("network", network, FieldType.STRING),
        ("malformed", _u64(core.malformed + counters.messages_malformed), U64),
        ("duplicates", _u64(core.duplicates), U64),
        ("misrouted", _u64(counters.messages_misrouted), U64),
        ("unwanted", _u64(counters.messages_unwanted), U64),
        ("unauth", _u64(counters.datagrams_unauthenticated), U64),
        (
            "refused",
            _u64(core.peers_refused + core.streams_refused + core.wrong_source),
            U64,
        ),
        ("ptprefused", _u64(counters.ptp_refused), U64),
    ]
