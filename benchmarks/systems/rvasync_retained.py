"""rvasync retained values: ``rv.CurrentValueCache`` in one process, a client in another.

Both open ``rv.Transport(service=<the row's UDP port>, network=None)`` (their
in-process daemons meet on the service). The cache keeps values in memory (no
store file: the NATS bucket's file store is the peer's own design choice, and
the rvasync store-file cost is one buffered write per loop turn).
"""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.environments import UdpPort
from benchmarks.registry import adapter
from benchmarks.scenarios.retained import PREFIX, Retained
from benchmarks.systems.rvasync_api import missing


@adapter
class RvRetained(Retained):
    """``CurrentValueCache`` ingest and ``request_retained``."""

    system = "rvasync"
    capability = "retained"
    environment = UdpPort

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message", "CurrentValueCache")

    async def _open(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.transport: Any = rv.Transport(service=str(self.env["ports"][0]), network=None)
        await asyncio.wait_for(self.transport.open(), 30)

    async def open_cache(self) -> None:
        await self._open()
        self.cache = self.rv.CurrentValueCache(self.transport, f"{PREFIX}.>")
        await asyncio.wait_for(self.cache.start(), 30)

    async def cache_size(self) -> int:
        return len(self.cache)

    async def open_client(self) -> None:
        await self._open()
        self.message = self.rv.Message
        self.opaque = self.rv.FieldType.OPAQUE

    async def publish(self, subject: str, data: bytes) -> None:
        msg = self.message(subject)
        msg.add("d", data, self.opaque)
        await self.transport.send(msg)

    async def fetch_all(self, pattern: str) -> int:
        return len(await self.transport.request_retained(pattern, timeout=30.0))

    async def close(self) -> None:
        cache = getattr(self, "cache", None)
        if cache is not None:
            await cache.close()
        transport = getattr(self, "transport", None)
        if transport is not None:
            await asyncio.wait_for(transport.close(), 30)
