"""The link from a network transport to a standalone daemon over TCP.

``rv.Transport(daemon="7500")`` (or ``"host:port"``) talks to its daemon
through a :class:`TcpLink`. The link

- connects, and when the daemon parameter is a bare local port (``"7500"`` or
  ``"tcp:7500"``) and nothing listens there, starts a daemon and connects to
  it (:mod:`rvasync.transport.autostart`); a two-part parameter
  (``"host:7500"``, ``"127.0.0.1:7500"``) never starts one;
- introduces the transport (HELLO: service, network, description,
  reliability) and learns its inbox prefix (WELCOME); the order of frames is
  kept by a client-role :class:`rvasync.protocol.clientproto.Connection`, this
  module being its asyncio adapter;
- writes a request or a reply at once when it is the first message of its
  loop turn (point-to-point latency), and otherwise coalesces the messages
  of one loop turn (or of one batch interval in timer batch mode) into one
  PUBLISH frame (a stream of publications is written once per turn, so the
  daemon and the subscriber wake once per batch, not once per message);
- hands what it reads to the transport at most ``_TURN_MESSAGES`` messages
  per loop turn, reading nothing more until the rest is handed over, so a
  backlog waits as bytes (in the sockets, then in the daemon) rather than as
  decoded messages the garbage collector walks over again and again; and
  reads nothing while the transport's listener queues hold half their
  ``pending_limit`` (a consumer awaiting slow work), so the daemon's consumer
  buffer, and its CLIENT.SLOWCONSUMER, bound what a slow consumer costs
  (unless they do not drain at all: rvasync.transport.backpressure);
- reconnects on its own when the connection drops, presenting
  ``_RV.WARN.SYSTEM.RVD.DISCONNECTED`` at once and
  ``_RV.INFO.SYSTEM.RVD.CONNECTED`` when it is back, and re-sends every
  interest. While disconnected nothing flows in either direction (spec): a
  publish raises :class:`~rvasync.errors.DaemonUnavailable` rather than being
  queued for a daemon that may never come back;
- presents ``_RV.WARN.SYSTEM.CLIENT.FASTPRODUCER`` when its outbound data has
  waited more than 5 seconds for the daemon to take it, and makes publishers
  wait (the awaitable ``publish`` returns) while the socket's buffer is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import sys
from collections.abc import Awaitable
from typing import Any, NoReturn, cast

from rvasync._logging import stderr_logger
from rvasync._wire import LOOPBACK_DATAGRAM, MAX_MESSAGE_SIZE, NETWORK_DATAGRAM, peek_subject
from rvasync.advisories import AdvisoryClass, build_advisory, fast_producer, msg_too_large
from rvasync.busypoll import poller_for
from rvasync.codec import decode as _decode
from rvasync.codec import encode as _encode
from rvasync.errors import (
    DaemonUnavailable,
    InvalidArgument,
    MalformedMessage,
    MessageTooLarge,
    NotPermitted,
    RvError,
    TransportClosed,
)
from rvasync.message import Message
from rvasync.protocol import clientproto as cp
from rvasync.protocol.authcheck import SubjectPermissions, SubjectRights
from rvasync.protocol.clientproto import ErrorCode
from rvasync.protocol.clientproto.address import parse_daemon
from rvasync.security import Security
from rvasync.transport import backpressure
from rvasync.transport.autostart import may_autostart, start_daemon_and_connect
from rvasync.transport.backpressure import ReadHold
from rvasync.transport.links import LinkHooks

__all__ = ["TcpLink"]

#: Seconds to wait for a TCP connection, and then for the daemon's WELCOME.
CONNECT_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 10.0
#: Reconnect backoff: first delay, cap.
RECONNECT_FIRST_DELAY = 0.05
RECONNECT_MAX_DELAY = 2.0
#: Seconds of failed reconnecting before RVD.RECONNECT_FAILED is presented (once).
RECONNECT_FAILED_AFTER = 10.0
#: Liveness: PING this often; a daemon silent for 3 intervals is taken for dead.
HEARTBEAT_INTERVAL = 5.0
#: Delay after an unconfirmed write before the link asks the daemon to confirm it
#: (see _Connection.wrote_messages and RVD.DISCONNECTED's ``unconfirmed``).
ACK_DELAY = 0.01
#: Seconds outbound data may wait before CLIENT.FASTPRODUCER (spec: 5 s).
FAST_PRODUCER_AFTER = 5.0
#: Timer batch mode: how long small messages may wait to share a frame (spec: about 25 ms).
TIMER_BATCH_INTERVAL = 0.02

_WRITE_HIGH_WATER = 4 * 1024 * 1024
_WRITE_LOW_WATER = 1024 * 1024
# A pending batch this big is written at once, whatever the batch mode.
_BATCH_BYTES = 256 * 1024
# Messages handed to the transport per loop turn at most (see _Connection._act): a
# turn's Messages (three objects the garbage collector tracks each) stay under its
# young-generation threshold (700 by default), so most die before it runs.
_TURN_MESSAGES = 128

# Messages handed to the transport between two looks at its listeners' queues, and
# seconds between looks while reading is held (see _Connection._check_pressure).
_PRESSURE_CHECK = 512
PRESSURE_POLL = 0.01

_ping_tokens = itertools.count(1)


class _Refused(DaemonUnavailable):
    """Nothing listens on the daemon's port: the one case where auto-start may help."""


