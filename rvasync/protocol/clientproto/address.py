"""The daemon parameter of a network transport: where a standalone daemon listens.

``None``, ``"7500"``, ``"tcp:7500"``, ``"host:port"`` or ``"tcp:host:port"``;
a bare local port also lets the transport start a daemon there when none
answers. Pure parsing, shared by the client (``rvasync.transport``) and the
daemon's command line (``rvasync daemon --listen``).
"""

from __future__ import annotations

from typing import NamedTuple

from rvasync.errors import InvalidArgument

__all__ = ["DEFAULT_DAEMON_PORT", "DaemonAddress", "parse_daemon"]

#: The default TCP port of a standalone daemon (``daemon="7500"``, or the CLI's ``--listen``).
DEFAULT_DAEMON_PORT = 7500

_LOOPBACK = "127.0.0.1"


class DaemonAddress(NamedTuple):
    """Where a standalone daemon listens, and whether a transport may start it.

    ``autostart`` is True only for a bare local port (``"7500"``, ``"tcp:7500"``):
    a two-part parameter names a host (even ``127.0.0.1``), and Rendezvous never
    starts a daemon for those; that is also how a user suppresses auto-start.
    """

    host: str
    port: int
    autostart: bool


def parse_daemon(daemon: str | None) -> DaemonAddress:
    """Parse a daemon parameter: ``None``, ``"7500"``, ``"tcp:7500"``, ``"host:port"``,
    ``"tcp:host:port"``. ``None`` means the default local daemon (port 7500, auto-start)."""
    if daemon is None or daemon == "":
        return DaemonAddress(_LOOPBACK, DEFAULT_DAEMON_PORT, True)
    if not isinstance(daemon, str):
        raise InvalidArgument(f"daemon must be a str or None, got {type(daemon).__name__}")
    parts = daemon.strip().split(":")
    if parts[0].lower() == "tcp":
        parts = parts[1:]
    elif parts[0].lower() == "ssl":
        raise InvalidArgument(
            f"daemon {daemon!r}: secure (ssl:) daemons are not supported; use tcp"
        )
    if len(parts) == 1:
        host, port_text, autostart = _LOOPBACK, parts[0], True
    elif len(parts) == 2:
        host, port_text = parts
        autostart = not host  # ":7500" is the local daemon, like "7500"
        host = host or _LOOPBACK
    else:
        raise InvalidArgument(f"daemon {daemon!r}: expected 'port', 'host:port' or 'tcp:host:port'")
    if (
        not (port_text.isascii() and port_text.isdigit())
        or len(port_text.lstrip("0")) > 5  # no port; and int() refuses over 4300 digits
        or not 0 < int(port_text) <= 0xFFFF
    ):
        shown = daemon if len(daemon) <= 40 else daemon[:37] + "..."
        raise InvalidArgument(f"daemon {shown!r}: the port must be a number within 1..65535")
    return DaemonAddress(host, int(port_text), autostart)
