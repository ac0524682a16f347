"""rvasync between processes: ``rv.Transport`` with each process's in-process daemon.

Every worker process opens ``rv.Transport(service=<free UDP port>, network=None)``:
the first network transport of a loop starts that loop's in-process daemon, and
the daemons of the different processes meet on the service over the loopback
interface. Rows report "not available in this rvasync build" until ``rv.Transport``
exists. A standalone-daemon variant (``daemon="127.0.0.1:<port>"``) belongs here
as a second :class:`~benchmarks.registry.Variant` once that mode lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from benchmarks.environments import UdpPort
from benchmarks.interfaces import PubSub, ReqRep, Sink
from benchmarks.registry import Variant, adapter
from benchmarks.systems.rvasync_api import missing

IN_PROCESS_DAEMON = Variant(name="ipm", label="in-process daemon")


class _RvNetwork:
    """One ``rv.Transport`` per process, on the service the runner chose."""

    environment = UdpPort
    env: dict[str, Any]
    index: int

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message")

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (IN_PROCESS_DAEMON,)

    async def connect(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.listeners: list[Any] = []
        self.transport = rv.Transport(service=str(self.env["ports"][0]), network=None)
        await asyncio.wait_for(self.transport.open(), 30)

    async def close(self) -> None:
        for listener in getattr(self, "listeners", ()):
            await asyncio.wait_for(listener.close(), 10)
        transport = getattr(self, "transport", None)
        if transport is not None:
            await asyncio.wait_for(transport.close(), 30)


@adapter
class RvNetworkPubSub(_RvNetwork, PubSub):
    """Publish with ``await t.send(msg)``, receive with ``async for`` on a Listener."""

    system = "rvasync"
    capability = "pubsub"

    async def subscribe(self, subject: str) -> Any:
        listener = self.transport.listen(subject)
        self.listeners.append(listener)
        return listener

    async def consume(self, subscription: Any, sink: Sink) -> None:
        async for msg in subscription:
            if sink(msg["data"]):
                return

    def prepare(self, subject: str, payload: bytes) -> Any:
        return self.rv.Message(subject, {"data": payload})

    async def publish(self, handle: Any) -> None:
        await self.transport.send(handle)


@adapter
class RvNetworkReqRep(_RvNetwork, ReqRep):
    """``send_request`` against a listener answering with ``send_reply``."""

    system = "rvasync"
    capability = "reqrep"

    async def serve(self, subject: str) -> None:
        listener = self.transport.listen(subject)
        self.listeners.append(listener)
        rv, transport = self.rv, self.transport

        async def echo() -> None:
            async for request in listener:
                await transport.send_reply(rv.Message(fields={"data": request["data"]}), request)

        self.server = asyncio.create_task(echo())

    def prepare(self, subject: str, payload: bytes) -> Any:
        return self.rv.Message(subject, {"data": payload})

    async def request(self, handle: Any, timeout: float) -> bytes:
        reply = await self.transport.send_request(handle, timeout)
        return bytes(reply["data"])

    async def close(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.cancel()
        await super().close()
