"""Direct communication, sans-IO: which inboxes can be reached directly, and proving it.

A transport that enables direct communication (a two-part service) binds a
UDP port of its own and writes it into its inbox names:
``_INBOX.<daemon address>.<session>.D<port>.<n>``. The daemon routes such an
inbox exactly as any other (its session is the third element), so a sender
without direct communication still reaches it through the daemons; a sender
with it reads the daemon's IP address and the direct port from the name and
may send straight there.

"May", because an inbox name is just text anyone can write: sending data to
whatever address a subject names would let a stranger aim this transport at
any host and port. So an address is used only once it has *proved* that an
enabled transport listens there: this end sends HELLO with a random nonce
(small; no data), and the address must answer ACK with the same nonce from
that same address. Until then, and if it never answers (no such transport,
a firewall), messages keep taking the daemon path. :class:`DirectPeers`
keeps that state; the driver owns socket and clock.

Direct communication never crosses a routing daemon: two transports talk
directly only when their daemons are on one service and hear each other. So
HELLO names the asker's service (its UDP port) and the asker's daemon
(address), and is answered only by a transport of the same service whose
daemon is that daemon or hears it (:func:`parse_hello` gives the driver both
to check); the asker, likewise, says HELLO only to an inbox whose daemon its
own daemon hears. An inbox from behind a router (whose reply subjects name
the router, and whose daemons are on another network) keeps the daemon path.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

__all__ = [
    "ACK",
    "HELLO",
    "NONCE_SIZE",
    "DirectPeers",
    "Hello",
    "direct_tag",
    "parse_direct_inbox",
    "parse_hello",
]

#: Control datagrams (the reliable core's datagrams start with another byte).
HELLO = b"RVDH"
ACK = b"RVDA"
NONCE_SIZE = 16
#: HELLO: magic, nonce, the asker's service port (2 bytes), the asker's daemon
#: (IPv4 address and port, 6 bytes). ACK: magic, the same nonce and service.
_HELLO_SIZE = len(HELLO) + NONCE_SIZE + 2 + 6
_ACK_SIZE = len(ACK) + NONCE_SIZE + 2


@dataclass(slots=True, frozen=True)
class Hello:
    """What a HELLO says: its nonce, the asker's service port and daemon address."""

    nonce: bytes
    service: int
    daemon: tuple[str, int]


def parse_hello(data: bytes) -> Hello | None:
    """The contents of a well-formed HELLO datagram, else None."""
    if len(data) != _HELLO_SIZE or data[:4] != HELLO:
        return None
    end = 4 + NONCE_SIZE
    raw = data[end + 2 :]
    host = ".".join(str(b) for b in raw[:4])
    return Hello(
        data[4:end],
        int.from_bytes(data[end : end + 2], "big"),
        (host, int.from_bytes(raw[4:], "big")),
    )


def _daemon_bytes(daemon: tuple[str, int]) -> bytes:
    host, port = daemon
    parts = host.split(".")
    if len(parts) != 4:
        raise ValueError(f"not an IPv4 daemon address: {host!r}")
    return bytes(int(p) for p in parts) + port.to_bytes(2, "big")


def direct_tag(port: int) -> str:
    """The inbox element that names a direct port (``D7501``)."""
    return f"D{port}"


def parse_direct_inbox(subject: str) -> tuple[str, int] | None:
    """``(daemon address element, direct port)`` of a direct-enabled inbox, else None."""
    if not subject.startswith("_INBOX."):
        return None
    parts = subject.split(".", 5)
    if len(parts) < 5:
        return None
    tag = parts[3]
    if len(tag) < 2 or tag[0] != "D" or not tag[1:].isascii() or not tag[1:].isdigit():
        return None
    port = int(tag[1:])
    if not 0 < port <= 0xFFFF:
        return None
    return parts[1], port


@dataclass(slots=True)
class _Pending:
    nonce: bytes
    sent_at: float
    tries: int


