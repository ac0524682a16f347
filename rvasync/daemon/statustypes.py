"""The shape of a daemon's status snapshot (what ``/api/status`` returns), as TypedDicts.

:func:`rvasync.daemon.status.snapshot` builds a :class:`StatusSnapshot`; the
HTML page and the Prometheus text are made from it. Which numbers only grow
for the daemon's life and which do not is said per field here and in
docs/daemon.md ("The status page's numbers"): every ``messages_*``,
``bytes_*``, ``datagrams_*``, ``retransmissions``, ``data_loss_*`` and
``messages_lost_*`` count of :class:`IdentityRow`, :class:`ServiceRow` and
:class:`Totals` is monotonic for the daemon's life; ``clients``, ``peers``,
``backlog_bytes`` and the :class:`ClientRow` of a connection (new at each
reconnect) are not.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "ClientRow",
    "IdentityRow",
    "SecurityRow",
    "ServiceRow",
    "StatusSnapshot",
    "Totals",
]


class ClientRow(TypedDict):
    """One connected client: its connection's counters (from zero at each connection)."""

    id: int  # the connection's number: new at every reconnect
    peer: str  # its address and ephemeral port: new at every reconnect
    user: str | None
    tls: bool
    transport_id: str | None
    description: str | None
    subjects: list[str]
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    backlog_bytes: int  # a gauge
    connected_seconds: float


class IdentityRow(TypedDict):
    """Every client of one identity, over the daemon's life: the stable series."""

    description: str
    user: str
    clients: int  # connected now (a gauge)
    connections: int  # connections in total, departed and live
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int


class ServiceRow(TypedDict):
    """One service over the daemon's life (its counters survive the service closing)."""

    service: int
    network: str
    open: bool  # served now (a service with no transport closes after its linger)
    clients: int  # a gauge
    messages_out: int
    bytes_out: int
    messages_in: int
    bytes_in: int
    deliveries: int
    datagrams_sent: int
    datagrams_received: int
    retransmissions: int
    datagrams_missed: int
    data_loss_inbound: int
    messages_lost_inbound: int
    data_loss_outbound: int
    peers: int  # a gauge


class Totals(TypedDict):
    """Sums over the daemon's life (``clients``: connected now)."""

    clients: int
    messages_in: int
    messages_out: int
    bytes_in: int
    bytes_out: int
    retransmissions: int
    data_loss: int


class SecurityRow(TypedDict, total=False):
    tls: bool
    users: bool
    logins: int
    failed_logins: int
    refused_by_rate_limit: int
    users_file_reloads: int


class StatusSnapshot(TypedDict):
    version: str
    pid: int
    listen: str | None
    uptime_seconds: float
    security: SecurityRow
    clients: list[ClientRow]
    identities: list[IdentityRow]
    client_port: dict[str, int]
    services: list[ServiceRow]
    hosts: list[dict[str, Any]]
    totals: Totals
