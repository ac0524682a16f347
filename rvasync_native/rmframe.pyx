# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Datagram framing for the reliable multicast protocol (compiled twin of rvasync.fallback.rmframe).

Same interface, same bytes on the wire, same results for every input as the
pure-Python module, which documents the format (its numbers are defined once, in
rvasync._rmwire, for both twins and the protocol core); this one packs records with
memcpy into a preallocated buffer and slices received payloads straight out of
the datagram. Integers are read and written byte by byte (little-endian), so
the result does not depend on the host's byte order.
"""

from cpython.buffer cimport PyBUF_READ
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory, PyMemoryView_FromObject
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy

from rvasync_native.largemem cimport Prefault, prefault_start, prefault_wait

import zlib

_crc32 = zlib.crc32

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

# The wire format's numbers, from their one definition (rvasync._rmwire), as C globals
# set once at import: the per-packet code reads them as plain C values.
cdef Py_ssize_t C_DATA_HEADER = DATA_HEADER
cdef Py_ssize_t C_HB_HEADER = HB_HEADER
cdef Py_ssize_t C_ENTRY = ENTRY_SIZE
cdef Py_ssize_t C_NAK_HEADER = NAK_HEADER
cdef Py_ssize_t C_RANGE = RANGE_SIZE
cdef Py_ssize_t C_MAX_MESSAGE = MAX_MESSAGE
cdef int C_MAX_DATAGRAM = MAX_DATAGRAM
cdef int C_MIN_DATAGRAM = MIN_DATAGRAM
cdef unsigned char C_MAGIC0 = MAGIC[0]
cdef unsigned char C_MAGIC1 = MAGIC[1]
cdef unsigned char C_VERSION = VERSION
cdef int C_T_DATA = T_DATA
cdef int C_T_HEARTBEAT = T_HEARTBEAT
cdef int C_T_NAK = T_NAK
cdef int C_K_WHOLE = K_WHOLE
cdef int C_K_FIRST = K_FIRST
cdef int C_K_MIDDLE = K_MIDDLE
cdef int C_K_LAST = K_LAST
cdef uint32_t C_LEN_MASK = LEN_MASK
cdef Py_ssize_t C_GATHER_MIN = GATHER_MIN
if (COMMON_HEADER, len(MAGIC)) != (16, 2):
    # wr_common and the parsers below write and read the common header by byte offset
    raise ImportError("rvasync_native.rmframe: common header layout differs from rvasync._rmwire")

# An assembly this far along starts faulting in the rest of its buffer (4 MiB).
DEF C_PREFAULT_AFTER = 4194304

cdef uint64_t U64_MAX = 0xFFFFFFFFFFFFFFFF


cdef inline uint32_t rd32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t rd64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>rd32(p)) | ((<uint64_t>rd32(p + 4)) << 32)


cdef inline void wr32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef inline void wr64(unsigned char* p, uint64_t v) noexcept nogil:
    wr32(p, <uint32_t>v)
    wr32(p + 4, <uint32_t>(v >> 32))


cdef inline void wr_common(unsigned char* p, int kind, uint64_t session) noexcept nogil:
    p[0] = C_MAGIC0
    p[1] = C_MAGIC1
    wr32(p + 2, 0)
    p[6] = C_VERSION
    p[7] = kind
    wr64(p + 8, session)


cdef extern from "zlib.h":
    # The function behind Python's zlib.crc32, called directly: a datagram's CRC
    # then costs no Python call, memoryview or argument parsing.
    unsigned long zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf,
                                     unsigned int length) nogil


cdef inline uint32_t crc_of(const unsigned char* p, Py_ssize_t n) noexcept:
    """CRC-32 of p[:n] (n is at most a datagram, far below the unsigned int limit)."""
    return <uint32_t>zlib_crc32(0, p, <unsigned int>n)


cdef bytes seal(unsigned char* p, Py_ssize_t n):
    """Write the CRC of p[6:n] into p[2:6] and return the datagram as bytes."""
    wr32(p + 2, crc_of(p + 6, n - 6))
    return PyBytes_FromStringAndSize(<char*>p, n)


cdef class Gathered:
    """A DATA datagram kept as its header and a view of the message (see the pure twin).

    The CRC is computed on first use of :attr:`parts` (when the datagram is
    sent), not when the packer makes it, so a large message's first datagrams
    leave while the checksums of the later ones are still to be computed.
    """

    cdef bytes _header
    cdef object _chunk
    cdef bint _sealed
    cdef Py_ssize_t _size

    def __init__(self, bytes header, chunk):
        if PyBytes_GET_SIZE(header) < C_DATA_HEADER:
            raise ValueError("a Gathered header holds at least a DATA header")
        self._header = header
        self._chunk = chunk
        self._size = PyBytes_GET_SIZE(header) + len(chunk)

    @property
    def parts(self):
        """(header bytes, chunk view), in wire order; the header's CRC filled in."""
        cdef unsigned char* p
        if not self._sealed:
            # The header has not been handed out yet, so filling its CRC field in
            # place changes nothing anyone has seen.
            p = <unsigned char*>PyBytes_AS_STRING(self._header)
            wr32(
                p + 2,
                <uint32_t>_crc32(
                    self._chunk, crc_of(p + 6, PyBytes_GET_SIZE(self._header) - 6)
                ),
            )
            self._sealed = True
        return (self._header, self._chunk)

    def __len__(self):
        return self._size

    def __bytes__(self):
        return b"".join(self.parts)

    def __repr__(self):
        return f"Gathered({self._size} bytes)"


