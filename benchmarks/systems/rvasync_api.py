"""What this rvasync build exposes: the availability checks of the rvasync adapters.

Benchmarks program against the public API (``import rvasync as rv``, /work/shared/api.md).
A capability whose names are not importable yet makes its rows "unavailable" with
the reason "not available in this rvasync build: ...", never a failure.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from benchmarks.interfaces import Sink

PREFIX = "not available in this rvasync build"


def rvasync() -> ModuleType | None:
    """The rvasync package, or None if it does not import."""
    try:
        return importlib.import_module("rvasync")
    except ImportError:
        return None


def missing(*names: str) -> str | None:
    """None if ``rv.<name>`` exists for every name, else the unavailability reason."""
    rv = rvasync()
    if rv is None:
        return f"{PREFIX}: rvasync does not import"
    absent = [n for n in names if not hasattr(rv, n)]
    if absent:
        return f"{PREFIX}: " + ", ".join(f"rv.{n}" for n in absent) + " missing"
    return None


def missing_module(module: str, *names: str) -> str | None:
    """Like :func:`missing`, for names of a submodule (``rvasync.subjects`` ...)."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return f"{PREFIX}: {module} does not import"
    absent = [n for n in names if not hasattr(mod, n)]
    if absent:
        return f"{PREFIX}: " + ", ".join(f"{module}.{n}" for n in absent) + " missing"
    return None


def implementations(hot_path: str) -> list[ModuleType]:
    """``rvasync._accel.implementations(hot_path)`` ([pure, native-if-built]), or [] if absent."""
    try:
        accel = importlib.import_module("rvasync._accel")
        return list(accel.implementations(hot_path))
    except (ImportError, AttributeError):
        return []


class ListenerPubSub:
    """The publish/subscribe calls every rvasync transport shares, for PubSub adapters.

    ``self.transport`` (an open rvasync transport), ``self.rv`` (the package) and
    ``self.listeners`` (closed by the adapter) are set by the adapter's ``connect``.
    Publish with ``await t.send(msg)``; receive with ``async for`` on a Listener.
    """

    transport: Any
    rv: Any
    listeners: list[Any]

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

    async def publish_new(self, subject: str, payload: bytes) -> None:
        await self.transport.send(self.rv.Message(subject, {"data": payload}))
