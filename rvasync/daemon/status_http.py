"""The daemon's status page over HTTP (aiohttp, on the daemon's own event loop).

``rvasync daemon --http PORT`` serves:

* ``/``: an HTML page for a person (refreshes itself every few seconds):
  clients, their subjects and counters, services with retransmissions and
  data loss, hosts heard through HOST.STATUS, uptime
  (:func:`rvasync.daemon.status_page.render_html`, a Jinja2 template);
* ``/api/status``: the same as JSON (:func:`rvasync.daemon.status.snapshot`);
* ``/metrics``: counters in the Prometheus text format.

It listens on 127.0.0.1 unless told otherwise; on a daemon without users,
anything else is refused unless ``allow_public`` says so (the page shows
every client's address and subjects to whoever asks). On a secure daemon
(one with a users file) every request needs a user's name and password (HTTP
basic authentication, checked by the daemon's login gate, with the same
brake as the client port); a request without them is answered 401 and its
connection closed. When the daemon has a TLS certificate the page is served
over HTTPS with it. Connections are bounded in number and time
(:mod:`rvasync.daemon.httpguard`).
"""

from __future__ import annotations

import base64
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from rvasync.daemon.accept import GatedServer, HostSlots, Slot, descriptor_limit
from rvasync.daemon.auth import DaemonSecurity, LoginRefused
from rvasync.daemon.engine import Daemon
from rvasync.daemon.httpguard import GuardedConnection, HttpLimits, OneLineLog
from rvasync.daemon.status import HostWatcher, snapshot
from rvasync.daemon.status_page import REFRESH_SECONDS, render_html
from rvasync.daemon.statustypes import StatusSnapshot
from rvasync.errors import InvalidArgument

