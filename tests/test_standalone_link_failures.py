"""A standalone daemon's link when things go wrong: refused, lost, started twice.

Real daemons on loopback; every wait is bounded and every daemon started here
is killed (its process group) when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket

import pytest

import rvasync as rv
from rvasync.testing import free_port
from rvasync.transport import tcplink

WAIT = 20.0


async def test_a_refused_connection_raises_the_public_error_class(rv_service):
    """The issue's case: the private ``_Refused`` reached the program."""
    port = free_port(socket.SOCK_STREAM)
    with pytest.raises(rv.DaemonUnavailable, match="connection refused") as caught:
        await rv.Transport(rv_service[0], daemon=f"127.0.0.1:{port}").open()
    assert type(caught.value) is rv.DaemonUnavailable


async def test_a_request_in_flight_fails_at_once_when_the_daemon_link_drops(
    rv_daemon, rv_service, monkeypatch
):
    """A send_request waiting when the daemon dies raises DaemonUnavailable at once (its
    reply would go to an inbox of the lost session), not RequestTimeout at its timeout."""
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.2)
    async with rv.Transport(rv_service[0], daemon=rv_daemon) as t:
        replier = t.listen("SLOW.SERVICE")  # takes the request, never answers
        loop = asyncio.get_running_loop()
        started = loop.time()
        request = asyncio.ensure_future(t.send_request(rv.Message("SLOW.SERVICE", {}), 300.0))
        await asyncio.wait_for(replier.get(), WAIT)  # the request reached the daemon
        os.kill(t.link.daemon_info["pid"], signal.SIGKILL)
        with pytest.raises(rv.DaemonUnavailable, match="while waiting for the reply"):
            await asyncio.wait_for(request, WAIT)
        assert loop.time() - started < WAIT  # long before the 300 s timeout


async def test_transports_opening_at_once_start_one_daemon_and_name_it(rv_service):
    """Two transports of one loop that find no daemon start one between them, and only
    the one that started it names its pid (before: each started one, and one named a
    daemon that had exited, having lost the race for the port)."""
    port = free_port(socket.SOCK_STREAM)
    transports = [rv.Transport(rv_service[0], daemon=str(port)) for _ in range(3)]
    pids: set[int] = set()
    try:
        await asyncio.wait_for(asyncio.gather(*(t.open() for t in transports)), WAIT)
        pids = {t.link.daemon_info["pid"] for t in transports}
        assert len(pids) == 1
        started = [t.link.started_daemon_pid for t in transports]
        assert sorted(started, key=lambda p: p is None) == [next(iter(pids)), None, None]
    finally:
        for t in transports:
            await t.close()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
