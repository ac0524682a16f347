"""``CmTransport``: certified message delivery over any rvasync transport.

This is the asyncio driver of the sans-IO core
(:class:`~rvasync.protocol.cm.CmCorrespondent`). It owns everything the core
does not: the internal listeners that bring labeled messages and records in,
one task that feeds them to the core in arrival order, the timer that wakes
the core, the ledger file, and the CM listeners the program reads from.
After every input it drains the core's outputs and carries them out in
order (send a record, deliver to a CM listener, present an advisory, append
to the ledger). See docs/certified.md ("Using CmTransport").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.cmdriver.ledgerfile import LedgerFile, LedgerTrouble, check_ledger_path
from rvasync.cmdriver.listener import CmCallback, CmListener, ListenerHooks, present_in
from rvasync.cmdriver.wire import (
    internal_sender,
    make_label,
    message_fields,
    record_message,
)
from rvasync.correlation import CorrelationId, check_correlation_id
from rvasync.errors import (
    InvalidArgument,
    InvalidSubject,
    MalformedMessage,
    NotPermitted,
    QueueDestroyed,
    RequestTimeout,
    RvError,
    TransportClosed,
)
from rvasync.message import Message
from rvasync.protocol.cm import (
    AppendLedger,
    CmCorrespondent,
    CmTiming,
    Deliver,
    LedgerState,
    SubjectReview,
    Transmit,
)
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.ledger import LedgerRecord
from rvasync.protocol.cm.names import (
    any_instance_address,
    check_correspondent_name,
    check_listen_pattern,
    check_time_limit,
    hello_subject,
    instance_address,
    instance_route,
    is_transient_name,
    new_transient_name,
)
from rvasync.protocol.cm.records import DataRecord, Hello, RegisterRequest, parse_record
from rvasync.protocol.relay import RelayTiming
from rvasync.queues import Queue
from rvasync.relaydriver.link import RelayLink
from rvasync.sendpace import pacer_for
from rvasync.subjects import validate_subject
from rvasync.transport.base import BaseTransport
from rvasync.transport.retained import RetainedHandOver

__all__ = ["CmTransport"]

# Roles of the internal listeners, carried as their closure.
_DATA = "data"
_P2P = "p2p"
_OWN_HELLO = "own-hello"
_PEER_HELLO = "peer-hello"

RELAY_CLOSE_TIMEOUT = 5.0
"""How long close() waits for the relay agent to take what is pending."""

_SWEEP_INTERVAL = 0.5
"""How often deliveries waiting in a program's queue are checked for having left it."""


