"""Ready-made set-ups for testing programs built on rvasync: two routed networks, a secure daemon.

Each is an async context manager that starts everything in the running event
loop, on loopback, on ports nobody else uses, and stops it all on exit. The
pytest fixtures ``rv_router_pair`` and ``rv_secure_daemon``
(:mod:`rvasync.pytest_plugin`) are these; a test suite that does not use
pytest (``unittest.IsolatedAsyncioTestCase``) uses them directly::

    async with router_pair() as pair:
        async with rv.Transport(*pair.right) as tokyo, rv.Transport(*pair.left) as paris:
            prices = tokyo.listen("PRICES.>")
            await pair.wait_listening("left", "PRICES.>")
            await paris.send(rv.Message("PRICES.ACME", {"last": 100.25}))
            msg = await prices.get(timeout=10)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rvasync.testing import LOOPBACK, free_port

__all__ = ["RouterPair", "SecureDaemon", "router_pair", "secure_daemon"]

#: Seconds the set-ups wait for their parts to meet (a link to come up).
READY_TIMEOUT = 30.0

Side = Literal["left", "right"]


@dataclass(frozen=True)
class RouterPair:
    """Networks ``left`` and ``right``, each ``(service, network)``, joined by two routers.

    Router ``rleft`` is attached to network ``left``, ``rright`` to
    ``right``; they are neighbors over a TCP link on loopback. Only subjects
    that someone listens to on the far side cross: after a listener starts
    on the right, :meth:`wait_listening` ``("left", subject)`` returns once
    the interest has reached the left network's router, so what is sent on
    the left from then on crosses.
    """

    left: tuple[str, str]
    right: tuple[str, str]
    routers: dict[str, Any]

    async def wait_listening(self, side: Side, *subjects: str, timeout: float = 10.0) -> None:
        """Wait until the router of ``side`` listens there to every one of ``subjects``."""
        router = self.routers[side]
        wanted = frozenset(subjects)
        await router.wait_for(lambda: wanted <= router.listening(side), timeout=timeout)


@contextlib.asynccontextmanager
async def router_pair() -> AsyncIterator[RouterPair]:
    """Start two loopback services and a router on each, neighbors of each other; yield them."""
    from rvasync.rvrd import Router

    left, right = (str(free_port()), LOOPBACK), (str(free_port()), LOOPBACK)
    rleft = Router(
        {
            "router": {"name": "rleft", "listen": f"{LOOPBACK}:0"},
            "network": [{"name": "left", "service": left[0], "network": LOOPBACK}],
            "neighbor": [{"name": "rright"}],  # rright dials in
        }
    )
    async with rleft:
        rright = Router(
            {
                "router": {"name": "rright"},
                "network": [{"name": "right", "service": right[0], "network": LOOPBACK}],
                "neighbor": [{"name": "rleft", "address": f"{LOOPBACK}:{rleft.port}"}],
            }
        )
        async with rright:
            await rleft.wait_for(lambda: "rright" in rleft.neighbors, timeout=READY_TIMEOUT)
            await rright.wait_for(lambda: "rleft" in rright.neighbors, timeout=READY_TIMEOUT)
            yield RouterPair(left, right, {"left": rleft, "right": rright})


#: The users a secure daemon set-up starts with: name -> password (None: by certificate).
DEFAULT_USERS: dict[str, str | None] = {"alice": "alice-password", "bob": None}


@dataclass
class SecureDaemon:
    """A secure daemon in the test's loop: TLS, a users file, test certificates.

    ``daemon`` is the ``daemon=`` parameter of a transport (``"127.0.0.1:PORT"``);
    :meth:`security` logs in by password, :meth:`cert_security` by client
    certificate. User ``alice`` (password ``alice-password``) may publish and
    listen to everything; ``bob`` logs in with the client certificate made for
    him (``CN=bob``). :meth:`add_user` writes another user (or new rights)
    into the users file, which the daemon reads again at the next login.
    """

    daemon: str
    pki: Any  # rvasync.testcerts.TestPki
    users_file: Path
    engine: Any  # rvasync.Daemon
    passwords: dict[str, str] = field(default_factory=dict)
    _entries: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def security(self, user: str = "alice", password: str | None = None) -> Any:
        """``rv.Security`` logging in as ``user`` by password (its own, unless ``password``)."""
        from rvasync.security import Security

        return Security(
            daemon_cert=self.pki.ca_cert,
            user=user,
            password=password if password is not None else self.passwords[user],
        )

    def cert_security(self, name: str = "bob") -> Any:
        """``rv.Security`` logging in with the client certificate made for ``name``."""
        from rvasync.security import Security

        cert, key = self.pki.client(name)
        return Security(daemon_cert=self.pki.ca_cert, user_cert=cert, user_key=key)

    def add_user(
        self,
        name: str,
        password: str | None = None,
        *,
        publish: list[str] | None = None,
        subscribe: list[str] | None = None,
    ) -> None:
        """Add (or replace) user ``name``, allowed ``publish``/``subscribe`` (None: everything).

        ``password=None``: the user logs in with the client certificate made
        for that name (``CN=name``; the set-up makes them for alice and bob).
        """
        from rvasync.cli.passwd import dump_users
        from rvasync.daemon.auth import hash_password

        entry: dict[str, Any] = (
            {"cert_subject": f"CN={name}"}
            if password is None
            else {"password": hash_password(password)}
        )
        if publish is not None:
            entry["publish"] = list(publish)
        if subscribe is not None:
            entry["subscribe"] = list(subscribe)
        self._entries[name] = entry
        if password is not None:
            self.passwords[name] = password
        text = dump_users({"users": self._entries})
        fd = os.open(self.users_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)


@contextlib.asynccontextmanager
async def secure_daemon(directory: str | os.PathLike[str]) -> AsyncIterator[SecureDaemon]:
    """A TLS daemon on a free loopback port; its users and test certificates go in ``directory``."""
    from rvasync.daemon import Daemon
    from rvasync.daemon.auth import DaemonSecurity
    from rvasync.testcerts import make_test_pki

    directory = Path(directory)
    pki = make_test_pki(str(directory / "pki"), clients=tuple(DEFAULT_USERS))
    setup = SecureDaemon("", pki, directory / "users.toml", None)
    for name, password in DEFAULT_USERS.items():
        setup.add_user(name, password)
    security = DaemonSecurity(
        users_file=str(setup.users_file),
        tls_cert=pki.daemon_cert,
        tls_key=pki.daemon_key,
        client_ca=pki.ca_cert,
    )
    engine = Daemon(listen=0, security=security, host_status_interval=0)
    await engine.start()
    try:
        setup.engine = engine
        setup.daemon = f"{LOOPBACK}:{engine.listen_port}"
        yield setup
    finally:
        await engine.stop()
