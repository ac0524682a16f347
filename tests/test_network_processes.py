"""In-process daemons of separate processes meeting on one loopback service."""

import asyncio
import os

import pytest
from netutil import WAIT, Peer, collect

from rvasync.message import Message
from rvasync.transport.network import Transport


@pytest.fixture
def service(rv_service):
    return rv_service[0]


@pytest.fixture
async def peers(service):
    started = []

    async def start(count=1, reliability=None):
        new = await asyncio.gather(*(Peer.start(service, reliability) for _ in range(count)))
        started.extend(new)
        return new

    yield start
    for peer in started:
        await peer.close()


async def test_multicast_both_ways_between_processes(service, peers):
    (peer,) = await peers(1)
    async with Transport(service) as t:
        listener = t.listen("FROM.PEER")
        assert (await peer.call(op="listen", subject="FROM.TEST")) == {"ok": "listen"}
        for i in range(200):
            await t.send(Message("FROM.TEST", {"i": i}))
        got = await peer.call(op="collect", subject="FROM.TEST", n=200, timeout=WAIT)
        assert got["got"] == list(range(200))
        await peer.call(op="send", subject="FROM.PEER", n=200, start=1000)
        msgs = await collect(listener, 200)
        assert [m["i"] for m in msgs] == list(range(1000, 1200))


async def test_request_reply_across_processes(service, peers):
    (server,) = await peers(1)
    await server.call(op="serve", subject="ECHO")
    async with Transport(service) as t:
        for i in range(50):
            reply = await t.send_request(Message("ECHO", {"i": i}), WAIT)
            assert reply["echo"] == i and reply["pid"] == server.pid != os.getpid()


async def test_three_processes_multicast_and_point_to_point(service, peers):
    sender, first, second = await peers(3)
    for peer in (first, second):
        await peer.call(op="listen", subject="ALL.>")
    inbox = (await first.call(op="inbox"))["inbox"]
    assert inbox.startswith(first.inbox_prefix)
    await sender.call(op="send", subject="ALL.NEWS", n=100)
    await sender.call(op="send", subject=inbox, n=10, start=500)
    results = await asyncio.gather(
        first.call(op="collect", subject="ALL.>", n=100),
        second.call(op="collect", subject="ALL.>", n=100),
    )
    results.append(await first.call(op="collect", subject=inbox, n=10))
    assert results[0]["got"] == list(range(100))
    assert results[1]["got"] == list(range(100))
    assert results[2]["got"] == list(range(500, 510))
    # the point-to-point messages reached the inbox owner only: second's inbox listener
    # does not exist, and its ALL.> listener got exactly the multicast ones
    extra = await second.call(op="collect", subject="ALL.>", n=1, timeout=0.3)
    assert extra["got"] == []


async def test_request_reply_between_two_peer_processes(service, peers):
    server, client = await peers(2)
    await server.call(op="serve", subject="SVC")
    replies = [await client.call(op="request", subject="SVC", i=i, timeout=WAIT) for i in range(5)]
    assert [r["reply"]["echo"] for r in replies] == list(range(5))
    assert {r["reply"]["pid"] for r in replies} == {server.pid}


async def test_peer_process_killed_then_traffic_goes_on(service, peers):
    victim, survivor = await peers(2)
    await survivor.call(op="listen", subject="AFTER")
    victim.kill()
    async with Transport(service) as t:
        for i in range(10):
            await t.send(Message("AFTER", {"i": i}))
        got = await survivor.call(op="collect", subject="AFTER", n=10)
        assert got["got"] == list(range(10))
