"""The users of a secure daemon: the users file, password hashes, certificate subjects.

The users file is TOML (read with :mod:`tomllib`)::

    [users.alice]
    password = "scrypt$16384$8$1$<salt>$<hash>"   # rvasync passwd alice
    publish = ["ORDERS.>"]                        # omitted: everything
    subscribe = ["ORDERS.>", "PRICES.*"]
    reply = true                                  # may answer requests (default)

    [users.bob]
    cert_subject = "CN=bob,O=Example"             # log in with a client certificate

    [users.router1]
    password = "..."
    router = true                                 # may connect as a routing daemon

Passwords are stored as scrypt hashes (``hashlib.scrypt``: memory-hard, a
random salt per password), never in clear.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import tomllib
from dataclasses import dataclass
from typing import Any

from rvasync.errors import InvalidArgument
from rvasync.protocol.authcheck import SubjectPermissions

__all__ = [
    "LoginRefused",
    "User",
    "Users",
    "cert_subject",
    "hash_password",
    "load_users",
    "parse_users",
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
    known = {"password", "cert_subject", "publish", "subscribe", "reply", "router"}
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
                reply=entry.get("reply", True),
                router=entry.get("router", False),
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
