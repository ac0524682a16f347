"""Constants of the reliable multicast datagram format, shared by everything that reads or
writes it.

The pure framing (``rvasync.fallback.rmframe``), the compiled one
(``rvasync_native.rmframe``) and the protocol core (``rvasync.protocol.reliable``)
must agree on every one of these numbers, byte for byte on the wire, so they
live here once, in a module that imports nothing (as ``rvasync._wire`` does for
the message codec). The format itself is described in the pure twin's
docstring and in docs/reliable-multicast.md.
"""

from __future__ import annotations

__all__ = [
    "AGE_MAX",
    "COMMON_HEADER",
    "DATA_HEADER",
    "ENTRY_SIZE",
    "E_LOW_CONT",
    "E_NEXT_CONT",
    "E_NO_RETENTION",
    "E_SHARED",
    "F_NO_RETENTION",
    "GATHER_MIN",
    "HB_FINAL",
    "HB_HEADER",
    "K_FIRST",
    "K_LAST",
    "K_MIDDLE",
    "K_WHOLE",
    "LEN_MASK",
    "MAGIC",
    "MAX_DATAGRAM",
    "MAX_MESSAGE",
    "MIN_DATAGRAM",
    "NAK_HEADER",
    "RANGE_SIZE",
    "T_DATA",
    "T_HEARTBEAT",
    "T_NAK",
    "VERSION",
]

#: Every datagram starts with these two bytes; the version follows the CRC.
MAGIC = b"\xd2R"
VERSION = 1

#: Datagram types.
T_DATA = 1
T_HEARTBEAT = 2
T_NAK = 3

#: Largest message payload the protocol carries (64 MiB, as Rendezvous).
MAX_MESSAGE = 64 * 1024 * 1024
#: Largest UDP payload over IPv4.
MAX_DATAGRAM = 65507
#: Smallest configurable datagram: room for headers plus a useful chunk.
MIN_DATAGRAM = 256

#: Record kinds (the top two bits of a record header): a whole message, or the
#: first, a middle or the last fragment of one.
K_WHOLE = 0
K_FIRST = 1
K_MIDDLE = 2
K_LAST = 3
#: The low 30 bits of a record header: the chunk's length.
LEN_MASK = 0x3FFFFFFF

#: DATA flag: the sender keeps no retention buffer (reliability 0), so do not NAK.
F_NO_RETENTION = 1
#: HEARTBEAT flag: the sender is closing; this is its last word on each stream.
HB_FINAL = 1
#: Heartbeat entry flags: the sender retains nothing; the lowest retained
#: datagram opens with a continuation; the next datagram will; the stream's losses
#: are shared by several hosts lately (receivers spread their NAKs; readers that
#: predate the flag ignore it, as every bit they do not know).
E_NO_RETENTION = 1
E_LOW_CONT = 2
E_NEXT_CONT = 4
E_SHARED = 8

#: Largest stream age (ms) a DATA header or heartbeat entry carries (u32).
AGE_MAX = 0xFFFFFFFF

#: Sizes in bytes: the common header (magic, CRC, version, type, session); the
#: DATA header (common + stream, seq, first message index, age, flags); the
#: HEARTBEAT header (common + flags, entry count) and one entry; the NAK header
#: (common + target session, stream, range count) and one range.
COMMON_HEADER = 16
DATA_HEADER = 41
HB_HEADER = 19
ENTRY_SIZE = 41
NAK_HEADER = 30
RANGE_SIZE = 12

#: A MIDDLE fragment at least this long is not copied into a datagram of its own:
#: the datagram stays its header plus a view of the message (see ``Gathered``).
GATHER_MIN = 16 * 1024
