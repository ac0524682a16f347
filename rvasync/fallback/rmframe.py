"""Datagram framing for reliable multicast (pure-Python twin of ``rvasync_native.rmframe``).

This module is the per-packet hot path of :mod:`rvasync.protocol.reliable`: packing
many messages into one datagram (fragmenting the ones that do not fit), and
validating and unpacking received datagrams. It knows nothing about
sequencing policy, retransmission or time; the protocol core does.

Wire format (little-endian, see docs/reliable-multicast.md):

* common header, 16 bytes: magic ``b"\\xd2R"``, CRC-32 of every byte after the
  CRC field, version, datagram type, sender session id (u64).
* DATA (type 1): stream id (u32, 0 = multicast), datagram sequence number (u64),
  index of the message the first record belongs to (u64), stream age in ms
  (u32), flags (u8); then records. A record header is a u32 whose top two bits
  are the kind (WHOLE, FIRST, MIDDLE, LAST) and whose low 30 bits are the chunk
  length; a FIRST record adds the message's total length (u32).
* HEARTBEAT (type 2): flags (u8), entry count (u16), entries of 41 bytes:
  stream, flags, age, lowest retained seq, its message index, last seq, next
  message index.
* NAK (type 3): target session (u64), stream (u32), range count (u16), ranges of
  (first seq u64, count u32).

Its numbers (types, kinds, flags, sizes, limits) are defined once in
:mod:`rvasync._rmwire`, shared with the compiled twin and the protocol core, and
re-exported here; the struct layouts below are checked against them on import.

Every parse function returns ``None`` for anything malformed and never raises
on bad input, and nothing it allocates is larger than the datagram it reads.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, cast

from rvasync._rmwire import (
    COMMON_HEADER,
    DATA_HEADER,
    E_LOW_CONT,
    E_NEXT_CONT,
    E_NO_RETENTION,
    ENTRY_SIZE,
    F_NO_RETENTION,
    GATHER_MIN,
    HB_FINAL,
    HB_HEADER,
    K_FIRST,
    K_LAST,
    K_MIDDLE,
    K_WHOLE,
    LEN_MASK,
    MAGIC,
    MAX_DATAGRAM,
    MAX_MESSAGE,
    MIN_DATAGRAM,
    NAK_HEADER,
    RANGE_SIZE,
    T_DATA,
    T_HEARTBEAT,
    T_NAK,
    VERSION,
)

__all__ = [
    "DATA_HEADER",
    "ENTRY_SIZE",
    "E_LOW_CONT",
    "E_NEXT_CONT",
    "E_NO_RETENTION",
    "F_NO_RETENTION",
    "GATHER_MIN",
    "HB_FINAL",
    "HB_HEADER",
    "K_FIRST",
    "K_LAST",
    "K_MIDDLE",
    "K_WHOLE",
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
    "Assembly",
    "Gathered",
    "Packer",
    "build_heartbeat",
    "build_nak",
    "data_info",
    "parse",
]

_COMMON = struct.Struct("<2sIBBQ")
_DATA = struct.Struct("<2sIBBQIQQIB")
_HB = struct.Struct("<2sIBBQBH")
_ENTRY = struct.Struct("<IBIQQQQ")
_NAK = struct.Struct("<2sIBBQQIH")
_RANGE = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_U32_PAIR = struct.Struct("<II")
_CRC = struct.Struct("<I")

if (_COMMON.size, _DATA.size, _HB.size, _ENTRY.size, _NAK.size, _RANGE.size) != (
    COMMON_HEADER,
    DATA_HEADER,
    HB_HEADER,
    ENTRY_SIZE,
    NAK_HEADER,
    RANGE_SIZE,
):  # the layouts below and the sizes in rvasync._rmwire describe the same format
    raise ImportError("rvasync.fallback.rmframe: struct layouts disagree with rvasync._rmwire")

_LEN_MASK = LEN_MASK
_U64_MAX = (1 << 64) - 1
_FIRST_TAG = K_FIRST << 30
_MIDDLE_TAG = K_MIDDLE << 30
_LAST_TAG = K_LAST << 30


def _seal(buf: bytearray) -> bytes:
    """Write the CRC of ``buf[6:]`` into the header and return the finished datagram."""
    with memoryview(buf) as view, view[6:] as body:
        crc = zlib.crc32(body)
    _CRC.pack_into(buf, 2, crc)
    return bytes(buf)


class Gathered:
    """A DATA datagram kept as two parts: its header, and a view of the message it carries.

    The middle fragments of a large message are sent (``socket.sendmsg``) and
    retained for retransmission this way, so fragmenting a 64 MiB message
    copies nothing and allocates no second 64 MiB; the view keeps the
    (immutable) message alive as long as the datagram is retained.
    ``len()`` is the datagram's size and ``bytes()`` its contiguous form.

    The CRC is computed on first use of :attr:`parts` (when the datagram is
    sent), not when the packer makes it, so a large message's first datagrams
    leave while the checksums of the later ones are still to be computed.
    """

    __slots__ = ("_chunk", "_header", "_sealed", "_size")

    def __init__(self, header: bytes | bytearray, chunk: memoryview) -> None:
        if len(header) < DATA_HEADER:
            raise ValueError("a Gathered header holds at least a DATA header")
        self._header = header
        self._chunk = chunk
        self._sealed: bytes | None = None
        self._size = len(header) + len(chunk)

    @property
    def parts(self) -> tuple[bytes, memoryview]:
        """(header bytes, chunk view), in wire order; the header's CRC filled in."""
        sealed = self._sealed
        if sealed is None:
            header = bytearray(self._header)
            with memoryview(header) as view, view[6:] as body:
                crc = zlib.crc32(self._chunk, zlib.crc32(body))
            _CRC.pack_into(header, 2, crc)
            sealed = self._sealed = bytes(header)
        return (sealed, self._chunk)

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __repr__(self) -> str:
        return f"Gathered({self._size} bytes)"


