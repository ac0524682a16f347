"""The status page's HTML: a status snapshot rendered through a Jinja2 template.

The page itself is ``templates/status.html`` (autoescaped: every value a
client chose, such as its description or subjects, is escaped). This module
turns a :func:`rvasync.daemon.status.snapshot` into the rows the template
shows: sizes and uptime written for a person, the daemon's mode in words.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from rvasync.daemon.statustypes import SecurityRow, StatusSnapshot

__all__ = ["REFRESH_SECONDS", "render_html"]

#: Seconds between the HTML page's refreshes.
REFRESH_SECONDS = 2


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("rvasync.daemon", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
    )
    return environment.get_template("status.html")


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


def _mode(security: SecurityRow) -> str:
    if security.get("tls") and security.get("users"):
        return "secure (TLS, users)"
    if security.get("tls"):
        return "TLS"
    return "plain (no TLS, no users)"


def _client_rows(status: StatusSnapshot) -> list[list[Any]]:
    return [
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


_SERVICE_COLUMNS = (
    "service",
    "network",
    "clients",
    "messages_out",
    "messages_in",
    "retransmissions",
    "data_loss_inbound",
    "data_loss_outbound",
    "peers",
)
_HOST_COLUMNS = ("hostaddr", "ver", "cc", "ms", "mr", "rx", "idl", "odl")


def _host_rows(status: StatusSnapshot) -> list[list[Any]]:
    return [
        [h["host"], *(h.get(key, "") for key in _HOST_COLUMNS), f"{h['seconds_ago']:.0f} s ago"]
        for h in status["hosts"]
    ]


def _summary(status: StatusSnapshot) -> list[tuple[str, Any]]:
    totals = status["totals"]
    security = status["security"]
    summary = [
        ("Uptime", _uptime(status["uptime_seconds"])),
        ("Client port", status["listen"] or "-"),
        ("Mode", _mode(security)),
        ("Clients", totals["clients"]),
        ("Messages in / out", f"{totals['messages_in']} / {totals['messages_out']}"),
        ("Bytes in / out", f"{_bytes(totals['bytes_in'])} / {_bytes(totals['bytes_out'])}"),
        ("Retransmissions", totals["retransmissions"]),
        ("Data loss (datagrams)", totals["data_loss"]),
    ]
    if security.get("users"):
        summary.append(("Failed logins", security.get("failed_logins", 0)))
    return summary


def render_html(status: StatusSnapshot) -> str:
    """The status page for ``status`` (a :func:`~rvasync.daemon.status.snapshot`)."""
    return _template().render(
        status=status,
        refresh=REFRESH_SECONDS,
        summary=_summary(status),
        clients=_client_rows(status),
        services=[[s[key] for key in _SERVICE_COLUMNS] for s in status["services"]],  # type: ignore[literal-required]
        hosts=_host_rows(status),
    )
