"""A virtual circuit terminal: a transport whose only partner is the opposite terminal.

:class:`VcTransport` is an ordinary transport to the program (``send``,
``send_request``, ``send_reply``, ``create_inbox``, ``listen``), built on
another transport it *employs*. Everything it sends is encoded at once (the
wire form is the snapshot that travels) and goes into a DATA frame of
the circuit core, carried on the employed transport to the partner's inbox
(the turn's first message at once, in a frame of its own; the rest of the
turn's messages together, at its end, so a burst costs a few frames);
every frame arriving on its own inbox goes through the core, whose in-order
deliveries reach this terminal's listeners (routed by the subject the
partner sent to). Nothing else reaches them: the core drops frames without
the partner's tokens and anything that is not a frame at all.

Advisories on the terminal: ``_RV.INFO.SYSTEM.VC.CONNECTED``;
``_RV.ERROR.SYSTEM.VC.DISCONNECTED`` on failure and
``_RV.INFO.SYSTEM.VC.DISCONNECTED`` when a terminal was closed on purpose,
each with a ``description``. After either DISCONNECTED the terminal is
closed for good: sends raise TransportClosed, and each listener ends its
iteration once the messages already queued for it are taken (so the
DISCONNECTED advisory itself is never lost to a listener waiting for it).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.advisories import AdvisoryClass, build_advisory
from rvasync.codec import encode as _encode
from rvasync.correlation import CorrelationId, check_publisher_correlation
from rvasync.driverkit.deadline import DeadlineTimer
from rvasync.errors import MalformedMessage, NotPermitted, TransportClosed
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.vc import (
    Circuit,
    CircuitParams,
    CircuitState,
    Outputs,
    frame_from_message,
    frame_to_message,
)
from rvasync.sendpace import pacer_for
from rvasync.subjects import check_send_subject
from rvasync.transport.base import BaseTransport, check_reply_subject, not_a_message
from rvasync.transport.listener import Listener
from rvasync.vcdriver.checks import (
    check_connect_subject,
    check_params,
    check_transport,
    check_wait_timeout,
)

# CircuitState members as globals: on Python 3.11 an enum member read through its
# class costs about 0.2 us (see rvasync.protocol.vc.circuit).
_CONNECTED, _DISCONNECTED = CircuitState.CONNECTED, CircuitState.DISCONNECTED

__all__ = ["DEFAULT_HEARTBEAT", "DEFAULT_SILENCE", "VcTransport"]

DEFAULT_HEARTBEAT = CircuitParams().heartbeat
DEFAULT_SILENCE = CircuitParams().silence

#: How often a disconnected terminal looks whether its listeners' queues are drained
#: (first, and at most: the interval doubles in between).
DRAIN_POLL = 0.02
DRAIN_POLL_MAX = 1.0

# Connect subjects each employed transport is connecting to now: connecting
# twice to one accept terminal can only fail (it takes one connector).
_connecting: weakref.WeakKeyDictionary[BaseTransport, set[str]] = weakref.WeakKeyDictionary()


def _running_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise NotPermitted("a virtual circuit terminal needs a running event loop") from None


class VcTransport(BaseTransport):
    """One terminal of a virtual circuit; make it with :meth:`accept` or :meth:`connect`."""

    def __init__(
        self,
        transport: BaseTransport,
        *,
        connect_subject: str | None,
        params: CircuitParams,
        description: str | None = None,
    ) -> None:
        """Use :meth:`accept` or :meth:`connect` (they check the arguments)."""
        super().__init__(description=description)
        self._loop = _running_loop()
        self._pacer = pacer_for(self._loop)
        self._ticks = self._pacer.ticks
        self._employed = transport
        self._accepting = connect_subject is None
        inbox = transport.create_inbox()
        self._connect_subject = inbox if connect_subject is None else connect_subject
        self._circuit = Circuit(
            token=os.urandom(16), inbox=inbox, connect_subject=connect_subject, params=params
        )
        self._malformed = 0
        self._connected = asyncio.Event()  # set on connect and on disconnect (wakes waiters)
        self._all_acked = asyncio.Event()
        self._user_closed = False
        self._timer = DeadlineTimer(self._loop, self._on_timer)
        #: True while an end-of-turn flush is scheduled (messages of this turn wait for it)
        self._flush_scheduled = False
        #: The employed transport's backpressure from a deferred flush, for the next send
        self._held_wait: Any = None
        self._batch = params.batch
        self._frames: Listener = transport.listen(inbox, callback=self._on_frame)
        self._apply(self._circuit.start(self._loop.time()))

    # -- creation ---------------------------------------------------------------

    @classmethod
    def accept(
        cls,
        transport: BaseTransport,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        silence: float = DEFAULT_SILENCE,
        description: str | None = None,
    ) -> VcTransport:
        """The accepting terminal over ``transport``; send ``connect_subject`` as the reply
        subject of an invitation. ``silence`` (seconds) is the disconnect time; both
        terminals should use the same ``heartbeat`` and ``silence``."""
        _running_loop()  # first: nothing else can work without one
        employed = check_transport(transport, cls)
        params = check_params(heartbeat, silence)
        return cls(employed, connect_subject=None, params=params, description=description)

    @classmethod
    def connect(
        cls,
        transport: BaseTransport,
        connect_subject: str,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        silence: float = DEFAULT_SILENCE,
        description: str | None = None,
    ) -> VcTransport:
        """The connecting terminal: connects over ``transport`` to the accept terminal
        whose inbox is ``connect_subject`` (the invitation's reply subject)."""
        _running_loop()  # first: nothing else can work without one
        employed = check_transport(transport, cls)
        subject = check_connect_subject(connect_subject)
        params = check_params(heartbeat, silence)
        busy = _connecting.setdefault(employed, set())
        if subject in busy:
            raise NotPermitted(
                f"this transport is already connecting to {subject!r}: an accept terminal"
                " takes one connector only"
            )
        terminal = cls(employed, connect_subject=subject, params=params, description=description)
        busy.add(subject)
        return terminal

    # -- state ---------------------------------------------------------------------

    @property
    def connect_subject(self) -> str:
        """The accept terminal's inbox (the subject connectors connect to)."""
        return self._connect_subject

    @property
    def employed_transport(self) -> BaseTransport:
        """The ordinary transport this terminal's frames travel on."""
        return self._employed

    @property
    def connected(self) -> bool:
        """True while the circuit is complete and working."""
        return self._circuit.state is _CONNECTED

    @property
    def disconnected(self) -> bool:
        """True once the circuit has ended (for good: terminals never reconnect)."""
        return self._circuit.state is _DISCONNECTED

    @property
    def foreign(self) -> int:
        """Messages dropped on this terminal's inbox because the partner did not send them."""
        return self._circuit.foreign + self._malformed

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Return once the circuit is complete; ``timeout=0`` tests without waiting.

        ``TimeoutError`` when not connected within ``timeout`` seconds;
        ``TransportClosed`` once the circuit is broken (or the terminal closed).
        """
        limit = check_wait_timeout(timeout)
        if limit is None:
            await self._connected.wait()
        elif not self._connected.is_set():
            if limit == 0:
                raise TimeoutError("the virtual circuit is not connected yet")
            try:
                async with asyncio.timeout(limit):
                    await self._connected.wait()
            except TimeoutError:
                raise TimeoutError(
                    f"the virtual circuit did not connect within {limit} s"
                ) from None
        if not self.connected:
            raise TransportClosed(f"the virtual circuit is disconnected ({self._circuit.reason})")

    # -- sending -------------------------------------------------------------------

    async def send(self, msg: Message, *, correlation_id: CorrelationId | None = None) -> None:
        """Send ``msg`` to the opposite terminal only (its listeners route it by subject).

        ``correlation_id``: the publisher correlation id this message carries.
        """
        try:
            subject = msg.subject
        except AttributeError:
            raise not_a_message("msg", msg) from None
        if correlation_id is not None:
            msg.publisher_correlation = check_publisher_correlation(correlation_id)
        if subject is None:
            await super().send(msg)  # raises the right error
            return
        self._check_open()
        check_send_subject(subject)
        if msg.reply_subject is not None:
            check_reply_subject(msg.reply_subject)
        wait = self._route(msg)
        if wait is not None:
            await wait
        if (
            next(self._ticks) and (turn := self._pacer.look()) is not None
        ):  # a long run of sends gives the loop a turn (rvasync.sendpace)
            await turn

    def _route(self, msg: Message) -> Any:
        # The wire form is the snapshot: what the sender changes afterwards cannot reach
        # it, however late the frame is retransmitted, and bytes waiting for their frame
        # and its ack give the garbage collector nothing to trace (a Message copy per
        # message made the publisher's collections cost more than all its other work).
        # A message that cannot be encoded is refused here, not when its frame leaves.
        waiting = self._circuit.queue(_encode(msg))  # NotPermitted before completion ...
        wait = None
        if not self._flush_scheduled:
            # The turn's first message leaves now (a lone request or reply does not
            # wait for the end of the turn); the rest of the turn is framed at its end.
            self._flush_scheduled = True
            self._loop.call_soon(self._end_of_turn)
            wait = self._apply(self._circuit.flush(self._loop.time()))
        elif waiting >= self._batch:
            wait = self._apply(self._circuit.flush(self._loop.time()))
        held = self._held_wait
        if held is not None:
            self._held_wait = None  # both are the same backlog: either will do
            return wait or held
        return wait

    def _end_of_turn(self) -> None:
        self._flush_scheduled = False
        if self._circuit.pending:
            wait = self._apply(self._circuit.flush(self._loop.time()))
            if wait is not None:
                self._held_wait = wait  # the next send waits for the backlog

    # -- lifecycle -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            if self._circuit.state is _DISCONNECTED:
                raise TransportClosed(
                    f"the virtual circuit is disconnected ({self._circuit.reason})"
                )
            raise TransportClosed("the virtual circuit terminal is closed")

    async def close(self) -> None:
        """Close this terminal: the partner presents INFO VC.DISCONNECTED.

        Data sent and not yet acknowledged gets up to the disconnect time to
        arrive first. This terminal presents INFO VC.DISCONNECTED too; its
        listeners end as after any disconnect (once drained). Closing twice
        raises NotPermitted.
        """
        if self._user_closed:
            raise NotPermitted("this virtual circuit terminal is already closed")
        self._user_closed = True
        circuit = self._circuit
        if circuit.pending:
            self._apply(circuit.flush(self._loop.time()))
        if circuit.state is _CONNECTED and circuit.unacked:
            self._all_acked.clear()
            try:
                async with asyncio.timeout(circuit.params.silence):
                    await self._all_acked.wait()
            except TimeoutError:
                pass  # the core breaks the circuit itself at the same limit
        if circuit.state is not _DISCONNECTED:
            self._apply(circuit.close(self._loop.time()))  # listeners end once drained
        else:
            self._close_listeners()  # ended before: the program is done with it now

    async def __aexit__(self, *exc_info: object) -> None:
        if not self._user_closed:
            await self.close()

    # -- the core's inputs ------------------------------------------------------------

    def _on_frame(self, msg: Message) -> None:
        try:
            frame = frame_from_message(msg)
        except MalformedMessage:
            self._malformed += 1
            return
        self._apply(self._circuit.receive(frame, self._loop.time()))

    def _on_timer(self, now: float) -> None:
        if self._employed.closed and self._circuit.state is not _DISCONNECTED:
            self._apply(self._circuit.fail("the transport under this terminal closed", now))
            return
        self._apply(self._circuit.timer(now))

    def _apply(self, out: Outputs) -> Any:
        """Carry out the core's outputs; returns the employed transport's backpressure wait."""
        wait = None
        for address, frame in out.transmit:
            try:
                wait = self._employed.send_internal(frame_to_message(frame, address)) or wait
            except Exception as exc:
                if self._circuit.state is not _DISCONNECTED:
                    now = self._loop.time()
                    self._apply(self._circuit.fail(f"sending failed: {exc}", now))
                break
        if out.deliver:
            deliver = self._router.deliver
            for payload in out.deliver:
                deliver(payload)
        if out.connected:
            self._connected.set()
            self._advise(AdvisoryClass.INFO, "VC.CONNECTED", None)
        if out.disconnected is not None:
            graceful, reason = out.disconnected
            self._disconnected(graceful, reason)
        elif self._circuit.unacked == 0:
            self._all_acked.set()
        self._rearm()
        return wait

    def _rearm(self) -> None:
        """Wake the core at its next deadline; a later deadline leaves the timer as it is.

        Every send moves the heartbeat deadline a little later: re-arming for
        each would cost a timer per message. Firing early costs one call to
        the core, which then names the later time.
        """
        deadline = self._circuit.next_deadline()
        if deadline is None:
            self._timer.cancel()
            return
        when = self._timer.when
        if when is None or deadline < when:
            self._timer.arm(deadline)

    def _advise(self, adv_class: AdvisoryClass, name: str, description: str | None) -> None:
        fields = None if description is None else [("description", description, FieldType.STRING)]
        self.present(build_advisory(adv_class, name, fields))

    def _disconnected(self, graceful: bool, reason: str) -> None:
        self._advise(
            AdvisoryClass.INFO if graceful else AdvisoryClass.ERROR, "VC.DISCONNECTED", reason
        )
        if not graceful:
            stderr_logger().warning("virtual circuit disconnected", reason=reason)
        self._connected.set()  # wake wait_connected: it raises TransportClosed now
        self._all_acked.set()
        self._timer.cancel()
        self._frames.close_now()
        busy = _connecting.get(self._employed)
        if busy is not None and not self._accepting:
            busy.discard(self._connect_subject)
        self._closed = True  # sends raise TransportClosed from now on
        self._end_listeners()

    def _end_listeners(self, delay: float = DRAIN_POLL) -> None:
        """End each listener once what is queued for it has been taken.

        Closing a listener discards its queue, and what is queued (the
        DISCONNECTED advisory, data delivered before the end) must reach the
        program first, however slowly it reads. A listener still holding
        messages is looked at again later (backing off to once a second);
        ``close()`` on the terminal ends them all at once.
        """
        waiting = False
        for listener in self._listeners():
            if listener.own_queue and len(listener.queue):
                waiting = True
            else:
                listener.close_now()
        if waiting:
            self._loop.call_later(delay, self._end_listeners, min(delay * 2, DRAIN_POLL_MAX))
        else:
            self._close_listeners()

    def __repr__(self) -> str:
        role = "accept" if self._accepting else "connect"
        return (
            f"<VcTransport {role} {self._connect_subject!r} {self._circuit.state.value}"
            f" listeners={len(self._router)}>"
        )
