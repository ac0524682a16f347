"""``rv.Transport``: the network transport, attached to a daemon.

A network transport reaches every transport on the same service, in this
process, on this host and (when the user names a network) beyond it, through a
daemon. By default the daemon runs inside the event loop (started by the first
transport; the IPM model, and the fastest); with ``daemon="7500"`` or
``"host:port"`` it is a standalone daemon reached over TCP.

Everything users call (send, send_request, listen ...) is the same as on the
process transport (see :class:`~rvasync.transport.base.BaseTransport`); this
class adds the daemon link, ``send_many`` and batch mode.
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import TYPE_CHECKING, Any

from rvasync.busypoll import BusyPoller, check_window, poller_for
from rvasync.correlation import CorrelationId, check_publisher_correlation
from rvasync.daemon.params import (
    check_reliability,
    check_service_text,
    parse_network,
    parse_service,
    regular_service,
)
from rvasync.daemon.udp import parse_address_hex
from rvasync.errors import (
    DaemonUnavailable,
    InvalidArgument,
    NotPermitted,
    RequestTimeout,
    TransportClosed,
)
from rvasync.message import Message
from rvasync.protocol.clientproto.address import parse_daemon
from rvasync.protocol.servicekey import DatagramMac, check_service_key
from rvasync.security import Security
from rvasync.sendpace import CHECK_EVERY, SendPacer, pacer_for
from rvasync.subjects import check_send_subject
from rvasync.transport.base import (
    BaseTransport,
    check_reply_subject,
    check_timeout,
    not_a_message,
)
from rvasync.transport.direct import DirectChannel, open_direct_socket
from rvasync.transport.links import DaemonLink, InProcessLink, _not_open

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from rvasync.transport.listener import Listener

__all__ = ["Transport"]


#: ``reply_poll`` when the process may run on more than one CPU: how long at most
#: ``send_request`` polls for its reply (seconds). Replies between processes of one host
#: come within about 0.1 ms; a slower one costs this much CPU, then the wait sleeps.
REPLY_POLL_SECONDS = 0.0005


def default_reply_poll() -> float:
    """REPLY_POLL_SECONDS, or 0 for a process confined to one CPU, where polling would
    only keep the replier (or its daemon) from running."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return REPLY_POLL_SECONDS if cpus > 1 else 0.0


#: Default ``reply_poll`` of this process (see :func:`default_reply_poll`).
REPLY_POLL = default_reply_poll()


def _expire(reply: asyncio.Future[Message], subject: str, timeout: float) -> None:
    if not reply.done():
        reply.set_exception(RequestTimeout(f"no reply to {subject!r} within {timeout} s"))


