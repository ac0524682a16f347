# cython: language_level=3, boundscheck=False, wraparound=False
"""The daemon's per-message receive path (compiled twin of rvasync.fallback.daemonpath).

Same interface and results as the pure-Python module, which documents the
behaviour. This one reads the subject bytes straight from the buffer, and when
a message has the same subject as the one before it (the usual case in a
burst) reuses that route without building a key or looking it up. The wire layout it
reads (where the subject sits) comes from rvasync._wire, as for the pure twin.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from libc.string cimport memcmp

from rvasync._wire import FIXSTR, FIXSTR_MAX, MESSAGE_ARRAY, STR8, SUBJECT_TAG_OFFSET

# The layout constants of rvasync._wire, as C values (one source for both twins).
cdef unsigned char _MESSAGE_ARRAY = MESSAGE_ARRAY
cdef Py_ssize_t _TAG = SUBJECT_TAG_OFFSET
cdef unsigned char _FIXSTR = FIXSTR
cdef unsigned char _FIXSTR_MAX = FIXSTR_MAX
cdef unsigned char _STR8 = STR8


cdef inline Py_ssize_t _key_span(const unsigned char* p, Py_ssize_t n, Py_ssize_t* start):
    """Length of the subject bytes at p (start set), or -1 when there is no short subject."""
    cdef unsigned char tag
    cdef Py_ssize_t length
    if n <= _TAG + 1 or p[_TAG - 1] != _MESSAGE_ARRAY:
        return -1
    tag = p[_TAG]
    if _FIXSTR < tag <= _FIXSTR_MAX:
        start[0] = _TAG + 1
        length = tag - _FIXSTR
    elif tag == _STR8:
        start[0] = _TAG + 2
        length = p[_TAG + 1]
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
    cdef object data, entry, prev_entry = None, owned, raw, sessions, msg
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
        owned, raw, sessions = entry
        if not sessions:
            unwanted += 1
            continue
        if raw is not None:
            deliveries += 1
            try:
                raw(data)
            except Exception as exc:
                contain(exc, data)
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
