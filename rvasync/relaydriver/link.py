"""``RelayLink``: the asyncio driver of a CM transport's link to its relay agent.

``CmTransport(..., relay_agent=NAME)`` sends every message through
:meth:`emit` instead of the network, and opens its internal listeners with
:meth:`listen` instead of on the transport: the relay agent listens on
those subjects for it and pushes back what arrived, which this driver puts
in the listener's queue exactly as a transport listener would have (same
queue, same closure). Frames to and from the agent travel on the employed
transport (locate by multicast, then point-to-point inboxes).

Replies to a message sent with an inbox as reply subject come back through
the agent too (reply name substitution): the agent stored them while this
client was away and restored the inbox as their subject; this driver
delivers them to whatever listens on that inbox of the employed transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, QueueDestroyed, RvError, TransportClosed
from rvasync.message import Message
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.relay import REPLY_ROLE, Inbound, RelayClient, RelayTiming, SendFrame
from rvasync.queues import Queue
from rvasync.relaydriver.frames import FRAME_FIELD, frame_message
from rvasync.subjects import subject_matches
from rvasync.transport.base import BaseTransport

__all__ = ["RelayLink", "RelayListener"]

_CONFIRM_REQUEST = "confirm_request"


class RelayListener:
    """What :meth:`RelayLink.listen` returns: an internal listener served by the relay."""

    def __init__(self, link: RelayLink, subject: str, queue: Queue, closure: str) -> None:
        self.subject = subject
        self.queue = queue
        self.closure = closure
        self._link = link
        self.closed = False

    def close_now(self) -> None:
        if not self.closed:
            self.closed = True
            self._link.unlisten(self)


class RelayLink:
    """Correspondent ``client``'s link to relay agent ``agent`` over ``transport``."""

    def __init__(
        self,
        transport: BaseTransport,
        client: str,
        agent: str,
        *,
        timing: RelayTiming | None = None,
        on_connected: Callable[[bool], None] | None = None,
    ) -> None:
        """``on_connected(connected)`` is called whenever the link comes up or goes down."""
        if timing is not None and not isinstance(timing, RelayTiming):
            raise InvalidArgument(
                f"relay timing must be a RelayTiming, not {type(timing).__name__}"
            )
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        address = transport.create_inbox()
        epoch = int.from_bytes(os.urandom(5), "big") or 1
        self._core = RelayClient(client, agent, address, epoch=epoch, timing=timing)
        self._frames = Queue(name=f"relaylink:{client}")
        self._inbox = transport.listen(address, queue=self._frames)
        self._listeners: dict[tuple[str, str], list[RelayListener]] = {}
        self._task = self._loop.create_task(self._pump(), name=f"relaylink:{client}")
        self._timer: asyncio.TimerHandle | None = None
        self._finished: asyncio.Event = asyncio.Event()
        self._closed = False
        self._scheduled = False
        self._frozen = False
        self._clock: float | None = None
        self._deadline: float | None = None
        self._routes: dict[str, list[tuple[str, RelayListener]]] | None = None
        self._on_connected = on_connected
        self._was_connected = False

    @property
    def agent(self) -> str:
        return self._core.agent

    @property
    def state(self) -> str:
        """``disconnected``, ``locating``, ``connecting``, ``connected``, ``disconnecting``..."""
        return self._core.state

    @property
    def connected(self) -> bool:
        return self._core.connected

    @property
    def stored(self) -> int:
        """Outbound events the agent has not acknowledged yet (stored while disconnected)."""
        return self._core.stored

    # --- calls from the CM transport -----------------------------------------------------

    def connect(self) -> None:
        self._finished.clear()
        self._core.connect(time.time())
        self._process()

    def disconnect(self) -> None:
        self._finished.clear()
        self._core.disconnect(time.time())
        self._process()

    def emit(self, msg: Message) -> Awaitable[None] | None:
        """Send ``msg`` through the agent (stored while disconnected); never blocks."""
        if self._closed:
            raise TransportClosed(f"the relay link of {self._core.client!r} is closed")
        droppable = msg.get("kind") == _CONFIRM_REQUEST and "rvcm" in msg
        self._core.emit(msg.to_bytes(), self._now(), droppable=droppable, reply=msg.reply_subject)
        self._process()
        return None

    def _now(self) -> float:
        """The wall clock, read once per loop turn for a burst of sends."""
        now = self._clock
        if now is None:
            now = self._clock = time.time()
            self._loop.call_soon(self._reset_clock)
        return now

    def _reset_clock(self) -> None:
        self._clock = None

    def listen(self, subject: str, *, queue: Queue, closure: str) -> RelayListener:
        listener = RelayListener(self, subject, queue, closure)
        key = (subject, closure)
        entries = self._listeners.setdefault(key, [])
        entries.append(listener)
        self._routes = None
        if len(entries) == 1:
            self._core.listen(subject, closure, time.time())
            self._process()
        return listener

    def freeze(self) -> None:
        """The CM transport is closing: listeners it closes now stay with the agent.

        A persistent correspondent that goes away (a cron job ending, a laptop
        program quitting) still wants the agent to store for it; only a
        listener the program closes itself tells the agent to stop.
        """
        self._frozen = True

    def unlisten(self, listener: RelayListener) -> None:
        key = (listener.subject, listener.closure)
        entries = self._listeners.get(key)
        if entries is None or listener not in entries:
            return
        entries.remove(listener)
        self._routes = None
        if not entries:
            del self._listeners[key]
            if not self._closed and not self._frozen:
                self._core.unlisten(listener.subject, listener.closure, time.time())
                self._process()

    async def close(self, timeout: float) -> None:
        """The implicit disconnect: hand over what is pending (up to ``timeout``), then stop."""
        if self._closed:
            return
        self._core.close(time.time())
        self._run()
        if not self._core.finished and not self._transport.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._finished.wait(), timeout)
        self._closed = True
        self._inbox.close_now()
        self._frames.destroy()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self._deadline = None

    # --- frames from the agent -------------------------------------------------------------

    async def _pump(self) -> None:
        frames = self._frames
        while True:
            try:
                msg = await frames.get()
            except QueueDestroyed:
                return
            now = time.time()
            while msg is not None:
                data = msg.get(FRAME_FIELD)
                if isinstance(data, bytes):
                    try:
                        self._core.receive(data, now)
                    except Exception:
                        stderr_logger().exception("relay link: a frame could not be handled")
                msg = frames.poll()
            self._run()

    def _process(self) -> None:
        """Carry out the core's outputs at the end of this loop turn (once for a burst)."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        core = self._core
        transport = self._transport
        for out in core.drain():
            if isinstance(out, SendFrame):
                with contextlib.suppress(TransportClosed):
                    transport.send_internal(frame_message(out.subject, out.data, core.address))
            elif isinstance(out, Inbound):
                self._inbound(out)
            elif isinstance(out, Advisory):
                with contextlib.suppress(TransportClosed):
                    transport.present(out.to_message())
        if core.finished:
            self._finished.set()
        connected = core.connected
        if connected != self._was_connected:
            self._was_connected = connected
            if self._on_connected is not None:
                self._on_connected(connected)
        self._reschedule()

    def _inbound(self, out: Inbound) -> None:
        try:
            msg = Message.from_bytes(out.data)
        except RvError:
            stderr_logger().warning("relay link: dropped an undecodable inbound message")
            return
        if out.role == REPLY_ROLE:
            self._reply(msg)
            return
        # Every listener opened with this role shares one queue and closure;
        # the first one that matches the subject takes it (the certified core
        # dispatches to CM listeners itself, so one copy is enough). If none
        # matches any more, the listening was closed meanwhile: nobody needs it.
        routes = self._routes
        if routes is None:
            routes = self._routes = {}
            for (pattern, role), listeners in self._listeners.items():
                if listeners:
                    routes.setdefault(role, []).append((pattern, listeners[0]))
        subject = msg.subject or ""
        for pattern, target in routes.get(out.role, ()):
            if pattern == subject or subject_matches(pattern, subject):
                # The message was decoded for this delivery alone: label it in place.
                msg.listener = target
                msg.closure = target.closure
                try:
                    target.queue.deliver(msg)
                except QueueDestroyed:
                    pass  # the CM transport is closing
                return

    def _reply(self, msg: Message) -> None:
        """A reply the agent relayed: to the listeners of its inbox on the employed transport.

        The agent already put the original inbox back as the subject, so the
        program's inbox listener (or ``send_request``) sees the reply as
        addressed. If nothing listens there any more it can never be
        received: RELAY.REPLY_LOST says so.
        """
        inbox = msg.subject or ""
        taken = 0
        with contextlib.suppress(TransportClosed):
            taken = self._transport.present(msg)
        if not taken:
            self._core.reply_unclaimed(inbox)
            self._process()

    # --- time ------------------------------------------------------------------------------------

    def _reschedule(self) -> None:
        deadline = None if self._closed else self._core.next_deadline()
        if deadline == self._deadline and (deadline is None) == (self._timer is None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadline = deadline
        if deadline is not None:
            self._timer = self._loop.call_later(max(0.0, deadline - time.time()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._deadline = None
        if self._closed:
            return
        self._core.handle_timer(time.time())
        self._process()
