"""Limits of the status page's HTTP server: how many connections, and for how long.

aiohttp parses HTTP and serves the page; this module bounds what a client
can hold without ever completing a request (slowloris) or by sitting idle:

* every connection is admitted through :class:`~rvasync.daemon.accept.HostSlots`
  (:attr:`HttpLimits.max_connections` in all, :attr:`HttpLimits.max_per_host`
  per client host; past them a connection is closed as soon as it is
  accepted), before its TLS handshake;
* :class:`GuardedConnection` wraps aiohttp's protocol of one connection with
  one deadline at a time: the request head (request line and headers) must be
  complete within :attr:`HttpLimits.header_timeout` of the connection's start
  or of the request's first byte; a request must be answered within
  :attr:`HttpLimits.request_timeout`; a keep-alive connection may be idle for
  :attr:`HttpLimits.idle_timeout`. When a deadline passes, the connection is
  aborted (its descriptor is free at once, even if the client does not read);
* :class:`OneLineLog` is the logger aiohttp is given: a malformed request (the
  client's fault) is one warning line naming the client and the problem, not
  a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass
from typing import Any, cast

from rvasync._logging import stderr_logger
from rvasync.daemon.accept import Slot

__all__ = ["GuardedConnection", "HttpLimits", "OneLineLog"]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Bounds of the status page's connections (module docstring)."""

    header_timeout: float = 10.0
    request_timeout: float = 10.0
    idle_timeout: float = 5.0
    #: None: 32, or fewer when the process's descriptor limit is small (a 32nd of it).
    max_connections: int | None = None
    max_per_host: int = 8

    def connections(self, descriptors: int) -> int:
        """Connections allowed in all, for a process limited to ``descriptors``."""
        if self.max_connections is not None:
            return self.max_connections
        return min(32, max(4, descriptors // 32))


class GuardedConnection(asyncio.Protocol):
    """aiohttp's protocol for one connection, with its deadlines and its admission slot.

    Everything is passed on to ``inner``; the page's handler tells this
    connection when a request starts and ends (:meth:`request_started`,
    :meth:`request_done`).
    """

    def __init__(
        self,
        inner: asyncio.Protocol,
        slot: Slot,
        limits: HttpLimits,
        registry: dict[asyncio.BaseTransport, GuardedConnection],
    ) -> None:
        self._inner = inner
        self._slot = slot
        self._limits = limits
        self._registry = registry
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._idle = False
        #: Connections this guard aborted for a deadline (the server counts them).
        self.expired: str = ""

    def _arm(self, seconds: float, why: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire, why)

    def _expire(self, why: str) -> None:
        self._timer = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self.expired = why
            stderr_logger().debug(
                "status page: closing a connection", client=self._slot.host, why=why
            )
            transport.abort()

    # -- what the page's handler tells ------------------------------------------------------

    def request_started(self) -> None:
        self._idle = False
        self._arm(self._limits.request_timeout, "no answer within the request timeout")

    def request_done(self) -> None:
        self._idle = True
        self._arm(self._limits.idle_timeout, "idle")

    # -- asyncio.Protocol, passed on ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._registry[transport] = self
        self._arm(self._limits.header_timeout, "no complete request head")
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._idle:  # the next request's first bytes: its head has the header timeout
            self._idle = False
            self._arm(self._limits.header_timeout, "no complete request head")
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._registry.pop(self._transport, None)
        self._transport = None
        self._slot.release()
        self._inner.connection_lost(exc)


class OneLineLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger aiohttp's server is given: a client's malformed request is one line.

    aiohttp logs "Error handling request" with the exception's traceback; for
    an HTTP error of the client's making (``HttpProcessingError``: a bad
    request line, header, length ...) that becomes one warning line through
    rvasync's logger. Anything else (a fault of the page itself) keeps its
    traceback.
    """

    def __init__(self) -> None:
        super().__init__(logging.getLogger("rvasync.daemon.status_http"), {})

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if exc is True:
            exc = sys.exc_info()[1]
        elif isinstance(exc, tuple):
            exc = exc[1]
        if _is_client_error(exc):
            client = args[0] if args else None
            stderr_logger().warning(
                "status page: bad HTTP request", client=client, problem=_first_line(exc)
            )
            return
        super().log(level, msg, *args, **kwargs)


def _is_client_error(exc: object) -> bool:
    try:
        from aiohttp.http_exceptions import HttpProcessingError
    except ImportError:  # pragma: no cover - aiohttp is what calls this
        return False
    return isinstance(exc, HttpProcessingError)


def _first_line(exc: object) -> str:
    """The exception's message without aiohttp's multi-line caret picture."""
    text = getattr(exc, "message", None) or str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " ".join(lines[:2])[:200] if lines else type(exc).__name__