cdef class Packer:
    """Packs one outbound stream's messages into sequenced DATA datagrams (see the pure twin)."""

    cdef bytearray _store
    cdef unsigned char* _p
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef list _closed
    cdef public uint64_t session
    cdef public uint32_t stream
    cdef public int flags
    cdef public uint32_t age_ms
    cdef public uint64_t seq
    cdef public uint64_t msg_next
    cdef public uint64_t head_msg
    cdef public bint head_cont

    def __init__(self, int max_datagram, uint64_t session, uint32_t stream, int flags=0):
        if not C_MIN_DATAGRAM <= max_datagram <= C_MAX_DATAGRAM:
            raise ValueError(
                f"max_datagram must be within {MIN_DATAGRAM}..{MAX_DATAGRAM}, got {max_datagram}"
            )
        self._cap = max_datagram
        self._store = bytearray(max_datagram)
        self._p = <unsigned char*>(<char*>self._store)
        self._len = C_DATA_HEADER
        self._closed = []
        self.session = session
        self.stream = stream
        self.flags = flags
        self.age_ms = 0
        self.seq = 0
        self.msg_next = 1
        self.head_msg = 1
        self.head_cont = False

    @property
    def pending(self):
        """True when the open datagram holds at least one record."""
        return self._len > C_DATA_HEADER

    def add(self, payload):
        """Append one message (at most MAX_MESSAGE bytes; the caller checks)."""
        cdef const unsigned char[::1] view
        if type(payload) is bytes:
            self._add(
                <const unsigned char*>PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload), payload
            )
        else:
            # Not bytes: may change after this call, so it is always copied (never gathered).
            view = payload
            if view.shape[0] == 0:
                self._add(<const unsigned char*>b"", 0, None)
            else:
                self._add(&view[0], view.shape[0], None)

    def add_many(self, list payloads):
        """Append several messages in order (same as calling add for each)."""
        for payload in payloads:
            self.add(payload)

    def seal_one(self, bytes payload, uint32_t age_ms):
        """The next datagram holding ``payload`` alone, or None (see the pure twin)."""
        cdef unsigned char* p = self._p
        cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
        cdef bytes datagram
        if self._len != C_DATA_HEADER or self._closed or n + 4 > self._cap - C_DATA_HEADER:
            return None
        self.age_ms = age_ms
        wr32(p + C_DATA_HEADER, <uint32_t>n)
        memcpy(p + C_DATA_HEADER + 4, PyBytes_AS_STRING(payload), n)
        self.msg_next += 1
        self._next_header(p)
        datagram = seal(p, C_DATA_HEADER + 4 + n)
        self.head_msg = self.msg_next
        self.head_cont = False
        return datagram

    cdef void _add(self, const unsigned char* src, Py_ssize_t n, object owner) except *:
        cdef unsigned char* p = self._p
        cdef Py_ssize_t whole_room = self._cap - C_DATA_HEADER - 4
        cdef Py_ssize_t chunk, off
        cdef uint64_t msg
        cdef bint gather
        if self._len + n + 4 <= self._cap:
            wr32(p + self._len, <uint32_t>n)
            memcpy(p + self._len + 4, src, n)
            self._len += n + 4
            self.msg_next += 1
            return
        if n <= whole_room:
            self._close()
            wr32(p + self._len, <uint32_t>n)
            memcpy(p + self._len + 4, src, n)
            self._len += n + 4
            self.msg_next += 1
            return
        if self._cap - self._len - 8 < 64:
            self._close()
        msg = self.msg_next
        if self._len == C_DATA_HEADER:
            self.head_msg = msg
        chunk = self._cap - self._len - 8
        wr32(p + self._len, (<uint32_t>C_K_FIRST << 30) | <uint32_t>chunk)
        wr32(p + self._len + 4, <uint32_t>n)
        memcpy(p + self._len + 8, src, chunk)
        self._len += chunk + 8
        off = chunk
        self._close()
        gather = whole_room >= C_GATHER_MIN and owner is not None
        while n - off > whole_room:
            self.head_msg = msg
            self.head_cont = True
            if gather:
                self._close_gathered(owner, off, whole_room)
            else:
                wr32(p + self._len, (<uint32_t>C_K_MIDDLE << 30) | <uint32_t>whole_room)
                memcpy(p + self._len + 4, src + off, whole_room)
                self._len += whole_room + 4
                self._close()
            off += whole_room
        self.head_msg = msg
        self.head_cont = True
        wr32(p + self._len, (<uint32_t>C_K_LAST << 30) | <uint32_t>(n - off))
        memcpy(p + self._len + 4, src + off, n - off)
        self._len += n - off + 4
        self.msg_next = msg + 1

    cdef void _close(self) except *:
        cdef unsigned char* p = self._p
        if self._len == C_DATA_HEADER:
            return
        self._next_header(p)
        self._closed.append(seal(p, self._len))
        self._len = C_DATA_HEADER
        self.head_msg = self.msg_next
        self.head_cont = False

    cdef inline void _next_header(self, unsigned char* p) noexcept:
        """Number the next datagram and write its DATA header at ``p``."""
        self.seq += 1
        wr_common(p, C_T_DATA, self.session)
        wr32(p + 16, self.stream)
        wr64(p + 20, self.seq)
        wr64(p + 28, self.head_msg)
        wr32(p + 36, self.age_ms)
        p[40] = self.flags & 0xFF

    cdef void _close_gathered(self, bytes owner, Py_ssize_t off, Py_ssize_t n) except *:
        """Close a datagram holding one MIDDLE record, owner[off:off + n], without copying it."""
        cdef bytes header = PyBytes_FromStringAndSize(NULL, C_DATA_HEADER + 4)
        cdef unsigned char* p = <unsigned char*>PyBytes_AS_STRING(header)
        cdef object chunk = PyMemoryView_FromObject(owner)[off : off + n]
        self._next_header(p)
        wr32(p + C_DATA_HEADER, (<uint32_t>C_K_MIDDLE << 30) | <uint32_t>n)
        self._closed.append(Gathered(header, chunk))
        self.head_msg = self.msg_next
        self.head_cont = False

    def flush(self):
        """Close the open datagram if it holds anything."""
        if self._len > C_DATA_HEADER:
            self._close()

    def take(self):
        """The datagrams closed since the last call, in sequence order."""
        cdef list closed = self._closed
        if closed:
            self._closed = []
        return closed