class Packer:
    """Packs one outbound stream's messages into sequenced DATA datagrams.

    Messages accumulate in an open datagram; one that does not fit closes it,
    and one larger than a datagram is split into FIRST/MIDDLE/LAST fragments
    in consecutive datagrams. Closed datagrams wait in order for :meth:`take`.
    ``seq`` is the last sequence number assigned, ``msg_next`` the index the
    next message will get; ``head_msg``/``head_cont`` describe the first record
    of the open datagram (the next one to be closed), which is what a status
    report says about sequence number ``seq + 1``.
    """

    __slots__ = (
        "_buf",
        "_cap",
        "_closed",
        "age_ms",
        "flags",
        "head_cont",
        "head_msg",
        "msg_next",
        "seq",
        "session",
        "stream",
    )

    def __init__(self, max_datagram: int, session: int, stream: int, flags: int = 0) -> None:
        if not MIN_DATAGRAM <= max_datagram <= MAX_DATAGRAM:
            raise ValueError(
                f"max_datagram must be within {MIN_DATAGRAM}..{MAX_DATAGRAM}, got {max_datagram}"
            )
        self._cap = max_datagram
        self._buf = bytearray(DATA_HEADER)
        self._closed: list[bytes | Gathered] = []
        self.session = session
        self.stream = stream
        self.flags = flags
        self.age_ms = 0
        self.seq = 0
        self.msg_next = 1
        self.head_msg = 1
        self.head_cont = False

    @property
    def pending(self) -> bool:
        """True when the open datagram holds at least one record."""
        return len(self._buf) > DATA_HEADER

    def add(self, payload: bytes) -> None:
        """Append one message (at most MAX_MESSAGE bytes; the caller checks)."""
        buf = self._buf
        n = len(payload)
        if len(buf) + n + 4 <= self._cap:
            buf += _U32.pack(n)
            buf += payload
            self.msg_next += 1
            return
        self._add_slow(payload, n)

    def add_many(self, payloads: list[bytes]) -> None:
        """Append several messages in order (same as calling :meth:`add` for each)."""
        for payload in payloads:
            self.add(payload)

    def seal_one(self, payload: bytes, age_ms: int) -> bytes | None:
        """The next datagram holding ``payload`` alone, numbered and sealed; or None.

        Same result as ``age_ms`` set, :meth:`add`, :meth:`flush` and :meth:`take`
        when the packer holds nothing (no open record, no closed datagram waiting)
        and ``payload`` fits one datagram; in any other case nothing changes and
        None says to take that longer way. A lone request or reply then costs one
        call from packing to the bytes to send.
        """
        buf = self._buf
        n = len(payload)
        if len(buf) != DATA_HEADER or self._closed or n + 4 > self._cap - DATA_HEADER:
            return None
        self.age_ms = age_ms
        buf += _U32.pack(n)
        buf += payload
        self.msg_next += 1
        self._next_header(buf)
        datagram = _seal(buf)
        del buf[DATA_HEADER:]
        self.head_msg = self.msg_next
        self.head_cont = False
        return datagram

    def _add_slow(self, payload: bytes, n: int) -> None:
        cap = self._cap
        whole_room = cap - DATA_HEADER - 4
        if n <= whole_room:
            self._close()
            self._buf += _U32.pack(n)
            self._buf += payload
            self.msg_next += 1
            return
        # Fragment. A FIRST chunk shorter than this is not worth a record header.
        if cap - len(self._buf) - 8 < 64:
            self._close()
        buf = self._buf
        msg = self.msg_next
        if len(buf) == DATA_HEADER:
            self.head_msg = msg
        view = memoryview(payload)
        chunk = cap - len(buf) - 8
        buf += _U32_PAIR.pack(_FIRST_TAG | chunk, n)
        buf += view[:chunk]
        off = chunk
        self._close()
        gather = whole_room >= GATHER_MIN and type(payload) is bytes
        while n - off > whole_room:
            self.head_msg = msg
            self.head_cont = True
            if gather:
                self._close_gathered(memoryview(payload)[off : off + whole_room])
            else:
                self._buf += _U32.pack(_MIDDLE_TAG | whole_room)
                self._buf += view[off : off + whole_room]
                self._close()
            off += whole_room
        self.head_msg = msg
        self.head_cont = True
        self._buf += _U32.pack(_LAST_TAG | (n - off))
        self._buf += view[off:]
        view.release()
        self.msg_next = msg + 1

    def _close(self) -> None:
        buf = self._buf
        if len(buf) == DATA_HEADER:
            return
        self._next_header(buf)
        self._closed.append(_seal(buf))
        del buf[DATA_HEADER:]
        self.head_msg = self.msg_next
        self.head_cont = False

    def _next_header(self, buf: bytearray) -> None:
        """Number the next datagram and write its DATA header at the start of ``buf``."""
        self.seq += 1
        _DATA.pack_into(
            buf,
            0,
            MAGIC,
            0,
            VERSION,
            T_DATA,
            self.session,
            self.stream,
            self.seq,
            self.head_msg,
            self.age_ms,
            self.flags,
        )

    def _close_gathered(self, chunk: memoryview) -> None:
        """Close a datagram holding one MIDDLE record, ``chunk``, without copying it."""
        header = bytearray(DATA_HEADER + 4)
        self._next_header(header)
        _U32.pack_into(header, DATA_HEADER, _MIDDLE_TAG | len(chunk))
        self._closed.append(Gathered(bytes(header), chunk))
        self.head_msg = self.msg_next
        self.head_cont = False

    def flush(self) -> None:
        """Close the open datagram if it holds anything."""
        if len(self._buf) > DATA_HEADER:
            self._close()

    def take(self) -> list[bytes | Gathered]:
        """The datagrams closed since the last call, in sequence order."""
        closed = self._closed
        if closed:
            self._closed = []
        return closed


