"""The daemon's status page over HTTP (aiohttp, on the daemon's own event loop).

``rvasync daemon --http PORT`` serves:

* ``/``: an HTML page for a person (refreshes itself every few seconds):
  clients, their subjects and counters, services with retransmissions and
  data loss, hosts heard through HOST.STATUS, uptime;
* ``/api/status``: the same as JSON (:func:`rvasync.daemon.status.snapshot`);
* ``/metrics``: counters in the Prometheus text format.

It listens on 127.0.0.1 unless told otherwise. On a secure daemon (one with a
users file) every request needs a user's name and password (HTTP basic
authentication, checked against the same users file, with the same
failed-login limiter), and when the daemon has a TLS certificate the page is
served over HTTPS with it, so the password never crosses in clear.
"""

from __future__ import annotations

import base64
import binascii
import html
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from rvasync._logging import stderr_logger
from rvasync.daemon.auth import LoginRefused
from rvasync.daemon.engine import Daemon
from rvasync.daemon.status import HostWatcher, snapshot
from rvasync.daemon.statustypes import StatusSnapshot

__all__ = ["StatusServer", "metrics_text", "render_html"]

#: Seconds between the HTML page's refreshes.
REFRESH_SECONDS = 2
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REALM = 'Basic realm="rvasync daemon", charset="UTF-8"'


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _uptime(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    text = f"{hours:02d}:{minutes:02d}:{s:02d}"
    return f"{days} d {text}" if days else text


def _table(headers: list[str], rows: list[list[Any]], empty: str, table_id: str) -> str:
    if not rows:
        return f'<p class="empty" id="{table_id}-empty">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_html(status: StatusSnapshot) -> str:
    """The status page for ``status`` (a :func:`snapshot`)."""
    totals = status["totals"]
    security = status["security"]
    mode = (
        "secure (TLS, users)"
        if security.get("tls") and security.get("users")
        else "TLS"
        if security.get("tls")
        else "plain (no TLS, no users)"
    )
    clients = [
        [
            c["id"],
            c["user"] or "-",
            c["peer"],
            "yes" if c["tls"] else "no",
            c["description"] or "",
            ", ".join(c["subjects"]) or "-",
            c["messages_in"],
            _bytes(c["bytes_in"]),
            c["messages_out"],
            _bytes(c["bytes_out"]),
        ]
        for c in status["clients"]
    ]
    services = [
        [
            s["service"],
            s["network"],
            s["clients"],
            s["messages_out"],
            s["messages_in"],
            s["retransmissions"],
            s["data_loss_inbound"],
            s["data_loss_outbound"],
            s["peers"],
        ]
        for s in status["services"]
    ]
    hosts = [
        [
            h["host"],
            h.get("hostaddr", ""),
            h.get("ver", ""),
            h.get("cc", ""),
            h.get("ms", ""),
            h.get("mr", ""),
            h.get("rx", ""),
            h.get("idl", ""),
            h.get("odl", ""),
            f"{h['seconds_ago']:.0f} s ago",
        ]
        for h in status["hosts"]
    ]
    summary = [
        ("Uptime", _uptime(status["uptime_seconds"])),
        ("Client port", status["listen"] or "-"),
        ("Mode", mode),
        ("Clients", totals["clients"]),
        ("Messages in / out", f"{totals['messages_in']} / {totals['messages_out']}"),
        ("Bytes in / out", f"{_bytes(totals['bytes_in'])} / {_bytes(totals['bytes_out'])}"),
        ("Retransmissions", totals["retransmissions"]),
        ("Data loss (datagrams)", totals["data_loss"]),
    ]
    if security.get("users"):
        summary.append(("Failed logins", security.get("failed_logins", 0)))
    summary_html = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v" id="sum-{i}">{_e(v)}</div>'
        "</div>"
        for i, (k, v) in enumerate(summary)
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>rvasync daemon {_e(status["listen"] or "")}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 1.5em; }}
.cards {{ display: flex; flex-wrap: wrap; gap: .6em; }}
.card {{ border: 1px solid #ccd; border-radius: 6px; padding: .5em .8em; min-width: 9em; }}
.k {{ font-size: .8em; color: #667; }} .v {{ font-size: 1.2em; font-weight: 600; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccd; padding: .25em .6em; text-align: left; }}
th {{ background: #eef; }} .empty {{ color: #888; }}
footer {{ margin-top: 2em; font-size: .8em; color: #888; }}
</style></head>
<body>
<h1>rvasync daemon {_e(status["version"])} (pid {_e(status["pid"])})</h1>
<div class="cards">{summary_html}</div>
<h2>Clients</h2>
{
        _table(
            [
                "#",
                "User",
                "Address",
                "TLS",
                "Description",
                "Subjects",
                "Msgs in",
                "Bytes in",
                "Msgs out",
                "Bytes out",
            ],
            clients,
            "No client is connected.",
            "clients",
        )
    }
<h2>Services</h2>
{
        _table(
            [
                "Service",
                "Network",
                "Clients",
                "Msgs sent",
                "Msgs received",
                "Retransmissions",
                "Inbound loss",
                "Outbound loss",
                "Peers",
            ],
            services,
            "No service is open.",
            "services",
        )
    }
<h2>Hosts seen (HOST.STATUS)</h2>
{
        _table(
            [
                "Host id",
                "Address",
                "Version",
                "Clients",
                "Msgs sent",
                "Msgs received",
                "Retransmitted",
                "Inbound loss",
                "Outbound loss",
                "Heard",
            ],
            hosts,
            "No HOST.STATUS heard yet.",
            "hosts",
        )
    }
<footer>Refreshes every {REFRESH_SECONDS} s. JSON: <a href="api/status">/api/status</a>,
Prometheus: <a href="metrics">/metrics</a>.</footer>
</body></html>
"""


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
    """The HTTP server of the status page (``await start()`` / ``await stop()``)."""

    def __init__(self, daemon: Daemon, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.daemon = daemon
        self.host = host
        self.port = port
        self.scheme = "http"
        self.watcher = HostWatcher(daemon)
        self._runner: Any = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/"

    def _ssl(self) -> ssl.SSLContext | None:
        security = self.daemon.security
        if security is None or security.ssl_context is None:
            return None
        return security.http_ssl_context()

    async def start(self) -> None:
        app = web.Application(middlewares=[self._check_login])
        app.router.add_get("/", self._page)
        app.router.add_get("/api/status", self._api)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ssl_context = self._ssl()
        try:
            # Our own socket, so that port 0 (any free port) can be read back.
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((self.host, self.port))
            except OSError:
                sock.close()
                raise
            site = web.SockSite(runner, sock, ssl_context=ssl_context)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                exc.errno, f"status page: cannot listen on {self.host}:{self.port}: {exc.strerror}"
            ) from None
        self._runner = runner
        self.scheme = "https" if ssl_context is not None else "http"
        self.port = sock.getsockname()[1]
        self.daemon.advertise_status_page(self.host, self.port, https=ssl_context is not None)
        self.watcher.start()

    async def stop(self) -> None:
        self.daemon.advertise_status_page(None)
        await self.watcher.stop()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @web.middleware
    async def _check_login(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        security = self.daemon.security
        if security is None or not security.requires_login:
            return await handler(request)
        user = await self._login(request, security)
        if user is None:
            return web.Response(
                status=401,
                text="This daemon's status page needs a user name and password.\n",
                headers={"WWW-Authenticate": _REALM},
            )
        return await handler(request)

    async def _login(self, request: web.Request, security: Any) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            return None
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        now = self.daemon.loop.time()
        key = (request.remote or "?", user)
        if security.limiter.retry_after(key, now) > 0:
            return None
        security.limiter.failed(key, now)
        try:
            await security.check_password(user, password)
        except LoginRefused:
            security.failed_logins += 1
            stderr_logger().warning("status page: login refused", client=request.remote, user=user)
            return None
        security.limiter.succeeded(key)
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
