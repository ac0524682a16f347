"""ZeroMQ: pyzmq with ``zmq.asyncio``, brokerless.

Pub/sub uses an XPUB socket for the publisher so it can wait for its
subscribers (ZeroMQ's "slow joiner": messages published before a subscription
arrives are silently lost). The single side of the layout binds on 127.0.0.1 and
the many side connects. High-water marks are off (0) on every socket, so ZeroMQ
queues instead of dropping, like the other systems here. Messages are two
frames: subject, payload.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.environments import LoopbackPorts
from benchmarks.interfaces import Environment, PubSub, ReqRep, Sink
from benchmarks.registry import Params, Scenario, Variant, adapter

#: Topic of the probe a waiting publisher sends (no subscriber's prefix matches it).
_PROBE = b"\x00probe"


def _missing() -> str | None:
    try:
        import zmq.asyncio  # noqa: F401
    except ImportError:
        return "pyzmq is not installed"
    return None


@adapter
class ZmqPubSub(PubSub):
    """PUB/SUB over TCP on 127.0.0.1."""

    system = "zmq"
    capability = "pubsub"
    environment = LoopbackPorts

    @classmethod
    def unavailable(cls) -> str | None:
        return _missing()

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        if int(params.get("pubs", 1)) > 1 and int(params.get("subs", 1)) > 1:
            return "many publishers to many subscribers needs an XSUB/XPUB proxy (a broker)"
        return None

    def endpoint(self) -> str:
        """Where the bound side listens."""
        return f"tcp://{self.env['host']}:{self.env['ports'][0]}"

    def publisher_binds(self) -> bool:
        """The single side binds: the publisher unless there are several publishers."""
        return int(self.params.get("pubs", 1)) == 1

    def context(self) -> Any:
        import zmq.asyncio

        return zmq.asyncio.Context()

    async def connect(self) -> None:
        import zmq

        self.zmq = zmq
        self.ctx = self.context()
        self.sockets: list[Any] = []
        self.pub: Any = None

    def _socket(self, kind: int) -> Any:
        sock = self.ctx.socket(kind)
        sock.setsockopt(self.zmq.SNDHWM, 0)
        sock.setsockopt(self.zmq.RCVHWM, 0)
        sock.setsockopt(self.zmq.LINGER, 0)
        self.sockets.append(sock)
        return sock

    async def subscribe(self, subject: str) -> Any:
        sock = self._socket(self.zmq.SUB)
        sock.setsockopt(self.zmq.SUBSCRIBE, subject.encode())
        if self.publisher_binds():
            sock.connect(self.endpoint())
        else:
            sock.bind(self.endpoint())
            self.tending = asyncio.create_task(self._tend(sock))
        return sock

    async def _tend(self, sock: Any) -> None:
        """Keep a bound SUB socket processing its commands until consuming starts.

        libzmq attaches an accepted connection, and sends it the subscriptions,
        only when the application thread uses the socket; an idle bound SUB would
        leave connecting publishers waiting forever.
        """
        while True:
            sock.getsockopt(self.zmq.EVENTS)
            await asyncio.sleep(0.01)

    def _stop_tending(self) -> None:
        tending = getattr(self, "tending", None)
        if tending is not None:
            tending.cancel()
            self.tending = None

    async def consume(self, subscription: Any, sink: Sink) -> None:
        self._stop_tending()
        recv = subscription.recv_multipart
        while True:
            frames = await recv()
            if sink(frames[1]):
                return

    def _publisher(self) -> Any:
        if self.pub is None:
            self.pub = self._socket(self.zmq.XPUB)
            self.pub.setsockopt(self.zmq.XPUB_VERBOSE, 1)
            if self.publisher_binds():
                self.pub.bind(self.endpoint())
            else:
                self.pub.connect(self.endpoint())
        return self.pub

    async def wait_subscribers(self, count: int, timeout: float) -> None:
        """Count subscription messages on the XPUB socket until ``count`` arrived.

        libzmq processes a connecting XPUB's incoming subscriptions only when the
        socket is used, so while waiting it sends a probe on a topic nobody
        subscribes to (dropped by the publisher's own filter).
        """
        pub = self._publisher()
        expected = count if self.publisher_binds() else 1
        seen = 0
        deadline = time.monotonic() + timeout
        while seen < expected:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"ZeroMQ publisher saw {seen} of {expected} subscriptions within {timeout}s"
                )
            try:
                event = await asyncio.wait_for(pub.recv(), 0.05)
            except TimeoutError:
                await pub.send_multipart([_PROBE, b""])
                continue
            if event[:1] == b"\x01":
                seen += 1

    def prepare(self, subject: str, payload: bytes) -> list[bytes]:
        return [subject.encode(), payload]

    async def publish(self, handle: list[bytes]) -> None:
        await self._publisher().send_multipart(handle)

    async def close(self) -> None:
        self._stop_tending()
        for sock in getattr(self, "sockets", ()):
            sock.close(linger=0)
        ctx = getattr(self, "ctx", None)
        if ctx is not None:
            ctx.term()


@adapter
class ZmqInproc(ZmqPubSub):
    """PUB/SUB over ``inproc://`` inside one process (one shared context)."""

    capability = "inproc"
    environment = Environment

    def endpoint(self) -> str:
        return "inproc://bench"


@adapter
class ZmqReqRep(ReqRep):
    """REQ/REP over TCP on 127.0.0.1; the replier binds."""

    system = "zmq"
    capability = "reqrep"
    environment = LoopbackPorts

    @classmethod
    def unavailable(cls) -> str | None:
        return _missing()

    async def connect(self) -> None:
        import zmq
        import zmq.asyncio

        self.zmq = zmq
        self.ctx = zmq.asyncio.Context()
        self.sock: Any = None
        self.task: asyncio.Task[None] | None = None
        self.endpoint = f"tcp://{self.env['host']}:{self.env['ports'][0]}"

    async def serve(self, subject: str) -> None:
        self.sock = self.ctx.socket(self.zmq.REP)
        self.sock.setsockopt(self.zmq.LINGER, 0)
        self.sock.bind(self.endpoint)

        async def echo() -> None:
            while True:
                await self.sock.send(await self.sock.recv())

        self.task = asyncio.create_task(echo())

    def prepare(self, subject: str, payload: bytes) -> bytes:
        if self.sock is None:
            self.sock = self.ctx.socket(self.zmq.REQ)
            self.sock.setsockopt(self.zmq.LINGER, 0)
            self.sock.connect(self.endpoint)
        return payload

    async def request(self, handle: bytes, timeout: float) -> bytes:
        await self.sock.send(handle)
        return bytes(await self.sock.recv())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.sock is not None:
            self.sock.close(linger=0)
        self.ctx.term()
