"""The daemon engine: services, client sessions, and the in-process daemon of each event loop.

One :class:`Daemon` runs inside one event loop. It opens a
:class:`~rvasync.daemon.service.ServiceEndpoint` per service its clients use
(its sessions and advisories, with its routing in :mod:`rvasync.daemon.routing`
and its sockets and reliable core in :mod:`rvasync.daemon.udpdriver`) and
attaches client sessions to them. The
same engine serves both modes:

* **in-process** (``rv.Transport(daemon=None)``, the default): transports of a
  loop attach to that loop's daemon (:func:`in_process_daemon`): the first
  daemon started in the loop (``await Daemon(...).start()``, to configure it),
  or else one started on first use with a 5-second reliability interval, which
  stops when the loop's main coroutine ends (``asyncio.run`` cancels its keeper
  task) or on ``await daemon.stop()``.
* **standalone** (``Daemon(listen=7500)``): ``start()`` also starts the TCP server
  of :mod:`rvasync.daemon.server`, one session per client connection; an
  auto-started daemon stops itself after ``idle_exit`` seconds without clients.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import weakref
from collections.abc import Iterable
from typing import Any

from rvasync._logging import stderr_logger
from rvasync._wire import LOOPBACK_DATAGRAM, NETWORK_DATAGRAM
from rvasync.busypoll import BusyPoller, check_window, poller_for
from rvasync.daemon.auth import DaemonSecurity, router_networks
from rvasync.daemon.ipmconfig import STANDALONE_ONLY, implicit_file, read_config
from rvasync.daemon.params import (
    MAX_RELIABILITY,
    check_reliability,
    parse_network,
    parse_service,
)
from rvasync.daemon.service import ServiceEndpoint, StatusPage
from rvasync.daemon.session import ClientSession, SessionOwner
from rvasync.daemon.stats import ServiceTotals
from rvasync.errors import DaemonUnavailable, InvalidArgument, NotPermitted
from rvasync.protocol.reliable import DEFAULT_MAX_RETENTION
from rvasync.protocol.servicekey import check_service_key

__all__ = [
    "IN_PROCESS_MAX_RETENTION",
    "IN_PROCESS_RELIABILITY",
    "MAX_RELIABILITY",
    "STANDALONE_RELIABILITY",
    "Daemon",
    "in_process_daemon",
]

#: Default reliability interval (seconds) of a standalone daemon, as rvd.
STANDALONE_RELIABILITY = 60.0
#: Default reliability interval of the in-process daemon, as IPM.
IN_PROCESS_RELIABILITY = 5.0
#: Most bytes of sent data a service of the in-process daemon keeps for retransmission
#: (a standalone daemon keeps up to DEFAULT_MAX_RETENTION, 256 MiB). Every process has
#: an in-process daemon, most of them publishing to receivers a NAK's round trip away
#: on loopback or a LAN: 32 MiB is a second of 30 MB/s, where 256 MiB per process made
#: a publishing process hold hundreds of megabytes it would hardly ever resend.
IN_PROCESS_MAX_RETENTION = 32 * 1024 * 1024
#: What the in-process daemon a transport starts gets, under its implicit file's keys.
_IN_PROCESS_DEFAULTS: dict[str, Any] = {
    "reliability": IN_PROCESS_RELIABILITY,
    "max_retention": IN_PROCESS_MAX_RETENTION,
}


def _seconds(name: str, value: Any, *, zero_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
        raise InvalidArgument(
            f"{name} must be finite and {'>= 0' if zero_ok else '> 0'} seconds, got {seconds!r}"
        )
    return seconds


def _optional_seconds(name: str, value: Any, *, zero_ok: bool) -> float | None:
    """:func:`_seconds`, or None for None."""
    return None if value is None else _seconds(name, value, zero_ok=zero_ok)


class Daemon:
    """A Rendezvous daemon engine, embeddable in any asyncio program.

    ``listen``: TCP port for client transports (standalone mode; 0 picks a free
    one; None serves only in-process transports). ``host``: the address it
    listens on (loopback by default). ``reliability``: default retention in
    seconds for its services (a transport may ask for more). ``idle_exit``:
    stop after this many seconds with no client sessions. ``max_datagram``:
    datagram size (default 60000 on loopback networks, 1400 elsewhere).
    ``loss``: fraction of inbound datagrams dropped on purpose (tests only).
    ``heartbeat_interval`` / ``peer_timeout``: the reliable protocol's liveness
    timing. ``host_status_interval``: period of HOST.STATUS (0 disables).
    ``busy_poll``: seconds the daemon's event loop keeps polling without
    sleeping after each datagram or frame it sends or receives (0, the default,
    never; up to 1 s): lower latency for a busy CPU core (rvasync.busypoll).
    ``max_consumer_buffer``: bytes of undelivered messages kept for each
    standalone client that does not read before its oldest are dropped
    (CLIENT.SLOWCONSUMER; None: 128 MiB, ``rvasync.daemon.server``).
    ``security``: a :class:`~rvasync.daemon.auth.DaemonSecurity` for a secure
    client port (TLS, users, subject permissions; needs ``listen``; see
    docs/security.md).
    ``service_key``: the secret every service of this daemon authenticates its
    datagrams with (bytes or str, 16 bytes at least; None: no key). See
    docs/service-key.md. ``max_retention``: bytes of sent datagrams a service
    keeps for retransmission at most, whatever the reliability interval (the
    oldest go first; receivers asking for them get the usual DATALOSS advisories).
    ``router_hosts``: on a client port without users, the networks (CIDR strings)
    whose clients may connect as routing daemons (None: loopback, ``127.0.0.0/8``
    and ``::1``; ``()``: nobody). With users, the users file decides (``router =
    true``). See docs/security.md.
    """

    version = "rvasync-0.1"

    def __init__(
        self,
        *,
        listen: int | None = None,
        host: str = "127.0.0.1",
        reliability: float = STANDALONE_RELIABILITY,
        idle_exit: float | None = None,
        max_datagram: int | None = None,
        loss: float = 0.0,
        heartbeat_interval: float = 1.0,
        peer_timeout: float = 10.0,
        host_status_interval: float = 90.0,
        busy_poll: float = 0.0,
        max_consumer_buffer: int | None = None,
        security: DaemonSecurity | None = None,
        service_key: bytes | str | None = None,
        max_retention: int = DEFAULT_MAX_RETENTION,
        router_hosts: Iterable[str] | None = None,
    ) -> None:
        if listen is not None and (
            isinstance(listen, bool) or not isinstance(listen, int) or not 0 <= listen <= 0xFFFF
        ):
            raise InvalidArgument(f"listen must be a TCP port 0..65535 or None, got {listen!r}")
        if not isinstance(host, str) or not host:
            raise InvalidArgument(f"host must be a non-empty str, got {host!r}")
        self._reliability = _seconds("reliability", reliability, zero_ok=True)
        if self._reliability > MAX_RELIABILITY:
            raise InvalidArgument(
                f"reliability must be at most {MAX_RELIABILITY:g} seconds, got {reliability!r}"
            )
        self._service_key = check_service_key(service_key)
        if (
            isinstance(max_retention, bool)
            or not isinstance(max_retention, int)
            or (max_retention <= 0)
        ):
            raise InvalidArgument(
                f"max_retention must be a positive number of bytes, got {max_retention!r}"
            )
        self._max_retention = max_retention
        self._idle_exit = _optional_seconds("idle_exit", idle_exit, zero_ok=True)
        if max_datagram is not None and (
            isinstance(max_datagram, bool)
            or not isinstance(max_datagram, int)
            or not 256 <= max_datagram <= 65507
        ):
            raise InvalidArgument(f"max_datagram must be within 256..65507, got {max_datagram!r}")
        if isinstance(loss, bool) or not isinstance(loss, int | float) or not 0 <= loss < 1:
            raise InvalidArgument(f"loss must be a fraction within [0, 1), got {loss!r}")
        self._heartbeat = _seconds("heartbeat_interval", heartbeat_interval, zero_ok=False)
        self._peer_timeout = _seconds("peer_timeout", peer_timeout, zero_ok=False)
        if self._peer_timeout <= self._heartbeat:
            raise InvalidArgument(
                f"peer_timeout ({peer_timeout}) must exceed heartbeat_interval "
                f"({heartbeat_interval})"
            )
        self._status_interval = _seconds("host_status_interval", host_status_interval, zero_ok=True)
        self._busy_poll = check_window("busy_poll", busy_poll)
        if max_consumer_buffer is not None and (
            isinstance(max_consumer_buffer, bool)
            or not isinstance(max_consumer_buffer, int)
            or max_consumer_buffer <= 0
        ):
            raise InvalidArgument(
                f"max_consumer_buffer must be a positive number of bytes or None, "
                f"got {max_consumer_buffer!r}"
            )
        self._max_consumer_buffer = max_consumer_buffer
        if security is not None and not isinstance(security, DaemonSecurity):
            raise InvalidArgument(
                "security must be a rvasync.daemon.auth.DaemonSecurity, "
                f"got {type(security).__name__}"
            )
        if security is not None and listen is None:
            raise InvalidArgument("security applies to the TCP client port: give listen=PORT too")
        self._security = security
        router_networks(router_hosts)  # refuse a bad network now, not at start
        self._router_hosts = router_hosts
        self._started_at: float | None = None
        self._poller: BusyPoller | None = None
        self._listen = listen
        self._host = host
        self._max_datagram = max_datagram
        self._loss = float(loss)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._services: dict[int, ServiceEndpoint] = {}
        self._session_count = 0
        self._instance = os.urandom(4).hex()
        self._tokens = itertools.count(1)
        self._server: Any = None
        self._state = "new"
        self._stopped_event: asyncio.Event | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._status_page: StatusPage | None = None
        self._retired: dict[int, ServiceTotals] = {}
        self._auto = False  # started on first use by a transport (in_process_daemon)
        self._log = stderr_logger()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **parameters: Any) -> Daemon:
        """A daemon configured by the TOML file at ``path`` (its keys are this class's
        parameters), each keyword argument given here overriding the file's key.

        The explicit configuration file of the spec's IPM: start the daemon
        (``await daemon.start()``) before the loop's first transport opens and
        it is the in-process daemon. Without ``reliability`` in the file or the
        arguments, a daemon that does not ``listen`` keeps the in-process
        default of 5 seconds. A bad file raises InvalidArgument naming the file,
        the line and the key (rvasync.daemon.ipmconfig).
        """
        merged = {**read_config(path, cls), **parameters}
        if "reliability" not in merged and merged.get("listen") is None:
            merged["reliability"] = IN_PROCESS_RELIABILITY
        return cls(**merged)

    # -- properties ------------------------------------------------------------

    @property
    def poller(self) -> BusyPoller:
        """The busy poller of the daemon's loop (see rvasync.busypoll); DaemonUnavailable
        when not running."""
        if self._poller is None or self._state != "running":
            raise DaemonUnavailable("the daemon is not running")
        return self._poller

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the daemon runs in (DaemonUnavailable before start / after stop)."""
        if self._loop is None or self._state != "running":
            raise DaemonUnavailable("the daemon is not running")
        return self._loop

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def reliability(self) -> float:
        """Default reliability interval (seconds) of this daemon's services."""
        return self._reliability

    @property
    def max_retention(self) -> int:
        """Most bytes of sent data each service of this daemon retains for retransmission."""
        return self._max_retention

    @property
    def listen_port(self) -> int | None:
        """The TCP port standalone clients connect to (None when not listening)."""
        return None if self._server is None else self._server.port

    @property
    def services(self) -> dict[int, ServiceEndpoint]:
        """Open service endpoints by UDP port."""
        return dict(self._services)

    @property
    def session_count(self) -> int:
        return self._session_count

    @property
    def client_server(self) -> Any:
        """The TCP client port (``rvasync.daemon.server.ClientServer``), None when not listening."""
        return self._server

    @property
    def security(self) -> DaemonSecurity | None:
        """The secure daemon's ``DaemonSecurity`` (None: a plain daemon)."""
        return self._security

    @property
    def uptime(self) -> float:
        """Seconds since the daemon started (0 before)."""
        if self._started_at is None or self._loop is None:
            return 0.0
        return max(0.0, self._loop.time() - self._started_at)

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start serving in the running loop (and the TCP server when ``listen`` is set).

        A daemon without ``listen`` serves the loop's in-process transports, so
        it must start before the first of them opens: once the loop's
        in-process daemon runs, its parameters are frozen and starting another
        one without ``listen`` (which would never be used) raises InvalidArgument.
        """
        if self._listen is None and self._state == "new":
            current = running_in_process_daemon()
            if current is not None:
                raise InvalidArgument(
                    "this loop's in-process daemon is already running (started by "
                    f"{'a transport' if current.started_on_first_use else 'the program'}), and its "
                    "parameters "
                    "are frozen: a Daemon without listen= started now would never be used; "
                    "start it before the first transport opens, or give it listen=PORT to "
                    "serve standalone clients"
                )
        self._start_in_loop()
        loop = self.loop
        if running_in_process_daemon(loop) is None:
            # One engine per loop: the first daemon started in a loop also serves its
            # in-process transports (so a configured Daemon can replace the default one).
            _in_process[loop] = self
        if self._listen is not None:
            from rvasync.daemon.server import start_server

            try:
                self._server = await start_server(
                    self,
                    self._host,
                    self._listen,
                    max_consumer_buffer=self._max_consumer_buffer,
                    security=self._security,
                    router_hosts=self._router_hosts,
                )
            except BaseException:
                self._shutdown_now()
                raise
        self._check_idle()

    @property
    def started_on_first_use(self) -> bool:
        """True for the in-process daemon a transport started because none was running."""
        return self._auto

    def start_in_process(self, *, first_use: bool = False) -> None:
        """Start now, synchronously, as the running loop's in-process daemon until the loop ends.

        What :func:`in_process_daemon` does with the daemon it makes on first
        use: synchronous, so no other task of the loop sees it half started;
        it replaces a stopped in-process daemon of the loop, and stops itself
        when the loop's main coroutine ends (``asyncio.run`` cancels its keeper
        task) or on ``await daemon.stop()``. Programs configure a daemon and
        ``await daemon.start()`` instead.
        """
        self._start_in_loop()
        self._auto = first_use
        _in_process[self.loop] = self
        self._keep_until_loop_ends()

    def _start_in_loop(self) -> None:
        if self._state != "new":
            raise NotPermitted(f"a daemon starts once; this one is {self._state}")
        self._loop = asyncio.get_running_loop()
        self._poller = poller_for(self._loop)
        self._poller.want(self._busy_poll)
        self._stopped_event = asyncio.Event()
        self._started_at = self._loop.time()
        self._state = "running"

    async def stop(self) -> None:
        """Stop: close the TCP server and client sessions, say goodbye on every service."""
        if self._state != "running":
            return
        server, self._server = self._server, None
        if server is not None:
            try:
                await server.close()
            except Exception:
                self._log.exception("daemon server close failed")
        self._shutdown_now()

    async def wait_stopped(self) -> None:
        """Return once the daemon has stopped (by ``stop()`` or ``idle_exit``)."""
        if self._stopped_event is None:
            raise NotPermitted("the daemon was never started")
        await self._stopped_event.wait()

    def _shutdown_now(self) -> None:
        """Synchronous part of stopping (also what the in-process keeper runs at loop end)."""
        if self._state == "stopped":
            return
        self._state = "stopped"
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        for service in list(self._services.values()):
            try:
                service.close()
            except Exception:
                self._log.exception("service close failed", service=service.spec.text)
        self._services.clear()
        self._session_count = 0
        if self._server is not None:
            self._server = None
        if self._stopped_event is not None:
            self._stopped_event.set()
        if self._keeper is not None and self._keeper is not asyncio.current_task():
            self._keeper.cancel()
        self._keeper = None
        loop, self._loop = self._loop, None
        if loop is not None and _in_process.get(loop) is self:
            del _in_process[loop]

    def _keep_until_loop_ends(self) -> None:
        """Run a task whose cancellation (asyncio.run ending) stops the daemon cleanly."""
        stopped = self._stopped_event
        assert stopped is not None  # made by _start_in_loop

        async def keeper() -> None:
            try:
                await stopped.wait()
            finally:
                self._shutdown_now()

        self._keeper = self.loop.create_task(keeper(), name="rvasync-in-process-daemon")

    # -- sessions ----------------------------------------------------------------

    def attach(
        self,
        owner: SessionOwner,
        *,
        service: str | None,
        network: str | None,
        description: str | None = None,
        reliability: float | None = None,
        service_key: bytes | str | None = None,
        router: bool = False,
    ) -> ClientSession:
        """Attach a client session to ``service`` (opened on first use) on ``network``.

        ``router``: the session is a routing daemon's (the caller decided it may
        be: an in-process transport of this process, or a client the client
        port authorized; see docs/security.md).

        Raises InvalidArgument for a bad parameter (naming it), NotPermitted when
        this daemon already runs ``service`` on another network (a service is
        bound to one network per daemon) or with another service key,
        DaemonUnavailable when not running. ``service_key`` (in-process
        transports): the key the service must run with; a session without one
        joins the service as it is (the key protects the daemons' datagrams, not
        the sessions of this process).
        """
        if self._state != "running":
            raise DaemonUnavailable("the daemon is not running")
        spec = parse_service(service)
        net = parse_network(network)
        wanted = check_reliability(reliability)
        key = check_service_key(service_key)
        endpoint = self._services.get(spec.port)
        if key is not None and endpoint is not None and endpoint.service_key != key:
            raise NotPermitted(
                f"service {spec.text} is already open in this daemon "
                f"{'with another service key' if endpoint.service_key else 'without a service key'}"
            )
        if endpoint is not None and endpoint.network.key != net.key:
            raise NotPermitted(_bound_elsewhere(spec.text, endpoint, net.text))
        if endpoint is None:
            endpoint = ServiceEndpoint(
                spec,
                net,
                loop=self.loop,
                touch=self.poller.touch,
                on_session_closed=self._session_closed,
                on_closed=self._service_closed,
                listen_port=lambda: self.listen_port,
                version=self.version,
                status_page=lambda: self._status_page,
                reliability=self._reliability if wanted is None else wanted,
                max_datagram=self._max_datagram
                or (LOOPBACK_DATAGRAM if net.loopback else NETWORK_DATAGRAM),
                heartbeat_interval=self._heartbeat,
                peer_timeout=self._peer_timeout,
                loss=self._loss,
                host_status_interval=self._status_interval,
                service_key=key if key is not None else self._service_key,
                default_reliability=self._reliability,
                max_retention=self._max_retention,
            )
            self._services[spec.port] = endpoint
        token = f"{self._instance}{next(self._tokens):x}"
        session = endpoint.attach(
            owner, token, description=description, reliability=wanted, router=router
        )
        self._session_count += 1
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        return session

    def _session_closed(self, session: ClientSession) -> None:
        self._session_count -= 1
        self._check_idle()

    def _service_closed(self, endpoint: ServiceEndpoint) -> None:
        if self._services.get(endpoint.port) is endpoint:
            del self._services[endpoint.port]
        # Its counters live on in the daemon's totals (the status page's numbers only grow).
        self._retired[endpoint.port] = self.service_totals(endpoint.port, endpoint)

    def service_totals(self, port: int, endpoint: ServiceEndpoint | None = None) -> ServiceTotals:
        """What service ``port`` has counted in this daemon's life: the endpoints that
        served it and closed (a service with no transport left closes after its linger),
        plus ``endpoint`` (default: the open one, if any)."""
        if endpoint is None:
            endpoint = self._services.get(port)
        retired = self._retired.get(port)
        if endpoint is None:
            return retired if retired is not None else ServiceTotals.zero(port)
        now = ServiceTotals(port, endpoint.network.text, endpoint.counters, endpoint.core.stats)
        return now if retired is None else retired.plus(now)

    @property
    def services_seen(self) -> list[int]:
        """Every service port this daemon has served, open or not, in order."""
        return sorted(set(self._services) | set(self._retired))

    def _check_idle(self) -> None:
        if self._idle_exit is None or self._session_count > 0 or self._state != "running":
            return
        if self._idle_handle is None:
            self._idle_handle = self.loop.call_later(self._idle_exit, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle_handle = None
        if self._session_count == 0 and self._state == "running":
            self._log.info("daemon idle; stopping", idle_exit=self._idle_exit)
            self.loop.create_task(self.stop())

    # -- status ------------------------------------------------------------------

    def host_status(self, service: str | None = None) -> dict[str, Any]:
        """HOST.STATUS fields (name -> value) of one service.

        ``service`` selects it like a transport's service parameter; with None,
        the daemon's only open service (InvalidArgument if there are several,
        or none).
        """
        endpoint: ServiceEndpoint | None
        if service is None:
            if len(self._services) != 1:
                raise InvalidArgument(
                    f"this daemon has {len(self._services)} open services; name one "
                    f"(open: {sorted(self._services)})"
                )
            endpoint = next(iter(self._services.values()))
        else:
            endpoint = self._services.get(parse_service(service).port)
            if endpoint is None:
                raise InvalidArgument(f"service {service!r} is not open in this daemon")
        return {name: value for name, value, _ in endpoint.host_status()}

    def advertise_status_page(
        self, host: str | None, port: int = 0, *, https: bool = False
    ) -> None:
        """Name the status page this daemon serves in its HOST.STATUS (``httpaddr`` and
        ``httpport``, or ``hsaddr`` and ``hsport`` over HTTPS); ``host=None``: none
        any more. The status server calls it when it starts and stops."""
        self._status_page = None if host is None else (host, port, https)

    def publish_host_status(self) -> None:
        """Publish HOST.STATUS now on every open service (besides the periodic ones)."""
        for endpoint in list(self._services.values()):
            endpoint.publish_host_status()

    def __repr__(self) -> str:
        listen = f" listen={self.listen_port}" if self._server is not None else ""
        return f"<Daemon {self._state}{listen} services={sorted(self._services)}>"


def _bound_elsewhere(service: str, endpoint: ServiceEndpoint, wanted: str) -> str:
    """Why a service open on one network cannot be used on another, and when that clears."""
    text = (
        f"service {service} is already bound to network "
        f"{endpoint.network.text or '(default loopback)'} in this daemon; "
        f"cannot also use it on {wanted or '(default loopback)'}"
    )
    lingering = endpoint.linger_remaining()
    if lingering is None:
        return text + " (use another service for another network)"
    return (
        f"{text}: its last transport closed, and it stays open {lingering:.1f} s more to "
        "answer retransmission requests for what was sent on it; it can be opened on "
        "another network after that (or use another service)"
    )


_in_process: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Daemon] = (
    weakref.WeakKeyDictionary()
)


async def in_process_daemon() -> Daemon:
    """The in-process daemon of the running loop, started on first use (reliability 5 s,
    at most 32 MiB retained per service)."""
    loop = asyncio.get_running_loop()
    daemon = _in_process.get(loop)
    if daemon is None or not daemon.running:
        daemon = Daemon(**_implicit_parameters())
        # synchronous: no other task can see it half started
        daemon.start_in_process(first_use=True)
    return daemon


def _implicit_parameters() -> dict[str, Any]:
    """The in-process daemon's parameters when the program started none: the implicit
    configuration file's (rvasync.daemon.ipmconfig) over the in-process defaults."""
    path = implicit_file()
    if path is None:
        return dict(_IN_PROCESS_DEFAULTS)
    parameters = read_config(
        path,
        Daemon,
        refuse=STANDALONE_ONLY,
        why="it configures a daemon serving standalone clients, and the in-process daemon "
        "a transport starts serves none (start rv.Daemon.from_file(path) in the program "
        "to also listen)",
    )
    return {**_IN_PROCESS_DEFAULTS, **parameters}


def running_in_process_daemon(loop: asyncio.AbstractEventLoop | None = None) -> Daemon | None:
    """The in-process daemon of ``loop`` (default: the running one) if it runs, else None."""
    if loop is None:
        loop = asyncio.get_running_loop()
    daemon = _in_process.get(loop)
    return daemon if daemon is not None and daemon.running else None
