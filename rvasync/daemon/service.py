"""One service of a daemon: its UDP sockets, the reliable core they feed, and message routing.

A :class:`ServiceEndpoint` is the asyncio driver of one
:class:`~rvasync.protocol.reliable.ReliableEndpoint` (the sans-IO protocol core):

* **input**: the multicast receiver(s) and the unicast socket are watched with
  ``loop.add_reader``; each readiness drains up to :data:`READ_BATCH` datagrams
  into the core before anything else runs, so a burst costs one wake-up, not
  one per datagram. Our own multicast, looped back by the kernel, is dropped by
  its session id before the core parses it.
* **output**: messages published during one event-loop turn are packed into the
  core's open datagram; one ``loop.call_soon`` per turn flushes them (batch mode
  waits up to :data:`BATCH_DELAY` instead). Datagrams go out of the unicast
  socket; when its buffer is full they wait in a backlog drained by
  ``loop.add_writer``, and publishers are asked to wait (backpressure).
* **time**: one timer handle at the core's ``next_deadline()``.
* **routing**: an index of subject interests -> sessions. A message published
  here is delivered to every matching session of this daemon (sender
  included) and multicast unless it is ``_LOCAL.``; an inbox of this daemon is
  delivered to its session; an inbox of another daemon goes point to point to
  the address written in it. A received message is decoded once, and only if
  some session wants it.
* **advisories**: the core's events become DATALOSS, RETRANSMISSION and
  UNREACHABLE.TRANSPORT advisories presented to every session of the service;
  HOST.STATUS is published periodically.

Nothing a peer sends can stop the endpoint: the core never raises on input,
and every driver callback contains and logs unexpected exceptions.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections import deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from rvasync import _accel, codec
from rvasync._logging import stderr_logger
from rvasync.daemon import advisories as adv
from rvasync.daemon.params import NetworkSpec, ServiceSpec
from rvasync.daemon.session import ClientSession, Payload, SessionOwner, peek_subject
from rvasync.daemon.stats import ServiceCounters, host_status_fields
from rvasync.daemon.udp import (
    RECV_BUFFER,
    SEND_BUFFER,
    address_hex,
    drop_own_datagrams,
    open_multicast_receiver,
    open_unicast,
    parse_address_hex,
    set_buffers,
)
from rvasync.errors import (
    InvalidArgument,
    MalformedMessage,
    MessageTooLarge,
    NotPermitted,
    TransportClosed,
)
from rvasync.message import Message
from rvasync.protocol.reliable import MAX_MESSAGE, ReliableEndpoint
from rvasync.protocol.reliable_events import (
    Delivered,
    InboundDataLoss,
    OutboundDataLoss,
    PeerSilent,
    RetransmissionRequested,
    RetransmissionSent,
    RetransmissionSuppressed,
)
from rvasync.subjects import SubjectIndex

if TYPE_CHECKING:
    import socket

    from rvasync.daemon.engine import Daemon

__all__ = ["BATCH_DELAY", "ServiceEndpoint"]

#: Datagrams read from one socket per readiness callback before other work runs.
READ_BATCH = 16
#: A datagram shorter than this ends a readiness callback's reads (see _on_readable).
SMALL_DATAGRAM = 2048
#: Batch mode holds small messages at most this long (the spec suggests ~25 ms of latency).
BATCH_DELAY = 0.02
#: In batch mode, a message larger than this is not held: it goes out at the end of the turn.
BATCH_SMALL = 1024
#: Packed but unflushed bytes that force a flush inside ``publish`` (a program that sends
#: without ever yielding to the loop must not buffer without bound).
FLUSH_BYTES = 4 * 1024 * 1024
#: Send backlog above which publishers wait, and below which they resume.
BACKLOG_HIGH = 16 * 1024 * 1024
BACKLOG_LOW = 4 * 1024 * 1024
#: Publishers waiting on the backlog this long get CLIENT.FASTPRODUCER (as rvd's 5 seconds).
FAST_PRODUCER_AFTER = 5.0
#: Subjects whose routes are remembered before the cache is cleared.
ROUTE_CACHE = 4096

_encode = codec.encode
_decode = codec.decode
_Delivered = Delivered
_deliver = _accel.load("daemonpath").deliver_multicast
_subject_key = _accel.load("daemonpath").subject_key


def _transmit(sock: socket.socket, data: Any, address: Any) -> None:
    """Send one datagram of the core: bytes, or a Gathered one from its parts (no copy)."""
    if data.__class__ is bytes:
        sock.sendto(data, address)
    else:
        sock.sendmsg(data.parts, (), 0, address)


class ServiceEndpoint:
    """The sockets, reliable core and routing of one service (UDP port) in one daemon."""

    def __init__(
        self,
        daemon: Daemon,
        spec: ServiceSpec,
        net: NetworkSpec,
        *,
        reliability: float,
        max_datagram: int,
        heartbeat_interval: float,
        peer_timeout: float,
        loss: float,
        host_status_interval: float,
    ) -> None:
        self._daemon = daemon
        self._loop: asyncio.AbstractEventLoop = daemon.loop
        self._touch = daemon.poller.touch
        self.spec = spec
        self.port = spec.port
        self.network = net
        self.counters = ServiceCounters()
        self.closed = False
        self._log = stderr_logger()
        self._loss = loss
        self._rng = random.Random()
        self._heartbeat_interval = heartbeat_interval
        self._peer_timeout = peer_timeout
        self._max_datagram = max_datagram

        self._uc = open_unicast(net)
        self._mcs: list[socket.socket] = []
        try:
            for group in net.groups:
                self._mcs.append(open_multicast_receiver(group, spec.port, net))
            self.buffers = set_buffers(self._uc, RECV_BUFFER, SEND_BUFFER)
            for sock in self._mcs:
                set_buffers(sock, RECV_BUFFER, 0)
        except BaseException:
            self._close_sockets()
            raise
        self.address: tuple[str, int] = self._uc.getsockname()
        self.address_hex = address_hex(self.address)
        self._group = (net.send_address, spec.port)

        now = self._loop.time()
        self._started = now
        self._own_sessions: set[bytes] = set()
        self._core = self._new_core(reliability, now)

        self.sessions: dict[str, ClientSession] = {}
        self._interest: SubjectIndex = SubjectIndex()
        self._routes: dict[str, tuple[ClientSession, ...]] = {}
        #: received subjects (encoded bytes) -> (owned sink or None, sessions)
        self._inbound: dict[bytes, tuple[Any, tuple[ClientSession, ...]]] = {}

        self._flush_soon = False
        self._batch_handle: asyncio.TimerHandle | None = None
        self._batched = 0
        self._unflushed = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._backlog: deque[tuple[bytes, tuple[str, int] | None]] = deque()
        self._backlog_bytes = 0
        self._drained: asyncio.Future[None] | None = None
        self._fast_producer_handle: asyncio.TimerHandle | None = None
        self._waiting_sessions: set[ClientSession] = set()
        self._linger: asyncio.TimerHandle | None = None
        self._status_interval = host_status_interval
        self._status_handle: asyncio.TimerHandle | None = None

        for sock in (self._uc, *self._mcs):
            self._loop.add_reader(sock.fileno(), self._on_readable, sock)
        self._rearm()
        if host_status_interval > 0:
            self._status_handle = self._loop.call_later(host_status_interval, self._status_tick)

    def _new_core(self, reliability: float, now: float) -> ReliableEndpoint:
        core = ReliableEndpoint(
            now=now,
            reliability=reliability,
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

    # ------------------------------------------------------------------ sessions

    @property
    def reliability(self) -> float:
        """Seconds sent data is retained for retransmission on this service."""
        return self._core.reliability

    @property
    def core(self) -> ReliableEndpoint:
        """The reliable multicast core this endpoint drives (for statistics and tests)."""
        return self._core

    def attach(
        self,
        owner: SessionOwner,
        token: str,
        *,
        description: str | None,
        reliability: float | None,
    ) -> ClientSession:
        """A new session on this service (see ``Daemon.attach``)."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        if reliability is not None:
            self._raise_reliability(reliability)
        session = ClientSession(
            self, owner, token, description=description, reliability=reliability
        )
        self.sessions[token] = session
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        return session

    def _raise_reliability(self, wanted: float) -> None:
        """Two transports asking for different reliability: the larger wins (never lowered).

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
        self._core = self._new_core(wanted, now)
        self._rearm()

    def detach(self, session: ClientSession) -> None:
        """Called by ``ClientSession.close``: forget the session and tell everyone."""
        if self.sessions.get(session.token) is not session:
            return
        del self.sessions[session.token]
        for subject in session._interests:
            self._interest.remove(subject, session)
        self._routes.clear()
        self._inbound.clear()
        self._waiting_sessions.discard(session)
        if not self.closed:
            try:
                self.publish_internal(
                    adv.unreachable_transport(session.transport_id, session.description)
                )
            except Exception:
                self._contain("reporting a closed transport")
        self._daemon._session_closed(session)
        if not self.sessions and not self.closed:
            self._start_linger()

    def _start_linger(self) -> None:
        """No session left: keep serving retransmissions while sent data is retained, then close."""
        now = self._loop.time()
        deadline = self._core.retention_deadline()
        delay = 0.0 if deadline is None else max(0.0, deadline - now)
        self._linger = self._loop.call_later(delay, self._linger_done)

    def _linger_done(self) -> None:
        self._linger = None
        if not self.sessions and not self.closed:
            self._daemon._service_closed(self)
            self.close()

    # ------------------------------------------------------------------ interest

    def add_interest(self, session: ClientSession, subject: str) -> None:
        self._interest.add(subject, session)
        self._routes.clear()
        self._inbound.clear()

    def remove_interest(self, session: ClientSession, subject: str) -> None:
        self._interest.remove(subject, session)
        self._routes.clear()
        self._inbound.clear()

    def _route(self, subject: str) -> tuple[ClientSession, ...]:
        """Sessions interested in ``subject``, each once, in order of first interest."""
        try:
            found = self._interest.match(subject)
        except Exception:
            found = ()
        if len(found) > 1:
            found = tuple(dict.fromkeys(found))
        routes = self._routes
        if len(routes) >= ROUTE_CACHE:
            routes.clear()
        routes[subject] = found
        return found

    # ------------------------------------------------------------------ publishing

    def publish(
        self, session: ClientSession | None, msg: Message | None, data: bytes | None = None
    ) -> Awaitable[None] | None:
        """Route one message from ``session`` (None: the daemon itself). See ClientSession."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        subject = msg.subject if msg is not None else _subject_of(data)  # type: ignore[arg-type]
        if subject is None:
            raise InvalidArgument("cannot publish a message without a subject")
        if subject[:1] == "_":
            return self._publish_special(session, subject, msg, data)
        # The hot path of a publishing transport: the common case is written out flat.
        if data is None:
            try:
                data = _encode(msg)
            except MessageTooLarge:
                self._too_large(session, None)
                raise
        elif len(data) > MAX_MESSAGE:
            data = self._wire(session, msg, data)
        lone = self._send_lone(session, data, None)
        sessions = self._routes.get(subject)
        if sessions is None:
            sessions = self._route(subject)
        if sessions:
            self._deliver_local(sessions, msg, data)
        size = len(data)
        counters = self.counters
        counters.messages_out += 1
        counters.bytes_out += size
        if not lone:
            self._core.send_multicast(data)
            unflushed = self._unflushed = self._unflushed + size
            if not self._flush_soon or unflushed >= FLUSH_BYTES or (session and session.batch):
                self._sent(session, size, counted=True)
        if self._drained is not None:
            return self._pressure(session)
        return None

    def publish_many(
        self,
        session: ClientSession | None,
        items: list[tuple[Message | None, bytes | None]],
    ) -> Awaitable[None] | None:
        """Route several messages in order; every one is encoded and checked before any is sent."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        plan: list[tuple[str, Message | None, bytes]] = []
        for msg, data in items:
            subject = msg.subject if msg is not None else _subject_of(data)  # type: ignore[arg-type]
            if subject is None:
                raise InvalidArgument("cannot publish a message without a subject")
            if session is not None and subject[:1] == "_":
                check_client_subject(subject)
            plan.append((subject, msg, self._wire(session, msg, data)))
        routes = self._routes
        multicast: list[bytes] = []
        total = 0
        for subject, msg, data in plan:
            if subject[:1] == "_":
                self._publish_special(session, subject, msg, data)
                continue
            sessions = routes.get(subject)
            if sessions is None:
                sessions = self._route(subject)
            if sessions:
                self._deliver_local(sessions, msg, data)
            multicast.append(data)
            total += len(data)
        if multicast:
            self._core.send_multicast_many(multicast)
            counters = self.counters
            counters.messages_out += len(multicast)
            counters.bytes_out += total
            self._sent(session, total)
        return self._pressure(session)

    def publish_internal(self, msg: Message) -> None:
        """Publish a message of the daemon's own (an advisory) locally and on the network."""
        self.publish(None, msg, None)

    def _wire(
        self, session: ClientSession | None, msg: Message | None, data: bytes | None
    ) -> bytes:
        """The wire bytes of a message to send, refusing (and reporting) one over 64 MiB."""
        if data is None:
            try:
                data = _encode(msg)
            except MessageTooLarge:
                self._too_large(session, None)
                raise
        if len(data) > MAX_MESSAGE:
            self._too_large(session, len(data))
            raise MessageTooLarge(
                f"message is {len(data)} bytes, over the {MAX_MESSAGE}-byte (64 MiB) limit"
            )
        return data

    def _publish_special(
        self,
        session: ClientSession | None,
        subject: str,
        msg: Message | None,
        data: bytes | None,
    ) -> Awaitable[None] | None:
        """Subjects whose first element starts with '_'.

        ``_INBOX.<address>.<session>.n`` goes to that session (here, or point to point to
        its daemon); ``_LOCAL.`` and inbox names rvasync did not make stay in this daemon;
        ``_RV.`` (advisories) is the daemon's own; any other (the protocol subjects of
        fault tolerance, certified delivery ...) travels like an ordinary subject.
        """
        counters = self.counters
        if subject.startswith("_INBOX."):
            parts = subject.split(".", 3)
            if len(parts) == 4:
                if parts[1] == self.address_hex:
                    target = self.sessions.get(parts[2])
                    counters.messages_local += 1
                    if target is None:
                        counters.messages_misrouted += 1
                    elif target._inbox_sink is not None:
                        if msg is None:
                            msg = _decode(data)  # type: ignore[arg-type]
                        target._inbox_sink(msg, False)
                        counters.deliveries += 1
                    else:
                        self._deliver_local((target,), msg, data)
                    return None
                dest = _address(parts[1])
                if dest is not None:
                    data = self._wire(session, msg, data)
                    if not self._send_lone(session, data, dest):
                        self._core.send_ptp(dest, data)
                        self._sent(session, len(data))
                    counters.messages_out += 1
                    counters.bytes_out += len(data)
                    return self._pressure(session)
            # Not an inbox rvasync made: only listeners of this daemon can have it.
            local_only = True
        elif subject.startswith("_LOCAL."):
            local_only = True
        else:
            if session is not None:
                check_client_subject(subject)
            local_only = False
        sessions = self._routes.get(subject)
        if sessions is None:
            sessions = self._route(subject)
        if local_only:
            counters.messages_local += 1
            if sessions:
                self._deliver_local(sessions, msg, data)
            return None
        data = self._wire(session, msg, data)
        if sessions:
            self._deliver_local(sessions, msg, data)
        self._core.send_multicast(data)
        counters.messages_out += 1
        counters.bytes_out += len(data)
        self._sent(session, len(data))
        return self._pressure(session)

    def _deliver_local(
        self, sessions: tuple[ClientSession, ...], msg: Message | None, data: bytes | None
    ) -> None:
        payload = None
        for target in sessions:
            try:
                if target._sink_is_message:
                    if msg is None:
                        msg = _decode(data)  # type: ignore[arg-type]
                    target._sink(msg)
                else:
                    if payload is None:
                        payload = Payload(msg, data)
                    target._sink(payload)
            except MalformedMessage:
                self.counters.messages_malformed += 1
                return
            except Exception:
                self._contain("delivering to a client", subject=getattr(msg, "subject", None))
        self.counters.deliveries += len(sessions)

    def _send_lone(self, session: ClientSession | None, data: bytes, dest: Any) -> bool:
        """Send ``data`` at once in a datagram of its own, if it is the turn's first message;
        False (nothing done) to pack it the usual way.

        The latency path of a request or a reply: the datagram leaves before any
        other work (local delivery, counters, the end-of-turn flush, the protocol
        timer), straight from the core's ``flush_lone``. Later messages of the same
        turn are packed together and flushed at its end as usual. Not taken with
        anything already waiting to go (packed, batched, or backlogged), so order
        on every stream is kept.
        """
        if (
            self._flush_soon
            or self._unflushed
            or self._backlog
            or (session is not None and session.batch)
        ):
            return False
        datagram = self._core.flush_lone(data, dest, self._loop.time())
        if datagram is None:
            return False
        # Straight to the socket, not through _transmit_all and _transmit: two calls
        # fewer on the latency path (the backlog is empty, the datagram is bytes).
        try:
            self._uc.sendto(datagram, self._group if dest is None else dest)
        except BlockingIOError:
            self._queue([(datagram, dest)], 0)
        except OSError as exc:
            self._send_failed(exc, dest)
        self._touch()
        self._flush_soon = True
        self._loop.call_soon(self._flush)
        self._rearm()
        return True

    def _too_large(self, session: ClientSession | None, size: int | None) -> None:
        self.counters.messages_too_large += 1
        if session is None:
            return
        lost = self._core.datagrams_for(size if size is not None else MAX_MESSAGE + 1)
        self._present(session, adv.msg_too_large(self.address[0], lost, size))

    def _sent(self, session: ClientSession | None, size: int, *, counted: bool = False) -> None:
        """Arrange for what was just packed to be flushed (end of turn, or batch timer).

        ``counted``: the caller already added ``size`` to the unflushed total.
        """
        if not counted:
            self._unflushed += size
        if self._unflushed >= FLUSH_BYTES:
            self._flush()
            return
        if session is not None and session.batch and size <= BATCH_SMALL:
            self._batched += size
            if self._batched < self._max_datagram:
                if self._batch_handle is None and not self._flush_soon:
                    self._batch_handle = self._loop.call_later(BATCH_DELAY, self._flush)
                return
        if not self._flush_soon:
            # The first message of a loop turn goes out at once: a lone request or reply
            # does not wait for the end of the turn. The rest of the turn is packed and
            # flushed at its end, so a burst still costs few datagrams.
            self._flush_soon = True
            self._loop.call_soon(self._flush)
            self._flush_now()
            self._unflushed = 0

    # ------------------------------------------------------------------ output

    def _flush(self) -> None:
        """Close the datagrams being packed and send everything the core has produced."""
        self._flush_soon = False
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
        for index, (data, dest) in enumerate(out):
            try:
                _transmit(sock, data, group if dest is None else dest)
            except BlockingIOError:
                self._queue(out, index)
                return
            except OSError as exc:
                self._send_failed(exc, dest)

    def _send_failed(self, exc: OSError, dest: Any) -> None:
        counters = self.counters
        counters.send_errors += 1
        if counters.send_errors == 1 or counters.send_errors % 1000 == 0:
            self._log.warning(
                "datagram not sent; the reliable protocol will recover it",
                service=self.spec.text,
                dest=str(dest or self._group),
                error=str(exc),
                send_errors=counters.send_errors,
            )

    def _queue(self, out: list[tuple[bytes, Any]], start: int) -> None:
        backlog = self._backlog
        was_empty = not backlog
        for item in out[start:]:
            backlog.append(item)
            self._backlog_bytes += len(item[0])
        self.counters.datagrams_backlogged += len(out) - start
        if was_empty:
            self._loop.add_writer(self._uc.fileno(), self._on_writable)
        if self._backlog_bytes >= BACKLOG_HIGH and self._drained is None:
            self._drained = self._loop.create_future()
            self._fast_producer_handle = self._loop.call_later(
                FAST_PRODUCER_AFTER, self._fast_producer
            )

    def _on_writable(self) -> None:
        try:
            backlog = self._backlog
            sock = self._uc
            group = self._group
            while backlog:
                data, dest = backlog[0]
                try:
                    _transmit(sock, data, group if dest is None else dest)
                except BlockingIOError:
                    break
                except OSError as exc:
                    self._send_failed(exc, dest)
                backlog.popleft()
                self._backlog_bytes -= len(data)
            if not backlog:
                self._loop.remove_writer(self._uc.fileno())
            if self._drained is not None and self._backlog_bytes <= BACKLOG_LOW:
                self._release_waiters()
        except Exception:
            self._contain("sending the backlog")

    def _release_waiters(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None
        self._waiting_sessions.clear()
        if self._fast_producer_handle is not None:
            self._fast_producer_handle.cancel()
            self._fast_producer_handle = None

    def _pressure(self, session: ClientSession | None) -> Awaitable[None] | None:
        drained = self._drained
        if drained is None or session is None:
            return None
        self._waiting_sessions.add(session)
        return asyncio.shield(drained)

    def _fast_producer(self) -> None:
        """Publishers have waited FAST_PRODUCER_AFTER seconds on the backlog: warn them."""
        self._fast_producer_handle = None
        if self._drained is None:
            return
        waiting = len(self._backlog)
        for session in list(self._waiting_sessions):
            self._present(session, adv.fast_producer(waiting))
        self._fast_producer_handle = self._loop.call_later(FAST_PRODUCER_AFTER, self._fast_producer)

    # ------------------------------------------------------------------ input

    def _on_readable(self, sock: socket.socket) -> None:
        try:
            recvfrom = sock.recvfrom
            receive = self._core.receive
            own = self._own_sessions
            loss = self._loss
            now = self._loop.time()
            counters = self.counters
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
                if loss and self._rng.random() < loss:
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

    def _deliver_multicast(self, payloads: list[bytes]) -> None:
        """Hand each received multicast message to the sessions interested in its subject.

        The hot path of a receiving daemon (``daemonpath``: compiled, or its
        pure twin). The subject is not decoded: its encoded bytes key a cache
        of routes, so an unwanted message costs a slice and a dict lookup, and
        a wanted one is decoded once whatever the number of sessions.
        """
        deliveries, unwanted, malformed = _deliver(
            payloads,
            self._inbound,
            _decode,
            self._inbound_route,
            self._deliver_shared,
            self._delivery_failed,
            MalformedMessage,
        )
        # Counted after the hand-over: a waiting consumer is woken first.
        counters = self.counters
        counters.messages_in += len(payloads)
        counters.bytes_in += sum(map(len, payloads))
        counters.deliveries += deliveries
        counters.messages_unwanted += unwanted
        counters.messages_malformed += malformed

    def _deliver_shared(
        self, msg: Message, data: bytes, sessions: tuple[ClientSession, ...]
    ) -> None:
        """A received message for several sessions (or for one that takes Payloads)."""
        payload = None
        for target in sessions:
            try:
                if target._sink_is_message:
                    target._sink(msg)
                else:
                    if payload is None:
                        payload = Payload(msg, data)
                    target._sink(payload)
            except Exception as exc:
                self._delivery_failed(exc, msg)

    def _delivery_failed(self, exc: BaseException, msg: Message) -> None:
        self.counters.internal_errors += 1
        self._log.error(
            "delivery to a client failed; the daemon carries on",
            service=self.spec.text,
            subject=getattr(msg, "subject", None),
            exc_info=exc,
        )

    def _inbound_route(self, data: bytes) -> tuple[Any, tuple[ClientSession, ...]] | None:
        """Route of a received multicast message the cache did not know: (owned sink or None,
        sessions); None to drop it (undecodable, or an inbox/_LOCAL subject, which never
        travel by multicast)."""
        key = _subject_key(data)
        subject = peek_subject(data)
        if subject is None or subject[:1] == "_":
            subject = self._acceptable_multicast(data, subject)
            if subject is None:
                return None
        sessions = self._routes.get(subject)
        if sessions is None:
            sessions = self._route(subject)
        owned = None
        if len(sessions) == 1:
            # The decoded message goes to one session only: it may keep it as is.
            owned = getattr(sessions[0].owner, "deliver_owned", None)
        entry = (owned, sessions)
        if key is not None:
            inbound = self._inbound
            if len(inbound) >= ROUTE_CACHE:
                inbound.clear()
            inbound[key] = entry
        return entry

    def _acceptable_multicast(self, data: bytes, subject: str | None) -> str | None:
        """The subject of a multicast message that could not be peeked or starts with '_',
        or None if it must be dropped: undecodable, or an inbox or _LOCAL subject (those
        never travel by multicast)."""
        counters = self.counters
        if subject is None:
            subject = _subject_of(data)
            if subject is None:
                counters.messages_malformed += 1
                return None
        if subject.startswith(("_INBOX.", "_LOCAL.")) or subject in ("_INBOX", "_LOCAL"):
            counters.messages_misrouted += 1
            return None
        return subject

    def _deliver_ptp(self, payloads: list[bytes]) -> None:
        counters = self.counters
        mine = self.address_hex
        for data in payloads:
            key = _subject_key(data)  # native: the subject's bytes, without a decode
            try:
                subject = key.decode() if key else _subject_of(data)
            except UnicodeDecodeError:
                subject = None
            if subject is None:
                counters.messages_malformed += 1
                continue
            parts = subject.split(".", 3)
            target = None
            if len(parts) == 4 and parts[0] == "_INBOX" and parts[1] == mine:
                target = self.sessions.get(parts[2])
            if target is None:
                counters.messages_misrouted += 1
                continue
            try:
                if target._inbox_sink is not None:
                    target._inbox_sink(_decode(data), True)
                elif target._sink_is_message:
                    target._sink(_decode(data))
                else:
                    target._sink(Payload(None, data))  # a TCP client: forwarded undecoded
                counters.deliveries += 1
            except MalformedMessage:
                counters.messages_malformed += 1
            except Exception:
                self._contain("delivering to a client", subject=subject)
        # Counted after the hand-over: a waiting request is woken first.
        counters.messages_in += len(payloads)
        counters.bytes_in += sum(map(len, payloads))

    def _on_event(self, event: Any) -> None:
        cls = event.__class__
        if cls is InboundDataLoss:
            host = event.src[0]
            message = adv.data_loss(
                "INBOUND", event.ptp, host, event.datagrams, messages=event.messages
            )
        elif cls is OutboundDataLoss:
            message = adv.data_loss("OUTBOUND", event.ptp, event.dest[0], event.datagrams)
        elif cls is RetransmissionRequested:
            message = adv.retransmission("INBOUND.EXPECTED", event.src[0], event.datagrams)
        elif cls is RetransmissionSent:
            message = adv.retransmission("OUTBOUND.SENT", event.dest[0], event.datagrams)
        elif cls is RetransmissionSuppressed:
            message = adv.retransmission("OUTBOUND.SUPPRESSED", event.dest[0], event.datagrams)
        elif cls is PeerSilent:
            message = adv.unreachable_daemon(address_hex(event.src), event.src[0], event.reason)
        else:
            return  # PeerDiscovered: nothing to report
        self.present_all(message)

    # ------------------------------------------------------------------ advisories

    def _present(self, session: ClientSession, message: Message) -> None:
        try:
            session.owner.present(message)
        except Exception:
            self._contain("presenting an advisory", subject=message.subject)

    def present_all(self, message: Message) -> None:
        """Present an advisory that concerns the whole service to every session."""
        for session in list(self.sessions.values()):
            self._present(session, message)

    def host_status(self) -> list[tuple[str, Any, Any]]:
        """The HOST.STATUS fields of this service now."""
        return host_status_fields(
            host=self.address[0],
            core=self._core.stats,
            counters=self.counters,
            uptime=self._loop.time() - self._started,
            clients=len(self.sessions),
            service=self.spec.text,
            network=self.network.text,
            ipport=self._daemon.listen_port or 0,
            version=self._daemon.version,
        )

    def publish_host_status(self) -> Message:
        """Publish HOST.STATUS now (locally and to the network); return the advisory."""
        message = adv.host_status(self.address[0], self.host_status())
        self.publish_internal(message)
        return message

    def _status_tick(self) -> None:
        self._status_handle = None
        if self.closed:
            return
        try:
            self.publish_host_status()
        except Exception:
            self._contain("publishing HOST.STATUS")
        self._status_handle = self._loop.call_later(self._status_interval, self._status_tick)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop now: flush, say goodbye to peers (a FINAL heartbeat), close the sockets.

        Sessions still attached are closed (their sends raise TransportClosed).
        """
        if self.closed:
            return
        now = self._loop.time()
        try:
            for session in list(self.sessions.values()):
                # Its transports are terminated: tell the network, as a closing transport does.
                self.publish_internal(
                    adv.unreachable_transport(session.transport_id, session.description)
                )
            self._core.close(now)
            self._send_out()
        except Exception:
            self._contain("closing")
        self.closed = True
        for session in list(self.sessions.values()):
            session.closed = True
        self.sessions.clear()
        for handle in (
            self._timer,
            self._batch_handle,
            self._linger,
            self._status_handle,
            self._fast_producer_handle,
        ):
            if handle is not None:
                handle.cancel()
        self._timer = self._batch_handle = self._linger = self._status_handle = None
        self._fast_producer_handle = None
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

    def _contain(self, doing: str, **details: Any) -> None:
        """Log an unexpected exception in a driver callback; the endpoint carries on."""
        self.counters.internal_errors += 1
        self._log.exception(
            "daemon error contained", doing=doing, service=self.spec.text, **details
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.sessions)} sessions"
        return f"<ServiceEndpoint {self.spec.text} {self.address_hex} {state}>"


def check_client_subject(subject: str) -> None:
    """Clients may not publish advisories: ``_RV.`` subjects belong to the daemons."""
    if subject == "_RV" or subject.startswith("_RV."):
        raise NotPermitted(
            f"clients may not publish to {subject!r}: '_RV.' subjects are the daemons' advisories"
        )


@functools.lru_cache(maxsize=1024)
def _address(text: str) -> tuple[str, int] | None:
    """The daemon address written in an inbox (cached: replies reuse a few addresses)."""
    return parse_address_hex(text)


def _subject_of(data: bytes) -> str | None:
    """Subject of wire bytes: peeked when possible, else decoded (None if undecodable)."""
    subject = peek_subject(data)
    if subject is not None:
        return subject
    try:
        return _decode(data).subject
    except MalformedMessage:
        return None
