"""rvasync inside one process: the process transport, and the subject index behind it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from benchmarks.interfaces import Fanout, PubSub
from benchmarks.measure import deliver_through
from benchmarks.registry import Variant, adapter
from benchmarks.systems.rvasync_api import ListenerPubSub, missing, missing_module


@adapter
class RvProcessInproc(ListenerPubSub, PubSub):
    """``rv.process_transport()``: ``await t.send(msg)`` and ``async for`` on a Listener."""

    system = "rvasync"
    capability = "inproc"

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("process_transport", "Message")

    async def connect(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.transport = rv.process_transport()
        self.listeners: list[Any] = []

    async def close(self) -> None:
        for listener in getattr(self, "listeners", ()):
            await asyncio.wait_for(listener.close(), 10)


TRANSPORT = Variant(
    name="transport",
    label="process transport",
    headline=True,
    unavailable=lambda: missing("process_transport", "Message"),
)
INDEX = Variant(
    name="index",
    label="SubjectIndex.match only",
    headline=False,
    unavailable=lambda: missing_module("rvasync.subjects", "SubjectIndex"),
)


@adapter
class RvFanout(Fanout):
    """N listeners on the process transport, or the same N patterns in a bare SubjectIndex
    (the lookup the transport does per message, with its default result cache)."""

    system = "rvasync"
    capability = "fanout"

    @classmethod
    def unavailable(cls) -> str | None:
        return missing()

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (TRANSPORT, INDEX)

    async def setup(self, patterns: Sequence[str]) -> None:
        if self.variant.name == INDEX.name:
            from rvasync.subjects import SubjectIndex

            self.subject_index: Any = SubjectIndex()
            for number, pattern in enumerate(patterns):
                self.subject_index.add(pattern, number)
            return
        self.pubsub = RvProcessInproc(self.params, self.env, self.variant, self.index)
        await self.pubsub.connect()
        self.listeners = [await self.pubsub.subscribe(p) for p in patterns]

    async def deliver(self, subject: str, payload: bytes, count: int, listener: int) -> int:
        if self.variant.name == INDEX.name:
            match = self.subject_index.match
            delivered = 0
            for _ in range(count):
                delivered += len(match(subject))
            return delivered
        return await deliver_through(
            self.pubsub,
            self.listeners[listener],
            subject,
            payload,
            count,
            idle=float(self.params["idle"]),
            deadline=float(self.params["timeout"]) - 5,
        )

    async def close(self) -> None:
        pubsub = getattr(self, "pubsub", None)
        if pubsub is not None:
            await pubsub.close()
