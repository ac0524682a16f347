"""The UDP driver of one service: sockets and asyncio around the reliable multicast core.

A :class:`UdpDriver` drives one :class:`~rvasync.protocol.reliable.ReliableEndpoint`
(the sans-IO protocol core) with asyncio, as aioquic's asyncio protocol adapter
drives a QUIC connection:

* **input**: the multicast receiver(s) and the unicast socket are watched with
  ``loop.add_reader``; each readiness drains up to :data:`READ_BATCH` datagrams
  into the core before anything else runs, so a burst costs one wake-up, not
  one per datagram. Our own multicast, looped back by the kernel, is dropped by
  its session id before the core parses it; ``loss`` drops a fraction of the
  rest on purpose (loss simulation, for tests). What the core delivers goes to
  the ``deliver_multicast`` / ``deliver_ptp`` callables given to :meth:`start`
  (the router), its other events to ``on_event`` (the service's advisories).
* **output**: the service packs messages into the core (:meth:`multicast`,
  :meth:`multicast_many`, :meth:`ptp`); the first message of a loop turn may
  leave at once in a datagram of its own (:meth:`send_lone`), unless local
  clients are still to be written to (then it waits for the end of the turn,
  behind those writes), the rest of the
  turn is flushed once at its end (``loop.call_soon``; batch mode waits up to
  :data:`BATCH_DELAY` instead). Datagrams go out of the unicast socket; when its
  buffer is full they wait in a backlog drained by ``loop.add_writer``, and
  :attr:`drained` is set for publishers to await (backpressure).
* **time**: one timer handle at the core's ``next_deadline()``.

Every driver callback contains and logs unexpected exceptions (``contain``);
the core never raises on input.

Public interface used by the service: :meth:`start`, :meth:`send_lone`,
:meth:`multicast`, :meth:`multicast_many`, :meth:`ptp`, :meth:`raise_reliability`,
:meth:`lower_reliability`, :meth:`knows_address`, :meth:`close`, and the
read-only attributes :attr:`core`, :attr:`address`, :attr:`address_hex`,
:attr:`buffers`, :attr:`flush_scheduled`, :attr:`drained`, :attr:`backlog_length`,
:attr:`keyed`.

With a service key (rvasync.protocol.servicekey), every datagram leaves with a
MAC appended, and every datagram received is checked and stripped of it before
the core sees it; one without a valid MAC is dropped and counted.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from rvasync._logging import stderr_logger
from rvasync._rmwire import MIN_DATAGRAM
from rvasync.daemon.params import NetworkSpec
from rvasync.daemon.stats import ServiceCounters
from rvasync.daemon.udp import (
    RECV_BUFFER,
    SEND_BUFFER,
    address_hex,
    drop_own_datagrams,
    open_multicast_receiver,
    open_unicast,
    set_buffers,
)
from rvasync.protocol.reliable import DEFAULT_MAX_RETENTION, ReliableEndpoint
from rvasync.protocol.reliable_events import Delivered
from rvasync.protocol.servicekey import TAG_SIZE, DatagramMac

__all__ = [
    "BACKLOG_HIGH",
    "BACKLOG_LOW",
    "BATCH_DELAY",
    "BATCH_SMALL",
    "FLUSH_BYTES",
    "READ_BATCH",
    "UdpDriver",
]

#: Datagrams read from one socket per readiness callback before other work runs.
READ_BATCH = 16
#: A datagram shorter than this ends a readiness callback's reads (see _on_readable).
SMALL_DATAGRAM = 2048
#: Batch mode holds small messages at most this long (the spec suggests ~25 ms of latency).
BATCH_DELAY = 0.02
#: In batch mode, a message larger than this is not held: it goes out at the end of the turn.
BATCH_SMALL = 1024
#: Packed but unflushed bytes that force a flush inside a send (a program that sends
#: without ever yielding to the loop must not buffer without bound).
FLUSH_BYTES = 4 * 1024 * 1024
#: Send backlog above which publishers wait, and below which they resume.
BACKLOG_HIGH = 16 * 1024 * 1024
BACKLOG_LOW = 4 * 1024 * 1024

_Delivered = Delivered


def _transmit(sock: socket.socket, data: Any, address: Any) -> None:
    """Send one datagram of the core: bytes, or a Gathered one from its parts (no copy)."""
    if data.__class__ is bytes:
        sock.sendto(data, address)
    else:
        sock.sendmsg(data.parts, (), 0, address)


def _sealing_transmit(mac: DatagramMac) -> Callable[[socket.socket, Any, Any], None]:
    """:func:`_transmit` for a service with a key: every datagram leaves with its tag."""
    seal = mac.seal
    seal_parts = mac.seal_parts

    def transmit(sock: socket.socket, data: Any, address: Any) -> None:
        if data.__class__ is bytes:
            sock.sendto(seal(data), address)
        else:
            sock.sendmsg(seal_parts(data.parts), (), 0, address)

    return transmit


def _ignore(*_args: Any) -> None:
    return None


class UdpDriver:
    """The sockets, timer and send backlog of one service, around its reliable core.

    ``name``: the service, for log records. ``port``/``net``: where it runs.
    ``loop``: the event loop; ``touch``: the busy poller's hook, called after
    datagrams go out or come in. ``counters``: the service's counters (the
    driver counts socket errors, own and dropped datagrams, backlog).
    ``contain(doing, **details)``: logs and counts an unexpected exception.
    ``loss``: fraction of received datagrams dropped on purpose (0: none).
    ``service_key``: the secret of the service key (None: none): every datagram
    sent carries a MAC, every one received without a valid MAC is dropped and
    counted (``counters.datagrams_unauthenticated``); see
    rvasync.protocol.servicekey. The rest configure the core. Sockets open here;
    reading starts with :meth:`start`.
    """

    def __init__(
        self,
        name: str,
        port: int,
        net: NetworkSpec,
        *,
        loop: asyncio.AbstractEventLoop,
        touch: Callable[[], None],
        counters: ServiceCounters,
        contain: Callable[..., None],
        reliability: float,
        max_datagram: int,
        heartbeat_interval: float,
        peer_timeout: float,
        loss: float,
        service_key: bytes | None = None,
        max_retention: int = DEFAULT_MAX_RETENTION,
    ) -> None:
        self._name = name
        self._loop = loop
        self._touch = touch
        self._counters = counters
        self._contain = contain
        self._log = stderr_logger()
        self._loss = loss
        self._random = random.Random().random
        self._heartbeat_interval = heartbeat_interval
        self._max_retention = max_retention
        self._peer_timeout = peer_timeout
        #: The MAC of the service key, or None: then datagrams are neither sealed nor checked.
        self._mac = DatagramMac(service_key, port) if service_key is not None else None
        self._transmit = _transmit if self._mac is None else _sealing_transmit(self._mac)
        # The tag travels inside the datagram size the network allows.
        self._max_datagram = (
            max_datagram if self._mac is None else max(MIN_DATAGRAM, max_datagram - TAG_SIZE)
        )
        self.closed = False

        self._uc = open_unicast(net)
        self._mcs: list[socket.socket] = []
        try:
            for group in net.groups:
                self._mcs.append(open_multicast_receiver(group, port, net))
            #: Socket buffer sizes the kernel granted (receive, send).
            self.buffers = set_buffers(self._uc, RECV_BUFFER, SEND_BUFFER)
            for sock in self._mcs:
                set_buffers(sock, RECV_BUFFER, 0)
        except BaseException:
            self._close_sockets()
            raise
        #: This daemon's unicast address on the service, and its hex form (in inboxes).
        self.address: tuple[str, int] = self._uc.getsockname()
        self.address_hex = address_hex(self.address)
        self._group = (net.send_address, port)

        self._own_sessions: set[bytes] = set()
        #: Addresses the cores replaced by raise_reliability knew (see knows_address).
        self._known_before: set[Any] = set()
        self._core = self._new_core(reliability, loop.time())

        self._deliver_multicast: Callable[[list[bytes]], None] = _ignore
        self._deliver_ptp: Callable[[list[bytes]], None] = _ignore
        self._on_event: Callable[[Any], None] = _ignore
        self._on_backpressure: Callable[[bool], None] = _ignore

        #: True from a loop turn's first send until its end-of-turn flush: later sends of
        #: the turn are packed (:meth:`send_lone` declines). Read only.
        self.flush_scheduled = False
        self._batch_handle: asyncio.TimerHandle | None = None
        self._batched = 0
        self._unflushed = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._backlog: deque[tuple[Any, tuple[str, int] | None]] = deque()
        self._backlog_bytes = 0
        #: Set while the send backlog is over BACKLOG_HIGH: publishers await it (it
        #: completes when the backlog is down to BACKLOG_LOW). Read only.
        self.drained: asyncio.Future[None] | None = None

    def _new_core(self, reliability: float, now: float) -> ReliableEndpoint:
        core = ReliableEndpoint(
            now=now,
            reliability=reliability,
            max_retention=self._max_retention,
            max_datagram=self._max_datagram,
            heartbeat_interval=self._heartbeat_interval,
            peer_timeout=self._peer_timeout,
        )
        # Every session id this endpoint ever used: a replaced core's goodbye loops back too.
        own = core.session_id.to_bytes(8, "little")
        self._own_sessions.add(own)
        for sock in self._mcs:
            drop_own_datagrams(sock, own)
        return core

    def start(
        self,
        *,
        deliver_multicast: Callable[[list[bytes]], None],
        deliver_ptp: Callable[[list[bytes]], None],
        on_event: Callable[[Any], None],
        on_backpressure: Callable[[bool], None],
    ) -> None:
        """Start reading and the protocol timer.

        ``deliver_multicast(payloads)`` / ``deliver_ptp(payloads)`` take the
        messages the core delivers in order; ``on_event(event)`` every other
        core event (loss, retransmission, peers); ``on_backpressure(waiting)``
        is told when :attr:`drained` is set (True) and cleared (False).
        """
        self._deliver_multicast = deliver_multicast
        self._deliver_ptp = deliver_ptp
        self._on_event = on_event
        self._on_backpressure = on_backpressure
        for sock in (self._uc, *self._mcs):
            self._loop.add_reader(sock.fileno(), self._on_readable, sock)
        self._rearm()

    @property
    def core(self) -> ReliableEndpoint:
        """The reliable multicast core (replaced by :meth:`raise_reliability` from 0)."""
        return self._core

    def knows_address(self, address: Any) -> bool:
        """Whether a daemon was heard on this service from ``address`` (a datagram of a
        session the core tracks, or of one a replaced core tracked): where point-to-point
        traffic may go."""
        return self._core.knows_address(address) or address in self._known_before

    @property
    def keyed(self) -> bool:
        """True when the service runs with a service key (every datagram authenticated)."""
        return self._mac is not None

    @property
    def backlog_length(self) -> int:
        """Datagrams waiting for the socket."""
        return len(self._backlog)

    def raise_reliability(self, wanted: float) -> None:
        """Retain sent data for ``wanted`` seconds if that is longer (never lowered).

        Raising a non-zero interval just retains longer. Raising from 0 changes
        what every datagram says (no retention), so the core is replaced: peers
        see a new sender session (the old one says goodbye), as after a restart.
        """
        core = self._core
        if wanted <= core.reliability:
            return
        if core.reliability > 0:
            core.reliability = wanted
            return
        now = self._loop.time()
        core.flush(now)
        core.close(now)
        self._send_out()
        self._known_before.update(core.peers().values())
        self._core = self._new_core(wanted, now)
        # The counters go on: HOST.STATUS and the status page count for the service's life.
        self._core.stats = core.stats
        self._rearm()

    def lower_reliability(self, wanted: float) -> None:
        """Retain for ``wanted`` seconds from now on if that is shorter (the client that
        asked for more left). Never down to 0: turning retention off would replace the
        core (a new session for peers), so a ``wanted`` of 0 leaves the interval as it is."""
        core = self._core
        if 0 < wanted < core.reliability:
            core.reliability = wanted

    # ------------------------------------------------------------------ sending

    def send_lone(self, data: bytes, dest: Any) -> bool:
        """Send ``data`` (multicast, or to ``dest``) at once in a datagram of its own, if it
        is the turn's first message; False (nothing done) to pack it the usual way.

        The latency path of a request or a reply: the datagram leaves before any
        other work (local delivery, counters, the end-of-turn flush, the protocol
        timer), straight from the core's ``flush_lone``. Later messages of the same
        turn are packed together and flushed at its end as usual. Not taken with
        anything already waiting to go (packed, batched, or backlogged), so order
        on every stream is kept. Callers in batch mode do not call it.
        """
        if self.flush_scheduled or self._unflushed or self._backlog:
            return False
        datagram = self._core.flush_lone(data, dest, self._loop.time())
        if datagram is None:
            return False
        # Straight to the socket, not through _transmit_all and _transmit: two calls
        # fewer on the latency path (the backlog is empty, the datagram is bytes).
        mac = self._mac
        try:
            self._uc.sendto(
                datagram if mac is None else mac.seal(datagram),
                self._group if dest is None else dest,
            )
        except BlockingIOError:
            self._queue([(datagram, dest)], 0)
        except OSError as exc:
            self._send_failed(exc, dest)
        self._touch()
        self.flush_scheduled = True
        self._loop.call_soon(self._flush)
        self._rearm()
        return True

    def multicast(self, data: bytes, size: int, batch: bool) -> None:
        """Pack one message (``size`` bytes) into the multicast stream; it goes out at the
        end of the turn (or at once, as the turn's first datagram; or after BATCH_DELAY
        for a ``batch`` sender)."""
        self._core.send_multicast(data)
        unflushed = self._unflushed = self._unflushed + size
        if not self.flush_scheduled or unflushed >= FLUSH_BYTES or batch:
            self._sent(size, batch)

    def multicast_many(
        self, datas: list[bytes], total: int, batch: bool, after_local: bool = False
    ) -> None:
        """:meth:`multicast` for several messages (``total`` bytes), in order.

        ``after_local``: the messages were also given to local clients whose
        writes are still to come in this turn; then the datagrams leave at the
        end of the turn, after those writes, rather than at once: the local
        delivery is not kept waiting behind a ``sendto`` (the network copy is
        as late as the rest of the turn, no later).
        """
        self._core.send_multicast_many(datas)
        unflushed = self._unflushed = self._unflushed + total
        if after_local and not batch and unflushed < FLUSH_BYTES:
            if not self.flush_scheduled:
                self.flush_scheduled = True
                self._loop.call_soon(self._flush)
            return
        if not self.flush_scheduled or unflushed >= FLUSH_BYTES or batch:
            self._sent(total, batch)

    def ptp(self, dest: tuple[str, int], data: bytes, batch: bool) -> None:
        """Pack one message into the point-to-point stream to ``dest`` (see :meth:`multicast`)."""
        self._core.send_ptp(dest, data)
        size = len(data)
        unflushed = self._unflushed = self._unflushed + size
        if not self.flush_scheduled or unflushed >= FLUSH_BYTES or batch:
            self._sent(size, batch)

    def _sent(self, size: int, batch: bool) -> None:
        """Arrange for what was just packed (already counted in ``_unflushed``) to be
        flushed: at the end of the turn, or by the batch timer."""
        if self._unflushed >= FLUSH_BYTES:
            self._flush()
            return
        if batch and size <= BATCH_SMALL:
            self._batched += size
            if self._batched < self._max_datagram:
                if self._batch_handle is None and not self.flush_scheduled:
                    self._batch_handle = self._loop.call_later(BATCH_DELAY, self._flush)
                return
        if not self.flush_scheduled:
            # The first message of a loop turn goes out at once: a lone request or reply
            # does not wait for the end of the turn. The rest of the turn is packed and
            # flushed at its end, so a burst still costs few datagrams.
            self.flush_scheduled = True
            self._loop.call_soon(self._flush)
            self._flush_now()
            self._unflushed = 0

    # ------------------------------------------------------------------ output

    def _flush(self) -> None:
        """Close the datagrams being packed and send everything the core has produced."""
        self.flush_scheduled = False
        if self._batch_handle is not None:
            self._batch_handle.cancel()
            self._batch_handle = None
        self._batched = 0
        if self._unflushed:
            # Skipped when nothing was packed after the turn's first message went out
            # at once (the usual case for requests and replies).
            self._unflushed = 0
            self._flush_now()

    def _flush_now(self) -> None:
        if self.closed:
            return
        try:
            out = self._core.flush_datagrams(self._loop.time())
            if out:
                self._transmit_all(out)
            self._rearm()
        except Exception:
            self._contain("flushing")

    def _send_out(self) -> None:
        out = self._core.datagrams_to_send()
        if out:
            self._transmit_all(out)

    def _transmit_all(self, out: list[tuple[Any, Any]]) -> None:
        """Send the core's datagrams in order; what the socket cannot take now waits in the
        backlog (sent by ``_on_writable``, oldest first)."""
        self._touch()
        if self._backlog:
            self._queue(out, 0)
            return
        sock = self._uc
        group = self._group
        transmit = self._transmit
        for index, (data, dest) in enumerate(out):
            try:
                transmit(sock, data, group if dest is None else dest)
            except BlockingIOError:
                self._queue(out, index)
                return
            except OSError as exc:
                self._send_failed(exc, dest)

    def _send_failed(self, exc: OSError, dest: Any) -> None:
        counters = self._counters
        counters.send_errors += 1
        if counters.send_errors == 1 or counters.send_errors % 1000 == 0:
            self._log.warning(
                "datagram not sent; the reliable protocol will recover it",
                service=self._name,
                dest=str(dest or self._group),
                error=str(exc),
                send_errors=counters.send_errors,
            )

    def _queue(self, out: list[tuple[Any, Any]], start: int) -> None:
        backlog = self._backlog
        was_empty = not backlog
        for item in out[start:]:
            backlog.append(item)
            self._backlog_bytes += len(item[0])
        self._counters.datagrams_backlogged += len(out) - start
        if was_empty:
            self._loop.add_writer(self._uc.fileno(), self._on_writable)
        if self._backlog_bytes >= BACKLOG_HIGH and self.drained is None:
            self.drained = self._loop.create_future()
            self._on_backpressure(True)

    def _on_writable(self) -> None:
        try:
            backlog = self._backlog
            sock = self._uc
            group = self._group
            transmit = self._transmit
            while backlog:
                data, dest = backlog[0]
                try:
                    transmit(sock, data, group if dest is None else dest)
                except BlockingIOError:
                    break
                except OSError as exc:
                    self._send_failed(exc, dest)
                backlog.popleft()
                self._backlog_bytes -= len(data)
            if not backlog:
                self._loop.remove_writer(self._uc.fileno())
            if self.drained is not None and self._backlog_bytes <= BACKLOG_LOW:
                self._release_waiters()
        except Exception:
            self._contain("sending the backlog")

    def _release_waiters(self) -> None:
        drained = self.drained
        if drained is not None and not drained.done():
            drained.set_result(None)
        self.drained = None
        self._on_backpressure(False)

    # ------------------------------------------------------------------ input

    def _on_readable(self, sock: socket.socket) -> None:
        try:
            recvfrom = sock.recvfrom
            receive = self._core.receive
            own = self._own_sessions
            loss = self._loss
            now = self._loop.time()
            counters = self._counters
            mac = self._mac
            settle = False
            for _ in range(READ_BATCH):
                try:
                    data, src = recvfrom(65536)
                except BlockingIOError:
                    break
                except OSError:
                    counters.receive_errors += 1
                    break
                if data[8:16] in own:
                    counters.own_datagrams += 1
                    continue
                if mac is not None:
                    opened = mac.open(data)
                    if opened is None:
                        counters.datagrams_unauthenticated += 1
                        continue
                    data = opened
                if loss and self._random() < loss:
                    counters.datagrams_dropped_on_purpose += 1
                    continue
                delivered = receive(data, src, now)
                if delivered is None:
                    # Anything but the next datagram of whole messages: the core may have
                    # events, datagrams (NAKs, resends) and a new deadline for us.
                    settle = True
                elif delivered.ptp:
                    self._deliver_ptp(delivered.payloads)
                else:
                    self._deliver_multicast(delivered.payloads)
                if len(data) < SMALL_DATAGRAM:
                    # Small datagrams are latency traffic: return to the loop now, not
                    # after a further read that would most likely find nothing (a
                    # failed recvfrom and its exception). The selector is level-
                    # triggered, so anything still queued calls us again at once.
                    break
            self._touch()
            if settle:
                self._after_core()
        except Exception:
            self._contain("reading datagrams")

    def _on_timer(self) -> None:
        self._timer = None
        try:
            now = max(self._loop.time(), self._timer_at)
            self._core.handle_timer(now)
            self._after_core()
        except Exception:
            self._contain("running the protocol timer")
            if self._timer is None and not self.closed:
                self._timer_at = self._loop.time() + self._heartbeat_interval
                self._timer = self._loop.call_at(self._timer_at, self._on_timer)

    def _after_core(self) -> None:
        events = self._core.events()
        if events:
            self._handle_events(events)
        self._send_out()
        self._rearm()

    def _rearm(self) -> None:
        if self.closed:
            return
        deadline = self._core.next_deadline()
        if deadline is None:
            return
        timer = self._timer
        if timer is not None:
            if self._timer_at <= deadline:
                return
            timer.cancel()
        self._timer_at = deadline
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _handle_events(self, events: list[Any]) -> None:
        for event in events:
            if event.__class__ is _Delivered:
                if event.ptp:
                    self._deliver_ptp(event.payloads)
                else:
                    self._deliver_multicast(event.payloads)
            else:
                try:
                    self._on_event(event)
                except Exception:
                    self._contain("reporting a protocol event", event=repr(event))

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush, say goodbye to peers (the core's FINAL heartbeat), stop the timers,
        release waiting publishers and close the sockets. Idempotent."""
        if self.closed:
            return
        try:
            self._core.close(self._loop.time())
            self._send_out()
        except Exception:
            self._contain("closing")
        self.closed = True
        for handle in (self._timer, self._batch_handle):
            if handle is not None:
                handle.cancel()
        self._timer = self._batch_handle = None
        self._release_waiters()
        if not self._loop.is_closed():
            for sock in (self._uc, *self._mcs):
                self._loop.remove_reader(sock.fileno())
            if self._backlog:
                self._loop.remove_writer(self._uc.fileno())
        self._backlog.clear()
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._uc, *self._mcs):
            sock.close()
