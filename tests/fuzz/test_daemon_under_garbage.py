"""A standalone daemon keeps serving a good client while garbage arrives on every port.

The daemon is the one ``rvasync daemon`` runs (``Daemon(listen=...)``: the client
server and the engine), in its own thread and event loop so the test can read its
counters exactly. A good client publishes and receives steadily over the TCP
client port while raw TCP connections send fuzzed frame streams (some after a
valid HELLO, so the garbage reaches the session's frame handling) and raw UDP
sockets send fuzzed reliable datagrams (most with a recomputed CRC, a forgery)
to the service's multicast group and to the daemon's own address.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct

from netutil import WAIT, LoopThread, until

from rvasync.daemon.engine import Daemon
from rvasync.daemon.params import DEFAULT_GROUP
from rvasync.message import Message
from rvasync.testing import free_port
from rvasync.transport.network import Transport

from .boundaries import boundaries, clientproto
from .run import Mutator

GOOD = 300  # messages the good client sends (and must receive, in order)
TCP_CONNECTIONS = 60
DATAGRAMS = 3000


def _corpus(name: str) -> list[bytes]:
    (found,) = [b for b in boundaries() if b.name == name and b.twin in ("pure", "-")][:1]
    return found.seeds(), found.fixup


def garbage_streams(service: str, count: int, seed: int) -> list[bytes]:
    """Fuzzed client-protocol streams; every other one after a valid HELLO for ``service``."""
    cp = clientproto()
    seeds, _ = _corpus("clientproto")
    # No HELLO among what gets mutated: a forged HELLO could open some other service.
    seeds = [s for s in seeds if s[4] != cp.FrameType.HELLO]
    mutator = Mutator(seeds, seed)
    hello = cp.encode(cp.Hello(service=service, description="garbage"))
    streams = [hello + mutator.next() if i % 2 else mutator.next() for i in range(count)]
    # Known shapes: a HELLO service the daemon once failed on, unknown frame type, HTTP.
    streams[0] = cp.encode(cp.Hello(service="75\x7f\x00"))
    streams[1] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    streams[2] = hello + struct.pack(">IB", 3, cp.FrameType.LISTEN) + b"\x92\x01"
    return streams


async def send_garbage(port: int, data: bytes) -> list:
    """Write ``data`` on a new connection; the frames the daemon answered before closing."""
    cp = clientproto()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder = cp.FrameDecoder()
    frames: list = []
    try:
        writer.write(data)
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(1.0):  # an incomplete frame waits; we hang up
                while chunk := await reader.read(65536):
                    frames += decoder.feed(chunk)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return frames


async def test_the_daemon_serves_its_good_client_through_garbage():
    service = str(free_port())
    lt = LoopThread()
    try:
        await _run(lt, service)
    finally:
        lt.stop()


async def _run(lt: LoopThread, service: str) -> None:
    cp = clientproto()

    async def start() -> Daemon:
        daemon = Daemon(listen=0, host="127.0.0.1")
        await daemon.start()
        return daemon

    daemon = await lt.run(start())
    port = daemon.listen_port
    good = await Transport(service, daemon=f"127.0.0.1:{port}", description="good").open()
    try:
        listener = good.listen("GOOD.>")
        await good.send(Message("GOOD.WARMUP", {"n": -1}))
        assert (await listener.get(WAIT))["n"] == -1
        endpoint = daemon.services[int(service)]
        address = endpoint.address
        answers: list[list] = []

        async def good_traffic() -> list[int]:
            received = []
            for n in range(GOOD):
                await good.send(Message("GOOD.N", {"n": n, "pad": "x" * (n % 50)}))
                if n % 10 == 9:
                    while len(received) < n + 1:
                        received.append((await listener.get(WAIT))["n"])
                    await asyncio.sleep(0.005)
            while len(received) < GOOD:
                received.append((await listener.get(WAIT))["n"])
            return received

        async def tcp_garbage() -> None:
            streams = garbage_streams(service, TCP_CONNECTIONS, seed=5)
            for start_at in range(0, len(streams), 6):
                batch = streams[start_at : start_at + 6]
                answers.extend(await asyncio.gather(*(send_garbage(port, s) for s in batch)))

        async def udp_garbage() -> int:
            seeds, fixup = _corpus("reliable")
            mutator = Mutator(seeds, 9)
            rng = random.Random(9)
            sent = 0
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.setsockopt(
                    socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1")
                )
                s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
                s.setblocking(False)
                for i in range(DATAGRAMS):
                    data = mutator.next()
                    if rng.random() < 0.7:
                        data = fixup(data, rng)
                    target = (DEFAULT_GROUP, int(service)) if i % 2 else address
                    with contextlib.suppress(BlockingIOError):
                        s.sendto(data[:65507], target)
                        sent += 1
                    if i % 50 == 49:
                        await asyncio.sleep(0.002)
            return sent

        received, _, datagrams = await asyncio.wait_for(
            asyncio.gather(good_traffic(), tcp_garbage(), udp_garbage()), 120
        )
        assert received == list(range(GOOD))  # everything, in order

        # The daemon counted the garbage, contained nothing, and is still up.
        protocol_errors = sum(
            1
            for frames in answers
            if any(type(f) is cp.Error and f.code == "PROTOCOL" for f in frames)
        )
        refused = [
            f for frames in answers for f in frames if type(f) is cp.Error and f.code != "PROTOCOL"
        ]

        async def snapshot() -> dict:
            return {
                "server": daemon._server.stats.as_dict(),
                "core": endpoint.core.stats.as_dict(),
                "counters": endpoint.counters.as_dict(),
            }

        await until(lambda: endpoint.core.stats.malformed > 0)
        stats = await lt.run(snapshot())
        assert datagrams > DATAGRAMS // 2
        assert protocol_errors > 10
        assert stats["server"]["dropped_protocol"] >= protocol_errors
        assert stats["server"]["refused"] >= 1  # the HELLO with a NUL in its service
        assert any(f.code == "INVALID_ARGUMENT" for f in refused)
        assert stats["core"]["malformed"] > 0  # datagrams that fail the CRC or the layout
        assert stats["core"]["internal_errors"] == 0
        assert stats["counters"]["internal_errors"] == 0
        print("daemon stats after the garbage:", stats)

        # A new client is served as the first one is.
        async with Transport(service, daemon=f"127.0.0.1:{port}") as late:
            late_listener = late.listen("LATE.CLIENT")
            await late.send(Message("LATE.CLIENT", {"ok": True}))
            assert (await late_listener.get(WAIT))["ok"] is True
        await good.send(Message("GOOD.END", {"n": GOOD}))
        assert (await listener.get(WAIT))["n"] == GOOD
    finally:
        await good.close()
        await lt.run(daemon.stop())
