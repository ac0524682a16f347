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
a firewall, a routing daemon in between), messages keep taking the daemon
path. :class:`DirectPeers` keeps that state; the driver owns socket and clock.
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
    "direct_tag",
    "parse_direct_inbox",
]

#: Control datagrams (the reliable core's datagrams start with another byte).
HELLO = b"RVDH"
ACK = b"RVDA"
NONCE_SIZE = 16
_CONTROL_SIZE = len(HELLO) + NONCE_SIZE


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

    ``retry`` seconds between HELLOs to one address, ``tries`` HELLOs before it
    counts as unreachable, and then ``backoff`` seconds before it is asked again.
    At most ``capacity`` addresses are remembered (least recently used goes).
    """

    def __init__(
        self,
        *,
        retry: float = 0.5,
        tries: int = 4,
        backoff: float = 30.0,
        capacity: int = 4096,
    ) -> None:
        self.retry = retry
        self.tries = tries
        self.backoff = backoff
        self.capacity = capacity
        self._verified: OrderedDict[object, None] = OrderedDict()
        self._pending: dict[object, _Pending] = {}
        self._unreachable: dict[object, float] = {}

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
            return HELLO + pending.nonce
        if len(self._pending) >= self.capacity:
            return None  # too many unanswered questions at once: use the daemon path
        nonce = os.urandom(NONCE_SIZE)
        self._pending[address] = _Pending(nonce, now, 1)
        return HELLO + nonce

    def answer(self, data: bytes) -> bytes | None:
        """The ACK for a HELLO datagram (None if ``data`` is not a well-formed HELLO)."""
        if len(data) != _CONTROL_SIZE or data[:4] != HELLO:
            return None
        return ACK + data[4:]

    def acknowledged(self, data: bytes, address: object) -> bool:
        """An ACK arrived from ``address``: True if it proves a HELLO we sent there."""
        pending = self._pending.get(address)
        if pending is None or len(data) != _CONTROL_SIZE or data[:4] != ACK:
            return False
        if data[4:] != pending.nonce:
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