class CmTransport:
    """A certified-delivery (CM) transport employing ``transport`` for the network.

    ``name`` is the correspondent name: a reusable name you choose (subject
    syntax, no wildcards, not starting with ``_``), or None for a generated
    transient name. ``ledger`` is a file path for a file-based ledger, or
    None to keep the ledger in the process. A reusable name with a ledger
    file makes a *persistent correspondent*, which a later transport with the
    same name and file continues. ``require_old`` asks senders to keep and
    deliver what an earlier instance of this name had not confirmed.
    ``sync_ledger`` makes ``send`` return only once its ledger record is on
    disk (fsync, shared by concurrent sends). ``default_time_limit`` (seconds,
    0 = none) applies to sends that give no time limit. ``timing`` tunes the
    protocol intervals (:class:`~rvasync.protocol.cm.CmTiming`).

    With a ledger file, open the transport before use (``async with`` or
    ``await cm.open()``; coroutine methods open it on first use). With a
    process ledger it is ready at once. Closing it never closes ``transport``
    and never cancels certified agreements.
    """

    def __init__(
        self,
        transport: BaseTransport,
        name: str | None = None,
        *,
        ledger: str | os.PathLike[str] | None = None,
        require_old: bool = False,
        sync_ledger: bool = False,
        relay_agent: str | None = None,
        default_time_limit: float = 0,
        timing: CmTiming | None = None,
        relay_timing: RelayTiming | None = None,
    ) -> None:
        if not isinstance(transport, BaseTransport):
            raise InvalidArgument(
                f"transport must be an rvasync transport, not {type(transport).__name__}"
            )
        if transport.closed:
            raise TransportClosed(f"cannot create a CM transport on a closed {transport!r}")
        if name is not None:
            check_correspondent_name(name)
        for flag, value in (("require_old", require_old), ("sync_ledger", sync_ledger)):
            if not isinstance(value, bool):
                raise InvalidArgument(f"{flag} must be a bool, not {type(value).__name__}")
        if relay_agent is not None:
            check_correspondent_name(relay_agent, what="relay agent name")
            if name is None:
                raise NotPermitted(
                    "a relay agent serves persistent correspondents: give the CM transport a "
                    "reusable name to use relay_agent="
                )
        if timing is not None and not isinstance(timing, CmTiming):
            raise InvalidArgument(f"timing must be a CmTiming, not {type(timing).__name__}")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise NotPermitted(
                "CmTransport needs a running event loop: create it from async code"
            ) from None
        self._transport = transport
        self._pacer = pacer_for(self._loop)
        self._ticks = self._pacer.ticks
        self._default_time_limit = check_time_limit(default_time_limit)
        self._require_old = require_old
        self._sync = sync_ledger
        self._timing = timing or CmTiming()
        self._ledger_path = None if ledger is None else check_ledger_path(ledger)
        self._ledger: LedgerFile | None = None
        self._name = name if name is not None else new_transient_name()
        self._instance = os.urandom(8).hex()
        self._address = instance_address(self._name, self._instance)
        for subject in (instance_route(self._name), hello_subject(self._name)):
            try:
                validate_subject(subject, wildcards=True)
            except InvalidSubject:
                raise InvalidSubject(
                    f"correspondent name {self._name!r} is too long: its control subject "
                    f"{subject!r} breaks the subject length limits (keep names short)"
                ) from None
        self._core: CmCorrespondent | None = None
        self._opening: asyncio.Future[None] | None = None
        self._closed = False
        self._inbound = Queue(name=f"rvcm:{self._name}")
        self._internal: list[Any] = []
        self._data_listeners: dict[str, list[Any]] = {}  # pattern -> [Listener, refcount]
        self._watched: dict[str, Any] = {}  # sender name -> Listener on its hello subject
        self._peers: dict[str, str] = {}  # name -> address heard in a record, this lifetime
        self._listeners: dict[int, CmListener] = {}
        self._outbound: dict[tuple[str, int], Message] = {}
        self._backpressure: Any = None  # what the transport asked us to await, if anything
        self._emit = internal_sender(transport)
        self._relay: RelayLink | None = None
        if relay_agent is not None:
            # Every message and internal listener goes through the relay agent;
            # creating the transport is the implicit connect.
            self._relay = RelayLink(
                transport,
                self._name,
                relay_agent,
                timing=relay_timing,
                on_connected=self._relay_connected,
            )
            self._emit = self._relay.emit
            self._relay.connect()
        self._confirms: list[tuple[int, str, str, int]] = []
        self._confirm_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._timer_dirty = False
        self._tracking: set[CmListener] = set()
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._last_data: Message | None = None
        self._seen: list[Any] = []
        self._hooks = ListenerHooks(
            self,
            confirm_later=self._confirm_later,
            confirm_now=self._confirm_now,
            close_listener=self._close_listener,
            track=self._track,
            queue_discarded=self._queue_discarded,
        )
        self.malformed = 0
        """Inbound records dropped as malformed."""
        if self._ledger_path is None:
            self._start(None)

    # --- lifecycle --------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The correspondent name (reusable, or generated for a transient correspondent)."""
        return self._name

    @property
    def transport(self) -> BaseTransport:
        """The transport this CM transport employs."""
        return self._transport

    @property
    def ledger_path(self) -> str | None:
        """The ledger file, or None for a process-based ledger."""
        return self._ledger_path

    @property
    def persistent(self) -> bool:
        """A reusable name with a ledger file: a later transport can continue this one."""
        return self._ledger_path is not None and not is_transient_name(self._name)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def opened(self) -> bool:
        return self._core is not None

    async def open(self) -> CmTransport:
        """Open the ledger file (if any) and start; a no-op once open."""
        if self._closed:
            raise TransportClosed(f"CM transport {self._name!r} is closed")
        if self._core is not None:
            return self
        if self._opening is None:
            self._opening = self._loop.create_future()
            try:
                await self._open_file_ledger()
            except BaseException as exc:
                self._opening.set_exception(exc)
                self._opening.exception()  # retrieved: later callers re-raise it
                raise
            self._opening.set_result(None)
        else:
            await asyncio.shield(self._opening)
        return self

    async def _open_file_ledger(self) -> None:
        assert self._ledger_path is not None
        ledger, replay = await LedgerFile.open(self._ledger_path, self._name, sync=self._sync)
        if self._closed:
            await ledger.close()
            raise TransportClosed(f"CM transport {self._name!r} was closed while opening")
        self._ledger = ledger
        self._start(replay.state)
        ledger.start(self._on_durable, self._snapshot, self._on_ledger_trouble)

    def _start(self, state: LedgerState | None) -> None:
        transport = self._transport
        try:
            self._internal.append(self._net_listen(instance_route(self._name), _P2P))
            core = CmCorrespondent(
                self._name,
                self._address,
                now=time.time(),
                ledger=state,
                file_ledger=self._ledger_path is not None,
                require_old=self._require_old,
                default_time_limit=self._default_time_limit,
                timing=self._timing,
                sync_sends=self._sync and self._ledger_path is not None,
            )
            for subject in core.control_subjects:
                self._internal.append(self._net_listen(subject, _OWN_HELLO))
        except BaseException:
            for listener in self._internal:
                listener.close_now()
            self._internal.clear()
            raise
        interested = transport.interested
        core.set_info_filter(
            lambda condition, tail: interested(f"_RV.INFO.RVCM.{condition}.{tail}")
        )
        self._core = core
        for entry in state.subjects.values() if state is not None else ():
            for listener in entry.registrations:
                self._watch(listener)  # listeners of ours the ledger remembers
        if self._relay is not None:
            core.hold_confirm_requests(not self._relay.connected, time.time())
        self._pump_task = self._loop.create_task(self._pump(), name=f"rvcm:{self._name}")
        self._process(core.drain())

    def _net_listen(self, subject: str, role: str) -> Any:
        """An internal listener feeding the core: on the transport, or kept by the relay agent."""
        relay = self._relay
        if relay is not None:
            return relay.listen(subject, queue=self._inbound, closure=role)
        return self._transport.listen(subject, queue=self._inbound, closure=role)

    # --- relay agent --------------------------------------------------------------------

    @property
    def relay_agent(self) -> str | None:
        """The relay agent this transport's certified traffic flows through, or None."""
        return None if self._relay is None else self._relay.agent

    @property
    def relay_state(self) -> str | None:
        """``connected``, ``locating``, ``disconnected``... (None without a relay agent)."""
        return None if self._relay is None else self._relay.state

    async def connect_relay(self) -> None:
        """Connect to the relay agent; returns at once, RELAY.CONNECTED tells when it is done.

        Keeps trying until it succeeds or :meth:`disconnect_relay` is called.
        """
        self._relay_link().connect()

    async def disconnect_relay(self) -> None:
        """Disconnect from the relay agent; returns at once, RELAY.DISCONNECTED tells when done.

        Outbound messages and confirmations are stored from now on (sent at
        the next connection); the agent stores inbound ones.
        """
        self._relay_link().disconnect()

    def _relay_connected(self, connected: bool) -> None:
        """The relay link came up or went down: ask listeners to confirm only while up.

        The specification's disconnected sender stops requesting delivery
        confirmation; requests made then could not leave anyway.
        """
        core = self._core
        if core is not None and not self._closed:
            core.hold_confirm_requests(not connected, time.time())
            self._process(core.drain())

    def _relay_link(self) -> RelayLink:
        if self._closed:
            raise TransportClosed(f"CM transport {self._name!r} is closed")
        relay = self._relay
        if relay is None:
            raise NotPermitted(
                f"CM transport {self._name!r} has no relay agent (create it with relay_agent=...)"
            )
        return relay

    def _require(self) -> CmCorrespondent:
        core = self._core
        if core is None or self._closed:
            if self._closed:
                raise TransportClosed(f"CM transport {self._name!r} is closed")
            raise NotPermitted(
                f"CM transport {self._name!r} has a ledger file and is not open yet: "
                "use `async with` or `await cm.open()` first"
            )
        return core

    async def _ready(self) -> CmCorrespondent:
        if self._core is None and not self._closed:
            await self.open()
        core = self._require()
        if self._transport.closed:
            raise TransportClosed(
                f"the transport of CM transport {self._name!r} is closed: {self._transport!r}"
            )
        ledger = self._ledger
        if ledger is not None and ledger.failure is not None:
            raise ledger.failure
        return core

    async def close(self) -> None:
        """Close every CM listener, write out the ledger and stop.

        Agreements are not cancelled (senders keep storing for this name);
        messages already sent are transmitted once their ledger records are
        written. The employed transport stays open.
        """
        if self._closed:
            return
        if self._opening is not None and self._core is None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._opening)
        core = self._core
        if self._relay is not None:
            self._relay.freeze()  # the agent keeps listening for us while we are away
        if core is not None:
            for listener in list(self._listeners.values()):
                self._settle_listener(listener)
            self._flush_confirms()
            for listener in list(self._listeners.values()):
                self._drop_listener(listener, cancel_agreements=False)
            core.close(time.time())
            self._process(core.drain())
        self._closed = True
        ledger = self._ledger
        if ledger is not None:
            lost = await ledger.close()  # last writes release the transmissions they held
            self._report_unrecorded(core, ledger.path, lost)
        if self._relay is not None:
            # The implicit disconnect: what is pending goes to the agent first.
            await self._relay.close(RELAY_CLOSE_TIMEOUT)
        for listener in self._internal:
            listener.close_now()
        self._internal.clear()
        for listener in self._watched.values():
            listener.close_now()
        self._watched.clear()
        for listener, _count in self._data_listeners.values():
            listener.close_now()
        self._data_listeners.clear()
        self._inbound.destroy()
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump_task
        for handle in (self._timer, self._sweep_handle):
            if handle is not None:
                handle.cancel()
        self._timer = self._sweep_handle = None
        self._outbound.clear()

    async def __aenter__(self) -> CmTransport:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        ledger = f" ledger={self._ledger_path!r}" if self._ledger_path else ""
        state = "closed" if self._closed else ("open" if self._core else "not open")
        return f"<CmTransport {self._name!r}{ledger} {state}>"

    # --- sending ----------------------------------------------------------------------

    async def send(self, msg: Message, time_limit: float | None = None) -> int:
        """Send ``msg`` as a labeled message; returns its sequence number on its subject.

        Certified to every listener registered for the subject. ``time_limit``
        (seconds, 0 = no limit, None = the transport's default) is how long
        the sender keeps trying. A wildcard subject raises NotPermitted.
        With ``sync_ledger`` this returns once the message is on disk.
        """
        core = self._core
        if core is None or self._closed or self._transport.closed:
            core = await self._ready()
        if msg.__class__ is not Message and not isinstance(msg, Message):
            raise InvalidArgument(f"send takes a Message, not {type(msg).__name__}")
        subject = msg.subject
        if subject is None:
            raise InvalidArgument("cannot send a message without a subject")
        ledger = self._ledger
        if ledger is not None and (ledger.failure or ledger.full or ledger.backlogged):
            await _ledger_room(ledger)
        # A new publication: its origin (in place, as a network transport's send does)
        # is in the payload kept for retransmission and in the ledger, so every copy
        # of this publication has the same identity (docs/retained.md).
        self._transport.stamp(msg)
        payload = msg.to_bytes()
        result = core.send(subject, payload, time.time(), time_limit)
        # The core has checked the time limit (it raises before sending otherwise).
        limit = self._default_time_limit if time_limit is None else float(time_limit)
        wire = msg.delivery_copy(None, None)
        wire.cm = make_label(self._name, result.sequence, limit)
        outputs = core.drain()
        if (
            len(outputs) == 1
            and outputs[0].__class__ is Transmit
            # (the Transmit core.send adds last carries the message's DataRecord)
            and outputs[0].record.payload is payload  # type: ignore[attr-defined]  # see above
        ):
            # The usual case: this message goes out now, nothing else to do.
            self._transmit(wire)
            self._timer_changed()
        else:
            # Held for the ledger file, or among other outputs: _process sends it.
            self._outbound[(subject, result.sequence)] = wire
            self._process(outputs)
        wait = self._backpressure
        if wait is not None:
            self._backpressure = None
            await wait  # the employed transport's send backlog is full
        if ledger is not None:
            # With sync_ledger the message's record; otherwise, rarely, the
            # reservation of its number (not on disk yet: a crash now could make
            # a restarted sender hand it out again).
            lsn = result.lsn if self._sync else result.hold_lsn
            if lsn is not None:
                await ledger.wait_durable(lsn)
        # A long run of sends gives the loop a turn (confirmations, timers, the ledger's
        # writer, the transport's flush): rvasync.sendpace.
        if next(self._ticks) and (turn := self._pacer.look()) is not None:
            await turn
        return result.sequence

    async def send_reply(
        self, reply: Message, request: Message, time_limit: float | None = None
    ) -> int:
        """Send ``reply`` (labeled) to the reply subject of ``request``."""
        reply_subject = request.reply_subject
        if not reply_subject:
            raise InvalidArgument("the request has no reply subject to answer")
        reply.subject = reply_subject
        return await self.send(reply, time_limit)

    async def send_request(
        self, msg: Message, timeout: float, time_limit: float | None = None
    ) -> Message:
        """Send ``msg`` (labeled) with a fresh inbox as reply subject; the first reply.

        Raises :class:`~rvasync.errors.RequestTimeout` after ``timeout`` seconds.
        The reply arrives on the employed transport (an inbox is never
        certified: it cannot outlive this call). Through a relay agent the
        request carries a surrogate inbox of the agent, which keeps the reply
        while this transport is disconnected and hands it over on
        reconnection (reply name substitution, docs/relay-agent.md).
        """
        if timeout is None or isinstance(timeout, bool) or not timeout > 0:
            raise InvalidArgument(
                f"send_request timeout must be a positive number, got {timeout!r}"
            )
        if msg.subject is None:
            raise InvalidArgument("cannot send a request without a subject")
        await self._ready()
        inbox = self._transport.create_inbox()
        listener = self._transport.listen(inbox)
        try:
            request = msg.delivery_copy(None, None)
            request.reply_subject = inbox
            await self.send(request, time_limit)
            try:
                return await listener.get(timeout)
            except TimeoutError:
                raise RequestTimeout(f"no reply to {msg.subject!r} within {timeout} s") from None
        finally:
            listener.close_now()

    def create_inbox(self) -> str:
        """A unique inbox subject of the employed transport."""
        return self._transport.create_inbox()

    # --- sender-side management ---------------------------------------------------------

    async def add_listener(self, name: str, subject: str) -> bool:
        """Anticipate listener ``name`` on ``subject``: store messages for it from now on.

        Returns False if it is already registered. The listener must use
        ``require_old=True`` to receive what was stored before it registers.
        Returns once the agreement is in the ledger.
        """
        core = await self._ready()
        added = core.add_listener(name, subject)
        self._watch(name)
        await self._after_ledger_change(core)
        return added

    async def remove_listener(self, name: str, subject: str) -> None:
        """End the agreement with listener ``name`` on ``subject`` (it may register again)."""
        core = await self._ready()
        core.remove_listener(name, subject, time.time())
        await self._after_ledger_change(core)

    async def disallow_listener(self, name: str) -> None:
        """End every agreement with ``name`` and refuse its registrations until allowed."""
        core = await self._ready()
        core.disallow_listener(name, time.time())
        await self._after_ledger_change(core)

    async def allow_listener(self, name: str) -> None:
        """Lift :meth:`disallow_listener`; the listener is invited to register again."""
        core = await self._ready()
        core.allow_listener(name)
        await self._after_ledger_change(core)

    async def expire_messages(self, subject: str, sequence: int) -> int:
        """Give up on stored messages on ``subject`` up to ``sequence`` (DELIVERY.FAILED each).

        Returns how many messages were expired.
        """
        core = await self._ready()
        count = core.expire_messages(subject, sequence)
        await self._after_ledger_change(core)
        return count

    def review_ledger(self, subject: str) -> list[SubjectReview]:
        """The ledger's summary of each outbound subject matching ``subject`` (wildcards allowed).

        Per subject: ``last_sent``, ``total_messages``, ``total_size`` and the
        registered ``listeners`` (name, last confirmed, unconfirmed count,
        anticipated).
        """
        return self._require().review_ledger(subject)

    async def sync(self) -> None:
        """Wait until every ledger record made so far is written (synced with ``sync_ledger``)."""
        await self._ready()
        if self._ledger is not None:
            await self._ledger.flush()

    async def compact_ledger(self) -> None:
        """Rewrite the ledger file as its live state now (it also happens by itself)."""
        await self._ready()
        if self._ledger is not None:
            await self._ledger.compact_now()

    async def _after_ledger_change(self, core: CmCorrespondent) -> None:
        self._process(core.drain())
        if self._ledger is not None:
            await self._ledger.wait_durable(core.last_lsn)

    # --- listening ---------------------------------------------------------------------------

    def listen(
        self,
        subject: str,
        *,
        explicit_confirm: bool = False,
        queue: Queue | None = None,
        closure: Any = None,
        callback: CmCallback | None = None,
        correlation_id: CorrelationId | None = None,
        retained: bool = False,
    ) -> CmListener:
        """A CM listener on ``subject`` (wildcards allowed).

        Certified messages are confirmed automatically once the program has
        taken them (see :class:`CmListener`), or with ``explicit_confirm``
        only by ``await listener.confirm(msg)``. ``queue``, ``closure`` and
        ``callback`` and ``correlation_id`` work as for an ordinary listener.
        ``retained=True`` first delivers what the current value caches retain
        for ``subject`` (uncertified: no sequence in their label), then the
        live stream, with no gap and no duplicate (docs/retained.md).
        """
        if not isinstance(retained, bool):
            raise InvalidArgument(f"retained must be a bool, got {type(retained).__name__}")
        core = self._require()
        check_listen_pattern(subject)
        if correlation_id is not None:
            check_correlation_id(correlation_id)
        if not isinstance(explicit_confirm, bool):
            raise InvalidArgument(
                f"explicit_confirm must be a bool, not {type(explicit_confirm).__name__}"
            )
        if queue is not None and not isinstance(queue, Queue):
            raise InvalidArgument(f"queue must be an rvasync Queue, got {type(queue).__name__}")
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        transport = self._transport
        own_queue = queue is None
        if queue is None:
            queue = Queue(name=f"cmlistener:{subject}")
        dispatched = callback is not None
        # The transport's queue rules (dispatched or iterated, never both) apply
        # to CM listeners too; checked here, before anything is registered.
        transport.attach_queue(queue, dispatched=dispatched, shared=not own_queue)
        try:
            self._acquire_data_listener(subject)
            listener_id = core.listen(subject, now=time.time(), explicit_confirm=explicit_confirm)
        except BaseException:
            transport.detach_queue(queue, dispatched=dispatched, shared=not own_queue)
            raise
        listener = CmListener(
            self._hooks,
            listener_id,
            subject,
            explicit_confirm=explicit_confirm,
            queue=queue,
            own_queue=own_queue,
            closure=closure,
            callback=callback,
            correlation_id=correlation_id,
        )
        self._listeners[listener_id] = listener
        if retained:
            RetainedHandOver(
                transport,
                listener,
                deliver=listener.enqueue,
                discard=listener.discard,
                certified=True,
            )
        self._process(core.drain())
        return listener

    def _acquire_data_listener(self, pattern: str) -> None:
        entry = self._data_listeners.get(pattern)
        if entry is None:
            internal = self._net_listen(pattern, _DATA)
            self._data_listeners[pattern] = [internal, 1]
        else:
            entry[1] += 1

    def _release_data_listener(self, pattern: str) -> None:
        entry = self._data_listeners.get(pattern)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._data_listeners[pattern]
            entry[0].close_now()

    def _settle_listener(self, listener: CmListener) -> None:
        """What the listener handed over counts as taken (it is closing)."""
        listener.settle()
        if listener.tracking:
            listener.sweep(present_in(listener.queue))

    async def _close_listener(self, listener: CmListener, cancel_agreements: bool) -> None:
        core = self._core
        if core is None or self._closed:
            listener.mark_closed()
            return
        self._settle_listener(listener)
        self._flush_confirms()
        self._drop_listener(listener, cancel_agreements=cancel_agreements)
        await self._after_ledger_change(core)

    def _drop_listener(self, listener: CmListener, *, cancel_agreements: bool) -> None:
        core = self._core
        assert core is not None
        listener.mark_closed()
        listener_id = listener.listener_id
        self._listeners.pop(listener_id, None)
        self._tracking.discard(listener)
        queue = listener.queue
        own_queue = listener.own_queue
        self._transport.detach_queue(
            queue, dispatched=listener.callback is not None, shared=not own_queue
        )
        if own_queue:
            queue.destroy()
        else:
            queue.discard_where(lambda item: getattr(item, "listener", None) is listener)
        core.close_listener(listener_id, time.time(), cancel_agreements=cancel_agreements)
        self._release_data_listener(listener.subject)

    # --- confirmation --------------------------------------------------------------------------

    def _confirm_later(self, listener_id: int, sender: str, subject: str, sequence: int) -> None:
        """Queue an automatic confirmation; a batch goes to the core once per loop turn."""
        self._confirms.append((listener_id, sender, subject, sequence))
        if not self._confirm_scheduled:
            self._confirm_scheduled = True
            self._loop.call_soon(self._flush_confirms)

    def _flush_confirms(self) -> None:
        self._confirm_scheduled = False
        items = self._confirms
        core = self._core
        if not items or core is None or self._closed:
            return
        self._confirms = []
        live = self._listeners
        try:
            core.confirm_many(item for item in items if item[0] in live)
        except RvError:
            stderr_logger().exception("confirming certified messages failed")
        self._process(core.drain())

    async def _confirm_now(self, listener_id: int, sender: str, subject: str, seq: int) -> None:
        core = self._require()
        self._flush_confirms()
        core.confirm(listener_id, sender, subject, seq)
        self._process(core.drain())
        if self._sync and self._ledger is not None:
            await self._ledger.wait_durable(core.last_lsn)

    def _track(self, listener: CmListener) -> None:
        """``listener`` has deliveries in a program's queue: sweep it until they leave."""
        self._tracking.add(listener)
        if self._sweep_handle is None and not self._closed:
            self._sweep_handle = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)

    def _sweep(self) -> None:
        self._sweep_handle = None
        by_queue: dict[Queue, list[CmListener]] = {}
        for listener in list(self._tracking):
            if not listener.tracking:
                self._tracking.discard(listener)
            else:
                by_queue.setdefault(listener.queue, []).append(listener)
        for queue, listeners in by_queue.items():
            present = present_in(queue)
            for listener in listeners:
                listener.sweep(present)
        if self._tracking and not self._closed:
            self._sweep_handle = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)

    def _queue_discarded(self, queue: Queue) -> None:
        """A program's queue discarded items: certified ones among them count as taken."""
        present = present_in(queue)
        for listener in list(self._tracking):
            if listener.queue is queue:
                listener.sweep(present)

    # --- inbound -------------------------------------------------------------------------------

    async def _pump(self) -> None:
        """Feed every inbound message to the core, in arrival order, then carry out outputs."""
        inbound = self._inbound
        handle = self._handle
        while True:
            try:
                msg = await inbound.get()
            except QueueDestroyed:
                return
            now = time.time()
            count = 0
            while msg is not None:
                try:
                    handle(msg, now)
                except Exception:
                    stderr_logger().exception(
                        "certified delivery: an inbound message could not be handled",
                        subject=msg.subject,
                    )
                count += 1
                if count & 255 == 0:
                    now = time.time()
                    self._drain_core()
                msg = inbound.poll()
            self._drain_core()

    def _drain_core(self) -> None:
        core = self._core
        if core is not None:
            self._process(core.drain())

    def _handle(self, msg: Message, now: float) -> None:
        core = self._core
        assert core is not None
        role = msg.closure
        if role is _DATA:
            # A message matching two CM listener subjects arrives once per
            # internal listener; the copies share field storage and label.
            cm = msg.cm
            last = self._last_data
            if last is not None and cm is last.cm and msg.shares_fields(last):
                seen = self._seen
                if msg.listener not in seen:
                    seen.append(msg.listener)
                    return
            self._last_data = msg
            self._seen = [msg.listener]
            if cm is None or cm.sequence is None or msg.subject is None:
                # The payload is the decoded message itself (see _deliver): opaque to the core.
                core.receive_plain(msg.subject or "", msg)  # type: ignore[arg-type]  # see above
                return
            sender = cm.sender
            if sender == self._name:
                address = self._address
            else:
                address = self._peers.get(sender) or self._first_contact(sender)
            # The payload is the decoded message itself (see _deliver).
            core.receive_labeled(
                sender,
                address,
                msg.subject,
                cm.sequence,
                cm.time_limit,
                msg,  # type: ignore[arg-type]  # opaque payload: the message itself
                now,
            )
            return
        try:
            record = parse_record(message_fields(msg))
        except MalformedMessage as exc:
            self._malformed(msg, exc)
            return
        if role is _P2P:
            if record.origin != self._name:
                self._peers[record.origin] = record.address
                if isinstance(record, RegisterRequest):
                    self._watch(record.origin)  # a listener of ours: watch for its restarts
            core.receive(record, now)
        elif role is _OWN_HELLO:
            core.receive(record, now)
        elif (
            role is _PEER_HELLO
            and isinstance(record, Hello)
            and not record.reply
            and msg.subject == hello_subject(record.origin)
        ):
            # A sender announcing a new instance: labeled messages from it now
            # carry its new address, which makes the core notice the move. A
            # listener announcing one: the core invites it to take back the
            # messages it is owed.
            self._peers[record.origin] = record.address
            core.receive(record, now)

    def _first_contact(self, sender: str) -> str:
        """A labeled message from ``sender``, not heard from yet: watch for its restarts."""
        self._watch(sender)
        return any_instance_address(sender)

    def _watch(self, name: str) -> None:
        """Listen for announcements of new instances of correspondent ``name``.

        Senders we listen to (their labeled messages then carry a new address)
        and listeners we keep messages for (a restarted one is invited to take
        them back without waiting for our next message).
        """
        if not is_transient_name(name) and name != self._name and name not in self._watched:
            with contextlib.suppress(RvError):
                self._watched[name] = self._net_listen(hello_subject(name), _PEER_HELLO)

    def _malformed(self, msg: Message, exc: Exception) -> None:
        self.malformed += 1
        if self.malformed == 1 or self.malformed % 1000 == 0:
            stderr_logger().warning(
                "certified delivery: dropped a malformed record",
                subject=msg.subject,
                problem=str(exc),
                malformed_total=self.malformed,
            )

    # --- outputs -----------------------------------------------------------------------------

    def _process(self, outputs: Iterable[Any]) -> None:
        """Carry out the core's outputs in order."""
        for out in outputs:
            kind = out.__class__
            if kind is Deliver:
                self._deliver(out)
            elif kind is Transmit:
                record = out.record
                if record.__class__ is DataRecord and not out.point_to_point:
                    wire = self._outbound.pop((record.subject, record.sequence), None)
                    if wire is None:
                        wire = Message.from_bytes(record.payload)
                        wire.subject = record.subject
                        wire.cm = make_label(record.origin, record.sequence, record.time_limit)
                    self._transmit(wire)
                else:
                    self._transmit(record_message(out.destination, record))
            elif kind is AppendLedger:
                ledger = self._ledger
                if ledger is not None:
                    ledger.append(out.lsn, out.record)
            elif kind is Advisory:
                self._present(out)
        self._timer_changed()

    def _transmit(self, msg: Message) -> None:
        """Send ``msg`` on the employed transport, noting any backpressure it reports."""
        try:
            wait = self._emit(msg)
        except TransportClosed:
            return  # the employed transport closed: peers will ask again later
        if wait is not None:
            self._backpressure = wait

    def _timer_changed(self) -> None:
        """The core's next deadline may have moved: look again once this loop turn ends."""
        if not self._timer_dirty:
            self._timer_dirty = True
            self._loop.call_soon(self._reschedule)

    def _deliver(self, out: Deliver) -> None:
        listener = self._listeners.get(out.listener_id)
        if listener is None or listener.closed:
            return
        payload: Any = out.payload
        if payload.__class__ is Message:
            base = payload
        else:
            try:
                base = Message.from_bytes(payload)
            except RvError as exc:
                self._malformed(Message(out.subject), exc)
                if out.sequence is not None and out.sender is not None:
                    # It can never be delivered: do not let it block the ones after it.
                    self._confirm_later(out.listener_id, out.sender, out.subject, out.sequence)
                return
            base.subject = out.subject
        msg = base.delivery_copy(listener, listener.closure)
        sender = out.sender
        if sender is None:
            msg.cm = None
        else:
            label = base.cm
            if label is None or label.sequence != out.sequence or label.sender != sender:
                msg.cm = make_label(sender, out.sequence, out.time_limit)
        listener.deliver(msg)

    def _present(self, advisory: Advisory) -> None:
        transport = self._transport
        if advisory.adv_class == "INFO" and not transport.interested(advisory.subject):
            return  # nobody listens, and INFO advisories nobody hears are dropped anyway
        try:
            transport.present(advisory.to_message())
        except TransportClosed:
            pass

    def _on_durable(self, lsn: int) -> None:
        core = self._core
        if core is None:
            return
        try:
            core.durable(lsn)
            self._process(core.drain())
        except Exception:
            stderr_logger().exception("certified delivery: releasing ledger-held output failed")

    def _report_unrecorded(
        self, core: CmCorrespondent | None, path: str, lost: list[LedgerRecord]
    ) -> None:
        """Closed on a full disk: DELIVERY.FAILED for each message sent but never written."""
        if not lost or core is None:
            return
        if core.unrecorded(lost):
            stderr_logger().error(
                "certified messages sent while the ledger was full were never written "
                "or transmitted; each is reported by DELIVERY.FAILED",
                path=path,
            )
        for out in core.drain():
            if isinstance(out, Advisory):
                self._present(out)

    def _on_ledger_trouble(self, trouble: LedgerTrouble) -> None:
        """The ledger file is full, fits again, or could not be compacted: say so."""
        core = self._core
        if core is not None and trouble.writable is not None:
            core.set_ledger_writable(trouble.writable)
        self._present(trouble.advisory(self._name))

    def _snapshot(self) -> LedgerState:
        """An unchanging copy of the ledger state, for compaction on the ledger's thread."""
        core = self._core
        assert core is not None
        return core.ledger.copy()

    # --- time ----------------------------------------------------------------------------------

    def _reschedule(self) -> None:
        self._timer_dirty = False
        core = self._core
        if core is None or self._closed:
            return
        deadline = core.next_deadline()
        if deadline == self._deadline and (deadline is None or self._timer is not None):
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
        core = self._core
        if core is None or self._closed:
            return
        core.handle_timer(time.time())
        self._process(core.drain())


async def _ledger_room(ledger: LedgerFile) -> None:
    """Before a send: raise if the ledger cannot take it, wait if it is backlogged."""
    if ledger.failure is not None:
        raise ledger.failure
    if ledger.full is not None:
        raise ledger.full_error()  # no number is handed out that might not be kept
    await ledger.wait_room()
