"""The floor: the same payloads moved by bare UDP sockets on 127.0.0.1, no framework.

What any messaging layer on this machine and event loop (uvloop) adds shows as
the distance to these rows. No subjects, no framing, no loss recovery: datagrams
the receiver's socket buffer cannot hold are lost and counted as loss. With
several subscribers the sender sends each datagram to each subscriber's port.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Any

from benchmarks.environments import UdpPortPerSubscriber
from benchmarks.interfaces import PubSub, ReqRep, Sink
from benchmarks.registry import Params, Scenario, Variant, adapter

#: Largest UDP payload over IPv4.
MAX_DATAGRAM = 65_507

#: Socket buffers requested (the kernel caps them at net.core.[rw]mem_max).
BUFFER_BYTES = 8 * 1024 * 1024


def _grow_buffers(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)


class _Receiver(asyncio.DatagramProtocol):
    """Feeds datagrams to a sink, buffering the ones that arrive before it is attached."""

    def __init__(self) -> None:
        self.sink: Sink | None = None
        self.backlog: deque[bytes] = deque()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        sink = self.sink
        if sink is None:
            self.backlog.append(data)
        elif not self.done.done() and sink(data):
            self.done.set_result(None)

    def error_received(self, exc: Exception) -> None:
        """ICMP errors (a port not yet open) are part of bare UDP; nothing to do."""

    async def consume(self, sink: Sink) -> None:
        self.sink = sink
        while self.backlog:
            if sink(self.backlog.popleft()):
                return
        await self.done


@adapter
class FloorPubSub(PubSub):
    """One receiving socket per subscriber, one sending socket per publisher."""

    system = "floor"
    capability = "pubsub"
    environment = UdpPortPerSubscriber

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        if int(params.get("size", 0)) > MAX_DATAGRAM:
            return (
                f"a UDP datagram carries at most {MAX_DATAGRAM:,} B; moving "
                f"{int(params['size']):,} B needs fragmentation and loss recovery, a framework"
            )
        return None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.transports: list[asyncio.DatagramTransport] = []
        sender, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=(self.env["host"], 0)
        )
        _grow_buffers(sender)
        self.transports.append(sender)
        self.sender = sender
        self.addresses = [(self.env["host"], port) for port in self.env["ports"]]

    async def subscribe(self, subject: str) -> _Receiver:
        loop = asyncio.get_running_loop()
        port = self.env["ports"][self.index]
        transport, receiver = await loop.create_datagram_endpoint(
            _Receiver, local_addr=(self.env["host"], port)
        )
        _grow_buffers(transport)
        self.transports.append(transport)
        return receiver

    async def consume(self, subscription: _Receiver, sink: Sink) -> None:
        await subscription.consume(sink)

    def prepare(self, subject: str, payload: bytes) -> tuple[bytes, list[tuple[str, int]]]:
        return (payload, [(self.env["host"], port) for port in self.env["ports"]])

    async def publish(self, handle: tuple[bytes, list[tuple[str, int]]]) -> None:
        data, addresses = handle
        sendto = self.sender.sendto
        for address in addresses:
            sendto(data, address)

    async def publish_new(self, subject: str, payload: bytes) -> None:
        """The floor's message is its payload datagram; the addresses are set-up, not message."""
        sendto = self.sender.sendto
        for address in self.addresses:
            sendto(payload, address)

    async def flush(self) -> None:
        for _ in range(10_000):
            if not self.sender.get_write_buffer_size():
                return
            await asyncio.sleep(0.001)

    async def close(self) -> None:
        for transport in getattr(self, "transports", ()):
            transport.close()


@adapter
class FloorInproc(FloorPubSub):
    """A UDP socket pair inside one process."""

    capability = "inproc"


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.transport.sendto(data, addr)


class _Waiter(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future[bytes] | None = None

    def datagram_received(self, data: bytes, addr: Any) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(data)


def _expire(waiter: asyncio.Future[bytes], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"no UDP reply within {timeout}s"))


@adapter
class FloorReqRep(ReqRep):
    """UDP ping-pong: the replier sends each datagram back to where it came from."""

    system = "floor"
    capability = "reqrep"
    environment = UdpPortPerSubscriber

    async def connect(self) -> None:
        self.transports: list[asyncio.DatagramTransport] = []
        self.address = (self.env["host"], self.env["ports"][0])

    async def serve(self, subject: str) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(_Echo, local_addr=self.address)
        self.transports.append(transport)

    def prepare(self, subject: str, payload: bytes) -> bytes:
        return payload

    async def request(self, handle: bytes, timeout: float) -> bytes:
        if not self.transports:
            loop = asyncio.get_running_loop()
            transport, self.waiter = await loop.create_datagram_endpoint(
                _Waiter, remote_addr=self.address
            )
            self.transports.append(transport)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self.waiter.waiter = waiter
        timer = loop.call_later(timeout, _expire, waiter, timeout)
        self.transports[0].sendto(handle)
        try:
            return await waiter
        finally:
            timer.cancel()

    async def close(self) -> None:
        for transport in getattr(self, "transports", ()):
            transport.close()
