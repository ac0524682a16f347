"""Contenders of the secure-broker scenarios (benchmarks/scenarios/secure.py).

- rvasync, *secure standalone daemon* (the headline of these rows): one
  ``rvasync daemon --tls-cert --tls-key --users`` process; every worker logs
  in with ``rv.Security(daemon_cert=CA, user, password)``;
- rvasync, *standalone daemon*: the same daemon without TLS or users, so the
  two rows show what TLS costs;
- NATS, *nats-server with TLS*: a ``tls {}`` block with the same kind of
  certificate (EC P-256 from a throwaway CA) and a user with a password.

The certificates come from :mod:`rvasync.testcerts` (the ``cryptography``
package), made once per row in the row's work directory.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.procs import LOOPBACK, Broker, free_port
from benchmarks.registry import Variant, adapter
from benchmarks.systems.nats_peer import NatsPubSub, NatsReqRep, NatsServer
from benchmarks.systems.rvasync_network import (
    STANDALONE_DAEMON,
    RvNetworkPubSub,
    RvNetworkReqRep,
    RvService,
)

USER = "bench"
PASSWORD = "bench-password"


def _no_cryptography() -> str | None:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return "making the test certificates needs the cryptography package"
    return None


SECURE_DAEMON = Variant(
    name="standalone-tls",
    label="secure standalone daemon (TLS, password)",
    headline=True,
    unavailable=_no_cryptography,
)
NATS_TLS = Variant(
    name="tls",
    label="nats-server with TLS, password",
    headline=True,
    unavailable=_no_cryptography,
)


def _pki(workdir: Any) -> Any:
    from rvasync.testcerts import make_test_pki

    return make_test_pki(str(workdir / "pki"), clients=())


class SecureRvService(RvService):
    """The service's UDP port, and a standalone daemon: with TLS and users, or plain."""

    async def __aenter__(self) -> dict[str, Any]:
        if self.variant.name != SECURE_DAEMON.name:
            return await super().__aenter__()
        env = await super().__aenter__()  # the UDP port (no daemon for this variant name)
        from rvasync.daemon.auth import hash_password

        pki = _pki(self.workdir)
        users = self.workdir / "users.toml"
        users.write_text(f'[users.{USER}]\npassword = "{hash_password(PASSWORD)}"\n')
        port = free_port()
        self.broker = Broker(
            [
                sys.executable, "-m", "rvasync", "daemon", "--host", LOOPBACK,
                "--listen", str(port), "--tls-cert", pki.daemon_cert,
                "--tls-key", pki.daemon_key, "--users", str(users),
            ],
            self.workdir / f"rvasync-secure-daemon-{port}.log",
        )  # fmt: skip
        self.broker.start(port)
        env["daemon"] = f"{LOOPBACK}:{port}"
        env["ca"] = pki.ca_cert
        return env


class _SecureRv:
    environment = SecureRvService
    env: dict[str, Any]

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (SECURE_DAEMON, STANDALONE_DAEMON)

    async def connect(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.listeners: list[Any] = []
        security = None
        if "ca" in self.env:
            security = rv.Security(daemon_cert=self.env["ca"], user=USER, password=PASSWORD)
        self.transport = rv.Transport(
            service=str(self.env["ports"][0]),
            network=None,
            daemon=self.env["daemon"],
            security=security,
        )
        await asyncio.wait_for(self.transport.open(), 30)


@adapter
class RvSecurePubSub(_SecureRv, RvNetworkPubSub):
    """rvasync pub/sub through its standalone daemon, with and without TLS."""

    system = "rvasync"
    capability = "secure-pubsub"


@adapter
class RvSecureReqRep(_SecureRv, RvNetworkReqRep):
    """rvasync request/reply through its standalone daemon, with and without TLS."""

    system = "rvasync"
    capability = "secure-reqrep"

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (SECURE_DAEMON, STANDALONE_DAEMON)


class NatsTlsServer(NatsServer):
    """nats-server with a TLS certificate and one user; yields the URL and the CA."""

    async def __aenter__(self) -> dict[str, Any]:
        self.pki = _pki(self.workdir)
        env = await super().__aenter__()
        env["url"] = env["url"].replace("nats://", "tls://")
        env["ca"] = self.pki.ca_cert
        return env

    def extra_config(self) -> list[str]:
        return [
            "tls {",
            f'  cert_file: "{self.pki.daemon_cert}"',
            f'  key_file: "{self.pki.daemon_key}"',
            "}",
            "authorization {",
            f'  user: "{USER}"',
            f'  password: "{PASSWORD}"',
            "}",
        ]


class _NatsTls:
    environment = NatsTlsServer
    env: dict[str, Any]

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (NATS_TLS,)

    async def connect(self) -> None:
        import nats

        from rvasync.security import client_context

        self.nc = await nats.connect(
            servers=[self.env["url"]],
            tls=client_context(cafile=self.env["ca"]),
            user=USER,
            password=PASSWORD,
            allow_reconnect=False,
            connect_timeout=10,
            max_reconnect_attempts=0,
        )


@adapter
class NatsTlsPubSub(_NatsTls, NatsPubSub):
    """Publish/subscribe through nats-server over TLS."""

    system = "nats"
    capability = "secure-pubsub"


@adapter
class NatsTlsReqRep(_NatsTls, NatsReqRep):
    """Request/reply through nats-server over TLS."""

    system = "nats"
    capability = "secure-reqrep"
