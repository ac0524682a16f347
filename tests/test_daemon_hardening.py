"""Daemon boundaries hardened after the adversarial run of issue #24 (items 3, 4, 5, 6)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from netutil import WAIT, LoopThread

import rvasync as rv
from rvasync.daemon.udp import address_hex
from rvasync.message import Message
from rvasync.transport.network import Transport


@pytest.fixture
def service(rv_service):
    return rv_service[0]


async def test_a_crafted_inbox_never_makes_the_daemon_send_to_that_address(service):
    """Item 4: point-to-point traffic goes only to daemons heard on the service."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as victim:
        victim.bind(("127.0.0.1", 0))
        victim.setblocking(False)
        crafted = f"_INBOX.{address_hex(victim.getsockname())}.X1.1"
        async with Transport(service) as t:
            lost = t.listen("_RV.ERROR.SYSTEM.DATALOSS.OUTBOUND.PTP")
            await t.send(Message(crafted, {"x": 1}))
            adv = await lost.get(WAIT)
            assert adv["unknown_address"] == 1 and adv["port"] == victim.getsockname()[1]
            endpoint = t.link.session._service
            assert endpoint.counters.ptp_refused == 1
            await asyncio.sleep(0.2)  # what the daemon would have sent has had time to arrive
            with pytest.raises(BlockingIOError):
                victim.recvfrom(65536)
            status = {n: v for n, v, _ in endpoint.host_status()}
            assert status["ptprefused"] == 1


async def test_replies_still_reach_a_daemon_that_was_heard(service):
    lt = LoopThread()
    try:

        async def serve():
            t = await Transport(service).open()

            async def echo(msg):
                await t.send_reply(Message(fields={"ok": msg["n"]}), msg)

            t.listen("ASK", callback=echo)
            return t

        await lt.run(serve())
        async with Transport(service) as t:
            await asyncio.sleep(0.05)
            reply = await t.send_request(Message("ASK", {"n": 7}), WAIT)
            assert reply["ok"] == 7
    finally:
        lt.stop()


async def _raw_client(port: int, *frames):
    from rvasync.protocol import clientproto as cp

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for frame in frames:
        writer.write(cp.encode(frame))
    await writer.drain()
    return reader, writer


async def _frames_until_closed(reader) -> list:
    from rvasync.protocol import clientproto as cp

    decoder = cp.FrameDecoder()
    frames: list = []
    async with asyncio.timeout(WAIT):
        while data := await reader.read(65536):
            frames += decoder.feed(data)
    return frames


@pytest.fixture
async def standalone(service):
    daemon = rv.Daemon(listen=0, reliability=1.0)
    await daemon.start()
    yield daemon
    await daemon.stop()


async def test_garbage_after_a_readable_subject_is_not_forwarded(service, standalone):
    """Item 6: the daemon decodes what a client publishes; garbage gets ERROR and a close."""
    from rvasync.protocol import clientproto as cp

    wire = Message("A.B", {"x": 1}).to_bytes()
    garbage = wire[:9] + b"\xff\x00\x13" * 10  # header and subject intact, then junk
    async with Transport(service, daemon=f"127.0.0.1:{standalone.listen_port}") as good:
        listener = good.listen("A.B")
        await asyncio.sleep(0.1)  # the LISTEN reaches the daemon
        reader, writer = await _raw_client(
            standalone.listen_port, cp.Hello(service=service), cp.Publish([garbage])
        )
        frames = await _frames_until_closed(reader)
        writer.close()
        errors = [f for f in frames if type(f) is cp.Error]
        assert errors and errors[0].code == "PROTOCOL" and "malformed" in errors[0].text
        await good.send(Message("A.B", {"x": 2}))
        assert (await listener.get(WAIT))["x"] == 2  # the garbage never came first


async def test_raw_hello_with_an_unbounded_reliability_gets_an_error_frame(service, standalone):
    """Items 3 and 5: a raw HELLO asking for 1e308 s of retention is refused with ERROR."""
    from rvasync.protocol import clientproto as cp

    for hello in (
        cp.Hello(service=service, reliability=1e308),
        cp.Hello(service="7" * 5000),
    ):
        reader, writer = await _raw_client(standalone.listen_port, hello)
        frames = await _frames_until_closed(reader)
        writer.close()
        (error,) = [f for f in frames if type(f) is cp.Error]
        assert error.code == "INVALID_ARGUMENT"
    assert all(s.reliability <= 3600 for s in standalone.services.values())


async def test_raw_listen_on_inboxes_gets_the_documented_error_frame(service, standalone):
    """Item 5: LISTEN _INBOX.> is refused with an ERROR frame, not a transport traceback."""
    from rvasync.protocol import clientproto as cp

    reader, writer = await _raw_client(
        standalone.listen_port, cp.Hello(service=service), cp.Listen("_INBOX.>")
    )
    frames = await _frames_until_closed(reader)
    writer.close()
    (error,) = [f for f in frames if type(f) is cp.Error]
    assert error.code == "PROTOCOL" and "_INBOX" in error.text
    assert standalone.running


def _flood(address, group_port: int, count: int) -> None:
    """Forged datagrams under made-up sessions (valid framing, each a gap to NAK)."""
    import os as _os

    from rvasync import _accel
    from rvasync.daemon.params import DEFAULT_GROUP

    frame = _accel.load("rmframe")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
        for n in range(count):
            session = int.from_bytes(_os.urandom(8), "little") | 1
            packer = frame.Packer(1400, session, 0)
            for _ in range(3):
                packer.add(Message("NEWS", {"forged": n}).to_bytes())
                packer.flush()
            datagram = packer.take()[-1]  # seq 3: datagrams 1 and 2 "missing"
            s.sendto(datagram, address if n % 2 else (DEFAULT_GROUP, group_port))


async def test_a_flood_of_invented_sessions_leaves_a_known_peer_whole(service):
    """Item 1 over real sockets: the forger's sessions stay within the core's bounds and the
    legitimate exchange loses nothing."""
    lt = LoopThread()
    try:
        a = await lt.run(Transport(service).open())
        async with Transport(service) as b:
            news = b.listen("NEWS")
            lost = b.listen("_RV.ERROR.SYSTEM.DATALOSS.>")
            endpoint = b.link.session._service
            await lt.run(a.send(Message("NEWS", {"n": -1})))
            assert (await news.get(WAIT))["n"] == -1
            await asyncio.sleep(1.2)  # a's daemon heartbeats: b has confirmed its session
            flood = asyncio.create_task(
                asyncio.to_thread(_flood, endpoint.address, int(service), 5000)
            )

            async def send_all():
                for n in range(2000):
                    await a.send(Message("NEWS", {"n": n}))
                    if n % 100 == 0:
                        await asyncio.sleep(0.001)

            await lt.run(send_all())
            await flood
            got = []
            async with asyncio.timeout(2 * WAIT):
                while len(got) < 2000:
                    msg = await news.get()
                    if "n" in msg:
                        got.append(msg["n"])
            assert got == list(range(2000))
            core = endpoint.core
            assert len(core.peers()) <= core.max_new_peers + 1
            assert core.stats.peers_refused > 0
            a_session = a.link.session._service.core.session_id
            while (adv := lost.queue.poll()) is not None:
                assert adv["session"] != a_session  # only forged sessions report loss
    finally:
        lt.stop()
