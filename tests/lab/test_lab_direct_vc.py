"""Direct communication and a virtual circuit between two lab hosts, under loss.

Two hosts (network namespaces) on one lab LAN, both transports with a
two-part service. Request/reply to the server's inbox goes over the direct
channels; then a virtual circuit between the hosts carries numbered
messages. With 10% of each host's incoming UDP dropped, every reply still
arrives and the circuit delivers everything in order (tests/lab/dvpeer.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rvasync.testing import free_port
from tests.lab.conftest import long_run
from tests.lab.lab import Lab

pytestmark = pytest.mark.lab

PEER = str(Path(__file__).resolve().parent / "dvpeer.py")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("loss", [0, 10])
async def test_direct_and_circuit_between_hosts(lab2: Lab, loss: int) -> None:
    service = str(free_port())
    server_host, client_host = lab2.hosts
    server = await server_host.spawn(
        PEER, "server", "--service", service, "--network", server_host.network()
    )
    assert (await server.readline(60)).strip() == b"ready"
    if loss:
        server_host.loss(loss)
        client_host.loss(loss)
    messages = 5000 if long_run() else 500
    client = await client_host.spawn(
        PEER, "client", "--service", service, "--network", client_host.network(),
        "--requests", "50", "--messages", str(messages),
    )  # fmt: skip
    line = await client.readline(300)
    assert line, "the client ended without a result"
    result = json.loads(line)
    # Once both sides are proven (the client warms up until then), every request
    # and reply takes the direct channel (under loss, repairs can only add datagrams).
    assert result["rr_direct_received"] >= 50, result
    assert result["rr_direct_sent"] >= 50, result
    # The circuit delivered every message, in order, and its frames went direct.
    assert result["vc_count"] == messages and result["vc_ordered"] == 1, result
    assert result["vc_direct_sent"] >= 1, result
    if loss:
        assert server_host.packets("drop") + client_host.packets("drop") > 0
