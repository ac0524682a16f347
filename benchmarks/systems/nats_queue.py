"""NATS as the distributed-queue peer: a JetStream work queue, and a core queue group.

The broker is nats-server with JetStream (``-js -sd <store>``, the
:class:`~benchmarks.systems.nats_jetstream.JetStreamServer` environment). Rows (variants):

- *JetStream work queue, file store* and *memory store*: the scheduler process
  (re)creates the stream ``BENCH_TASKS`` with work-queue retention on the
  subject and one durable pull consumer (explicit acks) that the workers
  share, as nats-py's documentation sets up a work queue; then it idles
  (nats-server does the scheduling). Workers ``fetch`` :data:`FETCH_BATCH`
  messages at a time and ``ack`` each; the sender publishes with
  ``publish_async`` (up to :data:`WINDOW` PubAcks awaited at once). A task is
  done once the stream no longer holds it (work-queue retention removes a
  message when its ack arrives), read from ``stream_info``.
- *core queue group* (no acknowledgement, for reference): workers subscribe
  to the subject in one queue group; the sender publishes. A task is done
  once a worker has received it: the sender asks every worker for its count
  on a side subject and adds up the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.registry import Variant, adapter
from benchmarks.scenarios.queue import TaskQueue
from benchmarks.systems.nats_jetstream import JetStreamServer
from benchmarks.systems.nats_peer import _NatsClient

STREAM = "BENCH_TASKS"
CONSUMER = "BENCH_WORKERS"
QUEUE_GROUP = "BENCH_WORKERS"

#: Seconds a JetStream API request (stream and consumer set-up, stream_info) may take.
API_TIMEOUT = 30.0

#: PubAcks awaited at once by the sender.
WINDOW = 256

#: Messages a worker asks for per fetch.
FETCH_BATCH = 100

#: Where core-queue-group workers answer "how many tasks have you had?".
COUNT_SUBJECT = "BENCH.TASKS.COUNT"

#: Seconds the sender waits for the workers' count answers.
COUNT_WAIT = 1.0

JS_FILE = Variant(
    name="js-file",
    label=f"JetStream work queue, file store, fetch {FETCH_BATCH}, publish_async x{WINDOW}",
)
JS_MEMORY = Variant(
    name="js-memory",
    label=f"JetStream work queue, memory store, fetch {FETCH_BATCH}, publish_async x{WINDOW}",
)
CORE = Variant(name="core", label="core queue group (no acknowledgement)")


@adapter
class NatsTaskQueue(_NatsClient, TaskQueue):
    """JetStream work-queue stream with a shared pull consumer, or a core queue group."""

    system = "nats"
    capability = "queue"
    environment = JetStreamServer

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (JS_FILE, JS_MEMORY, CORE)

    @property
    def jetstream(self) -> bool:
        return self.variant.name != CORE.name

    async def _open(self, subject: str) -> None:
        await self.connect()
        self.subject = subject
        # A generous API timeout: on a loaded 2-core machine 5 s (the default) is not enough.
        self.js = self.nc.jetstream(timeout=API_TIMEOUT, publish_async_max_pending=WINDOW)

    # --- scheduler --------------------------------------------------------------------

    async def open_scheduler(self, subject: str) -> None:
        await self._open(subject)
        if not self.jetstream:
            return
        from nats.js.api import (
            AckPolicy,
            ConsumerConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )
        from nats.js.errors import NotFoundError

        with contextlib.suppress(NotFoundError):
            await self.js.delete_stream(STREAM)  # a fresh stream every repetition
        storage = StorageType.FILE if self.variant.name == JS_FILE.name else StorageType.MEMORY
        await self.js.add_stream(
            StreamConfig(
                name=STREAM,
                subjects=[subject],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=storage,
            )
        )
        await self.js.add_consumer(
            STREAM, ConsumerConfig(durable_name=CONSUMER, ack_policy=AckPolicy.EXPLICIT)
        )

    # --- worker -----------------------------------------------------------------------

    async def open_worker(self, subject: str) -> None:
        await self._open(subject)
        self.count = 0
        if self.jetstream:
            self.psub = await self.js.pull_subscribe(subject, durable=CONSUMER, stream=STREAM)
            return
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_task(msg: Any) -> None:
            self.queue.put_nowait(msg.data)

        async def on_count(msg: Any) -> None:
            await self.nc.publish(msg.reply, str(self.count).encode())

        await self.nc.subscribe(subject, queue=QUEUE_GROUP, cb=on_task)
        await self.nc.subscribe(COUNT_SUBJECT, cb=on_count)
        await self.nc.flush()

    async def work(self, sink: Callable[[bytes], None]) -> None:
        if not self.jetstream:
            get = self.queue.get
            while True:
                sink(await get())
                self.count += 1
        from nats.errors import TimeoutError as NatsTimeout

        fetch = self.psub.fetch
        while True:
            try:
                messages = await fetch(FETCH_BATCH, timeout=1.0)
            except NatsTimeout:
                continue
            for msg in messages:
                sink(msg.data)
                await msg.ack()

    # --- sender -----------------------------------------------------------------------

    async def open_sender(self, subject: str) -> None:
        await self._open(subject)
        self.failed: list[BaseException] = []

    async def send(self, data: bytes) -> None:
        if not self.jetstream:
            await self.nc.publish(self.subject, data)
            return
        future = await self.js.publish_async(self.subject, data)
        future.add_done_callback(self._acked)

    def _acked(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            self.failed.append(future.exception())  # type: ignore[arg-type]  # checked not None

    async def flush(self) -> None:
        if not self.jetstream:
            await self.nc.flush()
            return
        await asyncio.wait_for(self.js.publish_async_completed(), 60)
        if self.failed:
            raise RuntimeError(f"{len(self.failed)} publishes failed, first: {self.failed[0]!r}")

    async def all_done(self, sent: int) -> bool:
        if self.jetstream:
            info = await self.js.stream_info(STREAM)
            return bool(info.state.messages == 0)
        return await self._received() >= sent

    async def _received(self) -> int:
        """The workers' counts added up (core queue group)."""
        workers = int(self.params["workers"])
        inbox = self.nc.new_inbox()
        answers: asyncio.Queue[int] = asyncio.Queue()

        async def on_answer(msg: Any) -> None:
            answers.put_nowait(int(msg.data))

        sub = await self.nc.subscribe(inbox, cb=on_answer)
        try:
            await self.nc.publish(COUNT_SUBJECT, b"", reply=inbox)
            total = 0
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(COUNT_WAIT):
                    for _ in range(workers):
                        total += await answers.get()
            return total
        finally:
            await sub.unsubscribe()
