# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled byte form of remote-operation PDUs (twin of ``rvasync.fallback.ropspdu``).

Every remote-operation call encodes and parses two PDUs, one per side and
direction. The pure twin hands an eleven-item list to msgpack and checks the
parsed items one by one in Python; here the usual PDU is written and read in
C, and its ``Pdu`` is made by writing the dataclass's slots at their offsets
(as ``msgbuild`` does for messages) instead of running its ``__init__``.

The fast path covers what the cores make: exact str, bytes and bool values,
ints 0..127 (positive fixints), at most fifteen acknowledgments on encode.
Anything else -- and every malformed input -- goes to the pure twin, which
gives the exact bytes, PDU or error (:class:`PduError` naming the problem)
that it always gives: the two cannot disagree on what the fast path leaves
alone, and tests check that they agree on what it takes.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLong, PyLong_Check
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.string cimport memcpy

from rvasync.fallback import ropspdu as _pure
from rvasync.protocol.rops.pdutypes import WIRE_VERSION, Kind, Pdu, VerifyStatus

__all__ = ["decode", "encode", "new"]

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL
    object PyType_GenericAlloc(type, Py_ssize_t)
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

# The Pdu fields in the byte form's order (after the version), which is also
# the dataclass's field order.
cdef tuple _FIELDS = (
    "kind", "src", "invoke_id", "operation", "handshake", "body", "code", "transient",
    "detail", "status", "acks",
)
cdef enum:
    F_KIND, F_SRC, F_ID, F_OP, F_HS, F_BODY, F_CODE, F_TRANSIENT, F_DETAIL, F_STATUS, F_ACKS,
    F_COUNT

# The str fields, in the order they are written.
cdef Py_ssize_t _STRING_FIELDS[5]
_STRING_FIELDS[:] = [F_SRC, F_ID, F_OP, F_CODE, F_DETAIL]

cdef int _VERSION = WIRE_VERSION
cdef type _Pdu = Pdu
cdef list _KINDS = [None] * 128
cdef list _STATUSES = [None] * 128
for _k in Kind:
    _KINDS[int(_k)] = _k
for _v in VerifyStatus:
    _STATUSES[int(_v)] = _v
del _k, _v
cdef int _VERIFY_REPLY = int(Kind.VERIFY_REPLY)
cdef int _RVERIFY_REPLY = int(Kind.RVERIFY_REPLY)
cdef tuple _NO_ACKS = ()

# Slot offsets of Pdu, learnt once: writing them directly skips __init__ (a
# Python call of eleven arguments). Unless Pdu declares exactly _FIELDS as its
# own slots, decode calls Pdu(...) instead.
cdef Py_ssize_t _offset[F_COUNT]
cdef bint _slots_ok = False


cdef _learn():
    global _slots_ok
    cdef Py_ssize_t i
    own = Pdu.__dict__
    if tuple(own.get("__slots__", ())) != _FIELDS or Pdu.__base__ is not object:
        return
    descriptors = [own.get(name) for name in _FIELDS]
    if not all(d is not None and type(d).__name__ == "member_descriptor" for d in descriptors):
        return
    for i in range(F_COUNT):
        _offset[i] = (<PyMemberDescrObject*>descriptors[i]).d_member.offset
    _slots_ok = True


_learn()


cdef inline object _get(object obj, Py_ssize_t field):
    """A Pdu's slot ``field`` (Pdu's slots are never empty: __init__ sets them all)."""
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>obj) + _offset[field]))[0]
    if value is NULL:
        raise AttributeError(_FIELDS[field])
    return <object>value


