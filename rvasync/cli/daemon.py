"""``rvasync daemon``: run a standalone daemon that client transports reach over TCP.

It runs until SIGINT or SIGTERM (or, with ``--idle-exit``, until it has had no
client for that long, which is how an auto-started daemon goes away) and
prints one line once it accepts connections, so scripts and tests can wait
for it. SIGHUP re-reads the users file, or logs that there is nothing to
reload (rvasync.cli.signals).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from rvasync.cli import _args
from rvasync.cli.signals import handle_signals
from rvasync.errors import DaemonUnavailable, InvalidArgument
from rvasync.protocol.clientproto.address import DEFAULT_DAEMON_PORT


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "daemon",
        help="run a standalone daemon serving client transports over TCP",
        description="Run a standalone rvasync daemon. Client transports connect with "
        "rv.Transport(daemon='PORT') or daemon='HOST:PORT'.",
    )
    p.add_argument(
        "--listen",
        type=_args.port,
        default=DEFAULT_DAEMON_PORT,
        metavar="PORT",
        help=f"TCP port for client transports (default {DEFAULT_DAEMON_PORT}; 0 = any free port)",
    )
    p.add_argument(
        "--host",
        type=_args.nonempty,
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: clients on this host only)",
    )
    p.add_argument(
        "--reliability",
        type=_args.seconds(zero=True),
        default=60.0,
        metavar="SECONDS",
        help="how long sent messages are kept for retransmission (default 60; 0 disables)",
    )
    p.add_argument(
        "--max-retention",
        type=_args.byte_count,
        default=None,
        metavar="BYTES",
        help="most bytes of sent data kept for retransmission per service, whatever "
        "--reliability says (default 256 MiB)",
    )
    p.add_argument(
        "--service-key-file",
        type=_args.service_key_file,
        default=None,
        metavar="PATH",
        help="authenticate every datagram exchanged with other daemons with the key in "
        "this file (16 bytes or more); datagrams without it are dropped and counted. "
        "Every daemon of the service needs the same key (docs/service-key.md)",
    )
    p.add_argument(
        "--idle-exit",
        type=_args.seconds(),
        default=None,
        metavar="SECONDS",
        help="exit after this long with no client transport (default: never)",
    )
    p.add_argument(
        "--max-consumer-buffer",
        type=_args.byte_count,
        default=None,
        metavar="BYTES",
        help="undelivered bytes kept per client before its oldest messages are dropped "
        "(CLIENT.SLOWCONSUMER; default 128 MiB)",
    )
    p.add_argument(
        "--busy-poll",
        type=_args.busy_poll,
        default=0.0,
        metavar="SECONDS",
        help="keep polling without sleeping for this long after each datagram or frame "
        "(lower latency for a busy CPU core; default 0: never; at most 1)",
    )
    p.add_argument(
        "--loop",
        choices=_args.LOOP_CHOICES,
        default="auto",
        help="event loop: uvloop when installed (auto), or force one",
    )
    secure = p.add_argument_group("secure daemon (see docs/security.md)")
    secure.add_argument(
        "--tls-cert", metavar="PEM", default=None, help="the daemon's certificate: TLS only"
    )
    secure.add_argument("--tls-key", metavar="PEM", default=None, help="its private key")
    secure.add_argument(
        "--client-ca",
        metavar="PEM",
        default=None,
        help="CA whose client certificates may log in (subjects mapped in --users)",
    )
    secure.add_argument(
        "--users",
        metavar="FILE",
        default=None,
        help="users file (TOML; rvasync passwd): clients must log in; re-read when it "
        "changes or on SIGHUP",
    )
    secure.add_argument(
        "--router-hosts",
        type=_router_hosts,
        default=None,
        metavar="CIDR[,CIDR...]",
        help="without --users: the networks whose clients may connect as routing daemons "
        "(default 127.0.0.0/8,::1; 'none': nobody). With --users, the users file decides "
        "(router = true)",
    )
    secure.add_argument(
        "--allow-plain-passwords",
        action="store_true",
        help="accept passwords without TLS (trusted loopback only: they cross in clear)",
    )
    status = p.add_argument_group("status page")
    status.add_argument(
        "--http",
        type=_args.port,
        default=None,
        metavar="PORT",
        help="serve the status page (HTML, /api/status, /metrics) on this port (0: any free)",
    )
    status.add_argument(
        "--http-host",
        type=_args.nonempty,
        default="127.0.0.1",
        help="address of the status page (default 127.0.0.1: this host only)",
    )
    status.add_argument(
        "--http-public",
        action="store_true",
        help="serve the page of a daemon without --users on an address other than "
        "loopback (it shows every client to anyone who can reach it)",
    )
    p.set_defaults(handler=run)


def _router_hosts(text: str) -> tuple[str, ...]:
    """``--router-hosts``: comma-separated networks, or ``none``."""
    if text.strip().lower() == "none":
        return ()
    hosts = tuple(part.strip() for part in text.split(",") if part.strip())
    from rvasync.daemon.auth import router_networks

    try:
        router_networks(hosts)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return hosts


def run(args: argparse.Namespace) -> int:
    with asyncio.Runner(loop_factory=_args.loop_factory(args.loop)) as runner:
        return runner.run(serve(args))


async def serve(args: argparse.Namespace) -> int:
    from rvasync.daemon import Daemon

    security = None
    if args.tls_cert or args.users or args.tls_key or args.client_ca:
        from rvasync.daemon.auth import DaemonSecurity

        security = DaemonSecurity(
            users_file=args.users,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            client_ca=args.client_ca,
            allow_plain_passwords=args.allow_plain_passwords,
        )
    stop = asyncio.Event()
    users = security is not None and security.users_file is not None
    handle_signals(
        stop,
        command="rvasync daemon",
        reload=security.reload if users and security is not None else None,
        nothing_to_reload="no users file (--users); the other settings are read at start",
    )
    daemon = Daemon(
        security=security,
        listen=args.listen,
        host=args.host,
        reliability=args.reliability,
        idle_exit=args.idle_exit,
        busy_poll=args.busy_poll,
        max_consumer_buffer=args.max_consumer_buffer,
        service_key=args.service_key_file,
        router_hosts=args.router_hosts,
        **({} if args.max_retention is None else {"max_retention": args.max_retention}),
    )
    try:
        await daemon.start()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise DaemonUnavailable(f"--host {args.host} --listen {args.listen}: {reason}") from None
    status_server = None
    if args.http is not None:
        try:
            from rvasync.daemon.status_http import StatusServer
        except ImportError:
            await daemon.stop()
            raise InvalidArgument(
                "--http needs aiohttp and jinja2: pip install 'rvasync[secure]'"
            ) from None
        status_server = StatusServer(
            daemon, host=args.http_host, port=args.http, allow_public=args.http_public
        )
        try:
            await status_server.start()
        except InvalidArgument:
            await daemon.stop()
            raise
        except OSError as exc:
            await daemon.stop()
            raise DaemonUnavailable(str(exc.strerror or exc)) from None
    mode = ", TLS" if security is not None and security.ssl_context is not None else ""
    print(
        f"rvasync daemon listening on {args.host}:{daemon.listen_port} (pid {os.getpid()}{mode})",
        flush=True,
    )
    if status_server is not None:
        print(f"rvasync daemon status page on {status_server.url}", flush=True)
    stopped = asyncio.ensure_future(daemon.wait_stopped())
    signalled = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({stopped, signalled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        if status_server is not None:
            await status_server.stop()
        if not stopped.done():
            await daemon.stop()
        stopped.cancel()
    print("rvasync daemon stopped", file=sys.stderr, flush=True)
    return 0
