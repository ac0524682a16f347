"""``RelayAgent``: a relay agent embedded in any asyncio program (``rvasync relay`` runs one).

The driver of :class:`~rvasync.protocol.relay.RelayAgentCore`. It owns an
inbox (the agent's point-to-point address), a listener on the agent's
locate subject, one listener per subject pattern its clients need, the
ledger file and the timer. Every inbound message on a client's pattern goes
to the core as bytes (``Message.to_bytes``: subject, reply subject and
certified label included), so what a client gets back later is the very
message the network carried.

Reply name substitution: a client's message that the core sends on with a
surrogate inbox gets it as its reply subject here, and one listener on the
subtree of the agent's address (``<address>.>``) takes the replies to every
surrogate; each goes to the core with its subject set back to the client's
own inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, NotPermitted, QueueDestroyed, TransportClosed
from rvasync.message import Message
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.names import check_correspondent_name
from rvasync.protocol.relay import (
    AppendRecord,
    ClientReview,
    Emit,
    Interest,
    RelayAgentCore,
    RelayTiming,
    SendFrame,
    locate_subject,
)
from rvasync.queues import Queue
from rvasync.relaydriver.frames import FRAME_FIELD, frame_message
from rvasync.relaydriver.ledgerfile import RelayLedgerFile
from rvasync.transport.base import BaseTransport

__all__ = ["RelayAgent"]

_FRAME = "frame"
_DATA = "data"
_REPLY = "reply"

PROBE_WINDOW = 0.5
"""How long a starting agent listens for another live agent of its name."""


class RelayAgent:
    """Relay agent ``name`` on ``transport``, storing for its clients in ``ledger``.

    ``ledger`` is a file path (the agent's own ledger: what it stores for
    absent clients survives its restart) or None to keep everything in the
    process. Use as an async context manager, or ``await agent.start()`` /
    ``await agent.close()``. Starting fails with NotPermitted if another
    agent of the same name answers on the network, and with
    :class:`~rvasync.errors.LedgerCorrupt` if the ledger file is damaged.
    """

    def __init__(
        self,
        transport: BaseTransport,
        name: str,
        *,
        ledger: str | os.PathLike[str] | None = None,
        sync_ledger: bool = False,
        timing: RelayTiming | None = None,
    ) -> None:
        if not isinstance(transport, BaseTransport):
            raise InvalidArgument(
                f"transport must be an rvasync transport, not {type(transport).__name__}"
            )
        check_correspondent_name(name, what="relay agent name")
        if timing is not None and not isinstance(timing, RelayTiming):
            raise InvalidArgument(f"timing must be a RelayTiming, not {type(timing).__name__}")
        if not isinstance(sync_ledger, bool):
            raise InvalidArgument(f"sync_ledger must be a bool, not {type(sync_ledger).__name__}")
        self._transport = transport
        self._name = name
        self._ledger_path = None if ledger is None else _check_path(ledger)
        self._sync = sync_ledger
        self._timing = timing or RelayTiming()
        self._core: RelayAgentCore | None = None
        self._file: RelayLedgerFile | None = None
        self._queue = Queue(name=f"relay:{name}")
        self._internal: list[Any] = []
        self._interests: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._last: Message | None = None
        self._closed = False
        self._started = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def started(self) -> bool:
        return self._started and not self._closed

    def review(self) -> list[ClientReview]:
        """Each client the agent knows: connected or not, how many messages it stores."""
        return [] if self._core is None else self._core.review()

    def stored(self, client: str) -> int:
        """How many inbound messages the agent holds for ``client``."""
        return 0 if self._core is None else self._core.stored(client)

    @property
    def surrogates(self) -> int:
        """Live surrogate inboxes the agent holds for its clients' replies."""
        return 0 if self._core is None else self._core.surrogates

    async def start(self) -> RelayAgent:
        if self._closed:
            raise TransportClosed(f"relay agent {self._name!r} is closed")
        if self._started:
            return self
        transport = self._transport
        transport.check_open()
        instance = os.urandom(8).hex()
        address = transport.create_inbox()
        if self._ledger_path is not None:
            self._file = RelayLedgerFile.open(self._ledger_path, self._name, sync=self._sync)
        try:
            core = RelayAgentCore(
                self._name,
                address,
                instance,
                ledger=None if self._file is None else self._file.state,
                file_ledger=self._file is not None,
                timing=self._timing,
            )
            self._core = core
            self._internal.append(transport.listen(address, queue=self._queue, closure=_FRAME))
            self._internal.append(
                transport.listen(locate_subject(self._name), queue=self._queue, closure=_FRAME)
            )
            self._internal.append(
                transport.listen_inbox_tree(address, queue=self._queue, closure=_REPLY)
            )
            self._task = asyncio.get_running_loop().create_task(
                self._pump(), name=f"relay:{self._name}"
            )
            if self._file is not None:
                self._file.start(self._on_durable, core.ledger.snapshot)
            await self._probe(core)
        except BaseException:
            await self._shutdown()
            raise
        self._started = True
        self._process(core.drain())
        return self

    async def _probe(self, core: RelayAgentCore) -> None:
        """Ask the network for another live agent of this name; refuse to start if one answers."""
        frame = core.probe()
        for _ in range(3):
            self._send_frame(frame.subject, frame.data)
            await asyncio.sleep(PROBE_WINDOW / 3)
            if core.conflict is not None:
                break
        if core.conflict is not None:
            raise NotPermitted(
                f"another relay agent named {self._name!r} is already running on this "
                "network; relay agent names must be unique"
            )
        # Interests restored from the ledger were held back until the probe passed.

    async def close(self) -> None:
        """Stop serving; what is stored stays in the ledger for the next start."""
        if self._closed:
            return
        self._closed = True
        await self._shutdown()

    async def _shutdown(self) -> None:
        for listener in [*self._internal, *self._interests.values()]:
            listener.close_now()
        self._internal.clear()
        self._interests.clear()
        self._queue.destroy()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._file is not None:
            self._file.close()

    async def __aenter__(self) -> RelayAgent:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._started else "not started")
        return f"<RelayAgent {self._name!r} {state}>"

    # --- inbound ------------------------------------------------------------------

    async def _pump(self) -> None:
        queue = self._queue
        while True:
            try:
                msg = await queue.get()
            except QueueDestroyed:
                return
            now = time.time()
            count = 0
            while msg is not None:
                try:
                    self._handle(msg, now)
                except Exception:
                    stderr_logger().exception("relay agent: a message could not be handled")
                count += 1
                if count & 1023 == 0:
                    self._drain()
                    now = time.time()
                msg = queue.poll()
            self._drain()

    def _drain(self) -> None:
        core = self._core
        if core is not None:
            self._process(core.drain())

    def _handle(self, msg: Message, now: float) -> None:
        core = self._core
        assert core is not None
        if msg.closure is _FRAME:
            data = msg.get(FRAME_FIELD)
            if isinstance(data, bytes):
                core.receive(data, msg.reply_subject, now)
        elif msg.closure is _REPLY:
            surrogate = msg.subject or ""
            inbox = core.reply_for(surrogate)
            if inbox is None:
                core.reply_message(surrogate, b"", now)  # late: reported, nowhere to go
                return
            reply = msg.delivery_copy(None, None)
            reply.subject = inbox
            core.reply_message(surrogate, reply.to_bytes(), now)
        else:
            # A message matching several patterns arrives once per listener; the
            # copies share field storage. Keep one.
            last = self._last
            if (
                last is not None
                and last.cm is msg.cm
                and msg.shares_fields(last)
                and last.subject == msg.subject
                and last.reply_subject == msg.reply_subject
            ):
                return
            self._last = msg
            subject = msg.subject
            if subject is not None:
                core.network_message(subject, msg.to_bytes(), now)

    # --- outputs -------------------------------------------------------------------------

    def _process(self, outputs: list[Any]) -> None:
        transport = self._transport
        for out in outputs:
            if isinstance(out, SendFrame):
                self._send_frame(out.subject, out.data)
            elif isinstance(out, Emit):
                try:
                    msg = Message.from_bytes(out.data)
                except Exception:
                    stderr_logger().warning("relay agent: dropped an undecodable client message")
                    continue
                if out.reply is not None:
                    msg.reply_subject = out.reply  # a surrogate inbox of this agent
                with contextlib.suppress(TransportClosed):
                    transport.send_internal(msg)
            elif isinstance(out, AppendRecord):
                if self._file is not None:
                    self._file.append(out.lsn, out.record)
            elif isinstance(out, Interest):
                self._interest(out.pattern, out.listening)
            elif isinstance(out, Advisory):
                with contextlib.suppress(TransportClosed):
                    transport.present(out.to_message())
        self._reschedule()

    def _interest(self, pattern: str, listening: bool) -> None:
        if listening:
            if pattern not in self._interests and not self._closed:
                self._interests[pattern] = self._transport.listen(
                    pattern, queue=self._queue, closure=_DATA
                )
        else:
            listener = self._interests.pop(pattern, None)
            if listener is not None:
                listener.close_now()

    def _send_frame(self, subject: str, data: bytes) -> None:
        core = self._core
        reply = None if core is None else core.address
        with contextlib.suppress(TransportClosed):
            self._transport.send_internal(frame_message(subject, data, reply))

    def _on_durable(self, lsn: int) -> None:
        core = self._core
        if core is not None and not self._closed:
            core.durable(lsn, time.time())
            self._process(core.drain())

    # --- time ------------------------------------------------------------------------------

    def _reschedule(self) -> None:
        core = self._core
        if core is None or self._closed:
            return
        deadline = core.next_deadline()
        if deadline == self._deadline and (deadline is None) == (self._timer is None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadline = deadline
        if deadline is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(0.0, deadline - time.time()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._deadline = None
        core = self._core
        if core is None or self._closed:
            return
        core.handle_timer(time.time())
        self._process(core.drain())


def _check_path(ledger: object) -> str:
    if isinstance(ledger, bytes) or not isinstance(ledger, (str, os.PathLike)):
        raise InvalidArgument(
            f"ledger must be a file path (str or os.PathLike) or None, not {type(ledger).__name__}"
        )
    path = os.fspath(ledger)
    if not isinstance(path, str) or not path:
        raise InvalidArgument(f"ledger must be a non-empty str path, got {ledger!r}")
    return path