class Assembly:
    """One fragmented message being reassembled into one growing buffer.

    Fragments are appended as they arrive, so the message exists once while it
    is put together rather than as a list of chunks plus their join. (The
    compiled twin allocates the announced size at once and fills the result in
    place; this one grows, and copies once more into ``bytes`` at the end.)
    """

    __slots__ = ("_buf", "size", "total")

    def __init__(self, total: int, first: bytes) -> None:
        if not 0 <= len(first) < total <= MAX_MESSAGE:
            raise ValueError(
                f"a fragmented message is 1..{MAX_MESSAGE} bytes, its first chunk "
                f"shorter than the whole; got total {total}, first chunk {len(first)}"
            )
        # Grown as fragments arrive (large reallocations move pages, not bytes), so
        # memory follows what was received, not what a FIRST record announced.
        self._buf = bytearray(first)
        #: bytes received so far, and the message's announced length
        self.size = len(first)
        self.total = total

    def add(self, chunk: bytes) -> bool:
        """Append the next fragment; False (nothing copied) if it overflows the total."""
        end = self.size + len(chunk)
        if end > self.total:
            return False
        self._buf += chunk
        self.size = end
        return True

    def result(self) -> bytes:
        """The whole message; only once every byte has arrived (``size == total``)."""
        if self.size != self.total:
            raise ValueError(f"the message is incomplete: {self.size} of {self.total} bytes")
        return bytes(self._buf)


def data_info(data: bytes | Gathered) -> tuple[int, int, bool]:
    """(seq, index of first message, first record is a continuation) of a DATA datagram we built."""
    # A Gathered's header holds everything data_info reads, before sealing too.
    raw: bytes | bytearray = data._header if data.__class__ is Gathered else cast(bytes, data)
    seq, msg = struct.unpack_from("<QQ", raw, 20)
    kind = _U32.unpack_from(raw, DATA_HEADER)[0] >> 30
    return seq, msg, kind in (K_MIDDLE, K_LAST)


def build_heartbeat(session: int, flags: int, entries: list[tuple[Any, ...]]) -> bytes:
    """A HEARTBEAT datagram; each entry is (stream, flags, age_ms, low, low_msg, last, next_msg)."""
    buf = bytearray(HB_HEADER + ENTRY_SIZE * len(entries))
    _HB.pack_into(buf, 0, MAGIC, 0, VERSION, T_HEARTBEAT, session, flags, len(entries))
    off = HB_HEADER
    for entry in entries:
        _ENTRY.pack_into(buf, off, *entry)
        off += ENTRY_SIZE
    return _seal(buf)