def _point_to_point(msg: Message) -> bool:
    """A request (it names a reply subject) or a reply (to an inbox): one party waits
    for it, so its latency matters more than batching it with the turn's other messages."""
    if msg.reply_subject is not None:
        return True
    subject = msg.subject
    return subject is not None and subject.startswith("_INBOX.")


def _batch_interval(batch: Any) -> float:
    """0 for default batching (once per loop turn), else the timer batch interval."""
    if batch is None or batch is False:
        return 0.0
    if batch is True:
        return TIMER_BATCH_INTERVAL
    if isinstance(batch, (int, float)) and 0 < batch <= 1.0:
        return float(batch)
    raise InvalidArgument(
        f"batch must be True (timer batching), False, or an interval in seconds within (0, 1], "
        f"got {batch!r}"
    )


def _rights_of(welcome: cp.Welcome) -> SubjectRights | None:
    """What WELCOME says this session may do (None: nothing to check on this side).

    The user is the one the daemon logged in (a certificate's user included),
    the router role the one it granted.
    """
    perms = SubjectPermissions.from_dict(welcome.daemon.get("permissions"))
    if perms is None or perms.unrestricted:
        return None
    user = welcome.daemon.get("user")
    return SubjectRights(
        user=user if isinstance(user, str) else None,
        permissions=perms,
        router=welcome.daemon.get("router") is True,
    )


