"""One service of a daemon: its client sessions, their interest, and its advisories.

A :class:`ServiceEndpoint` is what a daemon opens per service (UDP port). It
puts three parts together:

* a :class:`~rvasync.daemon.udpdriver.UdpDriver`: the sockets, the reliable
  multicast core they feed, its timer and the send backlog;
* a :class:`~rvasync.daemon.routing.Router`: which local sessions and which
  peers get a message, and delivery of received messages;
* and itself, which keeps the **sessions** attached to the service (attach,
  detach, linger while sent data is retained), registers their **interest**
  with the router, takes their messages (:meth:`ServiceEndpoint.publish`: a
  message published here is delivered to every matching session of this
  daemon, sender included, and multicast unless it is ``_LOCAL.``; an inbox of
  this daemon is delivered to its session; an inbox of another daemon goes
  point to point to the address written in it), and turns the core's events
  into **advisories** (DATALOSS, RETRANSMISSION, UNREACHABLE.TRANSPORT,
  CLIENT.FASTPRODUCER) presented to its sessions, and publishes HOST.STATUS.

Nothing a peer sends can stop the endpoint: the core never raises on input,
and every callback contains and logs unexpected exceptions.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from rvasync import codec
from rvasync._logging import stderr_logger
from rvasync.advlimit import Coalescer
from rvasync.daemon import advisories as adv
from rvasync.daemon.interestadv import LISTEN_ADVISORIES, InterestAnnouncer
from rvasync.daemon.params import NetworkSpec, ServiceSpec
from rvasync.daemon.peerinterest import Heard, PeerInterest
from rvasync.daemon.routing import LOCAL_ONLY, TO_PEER, TO_SESSION, Router, subject_of
from rvasync.daemon.session import ClientSession, SessionOwner
from rvasync.daemon.stats import DaemonIdentity, ServiceCounters, host_status_fields
from rvasync.daemon.udp import address_hex
from rvasync.daemon.udpdriver import UdpDriver
from rvasync.errors import (
    InvalidArgument,
    MessageTooLarge,
    NotPermitted,
    TransportClosed,
)
from rvasync.message import Message
from rvasync.protocol.authcheck import reserved_publish_refusal
from rvasync.protocol.reliable import DEFAULT_MAX_RETENTION, MAX_MESSAGE, ReliableEndpoint
from rvasync.protocol.reliable_events import (
    InboundDataLoss,
    OutboundDataLoss,
    PeerDiscovered,
    PeerSilent,
    RetransmissionNotRequested,
    RetransmissionRequested,
    RetransmissionSent,
    RetransmissionSuppressed,
)

__all__ = ["ServiceEndpoint", "StatusPage", "check_client_subject"]

#: Where a daemon serves its status page: (address, port, over HTTPS).
StatusPage = tuple[str, int, bool]

#: Publishers waiting on the backlog this long get CLIENT.FASTPRODUCER (as rvd's 5 seconds).
FAST_PRODUCER_AFTER = 5.0

_encode = codec.encode
_decode = codec.decode


#: A daemon whose sessions watch the interest announcements asks a daemon it discovers
#: for its interest at once and again this many heartbeat intervals later: by then the
#: other has heard this daemon's stream, and a lost query is asked for again (it cannot
#: be while it is the first datagram).
REANNOUNCE_HEARTBEATS = (2, 5)


class ServiceEndpoint:
    """The sessions, routing and UDP driver of one service (UDP port) in one daemon.

    ``loop``: the daemon's event loop; ``touch``: its busy poller's hook.
    ``on_session_closed(session)``: told when a session detaches;
    ``on_closed(endpoint)``: told when the endpoint closes itself (no session
    left, retention over). ``listen_port()``, ``version`` and ``status_page()`` (where
    the daemon serves its status page, or None): for HOST.STATUS.
    The rest configure the driver and its core.
    """

    def __init__(
        self,
        spec: ServiceSpec,
        net: NetworkSpec,
        *,
        loop: asyncio.AbstractEventLoop,
        touch: Callable[[], None],
        on_session_closed: Callable[[ClientSession], None],
        on_closed: Callable[[ServiceEndpoint], None],
        listen_port: Callable[[], int | None],
        version: str,
        status_page: Callable[[], StatusPage | None] = lambda: None,
        reliability: float,
        max_datagram: int,
        heartbeat_interval: float,
        peer_timeout: float,
        loss: float,
        host_status_interval: float,
        service_key: bytes | None = None,
        default_reliability: float | None = None,
        max_retention: int = DEFAULT_MAX_RETENTION,
    ) -> None:
        self._loop = loop
        self._on_session_closed = on_session_closed
        self._on_closed = on_closed
        self._listen_port = listen_port
        self._version = version
        self._status_page = status_page
        self.spec = spec
        self.port = spec.port
        self.network = net
        self.counters = ServiceCounters()
        self.closed = False
        #: The service key's secret (None: datagrams are not authenticated).
        self.service_key = service_key
        #: What a session that asks for no particular reliability counts as.
        self._default_reliability = (
            reliability if default_reliability is None else (default_reliability)
        )
        self._log = stderr_logger()

        #: The UDP driver (sockets, reliable core, timer, backlog) of this service.
        self.driver = driver = UdpDriver(
            spec.text,
            spec.port,
            net,
            loop=loop,
            touch=touch,
            counters=self.counters,
            contain=self._contain,
            reliability=reliability,
            max_datagram=max_datagram,
            heartbeat_interval=heartbeat_interval,
            peer_timeout=peer_timeout,
            loss=loss,
            service_key=service_key,
            max_retention=max_retention,
        )
        self.address: tuple[str, int] = driver.address
        self.address_hex = driver.address_hex
        self.buffers = driver.buffers
        self._started = loop.time()

        self.sessions: dict[str, ClientSession] = {}
        #: The routing of this service (interest, route caches, delivery to sessions).
        self.router = router = Router(
            address_hex=self.address_hex,
            sessions=self.sessions,
            counters=self.counters,
            contain=self._contain,
            name=spec.text,
        )

        #: LISTEN.START / STOP announcements of this daemon's interest (for routers), and
        #: what the other daemons announced (for the STOPs of a daemon given up on).
        self._listen_adv = InterestAnnouncer(self.address_hex)
        #: When a newly discovered daemon is asked for its interest again (see _on_event).
        self._reannounce_after = tuple(n * heartbeat_interval for n in REANNOUNCE_HEARTBEATS)
        self._reannounce: set[asyncio.TimerHandle] = set()
        self._peer_interest = PeerInterest(self.address_hex)
        self._ear = ClientSession(
            self, _Ear(self._heard_listen), "listen-advisories", description=None, reliability=None
        )
        for subject in LISTEN_ADVISORIES:
            router.add_interest(self._ear, subject)  # not a session of the service's
        #: Advisories that can fire per message: one per cause per second (rvasync.advlimit).
        self._coalesce = Coalescer()
        self._fast_producer_handle: asyncio.TimerHandle | None = None
        self._waiting_sessions: set[ClientSession] = set()
        self._linger: asyncio.TimerHandle | None = None
        self._status_interval = host_status_interval
        self._status_handle: asyncio.TimerHandle | None = None

        driver.start(
            deliver_multicast=router.deliver_multicast,
            deliver_ptp=router.deliver_ptp,
            on_event=self._on_event,
            on_backpressure=self._on_backpressure,
        )
        if host_status_interval > 0:
            self._status_handle = loop.call_later(host_status_interval, self._status_tick)

    # ------------------------------------------------------------------ sessions

    @property
    def reliability(self) -> float:
        """Seconds sent data is retained for retransmission on this service."""
        return self.driver.core.reliability

    @property
    def core(self) -> ReliableEndpoint:
        """The reliable multicast core this endpoint drives (for statistics and tests)."""
        return self.driver.core

    def attach(
        self,
        owner: SessionOwner,
        token: str,
        *,
        description: str | None,
        reliability: float | None,
        router: bool = False,
    ) -> ClientSession:
        """A new session on this service (see ``Daemon.attach``)."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        if reliability is not None:
            # Two transports asking for different reliability: the larger wins.
            self.driver.raise_reliability(reliability)
        session = ClientSession(
            self, owner, token, description=description, reliability=reliability, router=router
        )
        self.sessions[token] = session
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        return session

    def on_service(self, address: tuple[str, int]) -> bool:
        """Whether the daemon at ``address`` is on this service with no routing daemon
        between: this daemon itself, or one whose datagrams were heard here."""
        return address == self.address or self.driver.knows_address(address)

    def detach(self, session: ClientSession) -> None:
        """Called by ``ClientSession.close``: forget the session and tell everyone."""
        if self.sessions.get(session.token) is not session:
            return
        del self.sessions[session.token]
        subjects = session.interests()
        self.router.forget(session, subjects)
        for subject in subjects:
            self._announce(self._listen_adv.removed(session.router, subject))
        self._waiting_sessions.discard(session)
        if not self.closed:
            try:
                self.publish_internal(
                    adv.unreachable_transport(session.transport_id, session.description)
                )
            except Exception:
                self._contain("reporting a closed transport")
        self._on_session_closed(session)
        if not self.sessions and not self.closed:
            self._start_linger()
        elif self.sessions and not self.closed:
            # The largest request wins while its session stays; when it leaves, the
            # interval falls back to what the remaining sessions ask for.
            self.driver.lower_reliability(self._wanted_reliability())

    def _wanted_reliability(self) -> float:
        default = self._default_reliability
        return max(
            default if s.reliability is None else s.reliability for s in self.sessions.values()
        )

    def request_reliability(self, session: ClientSession, seconds: float) -> None:
        """``session`` now asks for ``seconds`` (an open transport's request-reliability call).

        The service keeps the largest request of its sessions, as at attach: a
        larger one raises the interval at once, a smaller one lowers it to what
        the sessions still ask for.
        """
        if self.sessions.get(session.token) is not session or self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        session.reliability = seconds
        if seconds > self.driver.core.reliability:
            self.driver.raise_reliability(seconds)
        else:
            self.driver.lower_reliability(self._wanted_reliability())

    def _start_linger(self) -> None:
        """No session left: keep serving retransmissions while sent data is retained, then close."""
        now = self._loop.time()
        deadline = self.driver.core.retention_deadline()
        delay = 0.0 if deadline is None else max(0.0, deadline - now)
        self._linger = self._loop.call_later(delay, self._linger_done)

    def linger_remaining(self) -> float | None:
        """Seconds this endpoint stays open with no session left (serving retransmission
        requests for what its sessions sent), or None while sessions are attached."""
        linger = self._linger
        if linger is None or self.sessions:
            return None
        return max(0.0, linger.when() - self._loop.time())

    def _linger_done(self) -> None:
        self._linger = None
        if not self.sessions and not self.closed:
            self.close()  # first: its counters are final when the daemon is told
            self._on_closed(self)

    # ------------------------------------------------------------------ interest

    def add_interest(self, session: ClientSession, subject: str) -> None:
        """``session`` listens to ``subject`` (called once per subject by the session)."""
        self.router.add_interest(session, subject)
        self._announce(self._listen_adv.added(session.router, subject))

    def remove_interest(self, session: ClientSession, subject: str) -> None:
        """Undo :meth:`add_interest`."""
        self.router.remove_interest(session, subject)
        self._announce(self._listen_adv.removed(session.router, subject))

    def _later(self, delay: float, newcomer: str) -> None:
        """Ask daemon ``newcomer`` for its interest again in ``delay`` seconds (while
        sessions here still want it)."""

        def again() -> None:
            self._reannounce.discard(handle)
            if self._listen_adv.watchers:
                self._announce([self._listen_adv.query(to=newcomer)])

        handle = self._loop.call_later(delay, again)
        self._reannounce.add(handle)

    def _announce(self, advisories: list[Message]) -> None:
        """Publish LISTEN.START / STOP advisories (see :mod:`rvasync.daemon.interestadv`)."""
        for advisory in advisories:
            if self.closed:
                return
            try:
                self.publish_internal(advisory)
            except Exception:
                self._contain("announcing interest", subject=advisory.subject)

    # ------------------------------------------------------------------ publishing

    def publish(
        self, session: ClientSession | None, msg: Message | None, data: bytes | None = None
    ) -> Awaitable[None] | None:
        """Route one message from ``session`` (None: the daemon itself). See ClientSession.

        The in-process send path, written out flat for one message (it is
        ``publish_many(session, [(msg, data)])``, the reference, with the loop turn's
        first message sent at once: tests/test_service_publish.py holds them equal).
        """
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        subject = msg.subject if msg is not None else subject_of(data)  # type: ignore[arg-type]  # data if no msg
        if subject is None:
            raise InvalidArgument("cannot publish a message without a subject")
        if subject[:1] == "_":
            return self._publish_special(session, subject, msg, data)
        if data is None:
            try:
                data = _encode(msg)
            except MessageTooLarge:
                self._too_large(session, None)
                raise
        elif len(data) > MAX_MESSAGE:
            data = self._wire(session, msg, data)
        driver = self.driver
        batch = session is not None and session.batch
        # The turn's first message leaves at once, before local delivery (send_lone); the
        # rest of a burst does not ask (one call fewer per message).
        lone = not (driver.flush_scheduled or batch) and driver.send_lone(data, None)
        router = self.router
        sessions = router.routes.get(subject)
        if sessions is None:
            sessions = router.route(subject)
        if sessions:
            router.deliver_local(sessions, msg, data)
        size = len(data)
        counters = self.counters
        counters.messages_out += 1
        counters.bytes_out += size
        if not lone:
            driver.multicast(data, size, batch)
        if driver.drained is not None:
            return self._pressure(session)
        return None

    def publish_many(
        self,
        session: ClientSession | None,
        items: list[tuple[Message | None, bytes | None]],
    ) -> Awaitable[None] | None:
        """Route several messages in order; every one is encoded and checked before any is
        sent. The reference path of publishing (:meth:`_route_batch`)."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        subjects: list[str] = []
        msgs: list[Message | None] = []
        wires: list[bytes] = []
        for msg, data in items:
            subject = msg.subject if msg is not None else subject_of(data)  # type: ignore[arg-type]  # data if no msg
            if subject is None:
                raise InvalidArgument("cannot publish a message without a subject")
            subjects.append(subject)
            msgs.append(msg)
            wires.append(self._wire(session, msg, data))
        self._check_batch(session, subjects, wires)
        return self._route_batch(session, subjects, msgs, wires)

    def publish_run(
        self, session: ClientSession | None, subject: str, datas: list[bytes]
    ) -> Awaitable[None] | None:
        """Route wire messages that all carry ``subject``, in order (a routing daemon passing
        a batch through); the caller wrote ``subject`` into every one of them."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        if subject[:1] == "_" or len(datas) < 2 or max(map(len, datas)) > MAX_MESSAGE:
            # Reserved subjects (their own rules and destinations), a single message
            # (sent at once, for latency) or one too large (refused and reported, the
            # others sent): one by one.
            wait = None
            for data in datas:
                wait = self.publish(session, None, data)
            return wait
        subjects = [subject] * len(datas)
        self._check_batch(session, subjects, datas)
        return self._route_batch(session, subjects, None, datas)

    def publish_wires(
        self, session: ClientSession, subjects: list[str], wires: list[bytes]
    ) -> Awaitable[None] | None:
        """:meth:`publish_many` for a client's encoded messages whose subjects are known
        (``subjects[i]`` of ``wires[i]``, read by the caller from the bytes): nothing is
        decoded or peeked again. Every one is checked before any is sent."""
        if self.closed:
            raise TransportClosed(f"service {self.spec.text} of this daemon is closed")
        if len(subjects) != len(wires):
            raise ValueError("publish_wires needs one subject per message")
        self._check_batch(session, subjects, wires)
        return self._route_batch(session, subjects, None, wires)

    def _check_batch(
        self, session: ClientSession | None, subjects: list[str], wires: list[bytes]
    ) -> None:
        """Refuse the whole batch if one message is over 64 MiB (reported) or, from a
        client that is not a router, on a reserved subject (:func:`check_client_subject`)."""
        if wires and max(map(len, wires)) > MAX_MESSAGE:
            size = next(len(data) for data in wires if len(data) > MAX_MESSAGE)
            self._too_large(session, size)
            raise MessageTooLarge(
                f"message is {size} bytes, over the {MAX_MESSAGE}-byte (64 MiB) limit"
            )
        if session is None:
            return
        router: bool | None = None
        checked = None  # the last subject checked: a run of one subject is checked once
        for subject in subjects:
            # "_...": what check_client_subject may refuse (advisories, router records,
            # wildcard inboxes).
            if subject[:1] == "_" and subject != checked:
                if router is None:
                    router = session.router
                if not router:
                    check_client_subject(subject)
                checked = subject

    def _route_batch(
        self,
        session: ClientSession | None,
        subjects: list[str],
        msgs: list[Message | None] | None,
        wires: list[bytes],
    ) -> Awaitable[None] | None:
        """The reference path: route checked messages (``subjects[i]`` of ``wires[i]``, and
        ``msgs[i]`` where the Message is known) in order, to this daemon's sessions and to
        the network.

        A message whose only receiver here takes batches of bytes (a TCP client) joins
        that receiver's batch, handed over once: before any other delivery (which must
        not overtake it), and at the end. Local receivers come first, the datagrams
        after them (a local replier does not wait behind a sendto).
        """
        router = self.router
        routes = router.routes
        multicast: list[bytes] = []
        batches: dict[Any, list[bytes]] = {}
        local = False  # given to a local session (whose write may still be to come)
        # A run of one subject whose only receiver takes batches: the run's subject and
        # that batch (the rest of the run joins it with no lookup).
        run: str | None = None
        run_batch: list[bytes] | None = None
        for index, subject in enumerate(subjects):
            data = wires[index]
            if subject == run and run_batch is not None:
                run_batch.append(data)
                multicast.append(data)
                continue
            run = run_batch = None
            msg = None if msgs is None else msgs[index]
            if subject[:1] == "_":
                if batches:
                    router.deliver_wires(batches)
                    batches = {}
                self._publish_special(session, subject, msg, data)
                continue
            sessions = routes.get(subject)
            if sessions is None:
                sessions = router.route(subject)
            if sessions:
                local = True
                sink = sessions[0].wires_sink if len(sessions) == 1 else None
                if sink is not None:
                    batch = batches.get(sink)
                    if batch is None:
                        batch = batches[sink] = [data]
                    else:
                        batch.append(data)
                    run, run_batch = subject, batch
                else:
                    if batches:
                        router.deliver_wires(batches)
                        batches = {}
                    router.deliver_local(sessions, msg, data)
            multicast.append(data)
        if batches:
            router.deliver_wires(batches)
        return self._send_batch(session, multicast, local)

    def _send_batch(
        self, session: ClientSession | None, multicast: list[bytes], local: bool
    ) -> Awaitable[None] | None:
        """The network's copy of a batch (``local``: after local writes), counted."""
        driver = self.driver
        if multicast:
            total = sum(map(len, multicast))
            counters = self.counters
            counters.messages_out += len(multicast)
            counters.bytes_out += total
            driver.multicast_many(multicast, total, session is not None and session.batch, local)
        if driver.drained is None:  # the common case, without a call
            return None
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
        """Subjects whose first element starts with '_' (see ``Router.destination``).

        ``_INBOX.<address>.<session>.n`` goes to that session (here, or point to point to
        its daemon); ``_LOCAL.`` and inbox names rvasync did not make stay in this daemon;
        ``_RV.`` (advisories) is the daemon's own; any other (the protocol subjects of
        fault tolerance, certified delivery ...) travels like an ordinary subject.
        """
        kind, where = self.router.destination(subject)
        if kind == TO_PEER:
            return self._to_peer(session, subject, msg, data, where)
        if kind == TO_SESSION:
            self._to_session(where, msg, data)
            return None
        local_only = kind == LOCAL_ONLY
        if not local_only and session is not None and not session.router:
            check_client_subject(subject)  # a router presents its advisories to its networks
        router = self.router
        sessions = router.routes.get(subject)
        if sessions is None:
            sessions = router.route(subject)
        counters = self.counters
        if local_only:
            counters.messages_local += 1
            if sessions:
                router.deliver_local(sessions, msg, data)
            return None
        data = self._wire(session, msg, data)
        driver = self.driver
        batch = session is not None and session.batch
        # As in publish: the turn's first message leaves at once, before local delivery
        # (a protocol's request, such as a remote operation's invocation, is latency too).
        lone = not batch and driver.send_lone(data, None)
        if sessions:
            router.deliver_local(sessions, msg, data)
        counters.messages_out += 1
        counters.bytes_out += len(data)
        if not lone:
            driver.multicast(data, len(data), batch)
        if driver.drained is None:  # as for replies: no call for the common case
            return None
        return self._pressure(session)

    def _to_peer(
        self,
        session: ClientSession | None,
        subject: str,
        msg: Message | None,
        data: bytes | None,
        where: tuple[str, int],
    ) -> Awaitable[None] | None:
        """An inbox of another daemon: point to point to the address written in it."""
        data = self._wire(session, msg, data)
        driver = self.driver
        if not driver.knows_address(where):
            # The inbox names a daemon never heard on this service: the address may be
            # anyone's (a crafted _INBOX.<address> subject). Not sent; counted, and the
            # sender is told its message is lost.
            self._ptp_refused(session, subject, where)
            return None
        batch = session is not None and session.batch
        if batch or not driver.send_lone(data, where):
            driver.ptp(where, data, batch)
        counters = self.counters
        counters.messages_out += 1
        counters.bytes_out += len(data)
        # _pressure written out: a reply must not pay for a call that returns None
        if driver.drained is None:
            return None
        return self._pressure(session)

    def _to_session(
        self, where: ClientSession | None, msg: Message | None, data: bytes | None
    ) -> None:
        """An inbox of this daemon: to its session (None: no longer here)."""
        counters = self.counters
        counters.messages_local += 1
        if where is None:
            counters.messages_misrouted += 1
        elif where.inbox_sink is not None:
            where.inbox_sink(msg if msg is not None else _decode(data), False)
            counters.deliveries += 1
        else:
            self.router.deliver_local((where,), msg, data)

    def _ptp_refused(
        self, session: ClientSession | None, subject: str, where: tuple[str, int]
    ) -> None:
        counters = self.counters
        counters.ptp_refused += 1
        if counters.ptp_refused == 1 or counters.ptp_refused % 1000 == 0:
            self._log.warning(
                "point-to-point message to an unknown daemon address not sent",
                service=self.spec.text,
                subject=subject[:200],
                ptp_refused=counters.ptp_refused,
            )
        if session is not None:
            # Per message: one advisory a second per session and address, with the count.
            self._coalesce.report(
                ("ptp-refused", session.token, where),
                1,
                lambda n: self._present(
                    session,
                    adv.data_loss(
                        "OUTBOUND", True, where[0], n, peer=where, messages=n, unknown_address=1
                    ),
                ),
            )

    def _too_large(self, session: ClientSession | None, size: int | None) -> None:
        self.counters.messages_too_large += 1
        if session is None:
            return
        lost = self.driver.core.datagrams_for(size if size is not None else MAX_MESSAGE + 1)
        self._coalesce.report(
            ("too-large", session.token),
            1,
            lambda n: self._present(
                session, adv.msg_too_large(self.address[0], lost, size, messages=n)
            ),
        )

    # ------------------------------------------------------------------ backpressure

    def _pressure(self, session: ClientSession | None) -> Awaitable[None] | None:
        drained = self.driver.drained
        if drained is None or session is None:
            return None
        self._waiting_sessions.add(session)
        return asyncio.shield(drained)

    def _on_backpressure(self, waiting: bool) -> None:
        """The driver's backlog went over its high mark (publishers wait), or drained."""
        if waiting:
            self._fast_producer_handle = self._loop.call_later(
                FAST_PRODUCER_AFTER, self._fast_producer
            )
            return
        self._waiting_sessions.clear()
        if self._fast_producer_handle is not None:
            self._fast_producer_handle.cancel()
            self._fast_producer_handle = None

    def _fast_producer(self) -> None:
        """Publishers have waited FAST_PRODUCER_AFTER seconds on the backlog: warn them."""
        self._fast_producer_handle = None
        if self.driver.drained is None:
            return
        waiting = self.driver.backlog_length
        for session in list(self._waiting_sessions):
            self._present(session, adv.fast_producer(waiting))
        self._fast_producer_handle = self._loop.call_later(FAST_PRODUCER_AFTER, self._fast_producer)

    # ------------------------------------------------------------------ advisories

    def _on_event(self, event: Any) -> None:
        """A core event other than a delivery: the advisory it means, to every session."""
        cls = event.__class__
        # Every per-source advisory names the other daemon exactly: host, port and session.
        if cls is InboundDataLoss:
            src = event.src
            message = adv.data_loss(
                "INBOUND",
                event.ptp,
                src[0],
                event.datagrams,
                peer=src,
                session=event.session,
                messages=event.messages,
            )
        elif cls is OutboundDataLoss:
            dest = event.dest
            message = adv.data_loss(
                "OUTBOUND", event.ptp, dest[0], event.datagrams, peer=dest, session=event.session
            )
        elif cls is RetransmissionRequested:
            src = event.src
            message = adv.retransmission(
                "INBOUND.EXPECTED", src[0], event.datagrams, peer=src, session=event.session
            )
        elif cls is RetransmissionSent:
            dest = event.dest
            message = adv.retransmission(
                "OUTBOUND.SENT", dest[0], event.datagrams, peer=dest, session=event.session
            )
        elif cls is RetransmissionSuppressed:
            dest = event.dest
            message = adv.retransmission(
                "OUTBOUND.SUPPRESSED", dest[0], event.datagrams, peer=dest, session=event.session
            )
        elif cls is RetransmissionNotRequested:
            # This daemon held back its own request (the spec's censoring receiver):
            # ``host`` is the receiver's, this daemon's, address.
            src = event.src
            message = adv.retransmission(
                "INBOUND.REQUEST_NOT_SENT",
                self.address[0],
                event.datagrams,
                peer=src,
                session=event.session,
            )
        elif cls is PeerDiscovered:
            # A daemon joined (or came back): while sessions here want everyone's interest,
            # ask it for its own (START says what is new; nothing is announced again), now
            # and again later. It joins this daemon's stream where it first hears it, so if
            # the first query is that very datagram and is lost, it never asks for it again:
            # a restarted router then routed nothing here (issue #34, chaos tier).
            if self._listen_adv.watchers:
                newcomer = address_hex(event.src)
                self._announce([self._listen_adv.query(to=newcomer)])
                for delay in self._reannounce_after:
                    self._later(delay, newcomer)
            return
        elif cls is PeerSilent:
            gone = address_hex(event.src)
            message = adv.unreachable_daemon(
                gone, event.src[0], event.reason, session=event.session
            )
            self.present_all(message)
            # It can no longer withdraw its interest itself: STOP on its behalf.
            for subject in self._peer_interest.gone(gone):
                self._present_local(self._listen_adv.stopped(gone, subject))
            return
        else:
            return
        self.present_all(message)

    def _heard_listen(self, msg: Message) -> None:
        """A LISTEN advisory reached this daemon (from another, or its own)."""
        self.counters.deliveries -= 1  # the daemon's own listening is no client's delivery
        if self._peer_interest.heard(msg) is Heard.ANSWER:
            self._announce(self._listen_adv.current())

    def _present_local(self, message: Message) -> None:
        """Deliver a daemon advisory to this daemon's sessions listening to its subject,
        and not to the network (what this daemon says of another)."""
        subject = message.subject or ""
        sessions = self.router.routes.get(subject)
        if sessions is None:
            sessions = self.router.route(subject)
        if sessions:
            self.router.deliver_local(sessions, message, None)

    def _present(self, session: ClientSession, message: Message) -> None:
        try:
            session.owner.present(message)
        except Exception:
            self._contain("presenting an advisory", subject=message.subject)

    def present_all(self, message: Message) -> None:
        """Present an advisory that concerns the whole service to every session."""
        for session in list(self.sessions.values()):
            self._present(session, message)

    def identity(self) -> DaemonIdentity:
        """What tells this daemon from the others of its host in HOST.STATUS."""
        page = self._status_page()
        http = https = None
        if page is not None:
            host, port, secure = page
            where = (self.address[0] if host in ("", "0.0.0.0") else host, port)
            if secure:
                https = where
            else:
                http = where
        return DaemonIdentity(
            host=self.address[0],
            port=self.address[1],
            address_hex=self.address_hex,
            pid=os.getpid(),
            session=self.driver.core.session_id,
            ipport=self._listen_port() or 0,
            version=self._version,
            http=http,
            https=https,
        )

    def host_status(self) -> list[tuple[str, Any, Any]]:
        """The HOST.STATUS fields of this service now."""
        return host_status_fields(
            who=self.identity(),
            core=self.driver.core.stats,
            counters=self.counters,
            uptime=self._loop.time() - self._started,
            clients=len(self.sessions),
            service=self.spec.text,
            service_port=self.port,
            network=self.network.text,
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
        try:
            for session in list(self.sessions.values()):
                # Its transports are terminated: tell the network, as a closing transport does.
                self.publish_internal(
                    adv.unreachable_transport(session.transport_id, session.description)
                )
        except Exception:
            self._contain("closing")
        self.driver.close()
        self.closed = True
        for session in list(self.sessions.values()):
            session.closed = True
        self.sessions.clear()
        for handle in (self._linger, self._status_handle, self._fast_producer_handle):
            if handle is not None:
                handle.cancel()
        for handle in self._reannounce:
            handle.cancel()
        self._reannounce.clear()
        self._linger = self._status_handle = self._fast_producer_handle = None
        self._waiting_sessions.clear()

    def _contain(self, doing: str, **details: Any) -> None:
        """Log an unexpected exception in a callback; the endpoint carries on."""
        self.counters.internal_errors += 1
        self._log.exception(
            "daemon error contained", doing=doing, service=self.spec.text, **details
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.sessions)} sessions"
        return f"<ServiceEndpoint {self.spec.text} {self.address_hex} {state}>"


class _Ear:
    """The owner of the daemon's own session-like listener of LISTEN advisories: it is
    in the service's routing (so the daemon hears them from the network and counts
    them as wanted) but not among its sessions (no client, no HOST.STATUS ``cc``)."""

    def __init__(self, heard: Callable[[Message], None]) -> None:
        self.deliver_message = heard

    def deliver(self, payload: Any) -> None:
        self.deliver_message(payload.message())

    def present(self, advisory: Message) -> None:
        return


def check_client_subject(subject: str) -> None:
    """A session without the router role may not publish advisories (``_RV.``) or router
    records (``_RVRD.``), nor to a wildcard inbox: NotPermitted (the rule is
    :func:`rvasync.protocol.authcheck.reserved_publish_refusal`)."""
    refusal = reserved_publish_refusal(subject, router=False)
    if refusal is not None:
        raise NotPermitted(refusal)
