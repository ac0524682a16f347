"""``rv.Security``: how a client transport proves who it is to a secure daemon.

A secure daemon (``rvasync daemon --tls-cert ... --users ...``) accepts only
TLS links. The client checks the daemon's certificate against the one (or the
CA) it was given, so it cannot be talked into handing its password to an
impostor, and then authenticates with a user name and password (sent inside
TLS only) or with its own certificate (mutual TLS).

The TLS policy of both ends lives here: TLS 1.2 at least, forward-secret
AEAD cipher suites only for TLS 1.2 (TLS 1.3's suites are all modern), no
compression, no renegotiation.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from rvasync.errors import InvalidArgument

__all__ = ["TLS_CIPHERS", "Security", "client_context", "server_context"]

#: TLS 1.2 cipher suites allowed (OpenSSL syntax): ECDHE key exchange, AES-GCM or ChaCha20.
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!SHA1:!DSS"


def _pem(name: str, value: Any, *, optional: bool = True) -> str | None:
    if value is None:
        if optional:
            return None
        raise InvalidArgument(f"{name} is required")
    if not isinstance(value, str | os.PathLike) or not str(value):
        raise InvalidArgument(f"{name} must be a path to a PEM file, got {value!r}")
    path = os.fspath(value)
    if not os.path.isfile(path):
        raise InvalidArgument(f"{name}: no such file: {path}")
    return str(path)


def _harden(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION
    if hasattr(ssl, "OP_NO_RENEGOTIATION"):
        ctx.options |= ssl.OP_NO_RENEGOTIATION
    return ctx


def client_context(
    *, cafile: str | None, certfile: str | None = None, keyfile: str | None = None
) -> ssl.SSLContext:
    """A client's TLS context: verifies the daemon against ``cafile`` (None: the system's CAs)."""
    ctx = _harden(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))  # verifies cert and host name
    try:
        if cafile is None:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            ctx.load_verify_locations(cafile=cafile)
        if certfile is not None:
            ctx.load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgument(f"cannot load the TLS certificates: {exc}") from None
    return ctx


def server_context(
    *, certfile: str, keyfile: str | None, client_ca: str | None = None
) -> ssl.SSLContext:
    """A daemon's TLS context; with ``client_ca``, clients may log in with a certificate
    it signed (one that does not verify, expired or unknown, fails the handshake)."""
    ctx = _harden(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    try:
        ctx.load_cert_chain(certfile, keyfile)
        if client_ca is not None:
            ctx.load_verify_locations(cafile=client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL  # password users need no certificate
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgument(f"cannot load the daemon's TLS certificate: {exc}") from None
    return ctx


class Security:
    """``rv.Security(daemon_cert=PEM, user=..., password=... | user_cert=PEM, user_key=PEM)``.

    ``daemon_cert``: the daemon's certificate, or the CA that signed it, as a
    PEM file (None: the system's trusted CAs). ``user``/``password``: log in
    by name (the password crosses only inside TLS). ``user_cert``/``user_key``:
    log in with a client certificate (mutual TLS); the daemon maps its subject
    to a user. ``server_name``: the name the daemon's certificate must carry
    (default: the host of the daemon parameter).

    Give it to ``rv.Transport(daemon="host:port", security=...)``; a refused
    login, an unknown certificate or a daemon whose certificate does not
    match raise :class:`~rvasync.errors.NotPermitted` from ``open()``.
    """

    __slots__ = (
        "_context",
        "daemon_cert",
        "password",
        "server_name",
        "user",
        "user_cert",
        "user_key",
    )

    def __init__(
        self,
        *,
        daemon_cert: str | os.PathLike[str] | None = None,
        user: str | None = None,
        password: str | None = None,
        user_cert: str | os.PathLike[str] | None = None,
        user_key: str | os.PathLike[str] | None = None,
        server_name: str | None = None,
    ) -> None:
        self.daemon_cert = _pem("daemon_cert", daemon_cert)
        self.user_cert = _pem("user_cert", user_cert)
        self.user_key = _pem("user_key", user_key)
        if self.user_key is not None and self.user_cert is None:
            raise InvalidArgument("user_key needs user_cert")
        for name, value in (("user", user), ("password", password), ("server_name", server_name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidArgument(f"{name} must be a non-empty str or None")
        if password is not None and user is None:
            raise InvalidArgument("a password needs a user name (user=...)")
        if user is not None and password is None and self.user_cert is None:
            raise InvalidArgument(f"user {user!r}: give a password or a user_cert")
        self.user = user
        self.password = password
        self.server_name = server_name
        self._context: ssl.SSLContext | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """The client's TLS context (made once; InvalidArgument if a file does not load)."""
        if self._context is None:
            self._context = client_context(
                cafile=self.daemon_cert, certfile=self.user_cert, keyfile=self.user_key
            )
        return self._context

    def __repr__(self) -> str:
        how = (
            "password"
            if self.password is not None
            else "certificate"
            if self.user_cert
            else "anonymous"
        )
        return f"<Security user={self.user!r} by {how} daemon_cert={self.daemon_cert!r}>"