class TcpLink:
    """A network transport's connection to a standalone daemon (a ``DaemonLink``)."""

    def __init__(
        self,
        daemon: str,
        *,
        service: str | None = None,
        network: str | None = None,
        description: str | None = None,
        reliability: float | None = None,
        batch: Any = None,
        security: Security | None = None,
        router: bool = False,
    ) -> None:
        if security is not None and not isinstance(security, Security):
            raise InvalidArgument(f"security must be an rv.Security, got {type(security).__name__}")
        self.address = parse_daemon(daemon)
        #: TLS and login (None: a plain link to a plain daemon).
        self.security = security
        #: The routing daemon's role is asked for in HELLO.
        self.router = router
        # What the daemon said this session may publish and listen to (None: anything).
        self._rights: SubjectRights | None = None
        #: ``host:port`` of the daemon, as messages and advisories name it.
        self.where = f"{self.address.host}:{self.address.port}"
        self.daemon = daemon
        self.service = service
        self.network = network
        self.description = description
        self.reliability = reliability
        self._batch_interval = _batch_interval(batch)
        #: ``_INBOX.<transport id>.``; changes when the link reconnects to another daemon.
        self.inbox_prefix = ""
        #: What WELCOME said about the daemon (version, pid, host, port, transport_id ...).
        self.daemon_info: dict[str, Any] = {}
        #: pid of the daemon this link started, while it is the daemon the link talks to
        #: (None: it talks to a daemon someone else started).
        self.started_daemon_pid: int | None = None
        #: How many times the link came back after losing its daemon.
        self.reconnects = 0
        #: The daemon's IP address on the first connection (reconnections compare theirs).
        self.first_daemon_ip: str | None = None
        #: Why the link became defunct (a reconnection the daemon refused for good), or None.
        self.defunct: str | None = None
        self._hooks: LinkHooks | None = None
        self._conn: _Connection | None = None
        self._state = "new"  # new -> connected <-> disconnected -> closed
        self._interests: dict[str, int] = {}
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._flush_handle: asyncio.Handle | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- DaemonLink ----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._state == "connected"

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def batch(self) -> float:
        """Timer batch interval in seconds; 0 = default batching (send every loop turn)."""
        return self._batch_interval

    @batch.setter
    def batch(self, value: Any) -> None:
        self._batch_interval = _batch_interval(value)

    async def open(self, transport_hooks: LinkHooks) -> None:
        """Connect (starting a local daemon if allowed and needed); DaemonUnavailable if not."""
        if self._state != "new":
            raise TransportClosed(f"link to daemon {self.where} was already opened")
        self._hooks = transport_hooks
        self._loop = asyncio.get_running_loop()
        await self._establish(autostart=self.address.autostart and self.security is None)
        if self._state == "closed":  # closed while connecting
            self._drop_connection()
            raise TransportClosed(f"link to daemon {self.where} closed while connecting")
        self._state = "connected"
        self.first_daemon_ip = None if self._conn is None else self._conn.peer_ip

    async def close(self) -> None:
        """Say BYE and disconnect; no reconnecting afterwards."""
        if self._state == "closed":
            return
        self._flush()  # what was published before close() still goes out
        self._state = "closed"
        task, self._reconnect_task = self._reconnect_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        conn = self._conn
        if conn is not None:
            conn.say_bye()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await conn.gone
            conn.abort()
            self._conn = None
        self._batch.clear()

    def add_interest(self, subject: str) -> None:
        rights = self._rights
        if rights is not None:
            why = rights.why_not_listen(subject)
            if why:
                raise NotPermitted(f"daemon {self.where}: {why}")
        count = self._interests.get(subject, 0)
        self._interests[subject] = count + 1
        if count == 0 and self._state == "connected":
            self._send_control(cp.Listen(subject))

    def remove_interest(self, subject: str) -> None:
        count = self._interests.get(subject, 0)
        if count == 0:
            return
        if count == 1:
            del self._interests[subject]
            if self._state == "connected":
                self._send_control(cp.Unlisten(subject))
        else:
            self._interests[subject] = count - 1

    async def request_reliability(self, seconds: float) -> None:
        """Ask the daemon for ``seconds`` of reliability; returns once it has it.

        Kept for the HELLO of a reconnection too. Checked by the caller.
        """
        self.reliability = seconds
        if self._state != "connected":
            self._refuse_send()
        self._send_control(cp.Reliability(seconds))
        await self.ping()

    def publish(self, msg: Message) -> Awaitable[None] | None:
        """Queue ``msg`` for the daemon; an awaitable means "wait: the daemon is behind"."""
        if self._state != "connected":
            self._refuse_send()
        if self._rights is not None:
            self._check_publish(msg.subject)
        try:
            wire = _encode(msg)  # msg.to_bytes() without its Python frame (once per send)
        except MessageTooLarge:
            self._too_large()
            raise
        self._batch.append(wire)
        self._batch_bytes += len(wire)
        if self._flush_handle is None and not self._batch_interval and _point_to_point(msg):
            # The turn's first message is a request or a reply: written at once (it
            # does not wait for the end of the turn; the rest of the turn does).
            self._write_batch()
        return self._after_queue()

    def publish_many(self, msgs: list[Message]) -> Awaitable[None] | None:
        if self._state != "connected":
            self._refuse_send()
        if self._rights is not None:
            for m in msgs:  # none is sent if one is refused
                self._check_publish(m.subject)
        try:
            wires = [_encode(m) for m in msgs]
        except MessageTooLarge:  # none of them is sent
            self._too_large()
            raise
        self._batch += wires
        self._batch_bytes += sum(map(len, wires))
        return self._after_queue()

    def publish_wire(self, data: bytes) -> Awaitable[None] | None:
        """Queue a message given in its wire form (a router forwarding it undecoded)."""
        if self._state != "connected":
            self._refuse_send()
        subject = peek_subject(data)
        if subject is None:
            try:
                subject = Message.from_bytes(data).subject
            except MalformedMessage:
                subject = None
        if subject is None:
            raise InvalidArgument("cannot publish a message whose subject cannot be read")
        if self._rights is not None:
            self._check_publish(subject)
        if len(data) > MAX_MESSAGE_SIZE:
            self._too_large()
            raise MessageTooLarge(
                f"message is {len(data)} bytes, over the {MAX_MESSAGE_SIZE}-byte (64 MiB) limit"
            )
        self._batch.append(data)
        self._batch_bytes += len(data)
        return self._after_queue()

    def publish_wire_run(self, subject: str, datas: list[bytes]) -> Awaitable[None] | None:
        """Queue wire messages of one subject (each checked as :meth:`publish_wire` does)."""
        wait = None
        for data in datas:
            wait = self.publish_wire(data)
        return wait

    async def ping(self, timeout: float = 5.0) -> float:
        """Round trip to the daemon in seconds; everything sent before it has been processed."""
        conn = self._conn
        if self._state != "connected" or conn is None:
            self._refuse_send()
        self._flush()
        loop = asyncio.get_running_loop()
        token = next(_ping_tokens)
        waiter = loop.create_future()
        conn.pings[token] = waiter
        start = loop.time()
        conn.send(cp.Ping(token))
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise DaemonUnavailable(
                f"daemon {self.where} did not answer a ping within {timeout} s"
            ) from None
        finally:
            conn.pings.pop(token, None)
        return loop.time() - start

    # -- sending -------------------------------------------------------------------------------

    def _check_publish(self, subject: str | None) -> None:
        rights = self._rights
        if rights is not None and subject is not None:
            why = rights.why_not_publish(subject)
            if why:
                raise NotPermitted(f"daemon {self.where}: {why}")

    def _refuse_send(self) -> NoReturn:
        if self.defunct is not None:
            raise TransportClosed(f"link to daemon {self.where} is defunct: {self.defunct}")
        if self._state == "closed":
            raise TransportClosed(f"link to daemon {self.where} is closed")
        if self._state == "new":
            raise TransportClosed(f"link to daemon {self.where} is not open yet")
        raise DaemonUnavailable(
            f"not connected to daemon {self.where} (reconnecting); nothing was sent"
        )

    def _after_queue(self) -> Awaitable[None] | None:
        conn = self._conn
        if self._batch_bytes >= _BATCH_BYTES:
            self._flush()
        elif self._flush_handle is None:
            loop = self._loop
            assert loop is not None
            if self._batch_interval:
                self._flush_handle = loop.call_later(self._batch_interval, self._flush)
            else:
                self._flush_handle = loop.call_soon(self._flush)
        if conn is not None and conn.paused:
            conn.waiting += 1
            return conn.drained()
        return None

    def _flush(self) -> None:
        handle, self._flush_handle = self._flush_handle, None
        if handle is not None:
            handle.cancel()
        self._write_batch()

    def _write_batch(self) -> None:
        """Write the messages queued so far as one PUBLISH frame (nothing if none)."""
        batch = self._batch
        if not batch:
            return
        self._batch = []
        self._batch_bytes = 0
        conn = self._conn
        if conn is None or self._state != "connected":
            return
        try:
            buffers = conn.proto.send_messages(batch)
        except cp.ProtocolError as exc:  # a message over 64 MiB got past the codec
            stderr_logger().error("message not sent", daemon=self.where, error=str(exc))
            return
        conn.writelines(buffers)
        conn.wrote_messages(len(batch))

    def _send_control(self, frame: cp.Frame) -> None:
        # Messages published before this frame must reach the daemon before it.
        self._flush()
        if self._conn is not None:
            self._conn.send(frame)

    # -- connecting ----------------------------------------------------------------------------

    async def _establish(self, *, autostart: bool) -> None:
        """Connect and complete HELLO/WELCOME, or raise DaemonUnavailable/NotPermitted ..."""
        try:
            conn = await self._connect()
        except _Refused as refused:
            if not autostart or not may_autostart(self.address):
                # The public error, not the link's private marker class.
                raise DaemonUnavailable(str(refused)) from None
            conn = await start_daemon_and_connect(
                self.address, self._connect, refused, self._daemon_started
            )
        try:
            welcome = await conn.handshake(
                cp.Hello(
                    service=self.service,
                    network=self.network,
                    description=self.description,
                    reliability=self.reliability,
                    user=self.security.user if self.security is not None else None,
                    password=self.security.password if self.security is not None else None,
                    router=self.router,
                )
            )
        except BaseException:
            conn.abort()
            raise
        self._conn = conn
        self.inbox_prefix = welcome.inbox_prefix
        self.daemon_info = dict(welcome.daemon)
        # The pid of a daemon this link started, while it is the one it talks to: a
        # daemon started at the same time as another program's may have lost the race
        # for the port and exited, and the link then talks to the other one.
        if self.started_daemon_pid != self.daemon_info.get("pid"):
            self.started_daemon_pid = None
        self._rights = _rights_of(welcome)
        conn.start_heartbeat()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = self.address.host, self.address.port
        security = self.security
        tls: dict[str, Any] = {}
        if security is not None:
            tls = {
                "ssl": security.ssl_context(),
                "server_hostname": security.server_name or host,
                "ssl_handshake_timeout": CONNECT_TIMEOUT,
            }
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, conn = await loop.create_connection(lambda: _Connection(self), host, port, **tls)
        except ssl.SSLCertVerificationError as exc:
            raise NotPermitted(
                f"daemon {self.where}: its certificate does not verify: {exc.verify_message}"
            ) from None
        except ssl.SSLError as exc:
            raise NotPermitted(
                f"daemon {self.where}: TLS handshake failed ({exc.reason or exc}); "
                "is it a TLS daemon, and does it accept this client?"
            ) from None
        except TimeoutError:
            raise DaemonUnavailable(
                f"daemon {self.where}: no connection within {CONNECT_TIMEOUT} s"
            ) from None
        except ConnectionRefusedError:
            raise _Refused(f"no daemon listens on {self.where} (connection refused)") from None
        except OSError as exc:
            raise DaemonUnavailable(
                f"cannot connect to daemon {self.where}: {exc.strerror or exc}"
            ) from None
        return conn

    def _daemon_started(self, pid: int) -> None:
        self.started_daemon_pid = pid

    # -- losing and regaining the daemon ---------------------------------------------------------

    def on_connection_lost(self, conn: _Connection, reason: str) -> None:
        """``conn`` closed for ``reason``: if it was the live one, present
        RVD.DISCONNECTED and start reconnecting (connection API)."""
        if conn is not self._conn:
            return
        self._conn = None
        if self._state != "connected":
            return
        self._state = "disconnected"
        # Messages send() accepted that the daemon never confirmed: queued but not yet
        # written, or written after its last acknowledgment. They may be lost with the
        # connection (docs/daemon.md, "What a disconnection may lose").
        unconfirmed = len(self._batch) + conn.written - conn.acked
        self._batch.clear()
        self._batch_bytes = 0
        stderr_logger().warning(
            "lost the daemon", daemon=self.where, reason=reason, unconfirmed=unconfirmed
        )
        self._present(
            AdvisoryClass.WARN,
            "RVD.DISCONNECTED",
            {"daemon": self.where, "reason": reason, "unconfirmed": unconfirmed},
        )
        # Requests waiting for a reply through the lost session never get it (its
        # inboxes are gone with it): they fail now, as a new one would, not at timeout.
        lost = getattr(self._hooks, "link_lost", None)
        if lost is not None:
            lost(
                DaemonUnavailable(
                    f"lost daemon {self.where} ({reason}) while waiting for the reply"
                )
            )
        loop = self._loop
        if loop is not None and not loop.is_closed():
            self._reconnect_task = loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        delay = RECONNECT_FIRST_DELAY
        failure_reported = False
        attempts = 0
        while self._state == "disconnected":
            await asyncio.sleep(delay)
            if self._state != "disconnected":
                return
            attempts += 1
            try:
                await self._establish(autostart=self.address.autostart and self.security is None)
            except NotPermitted as exc:
                # The daemon refuses this transport for good (its service is bound to
                # another network there, the user may no longer log in ...).
                self._become_defunct(str(exc))
                return
            except Exception as exc:  # whatever went wrong, the loop must keep trying
                if not isinstance(exc, RvError):
                    stderr_logger().exception("reconnect attempt failed", daemon=self.where)
                if not failure_reported and loop.time() - started >= RECONNECT_FAILED_AFTER:
                    failure_reported = True
                    self._present(
                        AdvisoryClass.ERROR,
                        "RVD.RECONNECT_FAILED",
                        {"daemon": self.where, "attempts": attempts, "reason": str(exc)},
                    )
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
                continue
            if self._state != "disconnected":  # closed meanwhile
                self._drop_connection()
                return
            self._state = "connected"
            self.reconnects += 1
            self._adopt_inbox_prefix()
            conn = self._conn
            assert conn is not None  # _establish succeeded: connected
            for subject in self._interests:
                conn.send(cp.Listen(subject))
            self._present(
                AdvisoryClass.INFO,
                "RVD.CONNECTED",
                {"daemon": self.where, "attempts": attempts},
            )
            if conn.peer_ip is not None and self.first_daemon_ip not in (None, conn.peer_ip):
                # The spec's virtual-IP redirector case: another daemon answered. The
                # transport goes on; inboxes made before name a daemon that is gone.
                self._present(AdvisoryClass.ERROR, "CLIENT.IP_MISMATCH", self._identity())
            return

    def _identity(self) -> dict[str, Any]:
        """The ``tport`` and ``descr`` fields of the CLIENT advisories."""
        fields: dict[str, Any] = {"tport": self.inbox_prefix[len("_INBOX.") : -1]}
        if self.description:
            fields["descr"] = self.description
        return fields

    def _become_defunct(self, reason: str) -> None:
        """The daemon refused a reconnection for good: CLIENT.DEFUNCT, and no more tries."""
        self.defunct = reason
        self._state = "closed"
        self._drop_connection()
        stderr_logger().error("the daemon refused this transport", daemon=self.where, reason=reason)
        self._present(AdvisoryClass.ERROR, "CLIENT.DEFUNCT", {**self._identity(), "reason": reason})

    def _adopt_inbox_prefix(self) -> None:
        """A new daemon session has a new inbox prefix: new inboxes must use it.

        Inboxes made before the reconnect named the old session, which is gone
        with its daemon; replies to them are lost (a pending request times out).
        The transport learns it through its optional ``link_inbox_prefix`` hook.
        """
        adopt = getattr(self._hooks, "link_inbox_prefix", None)
        if adopt is not None:
            adopt(self.inbox_prefix)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort()

    # -- inbound -------------------------------------------------------------------------------

    def _present(self, adv_class: AdvisoryClass, name: str, fields: dict[str, Any]) -> None:
        hooks = self._hooks
        if hooks is not None:
            hooks.link_present(build_advisory(adv_class, name, fields))

    # -- called by the link's connection (_Connection) -------------------------------------------

    def on_deliver(self, wires: list[bytes]) -> None:
        """Hand the encoded messages of a DELIVER frame to the transport (connection API)."""
        hooks = self._hooks
        if hooks is None or self._state == "closed":
            return
        # Each message is decoded for this transport alone: the transport may hand it
        # over without the copy-on-write copy it makes for shared messages. Messages to
        # its inboxes (replies a request waits for) have a way of their own.
        deliver = getattr(hooks, "link_deliver_owned", None) or hooks.link_deliver
        deliver_inbox = getattr(hooks, "link_deliver_inbox", None)
        decode = _decode  # Message.from_bytes without its Python frame (once per message)
        for wire in wires:
            try:
                msg: Message = decode(wire)
            except MemoryError:
                self._no_memory()
                return
            except MalformedMessage as exc:
                stderr_logger().warning(
                    "dropped a malformed message from the daemon",
                    daemon=self.where,
                    error=str(exc),
                )
                continue
            # A decoded message has a subject (the wire format requires one): no None check.
            if deliver_inbox is not None and msg.subject.startswith("_INBOX."):  # type: ignore[union-attr]
                deliver_inbox(msg, True)
            else:
                deliver(msg)

    def backlog(self) -> tuple[int, int]:
        """The most messages waiting in one of the transport's listener queues, and their
        bound, ``pending_limit`` (0: none): what the connection's ReadHold decides on
        (connection API; a transport without the hooks has no bound)."""
        limit = getattr(self._hooks, "pending_limit", 0)
        backlog = getattr(self._hooks, "link_backlog", None)
        if not limit or backlog is None:
            return 0, 0
        return backlog(), limit

    def _no_memory(self) -> None:
        """No storage for an inbound message: CLIENT.NOMEMORY, then drop the connection
        (what it still held is discarded; RVD.DISCONNECTED counts what was unconfirmed)
        and reconnect, as the spec has a client do."""
        stderr_logger().error("out of memory receiving from the daemon", daemon=self.where)
        self._present(
            AdvisoryClass.ERROR,
            "CLIENT.NOMEMORY",
            {**self._identity(), "reason": "no memory for an inbound message"},
        )
        conn = self._conn
        if conn is not None:
            conn.abort("no memory for an inbound message (CLIENT.NOMEMORY)")

    def on_advisory(self, wire: bytes) -> None:
        """Present the encoded advisory of an ADVISORY frame on the transport (connection API)."""
        hooks = self._hooks
        if hooks is None or self._state == "closed":
            return
        try:
            advisory = Message.from_bytes(wire)
        except MalformedMessage:
            return
        hooks.link_present(advisory)

    def _too_large(self) -> None:
        """Present DATALOSS.MSG_TOO_LARGE, as the daemon would have had the message reached it.

        The codec refused the message before its size was known, so ``lost``
        counts the datagrams of the smallest message over the limit.
        """
        conn = self._conn
        peer = conn.transport.get_extra_info("peername") if conn and conn.transport else None
        host = peer[0] if peer else "127.0.0.1"
        datagram = LOOPBACK_DATAGRAM if self.network is None else NETWORK_DATAGRAM
        lost = -(-(MAX_MESSAGE_SIZE + 1) // (datagram - 64))
        if self._hooks is not None:
            self._hooks.link_present(msg_too_large(host, lost, None))

    def on_fast_producer(self, waiting: int) -> None:
        """Outbound data has waited too long for the daemon: present CLIENT.FASTPRODUCER
        (connection API; ``waiting`` messages were published meanwhile)."""
        if self._hooks is not None:
            self._hooks.link_present(fast_producer(waiting))

    def __repr__(self) -> str:
        return f"<TcpLink {self.where} {self._state} interests={len(self._interests)}>"


class _Connection(asyncio.Protocol):
    """One TCP connection of a link: the asyncio adapter of a client-role
    ``clientproto.Connection`` (which owns the order of frames), with liveness
    and flow control."""

    def __init__(self, link: TcpLink) -> None:
        self.link = link
        self.loop = asyncio.get_running_loop()
        self._touch = poller_for(self.loop).touch
        self.transport: asyncio.Transport | None = None
        self.peer_ip: str | None = None
        self.proto = cp.Connection(cp.Role.CLIENT)
        self.welcome: asyncio.Future[cp.Welcome] = self.loop.create_future()
        self.gone: asyncio.Future[None] = self.loop.create_future()
        self.pings: dict[int, asyncio.Future[None]] = {}
        #: Messages written to the daemon on this connection, and how many of them the
        #: daemon has confirmed processing (the PONG of a PING written after them); the
        #: rest may be lost if the daemon dies (``unconfirmed`` of RVD.DISCONNECTED).
        self.written = 0
        self.acked = 0
        #: The acknowledgment PING in flight: (token, messages written before it).
        self._ack_ping: tuple[int, int] | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self.paused = False
        self.waiting = 0  # messages published while paused
        self._drain: asyncio.Future[None] | None = None
        self._fast_timer: asyncio.TimerHandle | None = None
        self._heartbeat: asyncio.TimerHandle | None = None
        self._last_heard = self.loop.time()
        self._reason = "connection closed by the daemon"
        self._heard = False  # any byte from the daemon yet
        # Frames read but not yet acted on (from message n of the first): a turn's
        # share of messages was handed over (see _act); reading is paused meanwhile.
        self._stash: tuple[list[cp.Frame], int] | None = None
        self._reading_paused = False
        # Back-pressure (see _check_pressure): whether reading is held for the transport's
        # listener queues; messages handed over since the last look at them.
        self._hold = ReadHold()
        self._handed = 0
        self._hold_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP connection is a stream transport. A cast, not an isinstance check:
        # uvloop's TCPTransport does not derive from asyncio.Transport.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        #: The daemon's IP address on this connection (CLIENT.IP_MISMATCH compares them).
        self.peer_ip = peer[0] if isinstance(peer, tuple) and peer else None
        transport.set_write_buffer_limits(_WRITE_HIGH_WATER, _WRITE_LOW_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        self._last_heard = self.loop.time()
        self._touch()
        try:
            frames = self.proto.receive_data(data)
        except cp.ProtocolError as exc:
            if not self.welcome.done() and self.link.security is None and data[:1] == b"\x15":
                # A TLS alert record (content type 21): the daemon speaks TLS only.
                self.welcome.set_exception(
                    NotPermitted(
                        f"daemon {self.link.where} speaks TLS only: connect with "
                        "security=rv.Security(daemon_cert=...)"
                    )
                )
                self.welcome.exception()
            self._fail(f"daemon sent a bad frame: {exc}")
            return
        if self._stash is not None:
            # Earlier frames still wait for their turn: these go after them. (Reading
            # is paused meanwhile; a transport that still hands data over keeps order.)
            waiting, start = self._stash
            self._stash = (waiting + frames, start)
            return
        if self._hold.held:  # read just before reading paused: they wait with the backlog
            self._stash = (frames, 0)
            return
        self._act(frames, 0, _TURN_MESSAGES)
        if self._handed >= _PRESSURE_CHECK:
            self._check_pressure()

    def _act(self, frames: list[cp.Frame], start: int, budget: int) -> None:
        """Act on ``frames`` in order, from message ``start`` of the first, handing the
        transport at most ``budget`` messages; what is left waits for the next loop turn.

        An event loop reads a socket again and again while it has data (uvloop up
        to 32 reads per turn), and every message handed over becomes a Message
        waiting in a listener's queue until the application's turn comes. Against
        a daemon's backlog that piled up tens of thousands of live messages, and the
        garbage collector's passes over them cost the subscriber more than the
        messages did. A turn's share is kept under the collector's young-generation
        threshold (one Message is three tracked objects); the rest waits as bytes
        and reading pauses (the socket, then the daemon, hold the backlog, and the
        daemon's slow-consumer limits apply to it).
        """
        link = self.link
        # frame.__class__ (exact types, as before), not type(frame) in a local: mypy
        # narrows the frame union on the former only.
        for index, frame in enumerate(frames):
            if frame.__class__ is cp.Deliver:
                wires = frame.messages
                count = len(wires) - start
                if count > budget:
                    end = start + budget
                    if budget:
                        link.on_deliver(wires[start:end])
                    self._handed += budget
                    self._defer(frames[index:] if index else frames, end)
                    return
                link.on_deliver(wires[start:] if start else wires)
                self._handed += count
                budget -= count
                start = 0
            elif frame.__class__ is cp.Advisory:
                link.on_advisory(frame.message)
            elif frame.__class__ is cp.Pong:
                ack = self._ack_ping
                if ack is not None and frame.token == ack[0]:
                    self._ack_ping = None
                    self.acked = ack[1]
                    if self.written > self.acked and self._ack_timer is None:
                        self._ack_timer = self.loop.call_later(ACK_DELAY, self._ask_ack)
                waiter = self.pings.pop(frame.token, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
            elif frame.__class__ is cp.Ping:
                self.send(cp.Pong(frame.token))
            elif frame.__class__ is cp.Welcome:
                if not self.welcome.done():
                    self.welcome.set_result(frame)
            elif frame.__class__ is cp.Error:
                self._error(frame)
            elif frame.__class__ is cp.Bye:
                self._reason = (
                    f"daemon said goodbye: {frame.reason}"
                    if frame.reason
                    else ("daemon said goodbye")
                )

    def _defer(self, frames: list[cp.Frame], start: int) -> None:
        """Keep ``frames`` (from message ``start`` of the first) for the next loop turn,
        and read nothing more until they are all handed over."""
        self._stash = (frames, start)
        self._apply_reading()
        if self._handed >= _PRESSURE_CHECK:
            self._check_pressure()
        if not self._hold.held:
            self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        if self._hold.held:
            return  # the backlog's relief (_recheck) hands the rest over
        stash, self._stash = self._stash, None
        if stash is None:
            return
        self._act(stash[0], stash[1], _TURN_MESSAGES)
        self._apply_reading()

    def _apply_reading(self) -> None:
        """Read the socket unless frames wait for their turn or the listeners are full."""
        paused = self._stash is not None or self._hold.held
        if paused == self._reading_paused:
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._reading_paused = paused
        if paused:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _check_pressure(self) -> None:
        """Back-pressure from the listeners' queues to the daemon.

        A consumer that keeps its loop free but awaits slow work would otherwise
        have every message decoded into its listener's queue, and the process
        grow without bound. While the transport's listener queues hold half their
        ``pending_limit`` nothing more is read: the backlog waits in the sockets
        and the daemon, whose consumer buffer bounds it and whose
        CLIENT.SLOWCONSUMER reports what it drops (rvasync.transport.backpressure
        decides, and gives up on a queue nobody reads). Looked at every
        _PRESSURE_CHECK messages, and every PRESSURE_POLL seconds while held.
        """
        self._handed = 0
        hold = self._hold
        if hold.held or not hold.check(*self.link.backlog(), self.loop.time()):
            return
        self._apply_reading()
        self._hold_timer = self.loop.call_later(PRESSURE_POLL, self._recheck)

    def _recheck(self) -> None:
        self._hold_timer = None
        if self.transport is None:
            return
        if self._hold.poll(*self.link.backlog(), self.loop.time(), backpressure.STALL_AFTER):
            self._hold_timer = self.loop.call_later(PRESSURE_POLL, self._recheck)
            return
        if self._stash is not None:
            self._next_turn()
        self._apply_reading()

    def _act_on_stash(self) -> None:
        """Hand over every frame still waiting, at once (the connection is ending)."""
        stash, self._stash = self._stash, None
        if stash is not None:
            self._act(stash[0], stash[1], sys.maxsize)

    def connection_lost(self, exc: Exception | None) -> None:
        # What the daemon sent before the end is delivered, not lost with the stash.
        self._hold.held = False
        self._act_on_stash()
        for timer in (self._fast_timer, self._heartbeat, self._ack_timer, self._hold_timer):
            if timer is not None:
                timer.cancel()
        self._fast_timer = self._heartbeat = self._ack_timer = self._hold_timer = None
        if exc is not None and self._reason == "connection closed by the daemon":
            self._reason = f"connection lost: {exc}"
        if not self.welcome.done():
            if isinstance(exc, ssl.SSLError):
                # TLS 1.3: the daemon checks the client's certificate after the
                # client's side of the handshake is done, and says no with an alert.
                failure: Exception = NotPermitted(
                    f"daemon {self.link.where} refused the TLS link: {exc.reason or exc}"
                )
            elif not self._heard and self.link.security and self.link.security.user_cert:
                # TLS 1.3: the daemon checks a client certificate after the client's
                # side of the handshake is over; asyncio does not pass its alert on,
                # so a link closed before any answer is how a refusal shows.
                failure = NotPermitted(
                    f"daemon {self.link.where} closed the TLS link without a word: it "
                    "refused the client certificate (signed by a CA it does not trust, "
                    "expired, or not for client authentication)"
                )
            else:
                hint = ""
                if not self._heard and self.link.security is None:
                    hint = " (without a word: a secure daemon closes plain links; see rv.Security)"
                failure = DaemonUnavailable(f"daemon {self.link.where}: {self._reason}{hint}")
            self.welcome.set_exception(failure)
            self.welcome.exception()  # retrieved: the handshake may not be waiting any more
        for waiter in self.pings.values():
            if not waiter.done():
                waiter.set_exception(DaemonUnavailable(f"daemon {self.link.where} went away"))
                waiter.exception()
        self.pings.clear()
        self._release_drain()
        if not self.gone.done():
            self.gone.set_result(None)
        self.transport = None
        self.link.on_connection_lost(self, self._reason)

    def pause_writing(self) -> None:
        self.paused = True
        self.waiting = 0
        self._fast_timer = self.loop.call_later(FAST_PRODUCER_AFTER, self._still_paused)

    def resume_writing(self) -> None:
        self.paused = False
        if self._fast_timer is not None:
            self._fast_timer.cancel()
            self._fast_timer = None
        self._release_drain()

    # -- used by the link -------------------------------------------------------------------------

    async def handshake(self, hello: cp.Hello) -> cp.Welcome:
        self.send(hello)
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                return await self.welcome
        except TimeoutError:
            raise DaemonUnavailable(
                f"daemon {self.link.where} did not answer HELLO within {HANDSHAKE_TIMEOUT} s"
            ) from None

    def send(self, frame: cp.Frame) -> None:
        """Encode and write one frame (nothing once the socket is closing)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.proto.send(frame))
            self._touch()

    def writelines(self, buffers: list[bytes]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(buffers)
            self._touch()

    def wrote_messages(self, count: int) -> None:
        """``count`` messages were just written: have the daemon confirm them.

        An acknowledgment PING goes :data:`ACK_DELAY` after the first unconfirmed
        write, one at a time: its PONG confirms every message written before it
        (the daemon handles frames in order). Off the latency path of a send, and
        at most one per ACK_DELAY or round trip whatever the message rate.
        """
        self.written += count
        if self._ack_ping is None and self._ack_timer is None:
            self._ack_timer = self.loop.call_later(ACK_DELAY, self._ask_ack)

    def _ask_ack(self) -> None:
        self._ack_timer = None
        if self.transport is None or self.written <= self.acked:
            return
        token = next(_ping_tokens)
        self._ack_ping = (token, self.written)
        self.send(cp.Ping(token))

    def drained(self) -> asyncio.Future[None]:
        if self._drain is None:
            self._drain = self.loop.create_future()
        return self._drain

    def say_bye(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(self.proto.send(cp.Bye("client closing")))
            transport.close()

    def abort(self, reason: str | None = None) -> None:
        """Drop the connection now (``reason``: what RVD.DISCONNECTED will say)."""
        if reason is not None:
            self._reason = reason
        if self.transport is not None:
            self.transport.abort()

    def start_heartbeat(self) -> None:
        self._heartbeat = self.loop.call_later(HEARTBEAT_INTERVAL, self._beat)

    # -- internals --------------------------------------------------------------------------------

    def _beat(self) -> None:
        self._heartbeat = None
        if self.transport is None:
            return
        if self._hold.held:
            # Not reading (back-pressure): the daemon's answers wait in the socket.
            self._last_heard = self.loop.time()
        elif self.loop.time() - self._last_heard > 3 * HEARTBEAT_INTERVAL:
            self._fail(f"daemon silent for over {3 * HEARTBEAT_INTERVAL:g} s")
            return
        self.send(cp.Ping(0))
        self._heartbeat = self.loop.call_later(HEARTBEAT_INTERVAL, self._beat)

    def _still_paused(self) -> None:
        self._fast_timer = None
        if self.paused and self.transport is not None:
            self.link.on_fast_producer(self.waiting)
            self._fast_timer = self.loop.call_later(FAST_PRODUCER_AFTER, self._still_paused)

    def _release_drain(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def _error(self, error: cp.Error) -> None:
        exc_type: type[Exception] = DaemonUnavailable
        if error.code == ErrorCode.NOT_PERMITTED:
            exc_type = NotPermitted
        elif error.code == ErrorCode.INVALID_ARGUMENT:
            exc_type = InvalidArgument
        text = f"daemon {self.link.where} refused: {error.text}"
        if not self.welcome.done():
            self.welcome.set_exception(exc_type(text))
            self.welcome.exception()
        else:
            stderr_logger().error("daemon error", daemon=str(self.link.where), error=error.text)
        self._reason = f"daemon error {error.code}: {error.text}"

    def _fail(self, reason: str) -> None:
        self._reason = reason
        self.abort()