cdef class Assembly:
    """One fragmented message being reassembled (see the pure twin).

    The buffer is the result itself: a bytes object created uninitialised and
    filled in place with memcpy. Nothing else holds a reference to it until
    :meth:`result` hands it out, once it is complete, so no reader ever sees
    it change.
    """

    cdef bytes _buf
    cdef readonly Py_ssize_t size
    cdef readonly Py_ssize_t total
    cdef Prefault _prefault
    cdef bint _prefaulted

    def __init__(self, Py_ssize_t total, first):
        cdef const unsigned char[::1] view = first
        cdef Py_ssize_t n = view.shape[0]
        if not (0 <= n < total <= C_MAX_MESSAGE):
            raise ValueError(
                f"a fragmented message is 1..{C_MAX_MESSAGE} bytes, its first chunk "
                f"shorter than the whole; got total {total}, first chunk {n}"
            )
        self._buf = PyBytes_FromStringAndSize(NULL, total)
        if n:
            memcpy(PyBytes_AS_STRING(self._buf), &view[0], n)
        self.size = n
        self.total = total

    def add(self, chunk):
        """Append the next fragment; False (nothing copied) if it overflows the total."""
        cdef const unsigned char[::1] view = chunk
        cdef Py_ssize_t n = view.shape[0]
        if n > self.total - self.size:
            return False
        if n:
            memcpy(PyBytes_AS_STRING(self._buf) + self.size, &view[0], n)
        self.size += n
        if not self._prefaulted and self.size >= C_PREFAULT_AFTER:
            # Enough has arrived that the sender is real and the message big: have
            # the rest of the buffer's pages faulted in by another thread while this
            # one keeps copying (see largemem). Before this point the buffer costs
            # only the pages received, so a forged FIRST record commits no memory.
            self._prefaulted = True
            prefault_start(
                &self._prefault,
                PyBytes_AS_STRING(self._buf) + self.size,
                PyBytes_AS_STRING(self._buf) + self.total,
            )
        return True

    def result(self):
        """The whole message; only once every byte has arrived (``size == total``)."""
        if self.size != self.total:
            raise ValueError(f"the message is incomplete: {self.size} of {self.total} bytes")
        with nogil:
            prefault_wait(&self._prefault)
        return self._buf

    def __dealloc__(self):
        # The prefault thread works on the buffer, so the buffer outlives it.
        with nogil:
            prefault_wait(&self._prefault)


