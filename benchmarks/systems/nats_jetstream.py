"""NATS JetStream as the certified-delivery peer: a file-stored stream and durable consumers.

The broker is nats-server started with JetStream (``-js -sd <store>``, the store
a fresh directory under the run's temporary directory, removed afterwards).
Every process ensures the stream ``BENCH_CM`` (file storage) on the subject;
each listener is a durable pull consumer (deliver new, explicit ack) that
acknowledges every message it fetches and deletes itself when it closes. The
sender learns confirmations from the consumers' ack floors (consumer info).

Rows (variants):

- ``publish_async``: up to :data:`WINDOW` publishes await their PubAcks at once
  (the peer of rvasync's file ledger);
- the same with an explicit ``asyncio.sleep(0)`` every 1,000 sends, beside it
  (rvasync's explicit-yield row has the same);
- ``publish_async`` to a memory-stored stream (the peer of rvasync's process
  ledger: nothing on disk);
- ``js.publish``: each publish awaits its PubAck (the message is stored);
- the same with the server's ``sync_interval: always`` (fsync per write), the
  counterpart of rvasync's ``sync_ledger=True``. By default JetStream syncs its
  files every two minutes, like a file ledger written without ``sync_ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.registry import Params, Scenario, Variant, adapter
from benchmarks.scenarios.certified import YIELD_EVERY, Certified
from benchmarks.systems.nats_peer import NatsServer, _NatsClient

STREAM = "BENCH_CM"

#: PubAcks awaited at once by the pipelined rows.
WINDOW = 256

#: Messages a listener asks for per fetch.
FETCH_BATCH = 500

#: Unacknowledged messages the server lets a consumer have (acks are sent per message).
MAX_ACK_PENDING = 20_000

PUBLISH = Variant(name="publish", label="JetStream, file store, js.publish")
ASYNC = Variant(name="async", label=f"JetStream, file store, publish_async x{WINDOW}")
ASYNC_YIELD = Variant(
    name="async-yield",
    label=f"JetStream, file store, publish_async x{WINDOW}, "
    f"explicit asyncio.sleep(0) every {YIELD_EVERY:,} sends",
)
MEMORY_ASYNC = Variant(
    name="memory-async", label=f"JetStream, memory store, publish_async x{WINDOW}"
)
SYNC_ASYNC = Variant(
    name="sync-async", label=f"JetStream, file store, sync always, publish_async x{WINDOW}"
)


class JetStreamServer(NatsServer):
    """nats-server with JetStream on a store directory of its own."""

    store: Path | None = None

    async def __aenter__(self) -> dict[str, Any]:
        self.store = Path(tempfile.mkdtemp(prefix="jetstream-", dir=self.workdir))
        return await super().__aenter__()

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            if self.store is not None:
                shutil.rmtree(self.store, ignore_errors=True)

    def extra_args(self) -> list[str]:
        assert self.store is not None
        return ["-js", "-sd", str(self.store)]

    def extra_config(self) -> list[str]:
        if self.variant.name == SYNC_ASYNC.name:
            return ["jetstream {", "  sync_interval: always", "}"]
        return []


@adapter
class NatsJetStream(_NatsClient, Certified):
    """nats-py JetStream: ``js.publish`` / ``publish_async``, pull consumers with ``ack``."""

    system = "nats"
    capability = "certified"
    environment = JetStreamServer

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (ASYNC, ASYNC_YIELD, MEMORY_ASYNC, PUBLISH, SYNC_ASYNC)

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        if params.get("cold") and variant.name not in (ASYNC.name, MEMORY_ASYNC.name):
            return "the cold start is measured with publish_async (file and memory store)"
        if variant.name == ASYNC_YIELD.name and int(params["listeners"]) != 1:
            return "the loop's variations are measured with one listener"
        return None

    async def _open(self, subject: str) -> None:
        from nats.js.api import StorageType
        from nats.js.errors import BadRequestError

        await self.connect()
        self.subject = subject
        self.js = self.nc.jetstream(publish_async_max_pending=WINDOW)
        try:
            storage = (
                StorageType.MEMORY if self.variant.name == MEMORY_ASYNC.name else StorageType.FILE
            )
            await self.js.add_stream(name=STREAM, subjects=[subject], storage=storage)
        except BadRequestError:
            await self.js.stream_info(STREAM)  # made by another process meanwhile

    # --- sender -----------------------------------------------------------------------

    async def open_sender(self, subject: str) -> None:
        await self._open(subject)
        self.last = 0
        self.failed: list[BaseException] = []
        self.pending: asyncio.Future[Any] | None = None

    def yield_every(self) -> int:
        return YIELD_EVERY if self.variant.name == ASYNC_YIELD.name else 0

    async def send_new(self, subject: str, data: bytes) -> None:
        # A JetStream message is its subject and payload bytes: nothing to build.
        if self.variant.name == PUBLISH.name:
            ack = await self.js.publish(subject, data)
            self.last = ack.seq
            return
        future = await self.js.publish_async(subject, data)
        future.add_done_callback(self._acked)
        self.pending = future

    def _acked(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self.failed.append(exc)
        else:
            self.last = max(self.last, future.result().seq)

    async def flush(self) -> None:
        if self.variant.name == PUBLISH.name:
            return
        try:
            await asyncio.wait_for(self.js.publish_async_completed(), 60)
        except TimeoutError:
            raise TimeoutError("the server did not acknowledge every publish within 60 s") from None
        if self.failed:
            raise RuntimeError(f"{len(self.failed)} publishes failed, first: {self.failed[0]!r}")

    async def confirmed_by(self) -> int:
        last = self.last
        infos = await self.nc.jsm().consumers_info(STREAM)
        return sum(1 for info in infos if info.ack_floor and info.ack_floor.stream_seq >= last)

    # --- listener ---------------------------------------------------------------------

    async def open_listener(self, subject: str) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        await self._open(subject)
        self.durable = f"bench_l{self.index}_{secrets.token_hex(4)}"
        self.psub = await self.js.pull_subscribe(
            subject,
            durable=self.durable,
            stream=STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.NEW,
                max_ack_pending=MAX_ACK_PENDING,
                inactive_threshold=60.0,
            ),
        )

    async def consume(self, sink: Callable[[bytes], None]) -> None:
        from nats.errors import TimeoutError as NatsTimeout

        fetch = self.psub.fetch
        while True:
            try:
                messages = await fetch(FETCH_BATCH, timeout=1.0)
            except (NatsTimeout, TimeoutError):
                # An idle fetch ends in either (nats-py raises a bare asyncio timeout
                # from one of its paths): a listener waiting for the first message,
                # as a cold start's does, must not take it for the end.
                continue
            for msg in messages:
                sink(msg.data)
                await msg.ack()

    async def close(self) -> None:
        durable = getattr(self, "durable", None)
        nc = getattr(self, "nc", None)
        if durable is not None and nc is not None and not nc.is_closed:
            # If this fails, the consumer's inactive_threshold removes it anyway.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.js.delete_consumer(STREAM, durable), 10)
        await super().close()
