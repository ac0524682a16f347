"""The status page's numbers add up over time (issue 43 item 6).

``totals`` used to be a sum over the clients connected now (it fell to 0 when
they left), a service's counters went with the service when it closed, and
per-client Prometheus series were labelled with the connection's number and
ephemeral port, so every reconnect made a new series. Counters now only grow
for the daemon's life, and client series are named by description and user.
"""

from __future__ import annotations

import asyncio
import re

import pytest

import rvasync as rv
from rvasync.daemon.clienttally import OVERFLOW, ClientTallies

pytest.importorskip("aiohttp")
from rvasync.daemon.status import snapshot
from rvasync.daemon.status_http import metrics_text

WAIT = 20.0


async def _client_session(daemon: rv.Daemon, service: str, count: int) -> None:
    """A client that publishes ``count`` messages, receives them, and leaves."""
    where = f"127.0.0.1:{daemon.listen_port}"
    async with rv.Transport(service, daemon=where, description="feed", reliability=0.2) as t:
        listener = t.listen("COUNT.ME")
        await t.link.ping(WAIT)
        for n in range(count):
            await t.send(rv.Message("COUNT.ME", {"n": n}))
        for _ in range(count):
            await listener.get(WAIT)
        await t.link.ping(WAIT)


async def _until(predicate, what: str) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.05)


def _sample(text: str, name: str, labels: str) -> float:
    found = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    assert found, (name, labels, text)
    return float(found.group(1))


async def test_counters_only_grow_as_clients_leave_and_services_close(rv_service):
    service = rv_service[0]
    daemon = rv.Daemon(listen=0, host_status_interval=0, reliability=0.2)
    await daemon.start()
    try:
        await _client_session(daemon, service, 5)
        await _until(lambda: not daemon.client_server.sessions, "the client to leave")
        first = snapshot(daemon)
        assert first["clients"] == []
        assert first["totals"]["messages_in"] == 5  # was 0: a sum over clients connected now
        assert first["totals"]["messages_out"] >= 5
        # The service closes once its linger is over; its counters stay.
        await _until(lambda: not daemon.services, "the service to close")
        [row] = snapshot(daemon)["services"]
        assert row["open"] is False and row["messages_out"] >= 5
        text = metrics_text(snapshot(daemon))
        labels = 'description="feed",user=""'
        assert _sample(text, "rvasync_client_messages_in_total", labels) == 5
        assert _sample(text, "rvasync_client_connected", labels) == 0
        # The same program again: the same series, grown; the service's too.
        await _client_session(daemon, service, 3)
        text = metrics_text(snapshot(daemon))
        assert _sample(text, "rvasync_client_messages_in_total", labels) == 8
        assert _sample(text, "rvasync_client_connections_total", labels) == 2
        assert snapshot(daemon)["totals"]["messages_in"] == 8
        [row2] = snapshot(daemon)["services"]
        assert row2["messages_out"] >= row["messages_out"] + 3
        assert 'peer="' not in text and "client=" not in text  # no ephemeral labels
    finally:
        await daemon.stop()


def test_identities_beyond_the_bound_are_tallied_together():
    tallies = ClientTallies(max_identities=2)
    assert tallies.identity("a", None) == ("a", "")
    assert tallies.identity("b", "u") == ("b", "u")
    assert tallies.identity("c", None) == OVERFLOW
    assert tallies.identity("a", None) == ("a", "")  # a known one keeps its row