def _optional_str(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a str or None, got {type(value).__name__}")
    return value


def _daemon_of(inbox_prefix: str) -> tuple[str, int]:
    """The daemon address an inbox prefix (``_INBOX.<address hex>.<session>.``) names."""
    address = parse_address_hex(inbox_prefix.split(".", 2)[1])
    if address is None:
        raise DaemonUnavailable(
            f"the daemon gave an inbox prefix without its address: {inbox_prefix!r}"
        )
    return address


class Transport(BaseTransport):
    """A network transport: ``Transport(service=None, network=None, daemon=None, *,
    description=None, reliability=None, batch=False, busy_poll=None, reply_poll=None,
    security=None, service_key=None, router=False, pending_limit=None)``.

    ``service``: UDP port number or service name (default: ``rendezvous`` or 7500).
    ``network``: ``"interface;groups;send-address"``; None is loopback, so nothing
    leaves the host. ``daemon``: None for the in-process daemon of the running
    loop; ``"7500"`` for a local standalone daemon (started if not running),
    ``"host:port"`` for one that is never auto-started. ``reliability``: seconds
    sent data is kept for retransmission (None: the daemon's default, 5 s
    in-process, 60 s standalone; 0 disables; when transports of one daemon and
    service ask differently, the largest wins). ``batch``: hold small messages
    up to 20 ms to pack more per datagram (more throughput, more latency).
    ``busy_poll``: seconds this process's event loop keeps polling without
    sleeping after the last network activity of its transports or in-process
    daemon; None or 0 never. Lower latency for a busy CPU core; see
    docs/transports.md, "Polling instead of sleeping". ``reply_poll``: seconds at most that
    ``send_request`` keeps the loop polling while it waits for its reply (None:
    ``REPLY_POLL``, 0.5 ms, or 0 on a single usable CPU; 0 never): a reply that
    comes within it is picked up without the loop sleeping and being woken.
    ``security``: an :class:`rv.Security <rvasync.security.Security>` for a secure
    daemon (TLS, user and password or client certificate; docs/security.md).
    ``service_key`` (in-process daemon only): a secret (bytes or str, 16 bytes at
    least) the service authenticates every datagram between daemons with; daemons
    without it, and forgers, are not heard (docs/service-key.md).
    ``correlation_id``: the publisher correlation id every message this transport
    sends carries (``msg.publisher``; docs/retained.md, "Publisher identity").
    ``router``: this transport belongs to a routing daemon (rvasync.rvrd) and asks
    the daemon for the router role: it may publish advisories and router records,
    receives router records, and its listening is not announced. The in-process
    daemon grants it (it is this process's own); a standalone daemon grants it to
    a user the users file gives ``router = true``, or, without users, to the hosts
    its configuration names (``router_hosts``, loopback by default), and refuses
    the connection with ``NotPermitted`` otherwise (docs/security.md).
    ``pending_limit``: messages each listener's own queue holds at most before its
    oldest are dropped and reported (None: DEFAULT_PENDING_LIMIT, 20,000; 0:
    unbounded); through a standalone daemon the link stops reading at half of it,
    so the backlog waits in the daemon (docs/daemon.md, "Slow consumers").

    Use as ``async with rv.Transport(...) as t:`` or ``await t.open()`` /
    ``await t.close()``.
    """

    #: LinkHooks: the link hands inbound messages to this (the router's deliver itself).
    link_deliver: Callable[[Message], object]

    def __init__(
        self,
        service: str | None = None,
        network: str | None = None,
        daemon: str | None = None,
        *,
        description: str | None = None,
        reliability: float | None = None,
        batch: bool = False,
        busy_poll: float | None = None,
        reply_poll: float | None = None,
        security: Security | None = None,
        service_key: bytes | str | None = None,
        correlation_id: CorrelationId | None = None,
        router: bool = False,
        pending_limit: int | None = None,
    ) -> None:
        if not isinstance(router, bool):
            raise InvalidArgument(f"router must be True or False, got {router!r}")
        #: The routing daemon's role is asked for (see the class docstring).
        self.router_role = router
        if security is not None:
            if not isinstance(security, Security):
                raise InvalidArgument(
                    f"security must be an rv.Security, got {type(security).__name__}"
                )
            if daemon is None:
                raise InvalidArgument(
                    "security applies to a standalone daemon: give daemon='host:port' too"
                )
        self.security = security
        self.service = _optional_str("service", service)
        check_service_text(self.service)
        self.network = _optional_str("network", network)
        self.daemon = _optional_str("daemon", daemon)
        description = _optional_str("description", description)
        if daemon is not None:
            parse_daemon(daemon)  # refuse a bad daemon parameter now, not at open
        # Finite, >= 0 and at most MAX_RELIABILITY (an hour): the rule the daemon applies
        # to every client, raw HELLO frames included.
        reliability = check_reliability(reliability)
        self.service_key = check_service_key(service_key)
        if self.service_key is not None and daemon is not None:
            raise InvalidArgument(
                "service_key is for the in-process daemon; a standalone daemon takes its key "
                "from its own configuration (rvasync daemon --service-key-file)"
            )
        #: The direct port asked for by a two-part service (0: ephemeral), else None.
        self._direct_port = (
            parse_service(self.service).direct if self.service and ":" in self.service else None
        )
        self._direct: DirectChannel | None = None
        if not isinstance(batch, bool):
            raise InvalidArgument(f"batch must be True or False, got {batch!r}")
        super().__init__(
            description=description, pending_limit=pending_limit, correlation_id=correlation_id
        )
        self.reliability = reliability
        self.batch = batch
        self.busy_poll = 0.0 if busy_poll is None else check_window("busy_poll", busy_poll)
        self.reply_poll = (
            REPLY_POLL if reply_poll is None else check_window("reply_poll", reply_poll)
        )
        self._poller: BusyPoller | None = None
        #: The loop's send pacer (rvasync.sendpace) and its ticks, from open on: sends
        #: reach them only then.
        self._pacer: SendPacer
        self._ticks: Iterator[bool]
        self._link: DaemonLink | None = None
        self._loop: Any = None  # the running loop, from open on
        self._opening = False
        self._publish: Callable[[Message], Awaitable[None] | None] = _not_open
        self._publish_many: Callable[[list[Message]], Awaitable[None] | None] = _not_open
        self._publish_wire: Callable[[bytes], Awaitable[None] | None] = _not_open
        self._publish_wire_run: Callable[[str, list[bytes]], Awaitable[None] | None] = _not_open
        # LinkHooks: inbound messages go straight to the router.
        self.link_deliver = self._router.deliver
        self._match = self._router.match  # the owned-delivery fast path's lookup
        #: inbox -> future of a pending send_request
        self._replies: dict[str, asyncio.Future[Message]] = {}

    # -- lifecycle -------------------------------------------------------------

    @property
    def transport_id(self) -> str | None:
        """This transport's id in the daemon (the element after ``_INBOX.`` in its inboxes, and
        the suffix of ``_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.<id>``); None until open. A
        standalone daemon gives a new one after a reconnect."""
        if self._link is None:
            return None
        return self._link.inbox_prefix[len("_INBOX.") : -1]

    @property
    def link(self) -> DaemonLink | None:
        """The daemon link, once open."""
        return self._link

    async def open(self) -> Transport:
        """Attach to the daemon (in-process: started on first use). Idempotent."""
        if self._closed:
            raise TransportClosed("the transport is closed; make a new one")
        if self._link is not None:
            return self
        if self._opening:
            raise TransportClosed("the transport is already being opened by another task")
        self._opening = True
        try:
            poller = poller_for()
            poller.want(self.busy_poll)
            link = self._make_link()
            await link.open(self)
        finally:
            self._opening = False
        if self._closed:  # closed while opening
            await link.close()
            raise TransportClosed("the transport was closed while opening")
        self._link = link
        self._loop = asyncio.get_running_loop()  # an open transport serves this loop only
        self._poller = poller
        self._pacer = pacer_for(self._loop)
        self._ticks = self._pacer.ticks
        self._set_inbox_prefix(link.inbox_prefix)
        self._publish = link.publish
        self._publish_many = link.publish_many
        self._publish_wire = link.publish_wire
        self._publish_wire_run = link.publish_wire_run
        if self._direct_port is not None and self._direct_eligible():
            await self._open_direct(link)
        return self

    async def request_reliability(self, seconds: float) -> None:
        """Ask for ``seconds`` of reliability from now on (the spec's request-reliability call).

        The daemon retains what its transports on this service send for the
        largest interval any of them asks for (a transport asking for less does
        not shorten another's); a reconnection asks again. 0 to 3600 seconds
        (``InvalidArgument`` outside); returns once the daemon has the request.
        """
        wanted = check_reliability(seconds, "request_reliability seconds")
        if wanted is None:
            raise InvalidArgument("request_reliability needs a number of seconds, got None")
        self._check_open()
        # _check_open passed: the link is there.
        await self._link.request_reliability(wanted)  # type: ignore[union-attr]
        self.reliability = wanted

    # -- direct communication (rvasync.transport.direct) --------------------------

    @property
    def direct_enabled(self) -> bool:
        """True while point-to-point messages can use this transport's direct channel."""
        return self._direct is not None

    @property
    def direct(self) -> DirectChannel | None:
        """The direct channel (two-part service, open, attached to a local daemon), or None."""
        return self._direct

    def _direct_eligible(self) -> bool:
        # The spec: only transports attached to a local daemon communicate directly.
        if self.daemon is None:
            return True
        host = parse_daemon(self.daemon).host
        return host in ("", "localhost") or host.startswith("127.")

    async def _open_direct(self, link: DaemonLink) -> None:
        try:
            sock = open_direct_socket(parse_network(self.network).interface, self._direct_port or 0)
        except BaseException:
            await self.close()  # the transport cannot be what was asked for
            raise
        channel = self._direct = DirectChannel(
            sock,
            deliver=self._deliver_direct,
            owns=self._owns_inbox,
            present=self._present,
            service=parse_service(self.service).port,
            daemon=_daemon_of(link.inbox_prefix),
            # The in-process daemon tells which daemons are on its service (no router
            # between); a standalone daemon's link cannot, so the service must match.
            on_service=getattr(link, "on_service", None),
            reliability=self.reliability,
            mac=(
                None
                if self.service_key is None
                else DatagramMac(self.service_key, parse_service(self.service).port)
            ),
        )
        self._set_inbox_prefix(f"{link.inbox_prefix}{channel.tag}.")
        self._publish = channel.wrap(link.publish)

    def _owns_inbox(self, subject: str) -> bool:
        return subject.startswith(self._inbox_prefix)

    def _deliver_direct(self, msg: Message) -> None:
        self.link_deliver_inbox(msg, True)

    def _make_link(self) -> DaemonLink:
        if self.daemon is None:
            return InProcessLink(
                service=regular_service(self.service),
                network=self.network,
                description=self.description,
                reliability=self.reliability,
                batch=self.batch,
                service_key=self.service_key,
                router=self.router_role,
            )
        try:
            from rvasync.transport.tcplink import TcpLink
        except ImportError:
            raise DaemonUnavailable(
                f"daemon={self.daemon!r}: this rvasync build has no standalone-daemon client "
                "(rvasync.transport.tcplink); use daemon=None for the in-process daemon"
            ) from None
        return TcpLink(
            self.daemon,
            service=regular_service(self.service),
            network=self.network,
            description=self.description,
            reliability=self.reliability,
            batch=self.batch,
            security=self.security,
            router=self.router_role,
        )

    async def close(self) -> None:
        """Close every listener and detach from the daemon; peers hear UNREACHABLE.TRANSPORT."""
        if self._closed:
            return
        self._close_listeners()
        self._publish = self._publish_many = _not_open
        self._publish_wire = self._publish_wire_run = _not_open
        replies, self._replies = self._replies, {}
        for reply in replies.values():
            if not reply.done():
                reply.set_exception(TransportClosed("the transport was closed during the request"))
        direct, self._direct = self._direct, None
        if direct is not None:
            direct.close()
        link = self._link
        if link is not None:
            await link.close()

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed("the transport is closed")
        if self._link is None:
            raise TransportClosed(
                "the transport is not open: await transport.open() or use async with"
            )

    # -- sending ---------------------------------------------------------------

    async def send(self, msg: Message, *, correlation_id: CorrelationId | None = None) -> None:
        """Send ``msg`` to its subject (see BaseTransport.send); waits when the daemon's
        send backlog is full, and gives the loop a turn during a long run of sends
        (rvasync.sendpace). ``correlation_id``: this publication's publisher
        correlation id, over the transport's (``msg.publisher``)."""
        try:
            subject = msg.subject
        except AttributeError:
            raise not_a_message("msg", msg) from None
        if subject is None or self._closed:
            await super().send(msg)  # raises the right error
            return
        check_send_subject(subject)
        if msg.reply_subject is not None:
            check_reply_subject(msg.reply_subject)
        # Shared (the daemon keeps it) and a new publication: its identity, in place (the
        # link encodes and delivers it before this returns). One native call for both,
        # which also counts the send for the pacer (rvasync.sendpace).
        tick = self._stamp(msg)  # True every CHECK_EVERY sends: time to look at the turn
        if correlation_id is not None:
            msg.publisher_correlation = check_publisher_correlation(correlation_id)
        wait = self._publish(msg)
        if wait is not None:
            await wait
        if tick and (turn := self._pacer.look()) is not None:
            await turn

    def _publish_checked(self, msg: Message) -> Awaitable[None] | None:
        """The body of :meth:`send` as a plain call, for the request/reply paths (one
        coroutine fewer per request and per reply)."""
        subject = msg.subject
        if subject is None:
            raise InvalidArgument("cannot send a message without a subject")
        self._check_open()
        check_send_subject(subject)
        self._stamp(msg)  # shared, and a new publication (see send)
        return self._publish(msg)

    async def send_reply(self, reply: Message, request: Message) -> None:
        """Send ``reply`` to the reply subject of ``request`` (see BaseTransport.send_reply)."""
        try:
            reply_subject = request.reply_subject
        except AttributeError:
            raise not_a_message("request", request) from None
        if not reply_subject:
            raise InvalidArgument("the request has no reply subject to answer")
        if reply.__class__ is not Message and not isinstance(reply, Message):
            raise not_a_message("reply", reply)
        if reply.reply_subject is not None:
            check_reply_subject(reply.reply_subject)
        reply.subject = reply_subject
        wait = self._publish_checked(reply)
        if wait is not None:
            await wait
        if next(self._ticks) and (turn := self._pacer.look()) is not None:
            await turn

    def send_encoded(self, data: bytes) -> Awaitable[None] | None:
        """Send a message given in its wire form, as :meth:`send_internal` sends (driver API).

        A routing daemon forwards messages it received encoded, with their
        address and routing tag edited in place (rvasync.wireedit), without
        decoding them into Messages and encoding them again. Like
        :meth:`send_internal`: no subject rules (the driver is trusted with
        reserved subjects as far as the daemon allows it), TransportClosed
        once closed, an awaitable when the send backlog is full. The bytes
        go through the daemon even when the transport has a direct channel.
        MessageTooLarge over 64 MiB; a message whose subject cannot be read
        raises InvalidArgument.
        """
        if self._closed:
            raise TransportClosed("the transport is closed")
        return self._publish_wire(data)

    def send_encoded_run(self, subject: str, datas: list[bytes]) -> Awaitable[None] | None:
        """:meth:`send_encoded` for wire messages that all carry ``subject`` (driver API).

        A router passing a batch of one subject through hands it over in one
        call: the daemon looks the route up once and packs them together.
        ``subject`` must be the subject written in every one of them.
        """
        if self._closed:
            raise TransportClosed("the transport is closed")
        return self._publish_wire_run(subject, datas)

    async def send_many(self, msgs: list[Message]) -> None:
        """Send several messages in one call, in order; they are packed together.

        Every message is checked first: if one is invalid, none is sent.
        """
        if self._closed:
            raise TransportClosed("the transport is closed")
        batch = list(msgs)
        for msg in batch:
            try:
                subject = msg.subject
            except AttributeError:
                raise not_a_message("each message", msg) from None
            if subject is None:
                raise InvalidArgument("cannot send a message without a subject")
            check_send_subject(subject)
            if msg.reply_subject is not None:
                check_reply_subject(msg.reply_subject)
        stamp = self._stamp
        ticks = 0
        for msg in batch:
            if stamp(msg):  # shared, and each a new publication (see send)
                ticks += 1
        if not batch:
            return
        wait = self._publish_many(batch)
        if wait is not None:
            await wait
        # A batch counts as its messages (rvasync.sendpace).
        if ticks and (turn := self._pacer.look(ticks * CHECK_EVERY)) is not None:
            await turn

    async def send_request(self, msg: Message, timeout: float) -> Message:
        """Send ``msg`` with a fresh inbox as reply subject; return the first reply.

        Same behaviour as on every transport (RequestTimeout after ``timeout``
        seconds; the caller's message is not changed), without a listener per
        request: the daemon hands the reply straight to the waiting call.
        """
        # The rule is check_timeout's (every transport's); a plain finite float
        # above zero, the usual case, passes without the call.
        if timeout.__class__ is not float or not (0 < timeout < math.inf):
            timeout = check_timeout(timeout)
        try:
            subject = msg.subject
        except AttributeError:
            raise not_a_message("msg", msg) from None
        if subject is None:
            raise InvalidArgument("cannot send a request without a subject")
        self._check_open()
        inbox = f"{self._inbox_prefix}{next(self._inbox_counter)}"
        loop = self._loop
        reply: asyncio.Future[Message] = loop.create_future()
        self._replies[inbox] = reply
        request = msg.delivery_copy(None, None)
        request.reply_subject = inbox
        expiry = poller = None
        try:
            wait = self._publish_checked(request)
            # Armed after the request left (the same turn: no reply can come first),
            # so the timer costs the request nothing on its way out.
            expiry = loop.call_later(timeout, _expire, reply, msg.subject, timeout)
            if wait is not None:
                await wait
            if self.reply_poll:
                # The reply is due soon: poll for it rather than sleep and be woken.
                poller = self._poller
                # _check_open passed above, so open() has set the poller.
                poller.hold(self.reply_poll)  # type: ignore[union-attr]
            return await reply
        finally:
            if poller is not None:
                poller.release()
            if expiry is not None:
                expiry.cancel()
            self._replies.pop(inbox, None)

    async def request_internal(self, msg: Message, timeout: float) -> Message:
        """:meth:`send_request` for a driver-made message on a reserved subject (driver API).

        See BaseTransport.request_internal: the same reply path as
        send_request (the daemon hands the reply to the waiting call, which
        polls for it ``reply_poll`` seconds), without the subject rules.
        """
        if timeout.__class__ is not float or not (0 < timeout < math.inf):
            timeout = check_timeout(timeout)
        self._check_open()
        inbox = f"{self._inbox_prefix}{next(self._inbox_counter)}"
        loop = self._loop
        reply: asyncio.Future[Message] = loop.create_future()
        self._replies[inbox] = reply
        msg.reply_subject = inbox
        expiry = poller = None
        try:
            msg.share()
            wait = self._publish(msg)
            expiry = loop.call_later(timeout, _expire, reply, msg.subject, timeout)
            if wait is not None:
                await wait
            if self.reply_poll:
                poller = self._poller
                poller.hold(self.reply_poll)  # type: ignore[union-attr]
            return await reply
        finally:
            if poller is not None:
                poller.release()
            if expiry is not None:
                expiry.cancel()
            self._replies.pop(inbox, None)

    def _route(self, msg: Message) -> Awaitable[None] | None:
        return self._publish(msg)  # an awaitable when the send backlog is full

    # -- listeners -------------------------------------------------------------

    def _open_listener(self, listener: Listener) -> None:
        # listen() calls _check_open first: an open transport has its link.
        try:
            self._link.add_interest(listener.subject)  # type: ignore[union-attr]
        except NotPermitted:  # a secure daemon's user may not listen there: undo listen()
            listener.close_now()
            raise

    def _close_listener(self, listener: Listener) -> None:
        link = self._link
        if link is not None:
            try:
                link.remove_interest(listener.subject)
            except TransportClosed:
                pass

    # -- LinkHooks (called by the daemon link: see rvasync.transport.links) -------

    def link_present(self, advisory: Message) -> None:
        """Present an advisory from the link (daemon lost, back, fast producer ...)."""
        self._present(advisory)

    def link_inbox_prefix(self, prefix: str) -> None:
        """The link reconnected to a new daemon session: new inboxes start with ``prefix``.

        Inboxes made before named the old session, which is gone with its
        daemon; replies to them are lost (a pending request times out).
        """
        direct = self._direct
        if direct is None:
            self._set_inbox_prefix(prefix)
        else:
            self._set_inbox_prefix(f"{prefix}{direct.tag}.")
            direct.set_daemon(_daemon_of(prefix))

    def link_backlog(self) -> int:
        """LinkHooks: the most messages waiting in one of this transport's listener
        queues (see BaseTransport.backlog); the link stops reading while it is high."""
        return self.backlog()

    def link_lost(self, error: Exception) -> None:
        """The link lost its daemon session: every pending ``send_request`` (and
        ``request_internal``) fails with ``error`` (a DaemonUnavailable) at once, as a
        new one would; the replies they wait for went to inboxes of that session."""
        replies, self._replies = self._replies, {}
        for reply in replies.values():
            if not reply.done():
                # One exception per waiter: raised in several tasks, one would collect
                # all their tracebacks.
                reply.set_exception(DaemonUnavailable(str(error)))

    def link_deliver_inbox(self, msg: Message, owned: bool) -> None:
        """A message for one of this transport's inboxes: the reply a request waits for,
        or else an ordinary delivery to whoever listens on that inbox."""
        # An inbox message has a subject (the daemon routed it by it): never None here.
        reply = self._replies.pop(msg.subject, None)  # type: ignore[arg-type]
        if reply is not None:
            if not reply.done():
                reply.set_result(msg if owned else msg.delivery_copy(None, None))
            return
        if owned:
            self.link_deliver_owned(msg)
        else:
            self._router.deliver(msg)

    def link_deliver_owned(self, msg: Message) -> None:
        """Route a message that nobody else holds (freshly decoded for this transport only).

        With one matching listener the message itself is delivered, saving the
        copy-on-write copy the router makes for messages that others share.
        """
        # A decoded message has a subject (the wire format requires one).
        listeners = self._match(msg.subject)  # type: ignore[arg-type]
        if len(listeners) == 1:
            listener = listeners[0]
            msg.listener = listener
            msg.closure = listener.closure
            listener.deliver(msg)
            return
        copy = msg.delivery_copy
        for listener in listeners:
            listener.deliver(copy(listener, listener.closure))

    def __repr__(self) -> str:
        where = "in-process daemon" if self.daemon is None else f"daemon {self.daemon}"
        state = "closed" if self._closed else ("open" if self._link else "not open")
        return (
            f"<Transport service={self.service!r} network={self.network!r} {where} {state} "
            f"listeners={len(self._router)}>"
        )
