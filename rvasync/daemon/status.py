"""What a daemon's status page shows: one snapshot of its state, and the hosts it hears.

:func:`snapshot` gathers, through the daemon's public accessors only, the
clients of its TCP port (user, subjects, message and byte counters), each
service's counters (messages, retransmissions, data loss), the hosts whose
``_RV.INFO.SYSTEM.HOST.STATUS`` advisories reached it, and its uptime.
:class:`HostWatcher` is how it hears HOST.STATUS: a session of its own on
every open service, listening to that subject. The watcher never keeps a
service (or an ``--idle-exit`` daemon) alive: once only watchers are left, it
lets go of the services and comes back when a client does.

No HTTP here; :mod:`rvasync.daemon.status_http` serves the snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import time
from typing import Any

from rvasync._logging import stderr_logger
from rvasync._version import __version__
from rvasync.daemon.auth import DaemonSecurity
from rvasync.daemon.clienttally import Tally
from rvasync.daemon.engine import Daemon
from rvasync.daemon.session import Payload
from rvasync.daemon.statustypes import (
    ClientRow,
    IdentityRow,
    SecurityRow,
    ServiceRow,
    StatusSnapshot,
)
from rvasync.message import Message

__all__ = ["HOST_STATUS_SUBJECT", "HostWatcher", "snapshot"]

HOST_STATUS_SUBJECT = "_RV.INFO.SYSTEM.HOST.STATUS.>"
#: Seconds after which a host that stopped sending HOST.STATUS is no longer listed.
HOST_FORGET_AFTER = 600.0


def _plain(value: Any) -> Any:
    """A field value as JSON can carry it."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return str(value)


class _Watch:
    """The session owner of one service's watcher session."""

    def __init__(self, watcher: HostWatcher) -> None:
        self.watcher = watcher
        self.session: Any = None

    def deliver(self, payload: Payload) -> None:
        try:
            msg = payload.message()
        except Exception as exc:  # a forged HOST.STATUS must not break the page
            stderr_logger().debug("status page: unreadable HOST.STATUS", error=str(exc))
            return
        self.watcher.heard(msg)

    def present(self, advisory: Message) -> None:
        return  # transport-scoped advisories (slow consumer ...) concern no page

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None and not session.closed:
            with contextlib.suppress(Exception):  # the daemon may be stopping
                session.close()


class HostWatcher:
    """Keeps the last HOST.STATUS of every host the daemon hears (see the module docstring)."""

    def __init__(self, daemon: Daemon, *, interval: float = 1.0) -> None:
        self.daemon = daemon
        self.interval = interval
        #: host id -> (wall-clock time heard, fields)
        self.hosts: dict[str, tuple[float, dict[str, Any]]] = {}
        self._watches: dict[int, _Watch] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._release()

    def heard(self, msg: Message) -> None:
        subject = msg.subject or ""
        host = subject.rsplit(".", 1)[-1]
        fields = {field.name: _plain(field.value) for field in msg if field.name}
        self.hosts[host] = (time.time(), fields)

    def watching(self, port: int) -> bool:
        """True while the page holds a session of its own on service ``port``."""
        return port in self._watches

    def seen(self) -> list[dict[str, Any]]:
        """The hosts heard recently, newest report first."""
        now = time.time()
        for host in [h for h, (t, _) in self.hosts.items() if now - t > HOST_FORGET_AFTER]:
            del self.hosts[host]
        rows = []
        for host, (when, fields) in sorted(self.hosts.items(), key=lambda kv: -kv[1][0]):
            rows.append({"host": host, "seconds_ago": round(now - when, 1), **fields})
        return rows

    async def _run(self) -> None:
        while True:
            try:
                self._tick()
            except Exception:
                stderr_logger().exception("status page: watching HOST.STATUS failed")
            await asyncio.sleep(self.interval)

    def _tick(self) -> None:
        daemon = self.daemon
        if not daemon.running:
            self._release()
            return
        services = daemon.services
        # Let go of services where only our own session is left (or that closed).
        for port, watch in list(self._watches.items()):
            endpoint = services.get(port)
            if endpoint is None or len(endpoint.sessions) <= 1:
                del self._watches[port]
                watch.close()
        for port, endpoint in services.items():
            if port in self._watches or not endpoint.sessions:
                continue
            watch = _Watch(self)
            try:
                watch.session = daemon.attach(
                    watch,
                    service=str(port),
                    network=endpoint.network.text or None,
                    description="status page",
                )
            except Exception as exc:
                stderr_logger().debug("status page: cannot watch a service", error=str(exc))
                continue
            watch.session.add_interest(HOST_STATUS_SUBJECT)
            self._watches[port] = watch

    def _release(self) -> None:
        watches, self._watches = self._watches, {}
        for watch in watches.values():
            watch.close()


