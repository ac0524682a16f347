"""The status page's HTTP boundary as a fuzz target (see boundaries.py).

``consume(data)`` sends the bytes over a real loopback connection to a real
:class:`~rvasync.daemon.status_http.StatusServer` (on a secure daemon with a
users file, so that basic authentication is parsed too), half-closes, and
reads what comes back. It never raises for the input itself: the page must
answer every input with an HTTP response (or close without a word, as it does
for an empty or unfinished request) and must never

* answer 5xx (a fault of the page, not of the request),
* log a traceback or an error of its own (a malformed request is one warning
  line, see rvasync.daemon.httpguard.OneLineLog),
* stop answering: every 64 inputs, and after any input that broke a rule, a
  good request must get its 200.

Any of these is a :class:`~tests.fuzz.boundaries.Defect`. The daemon and the
page live on a private event loop kept between calls (one per process).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import tempfile
from typing import Any

__all__ = ["http_boundary"]

# Seconds one exchange may take (the fuzzers' per-input alarm is 2 s), and the wait
# for an answer before the request is ended with EOF.
_READ_FOR = 1.0
_ANSWER_WITHIN = 0.05
_STATUS = re.compile(rb"^HTTP/\d\.\d (\d{3}) ")
_GOOD = (
    b"GET /api/status HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n"
    b"Authorization: Basic %s\r\n\r\n"
)


class _Errors(logging.Handler):
    """Records the page's own error logs (what must never happen)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.levelname} {record.getMessage()} exc={bool(record.exc_info)}")


class _Page:
    """One daemon with its status page on a private loop."""

    def __init__(self) -> None:
        from rvasync.daemon import Daemon
        from rvasync.daemon.auth import DaemonSecurity, hash_password
        from rvasync.daemon.httpguard import HttpLimits
        from rvasync.daemon.status_http import StatusServer
        from rvasync.protocol.loginbrake import LoginBrake

        directory = tempfile.mkdtemp(prefix="rvasync-fuzz-http-")
        users = os.path.join(directory, "users.toml")
        with open(users, "w") as f:  # a cheap hash: the page's parsing is fuzzed, not scrypt
            f.write(f'[users.ops]\npassword = "{hash_password("ops-pw", n=16, r=1, p=1)}"\n')
        self.loop = asyncio.new_event_loop()
        security = DaemonSecurity(
            users_file=users,
            allow_plain_passwords=True,
            failed_login_delay=0.0,
            brake=LoginBrake(host_free=10**9, user_free=10**9),
        )
        self.daemon = Daemon(listen=0, security=security, host_status_interval=0)
        self.page = StatusServer(
            self.daemon,
            port=0,
            limits=HttpLimits(header_timeout=_READ_FOR / 2, max_connections=64, max_per_host=64),
        )
        self.loop.run_until_complete(self._start())
        self.errors = _Errors()
        logging.getLogger("rvasync.daemon.status_http").addHandler(self.errors)
        logging.getLogger("aiohttp").addHandler(self.errors)
        self.good = _GOOD % base64.b64encode(b"ops:ops-pw")
        self.count = 0

    async def _start(self) -> None:
        await self.daemon.start()
        await self.page.start()

    async def exchange(self, data: bytes) -> bytes:
        """Send ``data``; what comes back until the page closes the connection (ended with
        EOF once answered, or at once if unanswered: an unfinished head)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.page.port)
        answer = b""
        try:
            writer.write(data)
            with contextlib.suppress(TimeoutError):
                answer = await asyncio.wait_for(reader.read(65536), _ANSWER_WITHIN)
            if writer.can_write_eof():  # answered or not: no more requests on it
                writer.write_eof()
            async with asyncio.timeout(_READ_FOR):
                while len(answer) < 65536:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    answer += chunk
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
        return answer

    async def still_serving(self) -> bytes:
        """A good request's answer; retried a few times, as the connections of the last
        inputs may still hold the page's slots for a moment (the cap doing its job)."""
        answer = b""
        for _ in range(5):
            answer = await self.exchange(self.good)
            if answer:
                break
            await asyncio.sleep(0.05)
        return answer

    def consume(self, data: bytes) -> Any:
        from .boundaries import Defect

        self.count += 1
        answer = self.loop.run_until_complete(self.exchange(data))
        found = _STATUS.match(answer)
        problem = ""
        if answer and found is None:
            problem = f"not an HTTP response: {answer[:80]!r}"
        elif found is not None and found.group(1).startswith(b"5"):
            problem = f"the page failed: {answer[:120]!r}"
        elif self.errors.records:
            problem = f"the page logged: {self.errors.records[:3]}"
            self.errors.records.clear()
        if problem or self.count % 64 == 0:
            after = self.loop.run_until_complete(self.still_serving())
            if not after.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")):
                problem += f"; a good request then got {after[:80]!r}"
        if problem:
            raise Defect(problem)
        return found.group(1) if found else None


_page: _Page | None = None


def _consume(data: bytes) -> Any:
    global _page
    if _page is None or _page.loop.is_closed():
        _page = _Page()
    return _page.consume(data)


def _corpus() -> list[bytes]:
    auth = base64.b64encode(b"ops:ops-pw")
    wrong = base64.b64encode(b"ops:nope")
    return [
        _GOOD % auth,
        b"GET / HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Basic " + auth + b"\r\n\r\n",
        b"GET /metrics HTTP/1.0\r\nAuthorization: Basic " + auth + b"\r\n\r\n",
        b"GET /api/status HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Basic " + wrong + b"\r\n\r\n",
        b"GET /api/status HTTP/1.1\r\nHost: fuzz\r\n\r\n",
        b"GET /nowhere HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Basic " + auth + b"\r\n\r\n",
        b"POST /api/status HTTP/1.1\r\nHost: fuzz\r\nContent-Length: 5\r\n\r\nhello",
        b"GET / HTTP/1.1\r\nHost: fuzz\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        b"GET /api/status HTTP/1.1\r\nHost: a\r\nAuthorization: Basic " + auth + b"\r\n\r\n"
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nAuthorization: Basic " + auth + b"\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer x\r\nCookie: a=b\r\n\r\n",
    ]


def http_boundary() -> Any:
    """The ``http`` boundary (one implementation)."""
    from .boundaries import Boundary

    return Boundary(
        "http",
        "-",
        _corpus,
        _consume,
        (),
        notes="a real StatusServer over loopback: a response (never 5xx), no error logged",
    )
