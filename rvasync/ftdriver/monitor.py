"""``rv.FtMonitor``: a passive count of a fault tolerance group's active members.

The monitor only listens to the group's records (members cannot tell it is
there) and feeds them to :class:`~rvasync.protocol.ft.FtMonitorCore`, which
returns one count per change. Each count goes to the optional callback
(``callback(monitor, count)``, plain or async, in order) and to the
monitor's async iterator.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from rvasync._logging import stderr_logger
from rvasync.driverkit.channel import ORIGIN_MEMORY, GroupChannel
from rvasync.driverkit.deadline import DeadlineTimer
from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.ftdriver._serial import SerialCallback
from rvasync.ftdriver.member import check_transport
from rvasync.protocol.ft import FtMonitorCore, FtRecord
from rvasync.transport.base import BaseTransport

__all__ = ["BACKLOG_LIMIT", "FtMonitor", "FtMonitorCallback"]

FtMonitorCallback = Callable[["FtMonitor", int], Awaitable[None] | None]

BACKLOG_LIMIT = 10_000
"""Counts kept for the iterator; beyond this the oldest are dropped (the newest is always kept)."""


class FtMonitor:
    """Counts the active members of ``group``; an async context manager and async iterator.

    ``async for count in monitor`` yields the number of active members at
    every change, in order (one consumer: with several iterating tasks, each
    change goes to one of them). Without a callback, counts wait for the
    iterator from the moment the monitor starts; with one, the iterator sees
    the changes from ``aiter()`` on (so a callback-only monitor stores
    nothing). ``lost_interval`` (normally the group's activation
    interval) is how long a silent member keeps being counted; never less
    than the activation interval the member announces, so a punctual member
    is never counted lost.
    """

    def __init__(
        self,
        transport: BaseTransport,
        group: str,
        *,
        lost_interval: float,
        callback: FtMonitorCallback | None = None,
    ) -> None:
        self._transport = check_transport(transport, "FtMonitor")
        if callback is not None and not callable(callback):
            raise InvalidArgument(
                f"FtMonitor callback must be a function of (monitor, count) or None, "
                f"got {callback!r}"
            )
        self._core = FtMonitorCore(group, lost_interval=lost_interval)
        self._channel = GroupChannel(
            self._transport,
            self._core.group,
            memory=ORIGIN_MEMORY * self._core.lost_interval,
            on_record=self._on_record,
            on_gone=self._on_gone,
        )
        self._callbacks = (
            None if callback is None else SerialCallback(self, callback, f"monitor:{group}")
        )
        self._backlog: deque[int] = deque(maxlen=BACKLOG_LIMIT)
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: DeadlineTimer | None = None
        self._state = "new"
        self._overflow_logged = False
        self._iterating = callback is None

    @property
    def group(self) -> str:
        return self._core.group

    @property
    def lost_interval(self) -> float:
        return self._core.lost_interval

    @property
    def active_count(self) -> int:
        """The number of active members right now (0 before any heartbeat is heard)."""
        return self._core.active_count

    @property
    def running(self) -> bool:
        return self._state == "running"

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> FtMonitor:
        """Start listening to the group (``async with`` does this)."""
        if self._state != "new":
            raise NotPermitted(
                f"this FtMonitor of group {self.group!r} was already started; create a new one"
            )
        self._transport.check_open()
        self._loop = asyncio.get_running_loop()
        self._timer = DeadlineTimer(self._loop, self._on_timer)
        self._changed = asyncio.Event()
        self._channel.start()
        self._state = "running"
        return self

    async def close(self) -> None:
        """Stop listening; iteration ends once the counts already yielded are consumed."""
        if self._state == "running":
            self._state = "closed"
            assert self._timer is not None and self._changed is not None
            self._timer.cancel()
            self._channel.stop()
            self._changed.set()
        if self._callbacks is not None:
            try:
                await self._callbacks.wait_idle()
            except asyncio.CancelledError:
                self._callbacks.cancel()
                raise

    async def __aenter__(self) -> FtMonitor:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> FtMonitor:
        # From here on counts are kept for the iterator, even before the
        # first ``__anext__`` runs.
        self._iterating = True
        return self

    async def __anext__(self) -> int:
        if self._state == "new":
            raise NotPermitted(
                "start the FtMonitor (async with rv.FtMonitor(...) as monitor) before iterating"
            )
        assert self._changed is not None
        self._iterating = True
        while not self._backlog:
            if self._state != "running":
                raise StopAsyncIteration
            self._changed.clear()
            await self._changed.wait()
        return self._backlog.popleft()

    def __repr__(self) -> str:
        return f"<FtMonitor {self.group!r} active={self.active_count} {self._state}>"

    # -- inputs -----------------------------------------------------------------

    def _on_record(self, record: FtRecord) -> None:
        if self._state == "running":
            assert self._loop is not None
            self._report(self._core.receive(record, self._loop.time()))

    def _on_gone(self, members: list[str]) -> None:
        if self._state == "running":
            assert self._loop is not None
            for member in members:
                self._report(self._core.peer_gone(member, self._loop.time()))

    def _on_timer(self, now: float) -> None:
        if self._state == "running":
            self._report(self._core.handle_timer(now))

    def _report(self, counts: list[int]) -> None:
        if counts:
            if self._iterating:
                self._queue_for_iterator(counts)
            if self._callbacks is not None:
                self._callbacks.submit(counts)
        assert self._timer is not None
        self._timer.arm(self._core.next_deadline())

    def _queue_for_iterator(self, counts: list[int]) -> None:
        if len(self._backlog) + len(counts) > BACKLOG_LIMIT and not self._overflow_logged:
            self._overflow_logged = True
            stderr_logger().warning(
                "fault tolerance monitor: the counts are not being consumed; dropping the oldest",
                group=self.group,
                kept=BACKLOG_LIMIT,
            )
        self._backlog.extend(counts)
        assert self._changed is not None
        self._changed.set()
