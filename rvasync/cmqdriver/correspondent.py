"""The queue's certified correspondent, held by whichever member is the scheduler.

Senders see one listening correspondent named after the queue ("the sender
sees one correspondent"). Only the active scheduler embodies it: on becoming
scheduler a member opens an internal :class:`~rvasync.CmTransport` with the
queue's name, ``require_old=True`` (queue members require old messages,
chapter 12) and no ledger file, listening with explicit confirmation to every
subject the member's program listens to. A task is confirmed to its sender
only once a worker completed it. On losing the role the member closes that
transport *without* cancelling agreements: the senders keep every
unconfirmed task and deliver it to the next scheduler when it registers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from rvasync._logging import stderr_logger
from rvasync.cmdriver import CmListener, CmTransport
from rvasync.errors import RvError
from rvasync.message import Message
from rvasync.protocol.cmq import TaskId
from rvasync.transport.base import BaseTransport

__all__ = ["SchedulerCorrespondent"]

TaskCallback = Callable[[TaskId | None, Message], None]

_new = tuple.__new__


class SchedulerCorrespondent:
    """The internal CM transport of an active scheduler, its listeners and pending confirms."""

    def __init__(self, transport: BaseTransport, name: str, on_task: TaskCallback) -> None:
        self._transport = transport
        self._name = name
        self._on_task = on_task
        self._cm: CmTransport | None = None
        self._listeners: dict[str, CmListener] = {}
        self._pending: dict[TaskId, Message] = {}
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> bool:
        return self._cm is not None

    def start(self, subjects: list[str]) -> None:
        """Become the queue's listening correspondent for ``subjects``."""
        if self._cm is not None:
            return
        self._cm = CmTransport(self._transport, self._name, require_old=True)
        for subject in subjects:
            self.add_subject(subject)

    def add_subject(self, subject: str) -> None:
        cm = self._cm
        if cm is None or subject in self._listeners:
            return
        # Each task is taken as the transport delivers it: no queue and dispatcher
        # task in between (_on_message only notes it; the core gets it in a later
        # handle, _on_task). Nothing is confirmed on taking: the listener confirms
        # explicitly, once a worker completed the task.
        listener = cm.listen(subject, explicit_confirm=True)
        listener.intercept(self._on_message)
        self._listeners[subject] = listener

    def stop(self) -> None:
        """Stop being the correspondent; unconfirmed tasks stay with their senders."""
        cm = self._cm
        self._cm = None
        self._listeners.clear()
        self._pending.clear()
        if cm is not None:
            task = asyncio.get_running_loop().create_task(cm.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        self.stop()
        for task in list(self._closing):
            with contextlib.suppress(Exception):
                await task

    def forget(self, tid: TaskId) -> None:
        """A task the scheduler will not confirm (discarded): drop its message."""
        self._pending.pop(tid, None)

    def confirm(self, tid: TaskId) -> None:
        """A worker completed ``tid``: confirm it to its sender (batched per loop turn)."""
        msg = self._pending.pop(tid, None)
        if msg is None:
            return
        listener = msg.listener
        if not isinstance(listener, CmListener) or listener.closed:
            return
        try:
            listener.confirm_soon(msg)
        except RvError as exc:
            stderr_logger().warning(
                "confirming a distributed queue task failed", queue=self._name, problem=str(exc)
            )

    def _on_message(self, msg: Message) -> None:
        cm = msg.cm
        if cm is not None and cm.sequence is not None:
            # (tuple.__new__: TaskId(...) runs a Python-level __new__, per task)
            tid = _new(TaskId, (cm.sender, msg.subject or "", cm.sequence))
            self._pending[tid] = msg
            self._on_task(tid, msg)
        else:
            self._on_task(None, msg)
