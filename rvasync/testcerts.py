"""Throwaway certificates for trying a secure daemon (tests, examples, benchmarks).

:func:`make_test_pki` writes a small private CA into a directory: the CA, a
daemon certificate for ``127.0.0.1``/``localhost``, and client certificates,
all made with the ``cryptography`` package (``pip install cryptography``).
Never use these for anything real: the keys sit in plain files next to the
certificates, and nothing revokes them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["TestPki", "make_cert", "make_test_pki", "write_cert_and_key"]


@dataclass(frozen=True)
class TestPki:
    """Paths of the PEM files :func:`make_test_pki` wrote."""

    __test__ = False  # not a pytest test class, whatever its name

    directory: str
    ca_cert: str
    daemon_cert: str
    daemon_key: str

    def client(self, name: str) -> tuple[str, str]:
        """(cert, key) of a client certificate made for ``name`` (``CN=name``)."""
        return (
            os.path.join(self.directory, f"client-{name}.pem"),
            os.path.join(self.directory, f"client-{name}.key"),
        )


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ImportError(
            "making test certificates needs the cryptography package: pip install cryptography"
        ) from None
    return x509, hashes, serialization, ec, NameOID, ExtendedKeyUsageOID


def _write_key(path: str, key: Any) -> None:
    _, _, serialization, _, _, _ = _crypto()
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: str, cert: Any) -> None:
    _, _, serialization, _, _, _ = _crypto()
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))


def make_cert(
    *,
    common_name: str,
    issuer: tuple[Any, Any] | None,
    ca: bool = False,
    server: bool = False,
    days: float = 30,
    not_before_days: float = -1,
) -> tuple[Any, Any]:
    """(certificate, key): self-signed when ``issuer`` (cert, key) is None.

    ``days``/``not_before_days``: the validity window relative to now (an
    expired certificate: ``not_before_days=-10, days=-5``).
    """
    x509, hashes, _, ec, NameOID, ExtendedKeyUsageOID = _crypto()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    issuer_cert, issuer_key = issuer if issuer is not None else (None, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=not_before_days))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    return cert, key


def make_test_pki(directory: str, clients: tuple[str, ...] = ("bob",)) -> TestPki:
    """Write a CA, a daemon certificate and one client certificate per name into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    ca = make_cert(common_name="rvasync test CA", issuer=None, ca=True)
    pki = TestPki(
        directory=directory,
        ca_cert=os.path.join(directory, "ca.pem"),
        daemon_cert=os.path.join(directory, "daemon.pem"),
        daemon_key=os.path.join(directory, "daemon.key"),
    )
    _write_cert(pki.ca_cert, ca[0])
    daemon = make_cert(common_name="rvasync daemon", issuer=ca, server=True)
    _write_cert(pki.daemon_cert, daemon[0])
    _write_key(pki.daemon_key, daemon[1])
    for name in clients:
        cert, key = make_cert(common_name=name, issuer=ca)
        cert_path, key_path = pki.client(name)
        _write_cert(cert_path, cert)
        _write_key(key_path, key)
    return pki


def write_cert_and_key(cert_path: str, key_path: str, pair: tuple[Any, Any]) -> None:
    """Write a (certificate, key) pair made by :func:`make_cert` as PEM files."""
    _write_cert(cert_path, pair[0])
    _write_key(key_path, pair[1])
