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
import sys
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from rvasync.fieldtypes import FieldType
from rvasync.protocol.reliable_events import ReliableStats
from rvasync.rvdatetime import DateTime

__all__ = [
    "OS_CODES",
    "DaemonIdentity",
    "ServiceCounters",
    "ServiceTotals",
    "counter_fields",
    "extra_fields",
    "host_status_fields",
    "identity_fields",
    "os_code",
]

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


def _sum(a: _C, b: _C) -> _C:
    """Two counter dataclasses of one kind, field by field, as a new one."""
    return type(a)(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(a)})


_C = TypeVar("_C", ServiceCounters, ReliableStats)


@dataclass(frozen=True, slots=True)
class ServiceTotals:
    """What one service counted over a daemon's life, across the endpoints that served
    it (a service with no transport closes, and opens again with fresh counters)."""

    port: int
    network: str
    counters: ServiceCounters
    core: ReliableStats

    @classmethod
    def zero(cls, port: int) -> ServiceTotals:
        return cls(port, "", ServiceCounters(), ReliableStats())

    def plus(self, other: ServiceTotals) -> ServiceTotals:
        """Both together (``other``'s network, the later one, is kept)."""
        return ServiceTotals(
            self.port,
            other.network,
            _sum(self.counters, other.counters),
            _sum(self.core, other.core),
        )


def _u32(value: float) -> int:
    return max(0, min(int(value), _U32_MAX))


def _u64(value: int) -> int:
    # Counters are Python ints and never wrap, but forged heartbeats can claim streams of
    # 2**64 datagrams, so loss counters may pass what a U64 field holds: saturate.
    return max(0, min(value, _U64_MAX))


@dataclass(frozen=True, slots=True)
class DaemonIdentity:
    """Who publishes a HOST.STATUS: what tells one daemon from the others of its host.

    Every in-process daemon of a host publishes on the same subject (its
    ``hostid`` is the host's address), so the fields say which daemon it is:
    ``address`` (``host:port``, the daemon's own UDP address on the service, as
    its inboxes name it in hex), ``pid`` and ``session`` (its reliable-protocol
    session id, new at every start). ``http`` / ``https``: where it serves its
    status page, ``(address, port)`` (None: not served that way).
    """

    host: str
    port: int
    address_hex: str
    pid: int
    session: int
    ipport: int
    version: str
    http: tuple[str, int] | None = None
    https: tuple[str, int] | None = None


#: ``os`` codes of HOST.STATUS (the spec leaves them to the implementation): rvasync's.
OS_CODES = {"linux": 1, "darwin": 2, "win32": 3, "freebsd": 4, "openbsd": 5, "netbsd": 6}


def os_code(platform: str = sys.platform) -> int:
    """The ``os`` field for ``platform`` (``sys.platform``): :data:`OS_CODES`, 0 if unknown."""
    for prefix, code in OS_CODES.items():
        if platform.startswith(prefix):
            return code
    return 0


def _ipv4(address: str | None) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(address or "0.0.0.0")
    except ValueError:  # an IPv6 or a host name: not what an IPADDR32 holds
        return ipaddress.IPv4Address("0.0.0.0")


def identity_fields(who: DaemonIdentity) -> list[tuple[str, Any, FieldType]]:
    """The HOST.STATUS fields naming the daemon (see :class:`DaemonIdentity`).

    ``sn`` (a licence serial number) is 0: rvasync has no licence keys.
    ``httpaddr``/``httpport`` and ``hsaddr``/``hsport``: the status page over
    HTTP or HTTPS, 0.0.0.0 and 0 when not served so. ``cid``: the daemon's
    UDP port on the service (with ``hostaddr``, unique among the daemons of a
    host); ``scid``: the service's UDP port. Beyond the spec: ``daemon`` (the
    address in hex, as in inboxes and LISTEN.START), ``pid``, ``session``.
    """
    http = who.http or ("0.0.0.0", 0)
    https = who.https or ("0.0.0.0", 0)
    return [
        ("hostaddr", ipaddress.IPv4Address(who.host), FieldType.IPADDR32),
        ("sn", 0, FieldType.U32),
        ("os", os_code(), FieldType.U8),
        ("ver", who.version, FieldType.STRING),
        ("httpaddr", _ipv4(http[0]), FieldType.IPADDR32),
        ("httpport", http[1] & 0xFFFF, FieldType.IPPORT16),
        ("hsaddr", _ipv4(https[0]), FieldType.IPADDR32),
        ("hsport", https[1] & 0xFFFF, FieldType.IPPORT16),
    ]


def host_status_fields(
    *,
    who: DaemonIdentity,
    core: ReliableStats,
    counters: ServiceCounters,
    uptime: float,
    clients: int,
    service: str,
    service_port: int,
    network: str,
) -> list[tuple[str, Any, FieldType]]:
    """The fields of ``_RV.INFO.SYSTEM.HOST.STATUS.<hostid>`` as (name, value, type):
    the daemon's identity (:func:`identity_fields`), the spec's statistics
    (:func:`counter_fields`) and rvasync's additions (:func:`extra_fields`)."""
    return [
        *identity_fields(who),
        ("time", DateTime.now(), FieldType.DATETIME),
        ("up", _u32(uptime), FieldType.U32),
        ("cc", _u32(clients), FieldType.U32),
        *counter_fields(core, counters),
        ("ipport", who.ipport, FieldType.IPPORT16),
        ("service", service, FieldType.STRING),
        ("network", network, FieldType.STRING),
        ("cid", who.port & 0xFFFF, FieldType.U16),
        ("scid", service_port & 0xFFFF, FieldType.U16),
        ("daemon", who.address_hex, FieldType.STRING),
        ("pid", _u32(who.pid), FieldType.U32),
        ("session", _u64(who.session), FieldType.U64),
        *extra_fields(core, counters),
    ]


def counter_fields(
    core: ReliableStats, counters: ServiceCounters
) -> list[tuple[str, int, FieldType]]:
    """The spec's statistics. Spec field <- rvasync counter:

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
    """
    U64 = FieldType.U64
    return [
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
    ]


def extra_fields(
    core: ReliableStats, counters: ServiceCounters
) -> list[tuple[str, int, FieldType]]:
    """rvasync's counters beyond the spec: ``malformed`` (bad datagrams plus undecodable
    messages), ``duplicates``, ``misrouted`` and ``unwanted`` message counts; ``unauth``
    (datagrams without a valid service-key MAC), ``refused`` (datagrams of sessions or
    streams beyond the core's bounds, or naming a session from a wrong address: core
    peers_refused + streams_refused + wrong_source), ``implausible`` (datagrams whose
    sequence claims could not be true, dropped) and ``ptprefused`` (point-to-point
    messages to addresses the daemon does not know)."""
    U64 = FieldType.U64
    refused = core.peers_refused + core.streams_refused + core.wrong_source
    return [
        ("malformed", _u64(core.malformed + counters.messages_malformed), U64),
        ("duplicates", _u64(core.duplicates), U64),
        ("misrouted", _u64(counters.messages_misrouted), U64),
        ("unwanted", _u64(counters.messages_unwanted), U64),
        ("unauth", _u64(counters.datagrams_unauthenticated), U64),
        ("refused", _u64(refused), U64),
        ("implausible", _u64(core.implausible), U64),
        ("ptprefused", _u64(counters.ptp_refused), U64),
    ]
