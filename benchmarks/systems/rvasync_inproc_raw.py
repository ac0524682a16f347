"""rvasync's process transport for the raw intra-process scenario, native and pure.

Two rows: the native hot paths (the headline; "unavailable" unless every hot
path is built) and the pure-Python twins, forced with ``RVASYNC_PURE=1`` in the
worker's environment. The worker checks that it really runs what its row says.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from benchmarks.registry import Variant, adapter
from benchmarks.scenarios.inproc_raw import RawInproc
from benchmarks.systems.rvasync_api import PREFIX, missing


def _native_missing() -> str | None:
    try:
        from rvasync._accel import HOT_PATHS, native_module
    except ImportError:
        return f"{PREFIX}: rvasync._accel does not import"
    absent = [name for name in HOT_PATHS if native_module(name) is None]
    if absent:
        return f"{PREFIX}: rvasync_native {', '.join(absent)} not built"
    return None


NATIVE = Variant(name="native", label="native", headline=True, unavailable=_native_missing)
PURE = Variant(
    name="pure", label="pure Python, RVASYNC_PURE=1", env={"RVASYNC_PURE": "1"}, headline=False
)


@adapter
class RvRawInproc(RawInproc):
    """``rv.process_transport()``: its bound ``send``, ``async for`` and callback listeners."""

    system = "rvasync"
    capability = "inproc-raw"

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("process_transport", "Message", "FieldType", "native_enabled")

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (NATIVE, PURE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import rvasync as rv

        native = rv.native_enabled()
        if native != (self.variant.name == NATIVE.name):
            raise RuntimeError(
                f"row {self.variant.label!r} runs with native hot paths "
                f"{'on' if native else 'off'}: RVASYNC_PURE did not take effect"
            )
        self.rv = rv
        self.transport = rv.process_transport()
        self.listeners: list[Any] = []

    def message(self, subject: str, size: int) -> Any:
        msg = self.rv.Message(subject)
        msg.add("data", b"x" * size, type=self.rv.FieldType.OPAQUE)
        return msg

    def sender(self) -> Callable[[Any], Awaitable[Any]]:
        return self.transport.send

    def iterate(self, subject: str) -> AsyncIterator[Any]:
        listener = self.transport.listen(subject)
        self.listeners.append(listener)
        return listener

    def listen(self, subject: str, callback: Callable[[Any], None]) -> None:
        self.listeners.append(self.transport.listen(subject, callback=callback))

    async def release(self) -> None:
        listeners, self.listeners = self.listeners, []
        for listener in listeners:
            await asyncio.wait_for(listener.close(), 10)

    async def close(self) -> None:
        await self.release()