def _service_row(daemon: Daemon, port: int, watcher: HostWatcher | None) -> ServiceRow:
    """Service ``port`` over the daemon's life (its counters survive it closing)."""
    totals = daemon.service_totals(port)
    endpoint = daemon.services.get(port)
    core, counters = totals.core, totals.counters
    clients = 0
    if endpoint is not None:
        own = 1 if watcher is not None and watcher.watching(port) else 0
        clients = len(endpoint.sessions) - own  # not the page's own session
    return {
        "service": port,
        "network": totals.network or "(loopback)",
        "open": endpoint is not None,
        "clients": clients,
        "messages_out": counters.messages_out,
        "bytes_out": counters.bytes_out,
        "messages_in": counters.messages_in,
        "bytes_in": counters.bytes_in,
        "deliveries": counters.deliveries,
        "datagrams_sent": core.datagrams_sent,
        "datagrams_received": core.datagrams_received,
        "retransmissions": core.datagrams_retransmitted,
        "datagrams_missed": core.datagrams_missed,
        "data_loss_inbound": core.datagrams_lost_inbound,
        "messages_lost_inbound": core.messages_lost_inbound,
        "data_loss_outbound": core.datagrams_lost_outbound,
        "peers": 0 if endpoint is None else len(endpoint.core.peers()),
    }


def _security_row(security: DaemonSecurity | None) -> SecurityRow:
    if security is None:
        return {"tls": False, "users": False}
    return {
        "tls": security.ssl_context is not None,
        "users": security.requires_login,
        "logins": security.logins,
        "failed_logins": security.failed_logins,
        "refused_by_rate_limit": security.limiter.refused,
        "users_file_reloads": security.reloads,
    }


def _identity_rows(server: Any) -> list[IdentityRow]:
    """Every client identity seen in the daemon's life, with its monotonic counters."""
    rows: list[IdentityRow] = []
    for (description, user), (live, tally) in server.tallies.identities(server.sessions).items():
        rows.append(
            {
                "description": description,
                "user": user,
                "clients": live,
                "connections": tally.connections,
                "messages_in": tally.messages_in,
                "bytes_in": tally.bytes_in,
                "messages_out": tally.messages_out,
                "bytes_out": tally.bytes_out,
            }
        )
    return sorted(rows, key=lambda r: (r["description"], r["user"]))


def snapshot(daemon: Daemon, watcher: HostWatcher | None = None) -> StatusSnapshot:
    """The daemon's state as plain data (what ``/api/status`` returns).

    Counters only grow while the daemon runs: ``totals``, ``identities`` and
    ``services`` count clients that have left and services that have closed
    (docs/daemon.md, "The status page's numbers").
    """
    server = daemon.client_server
    now = asyncio.get_running_loop().time()
    clients: list[ClientRow] = []
    identities: list[IdentityRow] = []
    server_stats: dict[str, int] = {}
    listen = None
    departed = Tally()
    if server is not None:
        clients = sorted(
            (conn.describe(now) for conn in list(server.sessions)), key=lambda c: c["id"]
        )
        identities = _identity_rows(server)
        server_stats = server.stats.as_dict()
        listen = f"{server.host}:{server.port}"
        departed = server.tallies.departed
    services = [_service_row(daemon, port, watcher) for port in daemon.services_seen]
    return {
        "version": __version__,
        "pid": os.getpid(),
        "listen": listen,
        "uptime_seconds": round(daemon.uptime, 1),
        "security": _security_row(daemon.security),
        "clients": clients,
        "identities": identities,
        "client_port": server_stats,
        "services": services,
        "hosts": watcher.seen() if watcher is not None else [],
        "totals": {
            "clients": len(clients),
            "messages_in": departed.messages_in + sum(c["messages_in"] for c in clients),
            "messages_out": departed.messages_out + sum(c["messages_out"] for c in clients),
            "bytes_in": departed.bytes_in + sum(c["bytes_in"] for c in clients),
            "bytes_out": departed.bytes_out + sum(c["bytes_out"] for c in clients),
            "retransmissions": sum(s["retransmissions"] for s in services),
            "data_loss": sum(s["data_loss_inbound"] + s["data_loss_outbound"] for s in services),
        },
    }
