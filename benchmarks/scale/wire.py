"""What crosses a simulated network, counted per transmission (one multicast is one
datagram on the wire however many hosts hear it, as on a LAN).

:class:`Wire` is handed every transmission of the reliable protocol (a DATA,
HEARTBEAT or NAK datagram, and its destination) and sorts it: an original
DATA datagram of the publisher's multicast stream, a repair (the same datagram
sent again, to the group or to one host), a heartbeat, a NAK. It also records
which original datagrams some host never heard, so repair traffic can be
counted per *lost datagram* (one datagram missed by any number of hosts) as
well as per *loss* (one host missing one datagram).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rvasync import _rmwire

_SEQ = struct.Struct("<QIQ")  # session, stream id, sequence number (DATA, from byte 8)


def head(data: Any) -> bytes:
    """The first bytes of a datagram (``bytes`` or an rmframe ``Gathered``)."""
    if type(data) is bytes:
        return data
    return bytes(data)[: _rmwire.DATA_HEADER]


@dataclass
class Wire:
    """Counters of one run's traffic; see the module docstring."""

    #: publisher session id: only its multicast stream's data is "the fan-out".
    publisher: int = 0
    datagrams: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    #: (stream, seq) of every original DATA datagram seen, and of those some host lost
    seen: set[tuple[int, int]] = field(default_factory=set)
    lost: set[tuple[int, int]] = field(default_factory=set)
    #: host losses of original fan-out datagrams (one host, one datagram)
    losses: int = 0
    #: the transmission being sent: its kind and key
    _kind: str = ""
    _key: tuple[int, int] | None = None

    def transmit(self, data: Any, dest: Any, size: int) -> None:
        """Classify one transmission (called once, before its copies)."""
        h = head(data)
        kind = h[7]
        self._key = None
        if kind == _rmwire.T_DATA:
            session, stream, seq = _SEQ.unpack_from(h, 8)
            key = (stream, seq)
            if session != self.publisher:
                name = "other data"
            elif key in self.seen:
                name = "repair (multicast)" if dest is None else "repair (unicast)"
            else:
                self.seen.add(key)
                name = "data"
                if stream == 0:
                    self._key = key
        elif kind == _rmwire.T_HEARTBEAT:
            name = "heartbeat"
        else:
            name = "nak"
        self._kind = name
        self.datagrams[name] += 1
        self.bytes[name] += size

    def skip(self) -> None:
        """A transmission not counted (before the measured phase): its copies neither."""
        self._key = None

    def copy_lost(self) -> None:
        """One copy of the current transmission never arrived."""
        if self._key is not None:
            self.losses += 1
            self.lost.add(self._key)

    def repairs(self) -> int:
        return self.datagrams["repair (multicast)"] + self.datagrams["repair (unicast)"]
