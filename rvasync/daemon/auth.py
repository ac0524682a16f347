"""What a secure daemon's client port needs: TLS, the users file, and the login gate.

:class:`DaemonSecurity` holds the TLS context, the users (re-read when the
file changes, or on :meth:`DaemonSecurity.reload`, which ``rvasync daemon``
calls on SIGHUP) and the :class:`~rvasync.daemon.login.LoginGate` that checks
every login. The users file and password hashes are
:mod:`rvasync.daemon.users` (re-exported here); the rules of who may publish
and listen to what are :mod:`rvasync.protocol.authcheck`.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

from rvasync._logging import stderr_logger
from rvasync.daemon.login import FAILED_LOGIN_DELAY, LoginGate
from rvasync.daemon.rights import LOOPBACK_ROUTERS, router_networks
from rvasync.daemon.users import (
    LoginRefused,
    User,
    Users,
    cert_subject,
    hash_password,
    load_users,
    parse_users,
    verify_password,
)
from rvasync.errors import InvalidArgument
from rvasync.protocol.loginbrake import LoginBrake
from rvasync.security import server_context

__all__ = [
    "LOOPBACK_ROUTERS",
    "DaemonSecurity",
    "LoginRefused",
    "User",
    "Users",
    "cert_subject",
    "hash_password",
    "load_users",
    "parse_users",
    "router_networks",
    "verify_password",
]


class DaemonSecurity:
    """What a secure daemon's client port needs (see the module docstring).

    ``users_file``: path of the users file (None: no users, only TLS).
    ``tls_cert``/``tls_key``: the daemon's certificate and key (None: no TLS,
    which is refused with users unless ``allow_plain_passwords``, a switch for
    tests on a trusted loopback only). ``client_ca``: CA whose client
    certificates may log in. ``brake``: the failed-login brake (default:
    :class:`~rvasync.protocol.loginbrake.LoginBrake`'s limits);
    ``failed_login_delay``: seconds before a failed login is answered.
    """

    def __init__(
        self,
        *,
        users_file: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        client_ca: str | None = None,
        allow_plain_passwords: bool = False,
        brake: LoginBrake | None = None,
        failed_login_delay: float = FAILED_LOGIN_DELAY,
    ) -> None:
        if tls_cert is None and (tls_key is not None or client_ca is not None):
            raise InvalidArgument("tls_key and client_ca need tls_cert")
        if users_file is not None and tls_cert is None and not allow_plain_passwords:
            raise InvalidArgument(
                "a users file needs TLS (tls_cert/tls_key) so that passwords never cross in "
                "clear; allow_plain_passwords=True overrides this on a trusted network only"
            )
        if client_ca is not None and users_file is None:
            raise InvalidArgument("client_ca needs a users file mapping certificate subjects")
        self.ssl_context: ssl.SSLContext | None = (
            None
            if tls_cert is None
            else server_context(certfile=tls_cert, keyfile=tls_key, client_ca=client_ca)
        )
        self._cert = (tls_cert, tls_key)
        self.users_file = users_file
        self.allow_plain_passwords = allow_plain_passwords
        self._users: Users | None = None
        self._mtime: int | None = None
        if users_file is not None:
            self._users = load_users(users_file)
            self._mtime = self._stat()
        #: Checks every login (client port and status page).
        self.gate = LoginGate(lambda: self.users, brake=brake, failed_delay=failed_login_delay)
        self.reloads = 0
        self._reload_callbacks: list[Callable[[Users], None]] = []

    @property
    def limiter(self) -> LoginBrake:
        """The failed-login brake (its ``refused`` counts attempts refused unchecked)."""
        return self.gate.brake

    @property
    def logins(self) -> int:
        """Logins accepted since the daemon started."""
        return self.gate.logins

    @property
    def failed_logins(self) -> int:
        """Logins refused since the daemon started."""
        return self.gate.failed_logins

    def on_reload(self, callback: Callable[[Users], None]) -> None:
        """Call ``callback(users)`` after each successful reload (the client port
        applies the new permissions to the users already logged in)."""
        self._reload_callbacks.append(callback)

    def http_ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context with the daemon's certificate for the status page (no client certs)."""
        certfile, keyfile = self._cert
        if certfile is None:
            return None
        return server_context(certfile=certfile, keyfile=keyfile)

    @property
    def requires_login(self) -> bool:
        return self._users is not None

    @property
    def users(self) -> Users | None:
        """The current users table (re-read first if the file changed)."""
        self.reload_if_changed()
        return self._users

    def _stat(self) -> int | None:
        try:
            return os.stat(self.users_file).st_mtime_ns if self.users_file else None
        except OSError:
            return None

    def reload(self) -> bool:
        """Re-read the users file; on a bad file keep the old users and log why. True if loaded."""
        if self.users_file is None:
            return False
        try:
            users = load_users(self.users_file)
        except InvalidArgument as exc:
            stderr_logger().error("users file not reloaded; keeping the old users", error=str(exc))
            self._mtime = self._stat()  # do not retry a bad file on every login
            return False
        self._users = users
        self._mtime = self._stat()
        self.reloads += 1
        self.gate.keep_users(users)
        stderr_logger().info("users file reloaded", path=self.users_file, users=len(users.by_name))
        for callback in list(self._reload_callbacks):
            try:
                callback(users)
            except Exception:
                stderr_logger().exception("applying the reloaded users failed")
        return True

    def reload_if_changed(self) -> None:
        if self.users_file is not None and self._stat() != self._mtime:
            self.reload()

    def user_by_subject(self, subject: str | None) -> User | None:
        users = self.users
        if users is None or subject is None:
            return None
        return users.by_subject.get(subject)

    def close(self) -> None:
        self.gate.close()
