# cython: language_level=3, boundscheck=False, wraparound=False
"""The client protocol's message-frame bodies (compiled twin of rvasync.fallback.clientframes).

Same interface and results as the pure-Python module, which documents them.
This one walks the frame headers and the two msgpack shapes a message frame
uses (an array header, then one ``bin`` header per message) directly over the
receive buffer instead of slicing it and asking msgpack to build and check a
general object, and it writes a frame's header and body into one
preallocated ``bytes``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject_GenericSetAttr
from libc.string cimport memcpy

cdef str _MESSAGES = "messages"


cdef inline Py_ssize_t _be(const unsigned char* p, int n) noexcept:
    cdef Py_ssize_t value = 0
    cdef int i
    for i in range(n):
        value = (value << 8) | p[i]
    return value


cdef list _split(const unsigned char* p, Py_ssize_t total, Py_ssize_t max_count, Py_ssize_t max_bin):
    """The messages of one body, or None if it is not a plain array of bins."""
    cdef Py_ssize_t pos, count, i, n
    cdef unsigned char tag
    cdef list out
    if total == 0:
        return None
    tag = p[0]
    if 0x90 <= tag <= 0x9F:
        count = tag & 0x0F
        pos = 1
    elif tag == 0xDC:
        if total < 3:
            return None
        count = _be(p + 1, 2)
        pos = 3
    elif tag == 0xDD:
        if total < 5:
            return None
        count = _be(p + 1, 4)
        pos = 5
    else:
        return None
    if count > max_count or count > total - pos:
        return None
    out = [None] * count
    for i in range(count):
        if pos >= total:
            return None
        tag = p[pos]
        if tag == 0xC4:
            if total - pos < 2:
                return None
            n = p[pos + 1]
            pos += 2
        elif tag == 0xC5:
            if total - pos < 3:
                return None
            n = _be(p + pos + 1, 2)
            pos += 3
        elif tag == 0xC6:
            if total - pos < 5:
                return None
            n = _be(p + pos + 1, 4)
            pos += 5
        else:
            return None
        if n > max_bin or n > total - pos:
            return None
        out[i] = PyBytes_FromStringAndSize(<const char*>(p + pos), n)
        pos += n
    if pos != total:
        return None
    return out


def take_message_frames(
    object buffer,
    Py_ssize_t offset,
    Py_ssize_t max_frame,
    Py_ssize_t max_bin,
    type publish,
    type deliver,
):
    """``([frame, ...], offset after them)`` for the message frames at ``offset``."""
    cdef int publish_type = publish.frame_type
    cdef int deliver_type = deliver.frame_type
    cdef object frame
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t total, length, end
    cdef int frame_type
    cdef list taken = []
    cdef list wires
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        total = view.len
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        while total - offset >= 5:
            length = _be(p + offset, 4)
            frame_type = p[offset + 4]
            if (
                frame_type != publish_type and frame_type != deliver_type
            ) or not 0 < length <= max_frame:
                break
            end = offset + 4 + length
            if end > total:
                break
            wires = _split(p + offset + 5, length - 1, max_frame, max_bin)
            if wires is None:
                break
            # The frames are frozen dataclasses: set the one slot as their __init__ would,
            # without running it (no Python frame per frame).
            frame = (deliver if frame_type == deliver_type else publish).__new__(
                deliver if frame_type == deliver_type else publish
            )
            PyObject_GenericSetAttr(frame, _MESSAGES, wires)
            taken.append(frame)
            offset = end
    finally:
        PyBuffer_Release(&view)
    return taken, offset


cdef inline Py_ssize_t _put_be(unsigned char* p, Py_ssize_t value, int n) noexcept:
    cdef int i
    for i in range(n - 1, -1, -1):
        p[i] = value & 0xFF
        value >>= 8
    return n


def pack_messages(int frame_type, list messages):
    """One frame of ``frame_type`` carrying ``messages`` (a list of bytes), header included."""
    cdef Py_ssize_t count = PyList_GET_SIZE(messages)
    cdef Py_ssize_t body = 0, i, n, pos
    cdef object wire
    cdef bytes frame
    cdef unsigned char* out
    for i in range(count):
        wire = <object>PyList_GET_ITEM(messages, i)
        if type(wire) is not bytes:
            raise TypeError(f"messages must be bytes, got {type(wire).__name__}")
        n = PyBytes_GET_SIZE(wire)
        if n > 0xFFFFFFFF:
            raise ValueError(f"a message of {n} bytes is too large for a bin item")
        body += n + (2 if n < 0x100 else 3 if n < 0x10000 else 5)
    if count < 16:
        body += 1
    elif count < 0x10000:
        body += 3
    elif count <= 0xFFFFFFFF:
        body += 5
    else:
        raise ValueError(f"{count} messages are too many for one array")
    if body + 1 > 0xFFFFFFFF:
        raise ValueError(f"a frame of {body + 1} bytes is too large")
    frame = PyBytes_FromStringAndSize(NULL, 5 + body)
    out = <unsigned char*>PyBytes_AS_STRING(frame)
    _put_be(out, body + 1, 4)
    out[4] = <unsigned char>frame_type
    pos = 5
    if count < 16:
        out[pos] = 0x90 | count
        pos += 1
    elif count < 0x10000:
        out[pos] = 0xDC
        pos += 1 + _put_be(out + pos + 1, count, 2)
    else:
        out[pos] = 0xDD
        pos += 1 + _put_be(out + pos + 1, count, 4)
    for i in range(count):
        wire = <object>PyList_GET_ITEM(messages, i)
        n = PyBytes_GET_SIZE(wire)
        if n < 0x100:
            out[pos] = 0xC4
            out[pos + 1] = <unsigned char>n
            pos += 2
        elif n < 0x10000:
            out[pos] = 0xC5
            pos += 1 + _put_be(out + pos + 1, n, 2)
        else:
            out[pos] = 0xC6
            pos += 1 + _put_be(out + pos + 1, n, 4)
        memcpy(out + pos, PyBytes_AS_STRING(wire), n)
        pos += n
    return frame