cdef inline void _put(object obj, Py_ssize_t field, object value):
    """Store ``value`` in a freshly allocated (zeroed) Pdu's slot ``field``."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + _offset[field]))[0] = <PyObject*>value


# --- encode ---------------------------------------------------------------

cdef inline Py_ssize_t _str_head(Py_ssize_t n) noexcept:
    if n < 32:
        return 1
    if n < 0x100:
        return 2
    if n < 0x10000:
        return 3
    return 5


cdef inline Py_ssize_t _bin_head(Py_ssize_t n) noexcept:
    if n < 0x100:
        return 2
    if n < 0x10000:
        return 3
    return 5


cdef inline char* _w_str(char* out, const char* s, Py_ssize_t n) noexcept:
    if n < 32:
        out[0] = <char>(0xa0 | n)
        out += 1
    elif n < 0x100:
        out[0] = <char>0xd9
        out[1] = <char>n
        out += 2
    elif n < 0x10000:
        out[0] = <char>0xda
        out[1] = <char>(n >> 8)
        out[2] = <char>n
        out += 3
    else:
        out[0] = <char>0xdb
        out[1] = <char>(n >> 24)
        out[2] = <char>(n >> 16)
        out[3] = <char>(n >> 8)
        out[4] = <char>n
        out += 5
    memcpy(out, s, n)
    return out + n


cdef inline char* _w_bin(char* out, const char* s, Py_ssize_t n) noexcept:
    if n < 0x100:
        out[0] = <char>0xc4
        out[1] = <char>n
        out += 2
    elif n < 0x10000:
        out[0] = <char>0xc5
        out[1] = <char>(n >> 8)
        out[2] = <char>n
        out += 3
    else:
        out[0] = <char>0xc6
        out[1] = <char>(n >> 24)
        out[2] = <char>(n >> 16)
        out[3] = <char>(n >> 8)
        out[4] = <char>n
        out += 5
    memcpy(out, s, n)
    return out + n


cdef inline long _fixint(object value) except -2:
    """``value`` as a positive fixint (0..127), or -1 when it is not one (bools are not)."""
    cdef long v
    if value is True or value is False or not PyLong_Check(value):
        return -1
    v = PyLong_AsLong(value)  # an overflow raises: the caller's fallback handles it
    if v < 0 or v > 127:
        return -1
    return v


cdef object _encode_fast(object pdu):
    """The byte form, or None when ``pdu`` leaves the fast path."""
    cdef const char* text[5]
    cdef Py_ssize_t size[5]
    cdef const char* ack_text[15]
    cdef Py_ssize_t ack_size[15]
    cdef Py_ssize_t i, n_acks, total
    cdef long kind, handshake, status
    cdef char* out
    if type(pdu) is not _Pdu or not _slots_ok:
        return None
    kind = _fixint(_get(pdu, F_KIND))
    handshake = _fixint(_get(pdu, F_HS))
    raw_status = _get(pdu, F_STATUS)
    status = 0 if raw_status is None else _fixint(raw_status)
    if kind < 0 or handshake < 0 or status < 0:
        return None
    transient = _get(pdu, F_TRANSIENT)
    if transient is not True and transient is not False:
        return None
    body = _get(pdu, F_BODY)
    if not PyBytes_CheckExact(body):
        return None
    for i in range(5):
        s = _get(pdu, _STRING_FIELDS[i])
        if not PyUnicode_CheckExact(s):
            return None
        text[i] = PyUnicode_AsUTF8AndSize(s, &size[i])  # surrogates raise: fallback
        if size[i] > 0xffffffff:
            return None
    acks = _get(pdu, F_ACKS)
    if type(acks) is not tuple:
        return None
    n_acks = PyTuple_GET_SIZE(acks)
    if n_acks > 15:
        return None
    body_size = PyBytes_GET_SIZE(body)
    if body_size > 0xffffffff:
        return None
    # array head, version, kind, handshake, transient, status: one byte each
    total = 6 + _bin_head(body_size) + body_size
    for i in range(5):
        total += _str_head(size[i]) + size[i]
    if n_acks:
        total += 1
        for i in range(n_acks):
            s = <object>PyTuple_GET_ITEM(acks, i)
            if not PyUnicode_CheckExact(s):
                return None
            ack_text[i] = PyUnicode_AsUTF8AndSize(s, &ack_size[i])
            if ack_size[i] > 0xffffffff:
                return None
            total += _str_head(ack_size[i]) + ack_size[i]
    result = PyBytes_FromStringAndSize(NULL, total)
    out = PyBytes_AS_STRING(result)
    out[0] = <char>(0x9c if n_acks else 0x9b)
    out[1] = <char>_VERSION
    out[2] = <char>kind
    out = _w_str(out + 3, text[0], size[0])
    out = _w_str(out, text[1], size[1])
    out = _w_str(out, text[2], size[2])
    out[0] = <char>handshake
    out = _w_bin(out + 1, PyBytes_AS_STRING(body), body_size)
    out = _w_str(out, text[3], size[3])
    out[0] = <char>(0xc3 if transient is True else 0xc2)
    out = _w_str(out + 1, text[4], size[4])
    out[0] = <char>status
    out += 1
    if n_acks:
        out[0] = <char>(0x90 | n_acks)
        out += 1
        for i in range(n_acks):
            out = _w_str(out, ack_text[i], ack_size[i])
    return result


def encode(pdu):
    """The byte form of ``pdu`` (the same bytes as the pure twin's)."""
    try:
        data = _encode_fast(pdu)
    except Exception:
        data = None  # the pure twin raises what it raises, or encodes it
    if data is None:
        return _pure.encode(pdu)
    return data


# --- decode ---------------------------------------------------------------

cdef struct _Reader:
    const unsigned char* p
    Py_ssize_t pos
    Py_ssize_t end


cdef inline int _byte(_Reader* r) noexcept:
    """The next byte, or -1 at the end."""
    if r.pos >= r.end:
        return -1
    r.pos += 1
    return r.p[r.pos - 1]


cdef inline Py_ssize_t _length(_Reader* r, int width) noexcept:
    """A big-endian length of ``width`` bytes, or -1 when the data ends first."""
    cdef Py_ssize_t n = 0
    cdef int i
    if r.end - r.pos < width:
        return -1
    for i in range(width):
        n = (n << 8) | r.p[r.pos + i]
    r.pos += width
    return n


cdef object _str(_Reader* r):
    """A str item, or None when the next item is not one (invalid UTF-8 raises)."""
    cdef int b = _byte(r)
    cdef Py_ssize_t n
    if 0xa0 <= b <= 0xbf:
        n = b & 0x1f
    elif b == 0xd9:
        n = _length(r, 1)
    elif b == 0xda:
        n = _length(r, 2)
    elif b == 0xdb:
        n = _length(r, 4)
    else:
        return None
    if n < 0 or r.end - r.pos < n:
        return None
    r.pos += n
    return PyUnicode_DecodeUTF8(<const char*>(r.p + r.pos - n), n, NULL)


cdef object _decode_fast(bytes data):
    """The PDU, or None when ``data`` leaves the fast path (the pure twin decides)."""
    cdef _Reader r
    cdef int head, version, kind, handshake, status, b
    cdef Py_ssize_t n, i, n_acks
    r.p = <const unsigned char*>PyBytes_AS_STRING(data)
    r.pos = 0
    r.end = PyBytes_GET_SIZE(data)
    head = _byte(&r)
    if head != 0x9b and head != 0x9c:
        return None
    version = _byte(&r)
    kind = _byte(&r)
    if version != _VERSION or kind < 0 or kind > 127:
        return None
    parsed_kind = _KINDS[kind]
    if parsed_kind is None:
        return None
    src = _str(&r)
    invoke_id = _str(&r)
    operation = _str(&r)
    if src is None or invoke_id is None or operation is None or not src or not invoke_id:
        return None
    handshake = _byte(&r)
    if handshake != 2 and handshake != 3:
        return None
    b = _byte(&r)
    if b == 0xc4:
        n = _length(&r, 1)
    elif b == 0xc5:
        n = _length(&r, 2)
    elif b == 0xc6:
        n = _length(&r, 4)
    else:
        return None
    if n < 0 or r.end - r.pos < n:
        return None
    body = PyBytes_FromStringAndSize(<const char*>(r.p + r.pos), n)
    r.pos += n
    code = _str(&r)
    if code is None:
        return None
    b = _byte(&r)
    if b == 0xc3:
        transient = True
    elif b == 0xc2:
        transient = False
    else:
        return None
    detail = _str(&r)
    if detail is None:
        return None
    status = _byte(&r)
    if status < 0 or status > 127:
        return None
    if status == 0:
        if kind == _VERIFY_REPLY or kind == _RVERIFY_REPLY:
            return None
        parsed_status = None
    else:
        parsed_status = _STATUSES[status]
        if parsed_status is None:
            return None
    acks = _NO_ACKS
    if head == 0x9c:
        b = _byte(&r)
        if 0x90 <= b <= 0x9f:
            n_acks = b & 0x0f
        elif b == 0xdc:
            n_acks = _length(&r, 2)
        elif b == 0xdd:
            n_acks = _length(&r, 4)
        else:
            return None
        if n_acks < 0 or n_acks > r.end - r.pos:  # every id takes a byte at least
            return None
        acks = PyTuple_New(n_acks)
        for i in range(n_acks):
            acked = _str(&r)
            if acked is None or not acked:
                return None
            Py_INCREF(acked)
            PyTuple_SET_ITEM(acks, i, acked)
    if r.pos != r.end:
        return None  # trailing bytes: msgpack's ExtraData, through the pure twin
    if not _slots_ok:
        return _Pdu(
            parsed_kind, src, invoke_id, operation, handshake, body, code, transient, detail,
            parsed_status, acks,
        )
    hs = handshake  # every object made before the Pdu, tracked by the GC once allocated
    pdu = PyType_GenericAlloc(_Pdu, 0)
    _put(pdu, F_KIND, parsed_kind)
    _put(pdu, F_SRC, src)
    _put(pdu, F_ID, invoke_id)
    _put(pdu, F_OP, operation)
    _put(pdu, F_HS, hs)
    _put(pdu, F_BODY, body)
    _put(pdu, F_CODE, code)
    _put(pdu, F_TRANSIENT, transient)
    _put(pdu, F_DETAIL, detail)
    _put(pdu, F_STATUS, parsed_status)
    _put(pdu, F_ACKS, acks)
    return pdu


def decode(data):
    """Parse ``data``; raises ``PduError`` naming what is wrong (as the pure twin does)."""
    if PyBytes_CheckExact(data):
        try:
            pdu = _decode_fast(<bytes>data)
        except Exception:
            pdu = None  # invalid UTF-8 and the like: the pure twin words the error
        if pdu is not None:
            return pdu
    return _pure.decode(data)


def new(kind, src, invoke_id, operation, handshake, body, code, transient, detail, status, acks):
    """``Pdu(kind, ..., acks)`` (all eleven fields, in order) without running its ``__init__``.

    The cores make two PDUs per call (an INVOKE, its RESULT); the dataclass's
    ``__init__`` is a Python call storing eleven attributes, this writes them.
    """
    if not _slots_ok:
        return _Pdu(
            kind, src, invoke_id, operation, handshake, body, code, transient, detail, status,
            acks,
        )
    pdu = PyType_GenericAlloc(_Pdu, 0)
    _put(pdu, F_KIND, kind)
    _put(pdu, F_SRC, src)
    _put(pdu, F_ID, invoke_id)
    _put(pdu, F_OP, operation)
    _put(pdu, F_HS, handshake)
    _put(pdu, F_BODY, body)
    _put(pdu, F_CODE, code)
    _put(pdu, F_TRANSIENT, transient)
    _put(pdu, F_DETAIL, detail)
    _put(pdu, F_STATUS, status)
    _put(pdu, F_ACKS, acks)
    return pdu
