# cython: language_level=3, boundscheck=False, wraparound=False
"""The daemon's per-message receive path (compiled twin of rvasync.fallback.daemonpath).

Same interface and results as the pure-Python module, which documents the
behaviour. This one reads the subject bytes straight from the buffer, and when
a message has the same subject as the one before it (the usual case in a
burst) reuses that route without building a key or looking it up.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from libc.string cimport memcmp


cdef inline Py_ssize_t _key_span(const unsigned char* p, Py_ssize_t n, Py_ssize_t* start):
    """Length of the subject bytes at p (start set), or -1 when there is no short subject."""
    cdef unsigned char tag
    cdef Py_ssize_t length
    if n <= 6 or p[4] != 0x94:
        return -1
    tag = p[5]
    if 0xA0 < tag <= 0xBF:
        start[0] = 6
        length = tag - 0xA0
    elif tag == 0xD9:
        start[0] = 7
        length = p[6]
    else:
        return -1
    if start[0] + length > n:
        length = n - start[0]  # as a slice would: truncated at the end of the data
    return length


def subject_key(bytes data):
    """The encoded subject bytes of wire message ``data``, or None (not a short subject)."""
    cdef Py_ssize_t start = 0
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t length = _key_span(p, PyBytes_GET_SIZE(data), &start)
    if length < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>p + start, length)


def deliver_multicast(
    list payloads,
    dict inbound,
    decode,
    slow,
    shared,
    contain,
    malformed_error,
):
    """Deliver each received message in ``payloads``; return (deliveries, unwanted, malformed)."""
    cdef Py_ssize_t deliveries = 0, unwanted = 0, malformed = 0
    cdef Py_ssize_t n, start = 0, length, prev_length = -1
    cdef const unsigned char* p
    cdef const unsigned char* prev = NULL
    cdef PyObject* found
    cdef object data, entry, prev_entry = None, owned, sessions, msg
    for data in payloads:
        if type(data) is not bytes:
            raise TypeError(f"payloads must be bytes, got {type(data).__name__}")
        p = <const unsigned char*>PyBytes_AS_STRING(data)
        n = PyBytes_GET_SIZE(data)
        entry = None
        length = _key_span(p, n, &start)
        if length > 0:
            if (
                length == prev_length
                and prev_entry is not None
                and memcmp(p + start, prev, length) == 0
            ):
                entry = prev_entry
            else:
                found = PyDict_GetItem(
                    inbound, PyBytes_FromStringAndSize(<const char*>p + start, length)
                )
                if found is not NULL:
                    entry = <object>found
        if entry is None:
            entry = slow(data)
            if entry is None:
                prev_entry = None
                prev_length = -1
                continue
        if length > 0:
            # Remember this route for the next message (the pointer stays valid: the
            # payloads list keeps ``data`` alive for the whole call).
            prev = p + start
            prev_length = length
            prev_entry = entry
        owned, sessions = entry
        if not sessions:
            unwanted += 1
            continue
        try:
            msg = decode(data)
        except malformed_error:
            malformed += 1
            continue
        deliveries += len(sessions)
        try:
            if owned is not None:
                owned(msg)
            else:
                shared(msg, data, sessions)
        except Exception as exc:
            contain(exc, msg)
    return deliveries, unwanted, malformed
