"""NATS KV as the retained-values peer: a JetStream key-value bucket on nats-server.

The bucket ``BENCHKV`` (file storage, history 1: the last value per key, as
a cache keeps) lives in nats-server started with JetStream (the
:class:`~benchmarks.systems.nats_jetstream.JetStreamServer` environment).
Updates are KV puts (a publish to ``$KV.BENCHKV.<key>``) pipelined with
``publish_async`` (up to :data:`WINDOW` awaiting their acks); fetching every
value is a watcher on every key (``deliver last per subject``) read until its
initial values end, the way a program restarting on a bucket gets the current
state. The cache process only polls the bucket's size (every 5 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from benchmarks.registry import adapter
from benchmarks.scenarios.retained import PREFIX, Retained
from benchmarks.systems.nats_jetstream import JetStreamServer
from benchmarks.systems.nats_peer import _NatsClient

BUCKET = "BENCHKV"
WINDOW = 256


@adapter
class NatsKv(_NatsClient, Retained):
    """A KV bucket: puts with ``publish_async``, fetch-all with ``watch``."""

    system = "nats"
    capability = "retained"
    environment = JetStreamServer
    poll_interval = 0.005

    js: Any
    kv: Any

    async def _open(self) -> None:
        """The client's side: the bucket the cache process made (it starts first)."""
        await self.connect()
        self.js = self.nc.jetstream(publish_async_max_pending=WINDOW)
        self.kv = await self.js.key_value(BUCKET)

    async def open_cache(self) -> None:
        """A fresh, empty bucket (the server may outlive a repetition: start from nothing)."""
        from nats.js.api import KeyValueConfig, StorageType

        await self.connect()
        self.js = self.nc.jetstream(publish_async_max_pending=WINDOW)
        with contextlib.suppress(Exception):
            await self.js.delete_key_value(BUCKET)
        self.kv = await self.js.create_key_value(
            KeyValueConfig(bucket=BUCKET, history=1, storage=StorageType.FILE)
        )

    async def cache_size(self) -> int:
        status = await self.kv.status()
        return int(status.values)

    async def open_client(self) -> None:
        await self._open()
        self.failed: list[BaseException] = []

    async def publish(self, subject: str, data: bytes) -> None:
        future = await self.js.publish_async(f"$KV.{BUCKET}.{subject}", data)
        future.add_done_callback(self._acked)

    def _acked(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            self.failed.append(future.exception())  # type: ignore[arg-type]

    async def flush(self) -> None:
        await asyncio.wait_for(self.js.publish_async_completed(), 60)
        if self.failed:
            raise RuntimeError(f"{len(self.failed)} puts failed, first: {self.failed[0]!r}")

    async def fetch_all(self, pattern: str) -> int:
        assert pattern == f"{PREFIX}.>"
        watcher = await self.kv.watch(pattern)
        count = 0
        try:
            while True:
                entry = await watcher.updates(timeout=30)
                if entry is None:
                    return count
                count += 1
        finally:
            await watcher.stop()