class DirectPeers:
    """Which direct addresses are proven, which are being asked, which gave no answer.

    ``service`` is this transport's service port and ``daemon`` its daemon's
    address (both travel in HELLO; a HELLO of another service is not answered).
    ``retry`` seconds between HELLOs to one address, ``tries`` HELLOs before it
    counts as unreachable, and then ``backoff`` seconds before it is asked again.
    At most ``capacity`` addresses are remembered (least recently used goes).
    """

    def __init__(
        self,
        *,
        service: int,
        daemon: tuple[str, int],
        retry: float = 0.5,
        tries: int = 4,
        backoff: float = 30.0,
        capacity: int = 4096,
    ) -> None:
        if not 0 < service <= 0xFFFF:
            raise ValueError(f"service port out of range: {service}")
        self.service = service
        self._service_bytes = service.to_bytes(2, "big")
        self.daemon = daemon
        self.retry = retry
        self.tries = tries
        self.backoff = backoff
        self.capacity = capacity
        self._verified: OrderedDict[object, None] = OrderedDict()
        self._pending: dict[object, _Pending] = {}
        self._unreachable: dict[object, float] = {}

    @property
    def daemon(self) -> tuple[str, int]:
        """This transport's daemon (it changes when a standalone daemon link reconnects)."""
        return self._daemon

    @daemon.setter
    def daemon(self, daemon: tuple[str, int]) -> None:
        self._daemon = daemon
        self._origin = self._service_bytes + _daemon_bytes(daemon)

    def verified(self, address: object) -> bool:
        """True when messages to ``address`` may go directly."""
        if address in self._verified:
            self._verified.move_to_end(address)
            return True
        return False

    def hello_for(self, address: object, now: float) -> bytes | None:
        """A HELLO to send to ``address`` now (None: proven, asked recently, or given up on)."""
        if address in self._verified:
            return None
        until = self._unreachable.get(address)
        if until is not None:
            if now < until:
                return None
            del self._unreachable[address]
        pending = self._pending.get(address)
        if pending is not None:
            if now < pending.sent_at + self.retry:
                return None
            if pending.tries >= self.tries:
                del self._pending[address]
                self._remember_unreachable(address, now)
                return None
            pending.tries += 1
            pending.sent_at = now
            return HELLO + pending.nonce + self._origin
        if len(self._pending) >= self.capacity:
            return None  # too many unanswered questions at once: use the daemon path
        nonce = os.urandom(NONCE_SIZE)
        self._pending[address] = _Pending(nonce, now, 1)
        return HELLO + nonce + self._origin

    def answer(self, hello: Hello) -> bytes | None:
        """The ACK for ``hello``; None when it comes from another service.

        (Whether the asker's daemon is on this service with no router between is
        the driver's question to its daemon, asked before this.)
        """
        if hello.service != self.service:
            return None
        return ACK + hello.nonce + self._service_bytes

    def acknowledged(self, data: bytes, address: object) -> bool:
        """An ACK arrived from ``address``: True if it proves a HELLO we sent there."""
        pending = self._pending.get(address)
        if pending is None or len(data) != _ACK_SIZE or data[:4] != ACK:
            return False
        if (
            data[4 : 4 + NONCE_SIZE] != pending.nonce
            or data[4 + NONCE_SIZE :] != self._service_bytes
        ):
            return False
        del self._pending[address]
        self._verified[address] = None
        while len(self._verified) > self.capacity:
            self._verified.popitem(last=False)
        return True

    def forget(self, address: object) -> None:
        """``address`` said goodbye (its transport closed): ask again before sending there.

        The next message to it takes the daemon path and sends a new HELLO;
        a transport that is really gone never answers and is given up on.
        """
        self._verified.pop(address, None)

    def _remember_unreachable(self, address: object, now: float) -> None:
        self._unreachable[address] = now + self.backoff
        if len(self._unreachable) > self.capacity:
            oldest = min(self._unreachable, key=self._unreachable.__getitem__)
            del self._unreachable[oldest]

    @staticmethod
    def is_control(data: bytes) -> bool:
        """True for HELLO/ACK datagrams (everything else belongs to the reliable core)."""
        return data[:4] in (HELLO, ACK)
