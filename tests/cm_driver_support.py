"""Helpers for the CmTransport tests: fast protocol timing, waiting, advisories, crashes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from rvasync.cmdriver import CmTransport
from rvasync.message import Message
from rvasync.protocol.cm import CmTiming

FAST = CmTiming(
    confirm_request_interval=0.2,
    register_retry_interval=0.1,
    register_attempts=3,
    retransmit_interval=0.1,
)
"""Protocol intervals short enough for tests that wait for retries and requests."""


async def until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Wait until ``predicate()`` holds (polling); fail the test after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)
    assert predicate(), what


class Advisories:
    """Every certified-delivery advisory presented on a transport, in order."""

    def __init__(self, transport) -> None:
        self.messages: list[Message] = []
        self._listener = transport.listen("_RV.*.RVCM.>", callback=self.messages.append)

    def of(self, condition: str) -> list[Message]:
        """Advisories whose subject has ``condition`` (e.g. ``DELIVERY.CONFIRM``)."""
        marker = f".RVCM.{condition}."
        return [m for m in self.messages if marker in (m.subject or "")]

    def fields(self, condition: str) -> list[dict]:
        return [{f.name: f.value for f in m} for m in self.of(condition)]

    async def close(self) -> None:
        await self._listener.close()


def review(cm: CmTransport, subject: str):
    """The ledger review of one outbound subject, or None if the ledger has none."""
    found = cm.review_ledger(subject)
    return found[0] if found else None


def payloads(messages: list[Message], field: str = "n") -> list:
    return [m[field] for m in messages]


async def crash(cm: CmTransport) -> None:
    """Stop ``cm`` the way kill -9 would: no more input or output, the file as written so far.

    Ledger appends still queued in memory are lost (a write already handed
    to the operating system completes, as it would after a real kill).
    """
    cm._closed = True
    internal = list(cm._internal) + list(cm._watched.values())
    internal += [entry[0] for entry in cm._data_listeners.values()]
    for listener in internal:
        listener._close_now()
    cm._inbound.destroy()
    for listener in list(cm._listeners.values()):
        listener._closed = True
        if listener._own_queue:
            listener.queue.destroy()
    tasks = [t for t in (cm._pump_task,) if t is not None]
    for handle in (cm._timer, cm._sweep_handle):
        if handle is not None:
            handle.cancel()
    ledger = cm._ledger
    if ledger is not None:
        ledger.abandon()  # nothing queued is written; the lock goes, as with the process
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