def data_info(data):
    """(seq, index of first message, first record is a continuation) of a DATA datagram we built."""
    cdef bytes head = data if type(data) is bytes else (<Gathered?>data)._header
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(head)
    cdef int kind = rd32(p + C_DATA_HEADER) >> 30
    return rd64(p + 20), rd64(p + 28), kind == C_K_MIDDLE or kind == C_K_LAST


def build_heartbeat(uint64_t session, int flags, list entries):
    """A HEARTBEAT datagram; each entry is (stream, flags, age_ms, low, low_msg, last, next_msg)."""
    cdef Py_ssize_t count = len(entries)
    cdef Py_ssize_t n = C_HB_HEADER + C_ENTRY * count
    cdef bytearray store = bytearray(n)
    cdef unsigned char* p = <unsigned char*>(<char*>store)
    cdef unsigned char* e
    if count > 0xFFFF:
        raise ValueError(f"a heartbeat holds at most 65535 entries, got {count}")
    wr_common(p, C_T_HEARTBEAT, session)
    p[16] = flags & 0xFF
    p[17] = count & 0xFF
    p[18] = (count >> 8) & 0xFF
    e = p + C_HB_HEADER
    for stream, eflags, age, low, low_msg, last, next_msg in entries:
        wr32(e, <uint32_t>stream)
        e[4] = <int>eflags & 0xFF
        wr32(e + 5, <uint32_t>age)
        wr64(e + 9, <uint64_t>low)
        wr64(e + 17, <uint64_t>low_msg)
        wr64(e + 25, <uint64_t>last)
        wr64(e + 33, <uint64_t>next_msg)
        e += C_ENTRY
    return seal(p, n)


def build_nak(uint64_t session, uint64_t target, uint32_t stream, list ranges):
    """A NAK datagram asking target to resend ranges ((first seq, count) pairs) of stream."""
    cdef Py_ssize_t count = len(ranges)
    cdef Py_ssize_t n = C_NAK_HEADER + C_RANGE * count
    cdef bytearray store = bytearray(n)
    cdef unsigned char* p = <unsigned char*>(<char*>store)
    cdef unsigned char* r
    if count > 0xFFFF:
        raise ValueError(f"a NAK holds at most 65535 ranges, got {count}")
    wr_common(p, C_T_NAK, session)
    wr64(p + 16, target)
    wr32(p + 24, stream)
    p[28] = count & 0xFF
    p[29] = (count >> 8) & 0xFF
    r = p + C_NAK_HEADER
    for first, num in ranges:
        wr64(r, <uint64_t>first)
        wr32(r + 8, <uint32_t>num)
        r += C_RANGE
    return seal(p, n)


