"""Direct communication between network transports with two-part services.

Point-to-point messages (replies, sends to an inbox) between two enabled
transports leave through the sender's own UDP channel once the receiver's
address answered a HELLO; before that, to a transport that is not enabled,
and for everything else, they take the daemon path. Port rules give clear
errors; loss on the direct path is repaired, or reported exactly as
DATALOSS.INBOUND.PTP / OUTBOUND.PTP.
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

import rvasync as rv
from rvasync.testing import free_port

WAIT = 15.0


async def until(predicate, what: str, timeout: float = WAIT) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def proven(sender: rv.Transport, inbox: str, receiver: rv.Listener) -> None:
    """Send to ``inbox`` until a message goes directly (the HELLO was answered)."""
    assert sender.direct is not None
    before = sender.direct.sent
    n = 0
    while sender.direct.sent == before:
        await sender.send(rv.Message(inbox, {"warmup": n}))
        await receiver.get(WAIT)
        n += 1
        await asyncio.sleep(0.01)
        assert n < 500, "the direct path never opened"


async def test_two_part_service_enables_direct(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(f"{service}:", network) as a,
        rv.Transport(f"{service}:0", network) as b,
        rv.Transport(service, network) as plain,
    ):
        assert a.direct_enabled and b.direct_enabled and not plain.direct_enabled
        assert a.direct is not None and b.direct is not None
        assert a.direct.port != b.direct.port
        assert f".D{a.direct.port}." in a.create_inbox()
        assert ".D" not in plain.create_inbox()
        # The daemon still knows the transport by its id (no direct tag in it).
        assert a.transport_id is not None and ".D" not in a.transport_id
    assert not a.direct_enabled


async def test_replies_and_inbox_messages_travel_directly(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(f"{service}:", network) as client,
        rv.Transport(f"{service}:", network) as server,
        rv.Transport(service, network) as plain,
    ):
        assert client.direct is not None and server.direct is not None
        requests = server.listen("PRICE")

        async def serve() -> None:
            async for request in requests:
                await server.send_reply(rv.Message(fields={"n": request["n"] + 1}), request)

        task = asyncio.ensure_future(serve())
        for n in range(20):
            reply = await client.send_request(rv.Message("PRICE", {"n": n}), WAIT)
            assert reply["n"] == n + 1
        # The first reply proved the client's address; the rest went direct.
        assert server.direct.sent >= 10
        assert client.direct.received == server.direct.sent
        # One side not enabled: the daemon path, both ways.
        sent_before = server.direct.sent
        for n in range(5):
            reply = await plain.send_request(rv.Message("PRICE", {"n": n}), WAIT)
            assert reply["n"] == n + 1
        assert server.direct.sent == sent_before
        inbox = plain.create_inbox()
        got = plain.listen(inbox)
        await client.send(rv.Message(inbox, {"x": 1}))
        assert (await got.get(WAIT))["x"] == 1
        task.cancel()


async def test_loss_on_the_direct_path_is_repaired(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(f"{service}:", network) as a,
        rv.Transport(f"{service}:", network) as b,
    ):
        assert a.direct is not None and b.direct is not None
        inbox = b.create_inbox()
        got = b.listen(inbox)
        await proven(a, inbox, got)
        rng = random.Random(7)
        b.direct.drop = lambda _data: rng.random() < 0.2
        sent_before = a.direct.sent
        for i in range(300):
            await a.send(rv.Message(inbox, {"i": i}))
        assert [(await got.get(WAIT))["i"] for _ in range(300)] == list(range(300))
        assert a.direct.sent - sent_before == 300


async def test_unrepairable_loss_is_reported_exactly(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(f"{service}:", network, reliability=0.05) as a,
        rv.Transport(f"{service}:", network) as b,
    ):
        assert a.direct is not None and b.direct is not None
        inbox = b.create_inbox()
        got = b.listen(inbox)
        inbound = b.listen("_RV.ERROR.SYSTEM.DATALOSS.INBOUND.PTP")
        outbound = a.listen("_RV.ERROR.SYSTEM.DATALOSS.OUTBOUND.PTP")
        await proven(a, inbox, got)
        # b hears nothing for a while: a's retention (50 ms) runs out meanwhile.
        b.direct.drop = lambda _data: True
        for i in range(10):
            await a.send(rv.Message(inbox, {"i": i}))
        await asyncio.sleep(0.5)
        b.direct.drop = None
        for i in range(10, 20):
            await a.send(rv.Message(inbox, {"i": i}))
        advisory = await inbound.get(WAIT)
        assert advisory["messages"] == 10
        assert [(await got.get(WAIT))["i"] for _ in range(10)] == list(range(10, 20))
        assert (await outbound.get(WAIT))["lost"] >= 1
        assert len(got.queue) == 0


async def test_port_rules(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    with pytest.raises(rv.InvalidArgument, match="different ports"):
        rv.Transport(f"{service}:{service}", network)
    with pytest.raises(rv.InvalidArgument, match="direct part"):
        rv.Transport(f"{service}:nope", network)
    port = free_udp_port()
    async with rv.Transport(f"{service}:{port}", network) as a:
        assert a.direct is not None and a.direct.port == port
        clash = rv.Transport(f"{service}:{port}", network)
        with pytest.raises(rv.NotPermitted, match="already bound"):
            await clash.open()
        assert clash.closed
        # A direct port on another transport's regular service (its daemon bound it).
        other = rv.Transport(f"{service}:{free_port()}", network)
        regular = rv.Transport(str(free_port()), network)
        await regular.open()
        try:
            taken = rv.Transport(f"{service}:{regular.service}", network)
            with pytest.raises(rv.NotPermitted, match="already bound"):
                await taken.open()
        finally:
            await regular.close()
        await other.open()
        await other.close()


async def test_a_message_for_someone_elses_inbox_is_dropped(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(f"{service}:", network) as a,
        rv.Transport(f"{service}:", network) as b,
    ):
        assert a.direct is not None and b.direct is not None
        inbox = b.create_inbox()
        got = b.listen(inbox)
        await proven(a, inbox, got)
        # Same direct address, a session that is not b's: b's channel must refuse it.
        parts = inbox.split(".")
        parts[2] = "notb"
        foreign = ".".join(parts)
        assert a.direct.route(rv.Message(foreign, {"forged": True}))
        await until(lambda: b.direct.dropped == 1, "the foreign inbox message dropped")
        assert len(got.queue) == 0


async def test_the_service_key_seals_the_direct_path_too(rv_service: tuple[str, str]) -> None:
    """With a service key the direct port is no open door: its datagrams carry the MAC,
    and a datagram without a valid tag is refused and counted, not delivered."""
    import socket

    service, network = rv_service
    key = "direct-path-service-key-0123456789"
    async with (
        rv.Transport(f"{service}:", network, service_key=key) as client,
        rv.Transport(f"{service}:", network, service_key=key) as server,
    ):
        assert client.direct is not None and server.direct is not None
        requests = server.listen("PRICE")

        async def serve() -> None:
            async for request in requests:
                await server.send_reply(rv.Message(fields={"n": request["n"] + 1}), request)

        task = asyncio.ensure_future(serve())
        for n in range(10):
            reply = await client.send_request(rv.Message("PRICE", {"n": n}), WAIT)
            assert reply["n"] == n + 1
        assert server.direct.sent >= 5  # replies went direct, sealed, and were opened
        assert client.direct.unauthenticated == 0
        # A forger without the key: its datagrams at the direct port are refused.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
            for _ in range(5):
                forger.sendto(b"RVDH" + bytes(40), ("127.0.0.1", client.direct.port))
        async with asyncio.timeout(WAIT):
            while client.direct.unauthenticated < 5:
                await asyncio.sleep(0.01)
        task.cancel()
