"""The direct channel of a network transport: its own UDP port, reliable point to point.

A transport with a two-part service (``"7500:7501"``, ``"7500:"``) opens one
:class:`DirectChannel`. It binds the direct port on the network's interface
(never shared: a second transport binding the same port, or a daemon's
service on it, is refused with a clear error), and drives the same sans-IO
reliable core as the daemons (:class:`~rvasync.protocol.reliable.ReliableEndpoint`,
point-to-point streams only), so direct messages are sequenced, NAKed and
retransmitted, and a loss it cannot repair is reported as
``_RV.ERROR.SYSTEM.DATALOSS.INBOUND.PTP`` / ``OUTBOUND.PTP`` on the transport.

Sending: :meth:`DirectChannel.wrap` puts a check in front of the transport's
publish function. A message to a direct-enabled inbox whose address has
proved itself (see :mod:`rvasync.protocol.direct`) leaves through this
channel; everything else, and everything before the proof, goes to the
daemon as before. Receiving: a message is handed to the transport's inbox
delivery only if its subject is one of this transport's inboxes.

The daemon never sends to a direct address: the channel is the transport's,
and it sends only to addresses that answered its HELLO.

No routing daemon in between: the channel says HELLO only to an inbox whose
daemon is on its own service (``on_service``: its daemon, or one its daemon
hears), and answers only a HELLO of its service from such a daemon. An inbox
of another network (reached through a router) keeps the daemon path.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.daemon.advisories import data_loss
from rvasync.daemon.udp import parse_address_hex
from rvasync.errors import InvalidArgument, MalformedMessage, NotPermitted
from rvasync.message import Message
from rvasync.protocol.direct import (
    ACK,
    HELLO,
    DirectPeers,
    direct_tag,
    parse_direct_inbox,
    parse_hello,
)
from rvasync.protocol.reliable import ReliableEndpoint
from rvasync.protocol.reliable_events import (
    Delivered,
    InboundDataLoss,
    OutboundDataLoss,
    PeerSilent,
)
from rvasync.protocol.servicekey import TAG_SIZE, DatagramMac

__all__ = ["DEFAULT_RELIABILITY", "DirectChannel", "open_direct_socket"]

#: Seconds a direct channel keeps sent datagrams for retransmission (unless the
#: transport's ``reliability`` says otherwise).
DEFAULT_RELIABILITY = 10.0
READ_BATCH = 64
#: Datagrams shorter than this are latency traffic (see ``_on_readable``).
SMALL_DATAGRAM = 1024
_CONTROL = (HELLO, ACK)
#: Inbox prefixes whose direct address is remembered (oldest forgotten first).
DEST_CACHE = 4096
_UNKNOWN: Any = object()
Publish = Callable[[Message], "Awaitable[None] | None"]


def open_direct_socket(interface: str, port: int) -> socket.socket:
    """Bind the direct port (0: ephemeral) on ``interface``, exclusively.

    No SO_REUSEADDR/SO_REUSEPORT: a direct service is bound once per host, so
    the kernel itself refuses a second transport on it. A daemon's regular
    service is bound on its multicast group address, which the kernel does
    not count as a clash with the interface address: a wildcard probe bind
    (any socket on the port, any address, clashes with it) finds it first.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if port:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.bind(("", port))
        sock.bind((interface, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise NotPermitted(
                f"direct service {port} on {interface} is already bound on this host (by another"
                " transport's direct channel or a daemon's regular service); give another"
                " direct port, or none for an ephemeral one ('7500:')"
            ) from None
        raise InvalidArgument(
            f"cannot bind direct service {port} on {interface}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


def _host(address: object) -> str:
    """The IP address of a UDP ``(host, port)`` address, for the advisories' host field."""
    return str(address[0]) if isinstance(address, tuple) else str(address)


#: The reliable core's largest datagram on a direct channel (its default).
_MAX_DATAGRAM = 60000


class DirectChannel:
    """One transport's direct UDP channel (see the module docstring)."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        deliver: Callable[[Message], None],
        owns: Callable[[str], bool],
        present: Callable[[Message], object],
        service: int,
        daemon: tuple[str, int],
        on_service: Callable[[tuple[str, int]], bool] | None = None,
        reliability: float | None = None,
        mac: DatagramMac | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        #: The service key's MAC (None: no key): the direct port is as much a way into
        #: the service as the daemons' port, so it seals and checks the same way.
        self._mac = mac
        self._sock = sock
        self.address: tuple[str, int] = sock.getsockname()
        self.tag = direct_tag(self.address[1])
        self._deliver = deliver
        self._owns = owns
        self._present = present
        self._core = ReliableEndpoint(
            now=self._loop.time(),
            reliability=DEFAULT_RELIABILITY if reliability is None else reliability,
            # The tag travels inside the datagram size the network allows.
            max_datagram=_MAX_DATAGRAM if mac is None else _MAX_DATAGRAM - TAG_SIZE,
        )
        self._peers = DirectPeers(service=service, daemon=daemon)
        #: Whether a daemon address is on this service with no router between (None:
        #: the link cannot tell, as for a standalone daemon: the service must match).
        self._on_service = on_service
        #: inbox prefix -> (direct address, its daemon's address), or None: not direct
        self._dests: dict[str, Any] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._flush_scheduled = False
        self._closed = False
        #: messages sent / received on the direct path, and received ones dropped
        #: (not for one of this transport's inboxes, or undecodable)
        self.sent = 0
        self.received = 0
        self.dropped = 0
        #: datagrams refused because their service-key tag was missing or wrong
        self.unauthenticated = 0
        #: HELLOs not answered: another service, or a daemon not heard on this one
        #: (a routing daemon in between)
        self.foreign_hellos = 0
        #: Loss simulation for tests: a function of each arriving reliable-core
        #: datagram; True drops it before the core sees it (None: no loss).
        self.drop: Callable[[bytes], bool] | None = None
        self._loop.add_reader(sock, self._on_readable)

    @property
    def port(self) -> int:
        return self.address[1]

    def set_daemon(self, daemon: tuple[str, int]) -> None:
        """This transport's daemon changed (a standalone daemon link reconnected)."""
        self._peers.daemon = daemon

    # -- sending ------------------------------------------------------------------

    def wrap(self, publish: Publish) -> Publish:
        """``publish`` with direct sending in front for eligible inbox messages."""
        route = self.route

        def publish_direct(msg: Message) -> Awaitable[None] | None:
            subject = msg.subject
            if subject is not None and subject.startswith("_INBOX.") and route(msg):
                return None
            return publish(msg)

        return publish_direct

    def route(self, msg: Message) -> bool:
        """Send ``msg`` directly if its inbox is direct-enabled and proven; else False."""
        subject = msg.subject
        if self._closed or subject is None:
            return False
        # Inboxes of one transport differ only in their last element: parse each once.
        key = subject[: subject.rfind(".")]
        dests = self._dests
        dest = dests.get(key, _UNKNOWN)
        if dest is _UNKNOWN:
            dest = dests[key] = self._destination(subject)
            if len(dests) > DEST_CACHE:
                del dests[next(iter(dests))]
        if dest is None:
            return False
        dest, daemon = dest
        if self._peers.verified(dest):
            data = msg.to_bytes()
            self.sent += 1
            if not self._flush_scheduled:
                # The turn's first message (a request, a reply): its own datagram, now,
                # not at the end-of-turn flush (the daemons' latency path does the same).
                datagram = self._core.flush_lone(data, dest, self._loop.time())
                if datagram is not None:
                    self._sendto(datagram, dest)
                    # No end-of-turn flush for a lone datagram: it costs a request or a
                    # reply about 17,000 instructions (callgrind), more than packing
                    # the rare burst to an inbox saves.
                    self._rearm()  # nothing else waits (flush_lone made sure)
                    return True
            self._core.send_ptp(dest, data)
            self._schedule_flush()
            return True
        on_service = self._on_service
        if on_service is not None and not on_service(daemon):
            return False  # another network (a router in between), or not heard yet
        hello = self._peers.hello_for(dest, self._loop.time())
        if hello is not None:
            self._sendto(hello, dest)
        return False

    def _destination(self, subject: str) -> tuple[tuple[str, int], tuple[str, int]] | None:
        """(direct address, daemon address) an inbox names, or None (not direct-enabled,
        or our own)."""
        parsed = parse_direct_inbox(subject)
        if parsed is None:
            return None
        daemon = parse_address_hex(parsed[0])
        if daemon is None:
            return None
        dest = (daemon[0], parsed[1])
        if dest == self.address:
            return None  # our own: the daemon hands it back
        return dest, daemon

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed:
            return
        self._core.flush(self._loop.time())
        self._after_core()

    def _sendto(self, data: Any, dest: Any) -> None:
        if self._mac is not None:
            data = self._mac.seal(bytes(data))
        try:
            self._sock.sendto(data, dest)
        except OSError:
            # A full socket buffer or an unreachable port: the reliable core
            # repairs data by NAK and tail probes; a lost HELLO is asked again.
            pass

    # -- receiving ----------------------------------------------------------------

    def _on_readable(self) -> None:
        recvfrom = self._sock.recvfrom
        receive = self._core.receive
        now = self._loop.time()
        settle = False
        for _ in range(READ_BATCH):
            try:
                data, src = recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue  # an ICMP error of an earlier send: nothing to read
            if self._mac is not None:
                opened = self._mac.open(data)
                if opened is None:
                    self.unauthenticated += 1
                    continue
                data = opened
            if data[:4] in _CONTROL:
                self._control(data, src)
                continue
            if self.drop is not None and self.drop(data):
                continue
            delivered = receive(data, src, now)
            if delivered is None:
                settle = True  # NAKs, resends, events or a new deadline for us
            else:
                for payload in delivered.payloads:
                    self._arrived(payload)
            if len(data) < SMALL_DATAGRAM:
                break  # latency traffic: back to the loop (level-triggered: it calls again)
        if settle:
            self._core.flush(now)
            self._after_core()

    def _control(self, data: bytes, src: Any) -> None:
        """A HELLO (answered if it is of this service, from a daemon on it) or an ACK."""
        hello = parse_hello(data)
        if hello is None:
            self._peers.acknowledged(data, src)
            return
        on_service = self._on_service
        answer = self._peers.answer(hello)
        if answer is None or (on_service is not None and not on_service(hello.daemon)):
            self.foreign_hellos += 1
            return
        self._sendto(answer, src)

    def _on_timer(self) -> None:
        self._timer = None
        if self._closed:
            return
        now = max(self._loop.time(), self._timer_at)
        self._core.handle_timer(now)
        self._core.flush(now)
        self._after_core()

    def _after_core(self) -> None:
        for data, dest in self._core.datagrams_to_send():
            if dest is not None:  # no multicast on a direct channel
                self._sendto(data, dest)
        for event in self._core.events():
            try:
                self._event(event)
            except Exception:
                stderr_logger().exception("direct channel event failed", event=repr(event))
        self._rearm()

    def _rearm(self) -> None:
        """One timer at the core's next deadline, moved only when that comes sooner."""
        if self._closed:
            return
        deadline = self._core.next_deadline()
        if deadline is None:
            return
        timer = self._timer
        if timer is not None:
            if self._timer_at <= deadline:
                return  # fires early at worst: the core then asks for the later time
            timer.cancel()
        self._timer_at = deadline
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _event(self, event: Any) -> None:
        if isinstance(event, Delivered):
            for payload in event.payloads:
                self._arrived(payload)
        elif isinstance(event, InboundDataLoss):
            self._present(
                data_loss(
                    "INBOUND", True, _host(event.src), event.datagrams, messages=event.messages
                )
            )
        elif isinstance(event, OutboundDataLoss):
            self._present(data_loss("OUTBOUND", True, _host(event.dest), event.datagrams))
        elif isinstance(event, PeerSilent) and event.reason == "closed":
            self._peers.forget(event.src)

    def _arrived(self, payload: bytes) -> None:
        try:
            msg = Message.from_bytes(payload)
        except MalformedMessage:
            self.dropped += 1
            return
        subject = msg.subject
        if subject is None or not self._owns(subject):
            self.dropped += 1  # not one of this transport's inboxes
            return
        self.received += 1
        self._deliver(msg)

    # -- end ------------------------------------------------------------------------

    def close(self) -> None:
        """Say goodbye to the peers (their streams end cleanly) and release the port."""
        if self._closed:
            return
        now = self._loop.time()
        self._core.close(now)
        for data, dest in self._core.datagrams_to_send():
            if dest is not None:
                self._sendto(data, dest)
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop.remove_reader(self._sock)
        self._sock.close()

    def __repr__(self) -> str:
        return f"<DirectChannel {self.address[0]}:{self.address[1]} sent={self.sent}>"
