"""Users of a secure daemon: the users file, password hashes, and the login check.

The users file is TOML (read with :mod:`tomllib`)::

    [users.alice]
    password = "scrypt$16384$8$1$<salt>$<hash>"   # rvasync passwd alice
    publish = ["ORDERS.>"]                        # omitted: everything
    subscribe = ["ORDERS.>", "PRICES.*"]

    [users.bob]
    cert_subject = "CN=bob,O=Example"             # log in with a client certificate

Passwords are stored as scrypt hashes (``hashlib.scrypt``: memory-hard, a
random salt per password), never in clear. :class:`DaemonSecurity` holds what
the daemon's client port needs: the TLS context, the users (re-read when the
file changes, or on :meth:`DaemonSecurity.reload`, which ``rvasync daemon``
calls on SIGHUP), the failed-login limiter, and a small thread pool in which
passwords are checked so that a flood of logins never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import os
import secrets
import ssl
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument
from rvasync.protocol.authcheck import FailureLimiter, SubjectPermissions
from rvasync.security import server_context

__all__ = [
    "DaemonSecurity",
    "User",
    "Users",
    "cert_subject",
    "hash_password",
    "load_users",
    "verify_password",
]

# scrypt cost: 16 MiB of memory and some tens of milliseconds per check.
_SCRYPT_N = 2**14
_SCRYPT_R = 8
_SCRYPT_P = 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(
    password: str, *, n: int = _SCRYPT_N, r: int = _SCRYPT_R, p: int = _SCRYPT_P
) -> str:
    """The users-file form of ``password``: ``scrypt$N$r$p$salt$hash`` (base64)."""
    if not isinstance(password, str) or not password:
        raise InvalidArgument("a password must be a non-empty str")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def _parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise InvalidArgument("a password hash must look like scrypt$N$r$p$salt$hash")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = (
            base64.b64decode(parts[4], validate=True),
            base64.b64decode(parts[5], validate=True),
        )
    except ValueError:
        raise InvalidArgument("a password hash has a bad number or base64 part") from None
    if n < 2 or n & (n - 1) or not 1 <= r <= 64 or not 1 <= p <= 16 or 128 * r * n > _SCRYPT_MAXMEM:
        raise InvalidArgument(f"a password hash has unusable scrypt parameters N={n} r={r} p={p}")
    if len(salt) < 8 or len(digest) < 16:
        raise InvalidArgument("a password hash has a too short salt or hash")
    return n, r, p, salt, digest


def verify_password(password: str, stored: str) -> bool:
    """True if ``password`` matches the ``stored`` hash (constant-time compare)."""
    n, r, p, salt, digest = _parse_hash(stored)
    candidate = hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=len(digest)
    )
    return hmac.compare_digest(candidate, digest)


# Checked against for unknown users, so an unknown name costs the same as a wrong password.
_DUMMY_HASH = hash_password("rvasync-no-such-user")


def cert_subject(peercert: Any) -> str | None:
    """A certificate's subject as ``CN=bob,O=Example`` (from ``SSLSocket.getpeercert()``)."""
    if not isinstance(peercert, dict):
        return None
    names = {
        "commonName": "CN",
        "organizationName": "O",
        "organizationalUnitName": "OU",
        "countryName": "C",
        "localityName": "L",
        "stateOrProvinceName": "ST",
        "emailAddress": "emailAddress",
    }
    parts = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            parts.append(f"{names.get(key, key)}={value}")
    return ",".join(parts) or None


@dataclass(frozen=True, slots=True)
class User:
    """One entry of the users file."""

    name: str
    password_hash: str | None
    cert_subject: str | None
    permissions: SubjectPermissions


@dataclass(frozen=True, slots=True)
class Users:
    """The parsed users file: by name and by certificate subject."""

    by_name: dict[str, User]
    by_subject: dict[str, User]


