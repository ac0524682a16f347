"""rvasync's rows of ``rops-latency``: send_request, RemoteOps 2-way and 3-way.

All three on the in-process daemon, one ``rv.Transport`` per process. The
performer registers an ``echo`` operation; the invoker's retry timeout is the
scenario's request timeout (no retry happens on a healthy loopback).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from benchmarks.registry import Variant, adapter
from benchmarks.systems.nats_peer import NatsReqRep
from benchmarks.systems.rvasync_api import missing
from benchmarks.systems.rvasync_network import IN_PROCESS_DAEMON, RvNetworkReqRep

PLAIN = Variant(name=IN_PROCESS_DAEMON.name, label="send_request", headline=False)
TWO_WAY = Variant(
    name="rops-2way",
    label="RemoteOps 2-way",
    headline=True,
    unavailable=lambda: missing("RemoteOps"),
)
THREE_WAY = Variant(
    name="rops-3way",
    label="RemoteOps 3-way",
    headline=False,
    unavailable=lambda: missing("RemoteOps"),
)
PERFORMER = "BENCH_PERFORMER"


@adapter
class RvRemoteOps(RvNetworkReqRep):
    """``RemoteOps.invoke`` of an echo operation (or plain ``send_request`` for the baseline)."""

    system = "rvasync"
    capability = "rops"

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (TWO_WAY, THREE_WAY, PLAIN)

    async def connect(self) -> None:
        await super().connect()  # PLAIN has the in-process daemon row's name: same transport
        self.ops: Any = None

    async def serve(self, subject: str) -> None:
        if self.variant.name == PLAIN.name:
            await super().serve(subject)
            return
        rv = self.rv
        self.ops = await rv.RemoteOps(self.transport, PERFORMER).open()

        def echo(msg: Any) -> Any:
            return rv.Message(fields={"data": msg["data"]})

        self.ops.perform("echo", echo)

    def prepare(self, subject: str, payload: bytes) -> Any:
        return self.rv.Message(subject, {"data": payload})

    async def request_new(self, subject: str, payload: bytes, timeout: float) -> bytes:
        if self.variant.name == PLAIN.name:
            return await super().request_new(subject, payload, timeout)
        return await self.request(self.rv.Message(subject, {"data": payload}), timeout)

    async def request(self, handle: Any, timeout: float) -> bytes:
        if self.variant.name == PLAIN.name:
            return await super().request(handle, timeout)
        if self.ops is None:
            self.ops = await self.rv.RemoteOps(self.transport, f"BENCH_INVOKER_{id(self)}").open()
        handshake = 3 if self.variant.name == THREE_WAY.name else 2
        reply = await self.ops.invoke(
            PERFORMER, "echo", handle, handshake=handshake, timeout=timeout, retries=2
        )
        return bytes(reply["data"])

    async def close(self) -> None:
        if getattr(self, "ops", None) is not None:
            await asyncio.wait_for(self.ops.close(), 10)
        await super().close()


@adapter
class NatsRops(NatsReqRep):
    """NATS has no remote operations; its plain request/reply is the row to beat."""

    system = "nats"
    capability = "rops"
