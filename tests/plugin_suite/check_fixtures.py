"""Each fixture of rvasync's pytest plugin does what docs/testing.md says, in strict mode."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

import rvasync as rv

pytestmark = pytest.mark.asyncio
WAIT = 20.0


async def test_rv_service_is_free_for_udp_and_tcp(rv_service):
    service, network = rv_service
    assert network == "127.0.0.1"
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind((network, int(service)))


async def test_rv_process_transport_is_the_loops_and_is_shut_down(rv_process_transport):
    assert rv_process_transport is rv.process_transport()
    async with rv_process_transport.listen("PLUGIN.PROCESS") as listener:
        await rv_process_transport.send(rv.Message("PLUGIN.PROCESS", {"n": 1}))
        assert (await listener.get(timeout=WAIT))["n"] == 1


async def test_rv_transport_meets_another_transport_on_rv_service(rv_service, rv_transport):
    async with rv.Transport(*rv_service) as other:
        listener = other.listen("PLUGIN.NET")  # same loop, same in-process daemon: no wait
        await rv_transport.send(rv.Message("PLUGIN.NET", {"n": 2}))
        assert (await listener.get(timeout=WAIT))["n"] == 2


async def test_rv_cm_transport_certifies_with_a_ledger_in_tmp_path(rv_cm_transport, tmp_path):
    listener = rv_cm_transport.listen("PLUGIN.CM")
    await rv_cm_transport.send(rv.Message("PLUGIN.CM", {"n": 3}))
    msg = await listener.get(timeout=WAIT)
    assert msg["n"] == 3 and msg.cm is not None and msg.cm.sender == "RVASYNC.TEST.CM"
    assert rv_cm_transport.ledger_path == os.fspath(tmp_path / "RVASYNC.TEST.CM.ledger")
    await rv_cm_transport.sync()
    assert os.path.getsize(rv_cm_transport.ledger_path) > 0


async def test_rv_router_pair_carries_messages_and_replies_across(rv_router_pair):
    pair = rv_router_pair
    async with rv.Transport(*pair.left) as left, rv.Transport(*pair.right) as right:
        prices = right.listen("PRICES.>")

        async def quote(request: rv.Message) -> None:
            await right.send_reply(rv.Message(fields={"bid": 99.5}), request)

        right.listen("QUOTE.ACME", callback=quote)
        await pair.wait_listening("left", "PRICES.>", "QUOTE.ACME")
        await left.send(rv.Message("PRICES.ACME", {"last": 100.25}))
        assert (await prices.get(timeout=WAIT))["last"] == 100.25
        reply = await left.send_request(rv.Message("QUOTE.ACME"), timeout=WAIT)
        assert reply["bid"] == 99.5


async def test_rv_secure_daemon_logs_users_in(rv_secure_daemon):
    secure = rv_secure_daemon
    for security in (secure.security("alice"), secure.cert_security("bob")):
        async with rv.Transport(daemon=secure.daemon, security=security) as t:
            listener = t.listen("PLUGIN.SECURE")
            await t.link.ping()
            await t.send(rv.Message("PLUGIN.SECURE", {"user": security.user or "cert"}))
            assert (await listener.get(timeout=WAIT))["user"] == (security.user or "cert")
    with pytest.raises(rv.NotPermitted):
        await rv.Transport(daemon=secure.daemon, security=secure.security("alice", "wrong")).open()


async def test_rv_secure_daemon_add_user_sets_rights(rv_secure_daemon):
    secure = rv_secure_daemon
    secure.add_user("carol", "carol-password", publish=["ORDERS.>"], subscribe=["ORDERS.>"])
    async with rv.Transport(daemon=secure.daemon, security=secure.security("carol")) as t:
        await t.send(rv.Message("ORDERS.NEW", {}))
        with pytest.raises(rv.NotPermitted):
            await t.send(rv.Message("PRICES.NEW", {}))


async def test_rv_daemon_serves_transports(rv_daemon):
    assert rv_daemon.startswith("127.0.0.1:")
    async with rv.Transport(daemon=rv_daemon) as t:
        listener = t.listen("PLUGIN.STANDALONE")
        await t.link.ping()
        await t.send(rv.Message("PLUGIN.STANDALONE", {"n": 4}))
        assert (await asyncio.wait_for(listener.get(), WAIT))["n"] == 4