def _strings(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{where} must be a list of subject patterns")
    return list(value)


def parse_users(data: dict[str, Any], source: str = "users file") -> Users:
    """Check a parsed users table; InvalidArgument naming the first problem."""
    allowed_top = {"users"}
    extra = set(data) - allowed_top
    if extra:
        raise InvalidArgument(f"{source}: unknown top-level keys {sorted(extra)}")
    table = data.get("users", {})
    if not isinstance(table, dict):
        raise InvalidArgument(f"{source}: [users] must be a table")
    by_name: dict[str, User] = {}
    by_subject: dict[str, User] = {}
    known = {"password", "cert_subject", "publish", "subscribe"}
    for name, entry in table.items():
        where = f"{source}: user {name!r}"
        if not isinstance(entry, dict):
            raise InvalidArgument(f"{where} must be a table")
        unknown = set(entry) - known
        if unknown:
            raise InvalidArgument(f"{where}: unknown keys {sorted(unknown)}")
        password, subject = entry.get("password"), entry.get("cert_subject")
        if password is not None:
            if not isinstance(password, str):
                raise InvalidArgument(f"{where}: password must be a str (an scrypt hash)")
            try:
                _parse_hash(password)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{where}: {exc} (make one with: rvasync passwd)") from None
        if subject is not None and (not isinstance(subject, str) or not subject):
            raise InvalidArgument(f"{where}: cert_subject must be a non-empty str")
        if password is None and subject is None:
            raise InvalidArgument(f"{where} has neither a password nor a cert_subject")
        try:
            permissions = SubjectPermissions.of(
                _strings(entry.get("publish"), f"{where} publish"),
                _strings(entry.get("subscribe"), f"{where} subscribe"),
            )
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from None
        user = User(name, password, subject, permissions)
        by_name[name] = user
        if subject is not None:
            if subject in by_subject:
                raise InvalidArgument(f"{where}: cert_subject {subject!r} is used twice")
            by_subject[subject] = user
    return Users(by_name, by_subject)


def load_users(path: str) -> Users:
    """Read and check the users file at ``path``."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InvalidArgument(f"users file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"users file {path}: not valid TOML: {exc}") from None
    return parse_users(data, f"users file {path}")


class LoginRefused(Exception):
    """A login failed; the text is what the client is told (no detail that helps guessing)."""


class DaemonSecurity:
    """What a secure daemon's client port needs (see the module docstring).

    ``users_file``: path of the users file (None: no users, only TLS).
    ``tls_cert``/``tls_key``: the daemon's certificate and key (None: no TLS,
    which is refused with users unless ``allow_plain_passwords``, a switch for
    tests on a trusted loopback only). ``client_ca``: CA whose client
    certificates may log in.
    """

    def __init__(
        self,
        *,
        users_file: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        client_ca: str | None = None,
        allow_plain_passwords: bool = False,
        limiter: FailureLimiter | None = None,
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
        self.limiter = limiter or FailureLimiter()
        self._users: Users | None = None
        self._mtime: int | None = None
        if users_file is not None:
            self._users = load_users(users_file)
            self._mtime = self._stat()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: Logins accepted / refused since the daemon started.
        self.logins = 0
        self.failed_logins = 0
        self.reloads = 0
        self._reload_callbacks: list[Callable[[Users], None]] = []

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

    async def check_password(self, user: str, password: str) -> User:
        """The user if ``password`` is theirs; LoginRefused otherwise (checked off the loop)."""
        users = self.users
        entry = users.by_name.get(user) if users is not None else None
        stored = entry.password_hash if entry is not None else None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="rvasync-login"
            )
        loop = asyncio.get_running_loop()
        good = await loop.run_in_executor(
            self._pool, verify_password, password, stored or _DUMMY_HASH
        )
        if not good or entry is None or stored is None:
            raise LoginRefused("wrong user name or password")
        return entry

    def user_by_subject(self, subject: str | None) -> User | None:
        users = self.users
        if users is None or subject is None:
            return None
        return users.by_subject.get(subject)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
