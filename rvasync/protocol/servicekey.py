"""The service key: a keyed MAC on every datagram daemons exchange on one service.

Without it the reliable multicast protocol trusts any datagram that parses:
anyone who can send UDP to the service port can invent sender sessions,
inject messages, fake loss reports or disturb the sessions it knows of (see
docs/service-key.md). With a key, every datagram carries a 16-byte BLAKE2b
tag (keyed mode, hashlib) computed over the whole datagram, appended at its
end; a datagram whose tag does not verify is dropped before the protocol
core sees it, and counted.

The key each service uses is derived from the configured secret and the
service's UDP port, so a datagram captured on one service is not valid on
another service protected by the same secret. The tag does not stop the
replay of a captured datagram on the same service; replays are what the
protocol already discards as duplicates of a session's sequence numbers.

Sans-IO and pure: the UDP driver (rvasync.daemon.udpdriver) seals what it
sends and opens what it receives.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

from rvasync.errors import InvalidArgument

__all__ = ["MIN_KEY_BYTES", "TAG_SIZE", "DatagramMac", "check_service_key"]

#: Bytes of the tag appended to every datagram.
TAG_SIZE = 16
#: Shortest secret accepted (a key shorter than 128 bits is guessable).
MIN_KEY_BYTES = 16
#: Longest secret accepted (a key file is read whole; this keeps a wrong file obvious).
MAX_KEY_BYTES = 4096

_PERSON = b"rvasync-svc-key"


def check_service_key(value: Any, name: str = "service_key") -> bytes | None:
    """``value`` as key bytes (a str is UTF-8 encoded), or None; InvalidArgument otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise InvalidArgument(f"{name} must be bytes, str or None, got {type(value).__name__}")
    if not MIN_KEY_BYTES <= len(value) <= MAX_KEY_BYTES:
        raise InvalidArgument(
            f"{name} must be {MIN_KEY_BYTES}..{MAX_KEY_BYTES} bytes, got {len(value)} bytes"
        )
    return value


class DatagramMac:
    """Seals and opens the datagrams of one service under one secret.

    ``secret``: the configured key (see :func:`check_service_key`); ``port``:
    the service's UDP port, mixed into the derived key.
    """

    __slots__ = ("_base", "tag_size")

    def __init__(self, secret: bytes, port: int) -> None:
        secret = check_service_key(secret) or b""
        derived = hashlib.blake2b(
            secret + int(port).to_bytes(2, "big"), digest_size=32, person=_PERSON
        ).digest()
        #: A keyed hash primed with the key block; each datagram hashes a copy of it.
        self._base = hashlib.blake2b(key=derived, digest_size=TAG_SIZE)
        self.tag_size = TAG_SIZE

    def tag(self, data: Any) -> bytes:
        """The tag of ``data`` (bytes-like)."""
        h = self._base.copy()
        h.update(data)
        return h.digest()

    def seal(self, data: bytes) -> bytes:
        """``data`` followed by its tag."""
        h = self._base.copy()
        h.update(data)
        return data + h.digest()

    def seal_parts(self, parts: Sequence[Any]) -> list[Any]:
        """The parts of a gathered datagram followed by the tag of their concatenation."""
        h = self._base.copy()
        for part in parts:
            h.update(part)
        return [*parts, h.digest()]

    def open(self, data: bytes) -> bytes | None:
        """The datagram without its tag, or None if the tag is missing or wrong."""
        if len(data) <= TAG_SIZE:
            return None
        body = memoryview(data)[:-TAG_SIZE]
        h = self._base.copy()
        h.update(body)
        if not hmac.compare_digest(h.digest(), data[-TAG_SIZE:]):
            return None
        return data[:-TAG_SIZE]