def parse(data):
    """Validate and unpack one datagram, or return None if it is malformed in any way (see the pure twin)."""
    cdef bytes raw
    if type(data) is bytes:
        raw = <bytes>data
    else:
        try:
            raw = bytes(memoryview(data))
        except (TypeError, ValueError):
            return None
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    if n < C_HB_HEADER:
        return None
    if p[0] != C_MAGIC0 or p[1] != C_MAGIC1 or p[6] != C_VERSION:
        return None
    if crc_of(p + 6, n - 6) != rd32(p + 2):
        return None
    cdef int kind = p[7]
    cdef uint64_t session = rd64(p + 8)
    if kind == C_T_DATA:
        return _parse_data(raw, p, n, session)
    if kind == C_T_HEARTBEAT:
        return _parse_heartbeat(p, n, session)
    if kind == C_T_NAK:
        return _parse_nak(p, n, session)
    return None


cdef object _parse_data(bytes raw, const unsigned char* p, Py_ssize_t n, uint64_t session):
    cdef uint64_t seq, msg
    cdef Py_ssize_t off = C_DATA_HEADER
    cdef Py_ssize_t length
    cdef uint32_t word, total = 0
    cdef int kind, head = -1, tail = -1
    cdef list payloads
    if n <= C_DATA_HEADER:
        return None
    seq = rd64(p + 20)
    msg = rd64(p + 28)
    if seq == 0 or msg == 0:
        return None
    payloads = []
    while off < n:
        if off + 4 > n:
            return None
        word = rd32(p + off)
        off += 4
        kind = word >> 30
        length = word & C_LEN_MASK
        if kind == C_K_WHOLE:
            if tail == C_K_FIRST or tail == C_K_MIDDLE:
                return None
        elif kind == C_K_FIRST:
            if tail == C_K_FIRST or tail == C_K_MIDDLE or off + 4 > n:
                return None
            total = rd32(p + off)
            off += 4
            if total > C_MAX_MESSAGE or <uint32_t>length >= total:
                return None
        elif head != -1 or length == 0:
            return None
        if length > n - off:
            return None
        payloads.append(PyBytes_FromStringAndSize(<const char*>(p + off), length))
        off += length
        if head == -1:
            head = kind
        tail = kind
    if tail != C_K_FIRST:
        total = 0
    return (T_DATA, session, rd32(p + 16), seq, msg, rd32(p + 36), p[40], head, tail, total, payloads)


cdef object _parse_heartbeat(const unsigned char* p, Py_ssize_t n, uint64_t session):
    cdef Py_ssize_t count, i
    cdef const unsigned char* e
    cdef uint64_t low, low_msg, last, next_msg
    cdef list entries
    count = p[17] | (p[18] << 8)
    if count == 0 or n != C_HB_HEADER + C_ENTRY * count:
        return None
    entries = []
    e = p + C_HB_HEADER
    for i in range(count):
        low = rd64(e + 9)
        low_msg = rd64(e + 17)
        last = rd64(e + 25)
        next_msg = rd64(e + 33)
        if last == U64_MAX or low == 0 or low > last + 1 or low_msg == 0 or next_msg < low_msg:
            return None
        entries.append((rd32(e), e[4], rd32(e + 5), low, low_msg, last, next_msg))
        e += C_ENTRY
    return (T_HEARTBEAT, session, p[16], entries)


cdef object _parse_nak(const unsigned char* p, Py_ssize_t n, uint64_t session):
    cdef Py_ssize_t count, i
    cdef const unsigned char* r
    cdef uint64_t first
    cdef uint32_t num
    cdef list ranges
    if n < C_NAK_HEADER:
        return None
    count = p[28] | (p[29] << 8)
    if count == 0 or n != C_NAK_HEADER + C_RANGE * count:
        return None
    ranges = []
    r = p + C_NAK_HEADER
    for i in range(count):
        first = rd64(r)
        num = rd32(r + 8)
        if first == 0 or num == 0 or first - 1 > U64_MAX - num:
            return None
        ranges.append((first, num))
        r += C_RANGE
    return (T_NAK, session, rd64(p + 16), rd32(p + 24), ranges)