def build_nak(session: int, target: int, stream: int, ranges: list[tuple[int, int]]) -> bytes:
    """A NAK asking ``target`` to resend ``ranges`` ((first seq, count) pairs) of ``stream``."""
    buf = bytearray(NAK_HEADER + RANGE_SIZE * len(ranges))
    _NAK.pack_into(buf, 0, MAGIC, 0, VERSION, T_NAK, session, target, stream, len(ranges))
    off = NAK_HEADER
    for first, count in ranges:
        _RANGE.pack_into(buf, off, first, count)
        off += RANGE_SIZE
    return _seal(buf)


def parse(data: bytes) -> tuple[Any, ...] | None:
    """Validate and unpack one datagram, or return None if it is malformed in any way.

    DATA: ``(T_DATA, session, stream, seq, msg, age_ms, flags, head, tail, total, payloads)``
    where ``head``/``tail`` are the kinds of the first and last record and
    ``total`` the declared length of a trailing FIRST fragment (else 0).
    HEARTBEAT: ``(T_HEARTBEAT, session, flags, entries)``.
    NAK: ``(T_NAK, session, target, stream, ranges)``.
    """
    try:
        n = len(data)
        if n < HB_HEADER:
            return None
        magic, crc, version, kind, session = _COMMON.unpack_from(data)
        if magic != MAGIC or version != VERSION:
            return None
        with memoryview(data) as view, view[6:] as body:
            if zlib.crc32(body) != crc:
                return None
        if kind == T_DATA:
            return _parse_data(data, n, session)
        if kind == T_HEARTBEAT:
            return _parse_heartbeat(data, n, session)
        if kind == T_NAK:
            return _parse_nak(data, n, session)
        return None
    except (struct.error, TypeError, ValueError):
        return None


def _parse_data(data: bytes, n: int, session: int) -> tuple[Any, ...] | None:
    if n <= DATA_HEADER:
        return None
    stream, seq, msg, age, flags = struct.unpack_from("<IQQIB", data, COMMON_HEADER)
    if seq == 0 or msg == 0:
        return None
    unpack = _U32.unpack_from
    payloads: list[Any] = []
    append = payloads.append
    off = DATA_HEADER
    head = tail = -1
    total = 0
    while off < n:
        if off + 4 > n:
            return None
        word = unpack(data, off)[0]
        off += 4
        kind = word >> 30
        length = word & _LEN_MASK
        if kind == K_WHOLE:
            if tail in (K_FIRST, K_MIDDLE):
                return None
        elif kind == K_FIRST:
            if tail in (K_FIRST, K_MIDDLE) or off + 4 > n:
                return None
            total = unpack(data, off)[0]
            off += 4
            if total > MAX_MESSAGE or length >= total:
                return None
        elif head != -1 or length == 0:
            # MIDDLE and LAST continue a message, so only the first record may be one.
            return None
        end = off + length
        if end > n:
            return None
        append(data[off:end])
        off = end
        if head == -1:
            head = kind
        tail = kind
    if tail != K_FIRST:
        total = 0
    return (T_DATA, session, stream, seq, msg, age, flags, head, tail, total, payloads)


def _parse_heartbeat(data: bytes, n: int, session: int) -> tuple[Any, ...] | None:
    if n < HB_HEADER:
        return None
    flags, count = struct.unpack_from("<BH", data, COMMON_HEADER)
    if count == 0 or n != HB_HEADER + ENTRY_SIZE * count:
        return None
    entries = []
    off = HB_HEADER
    for _ in range(count):
        entry = _ENTRY.unpack_from(data, off)
        off += ENTRY_SIZE
        _stream, _eflags, _age, low, low_msg, last, next_msg = entry
        if low == 0 or low > last + 1 or low_msg == 0 or next_msg < low_msg or last == _U64_MAX:
            return None
        entries.append(entry)
    return (T_HEARTBEAT, session, flags, entries)


def _parse_nak(data: bytes, n: int, session: int) -> tuple[Any, ...] | None:
    if n < NAK_HEADER:
        return None
    target, stream, count = struct.unpack_from("<QIH", data, COMMON_HEADER)
    if count == 0 or n != NAK_HEADER + RANGE_SIZE * count:
        return None
    ranges = []
    off = NAK_HEADER
    for _ in range(count):
        first, num = _RANGE.unpack_from(data, off)
        off += RANGE_SIZE
        if first == 0 or num == 0 or first + num - 1 > _U64_MAX:
            return None
        ranges.append((first, num))
    return (T_NAK, session, target, stream, ranges)