__all__ = ["REFRESH_SECONDS", "HttpLimits", "StatusServer", "metrics_text", "render_html"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REALM = 'Basic realm="rvasync daemon", charset="UTF-8"'
# Bounds of what aiohttp reads of a request head (the page needs a few short headers).
_MAX_LINE = 4096
_MAX_HEADERS = 32


def is_loopback(host: str) -> bool:
    """True for an address of this host only (127.0.0.0/8, ::1, "localhost")."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _metric_name(name: str) -> str:
    return "rvasync_" + "".join(c if c.isalnum() else "_" for c in name)


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(status: StatusSnapshot) -> str:
    """``status`` in the Prometheus text exposition format (version 0.0.4).

    Every ``_total`` is a counter that only grows while the daemon runs (clients
    that left and services that closed still count). Labels are stable: a
    client series is named by the client's description and user, which it
    keeps across reconnects (never by its connection number or ephemeral
    port); a service series by its UDP port. See docs/daemon.md.
    """
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, Any]]) -> None:
        full = _metric_name(name)
        out.append(f"# HELP {full} {help_text}")
        out.append(f"# TYPE {full} {kind}")
        for labels, value in samples:
            out.append(f"{full}{labels} {value}")

    metric(
        "uptime_seconds",
        "gauge",
        "Seconds since the daemon started.",
        [("", status["uptime_seconds"])],
    )
    metric("clients", "gauge", "Client transports connected.", [("", len(status["clients"]))])
    for key, value in sorted(status["client_port"].items()):
        metric(f"client_port_{key}_total", "counter", f"Client port: {key}.", [("", value)])
    _identity_metrics(metric, status)
    _service_metrics(metric, status)
    metric(
        "hosts_seen",
        "gauge",
        "Hosts whose HOST.STATUS was heard recently.",
        [("", len(status["hosts"]))],
    )
    security = status["security"]
    if security.get("users"):
        metric("logins_total", "counter", "Successful logins.", [("", security.get("logins", 0))])
        metric(
            "failed_logins_total",
            "counter",
            "Refused logins.",
            [("", security.get("failed_logins", 0))],
        )
    return "\n".join(out) + "\n"


_Metric = Callable[[str, str, str, list[tuple[str, Any]]], None]


def _identity_metrics(metric: _Metric, status: StatusSnapshot) -> None:
    """Per client identity (description, user): the series a reconnect keeps."""
    rows = status.get("identities", [])
    labels = [
        f'{{description="{_label(r["description"])}",user="{_label(r["user"])}"}}' for r in rows
    ]
    metric(
        "client_connected",
        "gauge",
        "Client transports of this description and user connected now.",
        [(label, r["clients"]) for label, r in zip(labels, rows, strict=True)],
    )
    per_client = [
        ("connections", "Connections made by clients of this description and user."),
        ("messages_in", "Messages clients of this description and user published."),
        ("bytes_in", "Bytes clients of this description and user published."),
        ("messages_out", "Messages delivered to clients of this description and user."),
        ("bytes_out", "Bytes delivered to clients of this description and user."),
    ]
    for key, help_text in per_client:
        samples = [(label, r[key]) for label, r in zip(labels, rows, strict=True)]  # type: ignore[literal-required]
        metric(f"client_{key}_total", "counter", help_text, samples)


def _service_metrics(metric: _Metric, status: StatusSnapshot) -> None:
    per_service = [
        ("messages_out", "Messages sent to the network."),
        ("messages_in", "Messages received from the network."),
        ("bytes_out", "Bytes sent to the network."),
        ("bytes_in", "Bytes received from the network."),
        ("retransmissions", "Datagrams retransmitted."),
        ("datagrams_missed", "Datagrams found missing (NAKed)."),
        ("data_loss_inbound", "Inbound datagrams lost for good."),
        ("data_loss_outbound", "Outbound datagrams asked for after they were discarded."),
    ]
    services = status["services"]
    for key, help_text in per_service:
        samples = [(f'{{service="{s["service"]}"}}', s[key]) for s in services]  # type: ignore[literal-required]
        metric(f"service_{key}_total", "counter", help_text, samples)


class StatusServer:
    """The HTTP server of the status page (``await start()`` / ``await stop()``).

    ``allow_public``: serve a daemon without users on an address other than
    loopback (refused otherwise: InvalidArgument). ``limits``: bounds of its
    connections (:class:`~rvasync.daemon.httpguard.HttpLimits`).
    """

    def __init__(
        self,
        daemon: Daemon,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_public: bool = False,
        limits: HttpLimits | None = None,
    ) -> None:
        self.daemon = daemon
        self.host = host
        self.port = port
        self.allow_public = allow_public
        self.limits = limits or HttpLimits()
        self.scheme = "http"
        self.watcher = HostWatcher(daemon)
        total = self.limits.connections(descriptor_limit())
        #: The page's connections (all of them: the cap is on every open one).
        self.connections = HostSlots(
            per_host=self.limits.max_per_host, total=total, what="status page"
        )
        self._guards: dict[Any, GuardedConnection] = {}
        self._runner: web.AppRunner | None = None
        self._server: GatedServer | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/"

    def _ssl(self) -> ssl.SSLContext | None:
        security = self.daemon.security
        if security is None or security.ssl_context is None:
            return None
        return security.http_ssl_context()

    def _check_address(self) -> None:
        security = self.daemon.security
        with_users = security is not None and security.requires_login
        if with_users or self.allow_public or is_loopback(self.host):
            return
        raise InvalidArgument(
            f"status page on {self.host}: this daemon has no users, so the page (every "
            "client's address and subjects) would be open to anyone who can reach it; serve "
            "it on 127.0.0.1, give the daemon a users file, or allow it explicitly "
            "(allow_public=True, rvasync daemon --http-public)"
        )

    async def start(self) -> None:
        self._check_address()
        app = web.Application(middlewares=[self._guard, self._check_login])
        app.router.add_get("/", self._page)
        app.router.add_get("/api/status", self._api)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(
            app,
            access_log=None,
            logger=OneLineLog(),
            keepalive_timeout=self.limits.idle_timeout,
            max_line_size=_MAX_LINE,
            max_field_size=_MAX_LINE,
            max_headers=_MAX_HEADERS,
            lingering_time=1.0,
        )
        await runner.setup()
        self._runner = runner
        try:
            sock = self._bind()
        except OSError as exc:
            await self.stop()
            raise OSError(
                exc.errno, f"status page: cannot listen on {self.host}:{self.port}: {exc.strerror}"
            ) from None
        ssl_context = self._ssl()
        self._server = GatedServer(
            self.connections,
            self._protocol,
            ssl_context=ssl_context,
            handshake_timeout=self.limits.header_timeout,
        )
        self._server.serve(sock)
        self.scheme = "https" if ssl_context is not None else "http"
        self.port = sock.getsockname()[1]
        self.daemon.advertise_status_page(self.host, self.port, https=ssl_context is not None)
        self.watcher.start()

    def _bind(self) -> socket.socket:
        """Our own socket, so that port 0 (any free port) can be read back."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        return sock

    def _protocol(self, slot: Slot) -> GuardedConnection:
        runner = self._runner
        assert runner is not None and runner.server is not None
        return GuardedConnection(runner.server(), slot, self.limits, self._guards)

    async def stop(self) -> None:
        self.daemon.advertise_status_page(None)
        await self.watcher.stop()
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        guard = self._guards.get(request.transport)
        if guard is not None:
            guard.request_started()
        try:
            return await handler(request)
        finally:
            if guard is not None:
                guard.request_done()

    @web.middleware
    async def _check_login(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        security = self.daemon.security
        if security is None or not security.requires_login:
            return await handler(request)
        user = await self._login(request, security)
        if user is None:
            refused = web.Response(
                status=401,
                text="This daemon's status page needs a user name and password.\n",
                headers={"WWW-Authenticate": _REALM},
            )
            refused.force_close()  # a client without credentials holds no connection
            return refused
        return await handler(request)

    async def _login(self, request: web.Request, security: DaemonSecurity) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            return None
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8
            return None
        if not sep or not user:
            return None
        host = request.remote or "?"
        try:
            await security.gate.password(host, user, password)
        except LoginRefused as exc:
            security.gate.log_refusal(f"status page {host}", user, str(exc))
            return None
        return user

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(
            text=render_html(snapshot(self.daemon, self.watcher)), content_type="text/html"
        )

    async def _api(self, request: web.Request) -> web.Response:
        return web.json_response(snapshot(self.daemon, self.watcher))

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=metrics_text(snapshot(self.daemon, self.watcher)),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )
