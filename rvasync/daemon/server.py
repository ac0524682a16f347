"""The TCP port of a standalone daemon: one client session per connection.

``Daemon.start()`` calls :func:`start_server` when the daemon has a ``listen``
port. Each accepted connection speaks the client protocol
(:mod:`rvasync.protocol.clientproto`): after a HELLO it owns one
``ClientSession`` of the engine, turns LISTEN/UNLISTEN/PUBLISH frames into
session calls, and writes what the engine delivers as DELIVER frames. The
order of frames (HELLO first, nothing after BYE ...) is the business of the
connection's ``clientproto.Connection`` (daemon role); this module is the
asyncio adapter around it.

The engine must never wait for a client, so delivery only appends to a
per-client backlog that is written once per loop turn, many messages to a
frame. Messages published by a client are written to the clients that take
them before that client's read returns (one write per receiving client per
read, on the latency path of a request and of its reply); deliveries from
elsewhere (the network, timers) are written at the end of the loop turn.
When the client stops reading, the socket's buffer fills, writing
pauses, and the backlog grows up to ``max_consumer_buffer`` bytes; past that
(or when a message has waited ``consumer_time_limit`` seconds) the *oldest*
messages are dropped and the client is told with
``_RV.ERROR.SYSTEM.CLIENT.SLOWCONSUMER`` ahead of everything still queued.
A connection that sends garbage, or breaks off in the middle of a frame,
loses its own session and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, NoReturn, cast

from rvasync import codec
from rvasync._logging import stderr_logger
from rvasync._version import __version__
from rvasync.advisories import AdvisoryClass, build_advisory
from rvasync.advlimit import Coalescer
from rvasync.busypoll import poller_for
from rvasync.daemon.accept import GatedServer, HostSlots, Slot, descriptor_limit, host_of
from rvasync.daemon.advisories import slow_consumer
from rvasync.daemon.auth import DaemonSecurity, LoginRefused, User, Users
from rvasync.daemon.clienttally import ClientTallies, Identity
from rvasync.daemon.params import check_reliability
from rvasync.daemon.rights import ConnectionRights, NotAllowed, RouterGrant
from rvasync.daemon.routing import subject_of
from rvasync.daemon.statustypes import ClientRow
from rvasync.daemon.users import cert_subject
from rvasync.errors import (
    InvalidArgument,
    InvalidSubject,
    MalformedMessage,
    MessageTooLarge,
    NotPermitted,
    RvError,
)
from rvasync.message import Message
from rvasync.protocol import clientproto as cp
from rvasync.protocol.clientproto import ErrorCode
from rvasync.subjects import check_listen_subject, validate_subject

_check_subject = codec.check_subject

__all__ = [
    "DEFAULT_CONSUMER_TIME_LIMIT",
    "DEFAULT_MAX_CONSUMER_BUFFER",
    "ClientConnection",
    "ClientServer",
    "ServerStats",
    "start_server",
]

#: Bytes of undelivered messages a daemon keeps for one client before dropping
#: the oldest (the daemon's ``-max-consumer-buffer``). Room for two messages of
#: the 64 MiB maximum, so one big message never pushes out the next.
DEFAULT_MAX_CONSUMER_BUFFER = 128 * 1024 * 1024

#: Seconds an undelivered message may wait for a client that does not read.
DEFAULT_CONSUMER_TIME_LIMIT = 60.0

#: Seconds a new connection has, from the moment it is accepted, to finish its TLS
#: handshake, introduce itself with HELLO and (secure daemon) log in.
HELLO_TIMEOUT = 10.0
#: Connections that have not logged in yet (no session), per client host and in all; the
#: total is also kept within a quarter of the process's descriptor limit (see accept.py).
MAX_UNAUTHENTICATED_PER_HOST = 64
MAX_UNAUTHENTICATED = 512

# The socket's own write buffer is kept small, so that messages a client has
# not taken wait in the backlog, where the oldest can still be dropped.
_WRITE_HIGH_WATER = 256 * 1024
_WRITE_LOW_WATER = 64 * 1024
# Bytes of backlog written per write call (one or a few DELIVER frames).
_WRITE_CHUNK = 256 * 1024
# After an ERROR or BYE, how long a peer that does not read may keep the socket.
_CLOSE_GRACE = 2.0

_MESSAGE = 0
_ADVISORY = 1

#: Secure daemon: seconds between checks of the users file for changes.
USERS_FILE_CHECK = 2.0

_connection_ids = itertools.count(1)


@dataclass
class ServerStats:
    """What the client port has seen since the daemon started (for HOST.STATUS and tests)."""

    connections: int = 0  # accepted in total
    sessions: int = 0  # connections that completed HELLO
    refused: int = 0  # HELLOs refused (version, parameters)
    dropped_protocol: int = 0  # connections dropped for garbage frames or forged messages
    login_refused: int = 0  # secure daemon: failed logins (wrong password, unknown user ...)
    unauthenticated_refused: int = 0  # closed at accept: too many not logged in (host or all)
    router_refused: int = 0  # HELLOs asking for the router role without the right to it
    not_permitted: int = 0  # secure daemon: LISTENs and PUBLISHes outside a user's patterns
    cut_mid_frame: int = 0  # connections that closed in the middle of a frame
    illegal_publish: int = 0  # messages refused for their subject
    slow_consumer_events: int = 0  # SLOWCONSUMER advisories presented
    messages_dropped: int = 0  # messages dropped for slow consumers
    bytes_dropped: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ClientServer:
    """The listening socket and the live client connections of one daemon."""

    def __init__(
        self,
        daemon: Any,
        *,
        max_consumer_buffer: int = DEFAULT_MAX_CONSUMER_BUFFER,
        consumer_time_limit: float = DEFAULT_CONSUMER_TIME_LIMIT,
        security: DaemonSecurity | None = None,
        router_hosts: Any = None,
    ) -> None:
        if max_consumer_buffer <= 0:
            raise InvalidArgument(
                f"max_consumer_buffer must be a positive number of bytes, got {max_consumer_buffer}"
            )
        if consumer_time_limit <= 0:
            raise InvalidArgument(
                f"consumer_time_limit must be positive seconds, got {consumer_time_limit}"
            )
        self.daemon = daemon
        self.max_consumer_buffer = max_consumer_buffer
        self.consumer_time_limit = consumer_time_limit
        self.stats = ServerStats()
        #: What departed clients exchanged, overall and per identity (the status page's
        #: counters stay monotonic across clients leaving and reconnecting).
        self.tallies = ClientTallies()
        #: Advisories that can fire per message: one per cause per second (rvasync.advlimit).
        self.advisories = Coalescer()
        #: TLS and users (None: a plain daemon that accepts any client).
        self.security = security
        #: Live connections (with or without a session yet).
        self.sessions: set[ClientConnection] = set()
        #: Who may take the router role (the users file, or ``router_hosts`` without users).
        self.router_grant = RouterGrant(
            router_hosts, with_users=security is not None and security.requires_login
        )
        #: Connections not logged in yet (TLS handshake, HELLO, login under way).
        self.unauthenticated = HostSlots(
            per_host=MAX_UNAUTHENTICATED_PER_HOST,
            total=min(MAX_UNAUTHENTICATED, max(16, descriptor_limit() // 4)),
            what="client port",
        )
        self._users_timer: asyncio.TimerHandle | None = None
        if security is not None and security.requires_login:
            security.on_reload(self._users_reloaded)
        self.host = ""
        self.port = 0
        # Connections given messages while a client's read is handled: written when that
        # read is done (see flush_written), not a loop turn later.
        self._reading = False
        self._unwritten: list[ClientConnection] = []
        self._server: GatedServer | None = None
        self._closed: asyncio.Future[None] | None = None
        self._finisher: asyncio.Task[None] | None = None

    async def listen(self, host: str, port: int) -> None:
        """Open the listening socket on ``host:port`` (0: any free port; see ``port``).

        :func:`start_server` calls it once, after making the server; OSError
        (naming the address) when the port cannot be had.
        """
        loop = asyncio.get_running_loop()
        try:
            ssl_context = self.security.ssl_context if self.security is not None else None
            self._server = GatedServer(
                self.unauthenticated,
                lambda slot: ClientConnection(self, slot),
                ssl_context=ssl_context,
                handshake_timeout=HELLO_TIMEOUT,
            )
            await self._server.listen(host, port)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen for clients on {host}:{port}: {exc.strerror}"
            ) from None
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = sockname[0], sockname[1]
        if self.security is not None and self.security.requires_login:
            self._users_timer = loop.call_later(USERS_FILE_CHECK, self._check_users_file)

    def _check_users_file(self) -> None:
        """Re-read the users file when it changed, even while nobody logs in."""
        self._users_timer = None
        security = self.security
        if security is None or self.closing:
            return
        security.reload_if_changed()
        self._users_timer = asyncio.get_running_loop().call_later(
            USERS_FILE_CHECK, self._check_users_file
        )

    def _users_reloaded(self, users: Users) -> None:
        """Apply a reloaded users file to the users already logged in."""
        for conn in list(self.sessions):
            conn.apply_users(users)

    def schedule_write(self, conn: ClientConnection) -> None:
        """``conn`` has messages to write: at the end of the client read being handled
        (:meth:`begin_read` .. :meth:`end_read`), else at the end of the loop turn."""
        if self._reading:
            self._unwritten.append(conn)
        else:
            conn.loop.call_soon(conn.write_now)

    def begin_read(self) -> bool:
        """A client's read is being handled; True if this call opened it (then the
        caller must call :meth:`end_read`)."""
        if self._reading:
            return False
        self._reading = True
        return True

    def end_read(self) -> None:
        """The read is handled: write what it gave other clients (and the sender) now.

        The messages of the read go out before anything else happens (the
        datagrams to other daemons, a later loop turn): a request reaches its
        local replier, and a reply its requester, one write after it came in.
        """
        self._reading = False
        unwritten = self._unwritten
        if unwritten:
            self._unwritten = []
            for conn in unwritten:
                try:
                    conn.write_now()
                except Exception:  # one client's failure must not keep the others waiting
                    stderr_logger().exception("writing to a client failed", client=conn.peer)

    @property
    def closing(self) -> bool:
        """True once :meth:`close` has been called.

        A connection accepted after that (it was already on its way) asks
        this in ``connection_made`` and is shut at once.
        """
        return self._closed is not None

    def info(self) -> dict[str, Any]:
        """What a client learns about the daemon in WELCOME."""
        return {
            "version": __version__,
            "pid": os.getpid(),
            "host": self.host,
            "port": self.port,
        }

    def close(self) -> asyncio.Future[None]:
        """Stop accepting, say BYE to every client and drop their sessions.

        The work is done at once; the returned future completes when every
        connection is gone, so both ``server.close()`` and
        ``await server.close()`` are correct.
        """
        loop = asyncio.get_running_loop()
        if self._closed is not None:
            return self._closed
        self._closed = loop.create_future()
        if self._server is not None:
            self._server.close()
        if self._users_timer is not None:
            self._users_timer.cancel()
            self._users_timer = None
        waits = [conn.shut(ErrorCode.SHUTDOWN, "the daemon is stopping") for conn in self.sessions]
        if self.security is not None:
            self.security.close()
        done = self._closed

        async def finish() -> None:
            with contextlib.suppress(Exception):
                if waits:
                    await asyncio.wait(waits, timeout=_CLOSE_GRACE + 1)
                if self._server is not None:
                    await self._server.wait_closed()
            if not done.done():
                done.set_result(None)

        self._finisher = loop.create_task(finish())
        return done

    async def wait_closed(self) -> None:
        if self._closed is not None:
            await self._closed

    def __repr__(self) -> str:
        return f"<ClientServer {self.host}:{self.port} clients={len(self.sessions)}>"


async def start_server(
    daemon: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    max_consumer_buffer: int | None = None,
    consumer_time_limit: float | None = None,
    security: DaemonSecurity | None = None,
    router_hosts: Any = None,
) -> ClientServer:
    """Listen for client transports of ``daemon`` on ``host:port`` (0 = any free port).

    The consumer limits (None: the module defaults) are ``Daemon``'s
    ``max_consumer_buffer`` parameter when the daemon starts its server.
    ``router_hosts``: on a daemon without users, the networks (CIDR) whose clients
    may take the router role (None: loopback).
    """
    server = ClientServer(
        daemon,
        max_consumer_buffer=(
            DEFAULT_MAX_CONSUMER_BUFFER if max_consumer_buffer is None else max_consumer_buffer
        ),
        consumer_time_limit=(
            DEFAULT_CONSUMER_TIME_LIMIT if consumer_time_limit is None else consumer_time_limit
        ),
        security=security,
        router_hosts=router_hosts,
    )
    await server.listen(host, port)
    return server


def _refuse_message(subject: str, bad: RvError) -> NoReturn:
    """A PUBLISH of bytes that are no good message (malformed: a protocol error)."""
    if isinstance(bad, MalformedMessage):
        raise cp.ProtocolError(f"PUBLISH carried a malformed message on {subject!r}: {bad}")
    raise bad


def _advisory_wire(advisory: Message) -> bytes:
    return advisory.to_bytes()


class ClientConnection(asyncio.Protocol):
    """One client transport: its socket, its engine session and its delivery backlog.

    It is the engine's ``SessionOwner``: ``deliver`` and ``present`` only
    queue, and never block the daemon.
    """

    def __init__(self, server: ClientServer, slot: Slot | None = None) -> None:
        self.server = server
        #: Its place among the connections not logged in yet (given back on attach).
        self._slot = slot
        self.id = next(_connection_ids)
        self.session: Any = None
        self.peer: str = "?"
        self._loop = asyncio.get_running_loop()
        #: The event loop of the connection (the server schedules writes on it).
        self.loop = self._loop
        self._touch = poller_for(self._loop).touch
        self._transport: asyncio.Transport | None = None
        self._conn = cp.Connection(cp.Role.DAEMON)
        self._interests: dict[str, int] = {}
        # The daemon's verdict on each subject this client published lately ("" when
        # legal, else why not): a client publishes few subjects many times, and the
        # checks cost more than the lookup. Bounded (cleared when full).
        self._verdicts: dict[str, str] = {}
        # Backlog of (enqueued_at, kind, wire): messages and advisories in delivery order.
        self._queue: deque[tuple[float, int, bytes]] = deque()
        self._queued_bytes = 0
        # This turn's messages while the socket keeps up (no backlog): one frame per turn.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._closing = False
        self._limit = server.max_consumer_buffer
        self._paused = False
        self._flush_scheduled = False
        self._age_timer: asyncio.TimerHandle | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._dropped = 0
        self._bytes_dropped = 0
        self._drop_reason = ""
        self._reading_paused = False
        self._gone: asyncio.Future[None] = self._loop.create_future()
        #: What the session may publish and listen to (made on attach).
        self._rights: ConnectionRights | None = None
        # Frames that came after HELLO while the login is checked (None: not holding).
        self._held: list[cp.Frame] | None = None
        self._login_task: asyncio.Task[None] | None = None
        self._tls = False
        #: Counters for the status page: messages and bytes this client published / was sent.
        self.messages_in = 0
        self.bytes_in = 0
        self.messages_out = 0
        self.bytes_out = 0
        self.connected_at = self._loop.time()
        #: (description, user): what the status page tallies this client under, across
        #: its reconnects (set once it attached; rvasync.daemon.clienttally).
        self.identity: Identity = ("", "")
        self._tallied = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server's transport. cast, not an isinstance check: uvloop's
        # TCPTransport (the daemon's loop when installed) is not an asyncio.Transport.
        stream = cast(asyncio.Transport, transport)
        self._transport = stream
        stream.set_write_buffer_limits(_WRITE_HIGH_WATER, _WRITE_LOW_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self._tls = transport.get_extra_info("ssl_object") is not None
        self.server.sessions.add(self)
        self.server.stats.connections += 1
        # HELLO (and the login) within HELLO_TIMEOUT of the accept, the handshake included.
        accepted = self._slot.taken_at if self._slot is not None else self._loop.time()
        self._hello_timer = self._loop.call_at(accepted + HELLO_TIMEOUT, self._hello_overdue)
        if self.server.closing:
            self.shut(ErrorCode.SHUTDOWN, "the daemon is stopping")

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._touch()
        server = self.server
        if server.begin_read():
            try:
                self._received(transport, data)
            finally:
                server.end_read()  # what the frames gave other clients is written now
        else:
            self._received(transport, data)

    def _received(self, transport: asyncio.Transport, data: bytes) -> None:
        garbage: cp.ProtocolError | None = None
        try:
            frames = self._conn.receive_data(data)
        except cp.ProtocolError as exc:
            frames, garbage = exc.frames, exc  # act on the good frames before the bad one
        for frame in frames:
            if transport.is_closing():
                return
            if self._held is not None:  # a login is being checked: keep the order
                self._held.append(frame)
                continue
            try:
                self._handle(frame)
            except cp.ProtocolError as exc:
                self._drop_for_garbage(str(exc))
                return
            except RvError as exc:
                # Any other refusal of what the client sent (a reserved subject, a bad
                # value): the documented ERROR frame and close, never a transport crash.
                self._drop_for_garbage(f"{type(exc).__name__}: {exc}")
                return
        if garbage is not None:
            self._drop_for_garbage(str(garbage))

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn.buffered:
            self.server.stats.cut_mid_frame += 1
            stderr_logger().info(
                "client cut off mid-frame",
                client=self.peer,
                buffered=self._conn.buffered,
            )
        self._teardown()

    def pause_writing(self) -> None:
        self._paused = True
        if self._queue and self._age_timer is None:
            self._arm_age_timer()

    def resume_writing(self) -> None:
        self._paused = False
        self._flush()

    # -- SessionOwner (called by the engine) ---------------------------------------------------

    def deliver(self, payload: Any) -> None:
        """Queue one message for this client; written at the end of the loop turn."""
        self.deliver_wire(payload.wire())

    def deliver_wire(self, wire: bytes) -> None:
        """:meth:`deliver` for a message's wire bytes (the engine's call when it has them)."""
        if self._closing:
            return
        self.messages_out += 1
        self.bytes_out += len(wire)
        if self._queue or self._paused:  # a backlog: keep the order, apply the limits
            self._enqueue(_MESSAGE, wire)
            return
        # The usual case, kept cheap: collect this turn's messages for one DELIVER frame.
        self._pending.append(wire)
        self._pending_bytes += len(wire)
        if self._pending_bytes >= _WRITE_CHUNK:
            self._write_pending()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.server.schedule_write(self)

    def deliver_wires(self, wires: list[bytes]) -> None:
        """:meth:`deliver_wire` for several messages in order (one client frame's worth)."""
        if self._closing:
            return
        size = sum(map(len, wires))
        if self._queue or self._paused or size >= _WRITE_CHUNK:
            for wire in wires:  # the backlog and its limits, or a big batch: one by one
                self.deliver_wire(wire)
            return
        self.messages_out += len(wires)
        self.bytes_out += size
        if self._pending_bytes + size > _WRITE_CHUNK:
            self._write_pending()  # a DELIVER frame stays within one write chunk
        self._pending += wires
        self._pending_bytes += size
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.server.schedule_write(self)

    def present(self, advisory: Message) -> None:
        """Queue an advisory for this client, in order with its messages."""
        if self._closing:
            return
        wire = _advisory_wire(advisory)
        if self._queue or self._paused:
            self._enqueue(_ADVISORY, wire)
            return
        self._write_pending()
        self._write(self._conn.send(cp.Advisory(wire)))

    # -- inbound frames ------------------------------------------------------------------------

    def _handle(self, frame: cp.Frame) -> None:
        # The connection let through only what a client may send at this point: a
        # LISTEN/UNLISTEN/PUBLISH comes after a HELLO this daemon has accepted (a
        # refused one closed the transport, which stops the caller's loop).
        # frame.__class__, not type(frame) in a local: mypy narrows the union on it.
        if frame.__class__ is cp.Publish:
            self._publish(frame.messages)
        elif frame.__class__ is cp.Listen:
            self._listen(frame.subject)
        elif frame.__class__ is cp.Unlisten:
            count = self._interests.get(frame.subject, 0)
            if count:
                if count == 1:
                    del self._interests[frame.subject]
                else:
                    self._interests[frame.subject] = count - 1
                self.session.remove_interest(frame.subject)
        elif frame.__class__ is cp.Ping:
            # Answered after this loop turn: the datagrams of the messages published
            # before the PING are flushed to the network at the end of the turn
            # (call_soon, scheduled earlier), so a PONG confirms they left this daemon
            # (the client counts what is unconfirmed when the daemon dies).
            self._loop.call_soon(self._pong, frame.token)
        elif frame.__class__ is cp.Reliability:
            self._request_reliability(frame.seconds)
        elif frame.__class__ is cp.Hello:
            self._hello(frame)
        elif frame.__class__ is cp.Bye:
            self._close_session()
            self._close_transport()
        # PONG: nothing to do.

    def _hello(self, hello: cp.Hello) -> None:
        if hello.version != cp.PROTOCOL_VERSION:
            self._refuse(
                ErrorCode.VERSION,
                f"client protocol version {hello.version} is not supported "
                f"(this daemon speaks version {cp.PROTOCOL_VERSION})",
            )
            return
        security = self.server.security
        if security is not None and security.requires_login:
            self._held = []
            self._pause_for_login()
            self._login_task = self._loop.create_task(self._login(hello, security))
            return
        self._attach(hello, None)

    def _attach(self, hello: cp.Hello, user: User | None) -> None:
        host = host_of(self._transport) if self._transport is not None else "?"
        refusal = self.server.router_grant.refusal(hello.router, user, host)
        if refusal:
            self.server.stats.router_refused += 1
            stderr_logger().warning("router role refused", client=self.peer, problem=refusal)
            self._refuse(ErrorCode.NOT_PERMITTED, refusal)
            return
        self._rights = ConnectionRights(user, router=hello.router)
        try:
            self.session = self.server.daemon.attach(
                self,
                service=hello.service,
                network=hello.network,
                description=hello.description,
                reliability=hello.reliability,
                router=hello.router,
            )
        except NotPermitted as exc:
            self._refuse(ErrorCode.NOT_PERMITTED, str(exc))
            return
        except RvError as exc:
            self._refuse(ErrorCode.INVALID_ARGUMENT, str(exc))
            return
        self._logged_in()
        self.server.stats.sessions += 1
        self.identity = self.server.tallies.identity(hello.description, self.user)
        self._tallied = True
        info = self.server.info()
        for name in ("transport_id", "description"):
            value = getattr(self.session, name, None)
            if isinstance(value, str):
                info[name] = value
        info["router"] = hello.router
        if user is not None:
            info["user"] = user.name
            info["permissions"] = user.permissions.as_dict()
        self._write(self._conn.send(cp.Welcome(self.session.inbox_prefix, info)))

    def _logged_in(self) -> None:
        """The session exists: no more deadline, and its unauthenticated slot is free."""
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()

    def _pong(self, token: int) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._write_pending()  # deliveries made before the PING go first
        self._write(self._conn.send(cp.Pong(token)))

    # -- secure daemon: login ---------------------------------------------------------------------

    def _pause_for_login(self) -> None:
        if self._transport is not None and not self._reading_paused:
            self._transport.pause_reading()

    def _resume_after_login(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing() and not self._reading_paused:
            transport.resume_reading()

    async def _login(self, hello: cp.Hello, security: DaemonSecurity) -> None:
        transport = self._transport
        if transport is None:
            return
        try:
            user = await security.gate.authenticate(
                host=host_of(transport),
                user=hello.user,
                password=hello.password,
                tls=self._tls,
                allow_plain=security.allow_plain_passwords,
                cert_subject=cert_subject(transport.get_extra_info("peercert")),
            )
        except LoginRefused as exc:
            self.server.stats.login_refused += 1
            security.gate.log_refusal(self.peer, hello.user, str(exc))
            self._held = None
            self._refuse(ErrorCode.NOT_PERMITTED, f"login refused: {exc}")
            return
        if self._transport is None or self._closing:
            return
        stderr_logger().info("login", client=self.peer, user=user.name)
        held, self._held = self._held or [], None
        self._attach(hello, user)
        for frame in held:
            if self.session is None or self._transport is None or self._transport.is_closing():
                return
            try:
                self._handle(frame)
            except cp.ProtocolError as exc:
                self._drop_for_garbage(str(exc))
                return
        self._resume_after_login()

    def _request_reliability(self, seconds: float) -> None:
        """A client's request-reliability call: checked by the rule HELLO's value follows."""
        try:
            wanted = check_reliability(seconds)
        except InvalidArgument as exc:
            raise cp.ProtocolError(f"RELIABILITY out of bounds: {exc}") from None
        if wanted is not None:
            self.session.request_reliability(wanted)

    def _listen(self, subject: str) -> None:
        try:
            check_listen_subject(subject)
        except (InvalidSubject, NotPermitted) as exc:  # NotPermitted: _INBOX.> and the like
            raise cp.ProtocolError(f"LISTEN on an invalid subject: {exc}") from None
        rights = self._rights
        why = rights.listen_verdict(subject) if rights is not None else ""
        if why:
            self._not_permitted(why)
            self._write(self._conn.send(cp.Error(str(ErrorCode.NOT_PERMITTED), why)))
            return
        self._interests[subject] = self._interests.get(subject, 0) + 1
        self.session.add_interest(subject)

    def _publish(self, wires: list[bytes]) -> None:
        rights = self._rights
        if rights is None:  # not attached: the connection let no PUBLISH through
            return
        subjects: list[str] = []
        good: list[bytes] = []
        verdicts = rights.verdicts
        # The subject of the last message accepted: a client publishes runs of one
        # subject, and a message of the same subject needs none of its checks again.
        accepted: str | None = None
        for wire in wires:
            try:
                # The whole message is checked, not only its header: bytes that begin with
                # a readable subject and go on with garbage must not reach other clients
                # (they would fail there, one by one). codec.check_subject refuses exactly
                # what a decode refuses, without building the message (it travels on as
                # bytes), and returns its subject.
                subject = _check_subject(wire)
                bad: RvError | None = None
            except (MalformedMessage, MessageTooLarge) as exc:
                # Refused; but an illegal subject is reported as such first, as ever.
                subject, bad = subject_of(wire), exc
            if not subject:
                # None: the bytes are not a message with a subject, which no genuine
                # transport sends.
                raise cp.ProtocolError(
                    "PUBLISH carried bytes that are not a message with a subject"
                )
            if subject == accepted and bad is None:
                subjects.append(subject)
                good.append(wire)
                continue
            verdict = verdicts.get(subject)
            if verdict is None:
                if subject[:7] == "_INBOX." and rights.replies and subject.count(".") > 2:
                    # A reply to one concrete inbox that this user may send: the latency
                    # path of request/reply, so the rules' answer is written out here: a
                    # valid subject without wildcards (a reply's inbox is not kept).
                    try:
                        validate_subject(subject)
                        verdict = ""
                    except (InvalidSubject, NotPermitted):
                        verdict = rights.publish_verdict(subject)  # which says why not
                else:
                    verdict = rights.publish_verdict(subject)  # inboxes: checked, not kept
            if verdict:
                if isinstance(verdict, NotAllowed):
                    self._not_permitted(verdict)
                self._illegal_publish(subject, verdict)
                continue
            if bad is not None:
                _refuse_message(subject, bad)
            subjects.append(subject)
            good.append(wire)
            accepted = subject
        if not good:
            return
        self.messages_in += len(good)
        self.bytes_in += sum(map(len, good))
        try:
            waiting = self.session.publish_wires(subjects, good)
        except RvError as exc:
            # The engine presented what went wrong (DATALOSS.MSG_TOO_LARGE ...) to this
            # session; a closed session means the connection is going away anyway.
            stderr_logger().debug("publish refused", client=self.peer, error=str(exc))
            return
        if waiting is not None:
            self._hold_reading_until(waiting)

    def _hold_reading_until(self, waiting: Any) -> None:
        """The engine's send backlog is full: stop reading this client until it drains.

        TCP flow control then makes the client's own writes wait, which is
        what presents CLIENT.FASTPRODUCER there.
        """
        transport = self._transport
        if transport is None or self._reading_paused:
            return
        self._reading_paused = True
        transport.pause_reading()
        future = asyncio.ensure_future(waiting)

        def resume(_: object) -> None:
            self._reading_paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()

        future.add_done_callback(resume)

    def apply_users(self, users: Users) -> None:
        """The users file was reloaded: apply this user's new permissions now.

        A user no longer in the file (or no longer a router, holding the role)
        is logged out (ERROR NOT_PERMITTED); the subjects they may no longer
        listen to are dropped, each with an ERROR.
        """
        rights = self._rights
        name = self.user
        if rights is None or name is None or self.session is None:
            return
        if not rights.reloaded(users):
            stderr_logger().warning("user removed: logging out", client=self.peer, user=name)
            self.shut(
                ErrorCode.NOT_PERMITTED,
                f"user {name!r} is no longer a user of this daemon (or no longer a router)",
            )
            return
        for subject, count in list(self._interests.items()):
            why = rights.listen_verdict(subject)
            if not why:
                continue
            del self._interests[subject]
            for _ in range(count):
                self.session.remove_interest(subject)
            self._not_permitted(why)
            self._write(self._conn.send(cp.Error(str(ErrorCode.NOT_PERMITTED), why)))

    @property
    def user(self) -> str | None:
        """The logged-in user's name (None: not logged in, or a daemon without users)."""
        return self._rights.user if self._rights is not None else None

    def _not_permitted(self, why: str) -> None:
        self.server.stats.not_permitted += 1
        stderr_logger().warning("not permitted", client=self.peer, user=self.user, problem=why)

    # -- public view (status page) ------------------------------------------------------------

    @property
    def subjects(self) -> dict[str, int]:
        """The subjects this client listens to, with how many listeners each."""
        return dict(self._interests)

    @property
    def backlog_bytes(self) -> int:
        """Bytes of messages waiting for this client to read them."""
        return self._queued_bytes + self._pending_bytes

    @property
    def tls(self) -> bool:
        return self._tls

    def describe(self, now: float) -> ClientRow:
        """What the status page shows of this client (``now``: the loop's time)."""
        session = self.session
        return {
            "id": self.id,
            "peer": self.peer,
            "user": self.user,
            "tls": self._tls,
            "transport_id": getattr(session, "transport_id", None),
            "description": getattr(session, "description", None),
            "subjects": sorted(self._interests),
            "messages_in": self.messages_in,
            "bytes_in": self.bytes_in,
            "messages_out": self.messages_out,
            "bytes_out": self.bytes_out,
            "backlog_bytes": self.backlog_bytes,
            "connected_seconds": round(max(0.0, now - self.connected_at), 3),
        }

    def _illegal_publish(self, subject: str | None, why: str) -> None:
        self.server.stats.illegal_publish += 1
        session = self.session
        fields = {
            "sub": subject or "",
            "tport": getattr(session, "transport_id", None) or str(self.id),
            "descr": getattr(session, "description", None) or "",
            "reason": why,
        }
        # Per message: one advisory a second per client and subject, with the count.
        self.server.advisories.report(
            (self.id, subject, why),
            1,
            lambda n: self.present(
                build_advisory(
                    AdvisoryClass.ERROR, "CLIENT.ILLEGAL_PUBLISH", {**fields, "count": n}
                )
            ),
        )

    # -- outbound backlog -----------------------------------------------------------------------

    def _write_pending(self) -> None:
        pending = self._pending
        if pending and self._transport is not None:
            self._pending = []
            self._pending_bytes = 0
            self._transport.writelines(self._conn.send_messages(pending))
            self._touch()

    def _enqueue(self, kind: int, wire: bytes) -> None:
        self._queue.append((self._loop.time(), kind, wire))
        self._queued_bytes += len(wire)
        if self._queued_bytes > self._limit:
            if not self._paused:
                self._flush()  # the socket takes it now; it pauses us when it is full
            if self._queued_bytes > self._limit:
                self._drop_oldest("size limit")
        if self._paused:
            if self._age_timer is None:
                self._arm_age_timer()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def write_now(self) -> None:
        """Write the messages collected for this client (the server's call, once per
        client read or loop turn; see ClientServer.schedule_write)."""
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self._transport
        if transport is None or self._closing:
            return
        # Messages collected while the socket took everything go first (they are older
        # than any backlog, and bounded by one write chunk).
        self._write_pending()
        queue = self._queue
        if not queue and not self._dropped:
            return  # the usual case: no backlog, nothing to report
        if self._paused:
            if queue and self._age_timer is None:
                self._arm_age_timer()
            return
        if self._dropped:
            self._write_slow_consumer()
        send, send_messages = self._conn.send, self._conn.send_messages
        while queue and not self._paused:
            buffers: list[bytes] = []
            batch: list[bytes] = []
            size = 0
            while queue and size < _WRITE_CHUNK:
                _, kind, wire = queue.popleft()
                size += len(wire)
                if kind == _MESSAGE:
                    batch.append(wire)
                    continue
                if batch:
                    buffers += send_messages(batch)
                    batch = []
                buffers.append(send(cp.Advisory(wire)))
            if batch:
                buffers += send_messages(batch)
            self._queued_bytes -= size
            transport.writelines(buffers)
        if queue and self._paused and self._age_timer is None:
            self._arm_age_timer()

    def _drop_oldest(self, reason: str) -> None:
        queue = self._queue
        while self._queued_bytes > self._limit and len(queue) > 1:
            _, _, wire = queue.popleft()
            self._count_drop(len(wire), reason)

    def _count_drop(self, size: int, reason: str) -> None:
        self._queued_bytes -= size
        if not self._dropped:
            stderr_logger().warning(
                "slow consumer: dropping its oldest messages",
                client=self.peer,
                transport=getattr(self.session, "transport_id", self.id),
                reason=reason,
            )
        self._dropped += 1
        self._bytes_dropped += size
        self._drop_reason = reason
        stats = self.server.stats
        stats.messages_dropped += 1
        stats.bytes_dropped += size

    def _arm_age_timer(self) -> None:
        self._age_timer = self._loop.call_later(1.0, self._check_ages)

    def _check_ages(self) -> None:
        self._age_timer = None
        queue = self._queue
        if not queue:
            return
        deadline = self._loop.time() - self.server.consumer_time_limit
        while queue and queue[0][0] < deadline:
            _, _, wire = queue.popleft()
            self._count_drop(len(wire), "time limit")
        if queue and self._paused:
            self._arm_age_timer()

    def _write_slow_consumer(self) -> None:
        self.server.stats.slow_consumer_events += 1
        advisory = slow_consumer(
            waiting=len(self._queue),
            dropped=self._dropped,
            bytes_dropped=self._bytes_dropped,
            reason=self._drop_reason,
        )
        self._dropped = self._bytes_dropped = 0
        self._write(self._conn.send(cp.Advisory(advisory.to_bytes())))

    # -- closing -------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _drop_for_garbage(self, why: str) -> None:
        self.server.stats.dropped_protocol += 1
        stderr_logger().warning("dropping client: bad frame", client=self.peer, problem=why)
        self.shut(ErrorCode.PROTOCOL, why)

    def _refuse(self, code: ErrorCode, text: str) -> None:
        self.server.stats.refused += 1
        self.shut(code, text)

    def _hello_overdue(self) -> None:
        self._hello_timer = None
        if self.session is None:
            self.server.stats.dropped_protocol += 1
            self._held = None
            self.shut(ErrorCode.PROTOCOL, f"no HELLO and login within {HELLO_TIMEOUT:g} s")

    def shut(self, code: ErrorCode | str, text: str) -> asyncio.Future[None]:
        """Tell the client why (ERROR, then BYE), end the session and close the socket."""
        self._close_session()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self._queue.clear()
            self._queued_bytes = 0
            transport.write(self._conn.send(cp.Error(str(code), text)))
            transport.write(self._conn.send(cp.Bye(text)))
            self._close_transport()
        return self._gone

    def _close_transport(self) -> None:
        self._closing = True
        self._pending = []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.close()
        # A peer that never reads would keep the socket (and its buffer) forever.
        self._loop.call_later(_CLOSE_GRACE, transport.abort)

    def _close_session(self) -> None:
        session, self.session = self.session, None
        self._interests.clear()
        if session is not None and not getattr(session, "closed", False):
            try:
                session.close()
            except Exception as exc:  # the engine may already be stopping
                stderr_logger().debug("session close failed", client=self.peer, error=str(exc))

    def _teardown(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()
        task, self._login_task = self._login_task, None
        if task is not None and not task.done():
            task.cancel()
        self._held = None
        for timer in (self._hello_timer, self._age_timer):
            if timer is not None:
                timer.cancel()
        self._hello_timer = self._age_timer = None
        self._close_session()
        self._queue.clear()
        self._queued_bytes = 0
        self._pending = []
        self._closing = True
        self.server.sessions.discard(self)
        if self._tallied:
            self._tallied = False
            self.server.tallies.retire(self)
        self._transport = None
        if not self._gone.done():
            self._gone.set_result(None)

    def __repr__(self) -> str:
        state = "attached" if self.session is not None else "new"
        return f"<ClientConnection #{self.id} {self.peer} {state} backlog={len(self._queue)}>"
