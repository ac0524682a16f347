# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled message codec (twin of ``rvasync.fallback.codec``).

Same wire format, same functions, byte-identical output. Where the pure twin
builds Python lists and hands them to msgpack, this module writes msgpack
bytes straight from the field tuples into a C buffer, and reads them back
with a bounds-checked parser that validates while it builds the Message. It
emits exactly the encodings msgpack-python picks (smallest int format,
str8 for short strings, bin for bytes, float64 for floats) so both twins
agree byte for byte; the test suite checks that on random messages.

Every read checks the remaining length first (the module is compiled without
bounds checking), and a declared array length is refused before anything is
allocated if the input could not possibly hold that many elements.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AsDouble, PyFloat_FromDouble
from cpython.long cimport (
    PyLong_AsLongLongAndOverflow,
    PyLong_AsUnsignedLongLong,
    PyLong_FromLongLong,
    PyLong_FromUnsignedLongLong,
)
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.number cimport PyNumber_Index
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.math cimport isinf
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from rvasync_native.largemem cimport SPLIT_COPY_MIN, large_copy

import ipaddress

from rvasync._wire import (
    HEADER,
    MAX_MESSAGE_SIZE,
    MAX_NESTING_DEPTH,
    ORIGIN_SIZE,
)
from rvasync.correlation import check_publisher_correlation
from rvasync.errors import InvalidArgument, MalformedMessage, MessageTooLarge
from rvasync.fieldtypes import FieldType, field_label
from rvasync.message import CmLabel, Message
from rvasync.rvdatetime import DateTime

__all__ = ["MAX_MESSAGE_SIZE", "check", "check_subject", "decode", "encode"]

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    object PyType_GenericAlloc(type, Py_ssize_t)

# ``Message.origin`` (an int below 2**128) to and from its 16 big-endian wire
# bytes with no temporary objects: the encoder writes one on every network
# send. On CPython 3.11 (30-bit digits, a compiler with 128-bit ints) the
# digits are read and written directly, a tenth of the general conversion's
# instructions; elsewhere the general one (public from 3.13, private before).
cdef extern from *:
    """
    #if PY_VERSION_HEX < 0x030C0000 && defined(__SIZEOF_INT128__) && PYLONG_BITS_IN_DIGIT == 30
    #define RV_ORIGIN_DIGITS 1
    #endif

    static inline void rv_put_be64(unsigned char* out, uint64_t v) {
        unsigned char b[8];
        int k;
        for (k = 7; k >= 0; k--) {
            b[k] = (unsigned char)v;
            v >>= 8;
        }
        memcpy(out, b, 8);
    }

    static inline uint64_t rv_get_be64(const unsigned char* p) {
        uint64_t v = 0;
        int k;
        for (k = 0; k < 8; k++) v = (v << 8) | p[k];
        return v;
    }

    static int rv_origin_to_bytes(PyObject* v, unsigned char* out) {
    #ifdef RV_ORIGIN_DIGITS
        Py_ssize_t n = Py_SIZE(v);
        if (n >= 0 && n <= 5 && !(n == 5 && ((PyLongObject*)v)->ob_digit[4] >= 256)) {
            const digit* d = ((PyLongObject*)v)->ob_digit;
            uint64_t x[5] = {0, 0, 0, 0, 0};
            Py_ssize_t i;
            for (i = 0; i < n; i++) x[i] = d[i];
            rv_put_be64(out, (x[2] >> 4) | (x[3] << 26) | (x[4] << 56));
            rv_put_be64(out + 8, x[0] | (x[1] << 30) | (x[2] << 60));
            return 0;
        }
        /* negative or too big: the general conversion raises the error */
    #endif
    #if PY_VERSION_HEX >= 0x030D0000
        Py_ssize_t needed = PyLong_AsNativeBytes(v, out, 16,
            Py_ASNATIVEBYTES_BIG_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER
            | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
        if (needed < 0) return -1;
        if (needed > 16) {
            PyErr_SetString(PyExc_OverflowError, "int too big to convert");
            return -1;
        }
        return 0;
    #else
        return _PyLong_AsByteArray((PyLongObject*)v, out, 16, 0, 0);
    #endif
    }

    static PyObject* rv_origin_from_bytes(const unsigned char* data) {
    #ifdef RV_ORIGIN_DIGITS
        uint64_t hi = rv_get_be64(data), lo = rv_get_be64(data + 8);
        digit x[5];
        Py_ssize_t n = 5, i;
        PyLongObject* out;
        if (hi == 0) return PyLong_FromUnsignedLongLong(lo);
        x[0] = (digit)(lo & 0x3FFFFFFF);
        x[1] = (digit)((lo >> 30) & 0x3FFFFFFF);
        x[2] = (digit)(((lo >> 60) | (hi << 4)) & 0x3FFFFFFF);
        x[3] = (digit)((hi >> 26) & 0x3FFFFFFF);
        x[4] = (digit)(hi >> 56);
        while (x[n - 1] == 0) n--;  /* hi != 0: some digit from x[2] up is not zero */
        out = _PyLong_New(n);
        if (out == NULL) return NULL;
        for (i = 0; i < n; i++) out->ob_digit[i] = x[i];
        return (PyObject*)out;
    #elif PY_VERSION_HEX >= 0x030D0000
        return PyLong_FromUnsignedNativeBytes(data, 16, Py_ASNATIVEBYTES_BIG_ENDIAN);
    #else
        return _PyLong_FromByteArray(data, 16, 0, 0);
    #endif
    }
    """
    int rv_origin_to_bytes(object v, unsigned char* out) except -1
    object rv_origin_from_bytes(const unsigned char* data)

cdef inline void _copy(char* dst, const char* src, size_t n):
    """memcpy; a large copy releases the GIL and runs on two threads (see largemem)."""
    if n < SPLIT_COPY_MIN:
        memcpy(dst, src, n)
    else:
        with nogil:
            large_copy(dst, src, n)




# Decoding creates a Message (and a DateTime per DATETIME field) for every
# message it reads; setting their slots with setattr looked each one up on the
# type, a tenth of a decode's time. The decoder allocates them and writes each
# slot at the offset its slot descriptor names instead (what
# ``object.__new__`` and the descriptors do, minus the look-ups). The slot
# lists must be the classes' own: import fails loudly if a slot is added to
# either class and not here, rather than leaving it unset on decoded objects.
cdef tuple _MESSAGE_SLOTS = (
    "subject", "reply_subject", "listener", "closure", "cm", "origin", "_fields", "_ids",
    "_shared", "publisher_correlation",
)
cdef enum:
    M_SUBJECT, M_REPLY, M_LISTENER, M_CLOSURE, M_CM, M_ORIGIN, M_FIELDS, M_IDS, M_SHARED, \
        M_PUBCORR, M_COUNT
cdef tuple _DATETIME_SLOTS = ("_seconds", "_microseconds")
cdef Py_ssize_t _msg_offset[M_COUNT]
cdef Py_ssize_t _dt_offset[2]


cdef int _learn_slots(type klass, tuple names, Py_ssize_t* offsets) except -1:
    cdef Py_ssize_t i
    declared = set()
    for k in klass.__mro__:
        declared.update(k.__dict__.get("__slots__", ()))
    if declared != set(names):
        raise ImportError(
            f"rvasync_native.codec writes {sorted(names)} on decoded {klass.__name__} "
            f"objects, but the class declares {sorted(declared)}: update the codec"
        )
    for i, name in enumerate(names):
        descriptor = getattr(klass, name)
        if type(descriptor).__name__ != "member_descriptor":
            raise ImportError(f"{klass.__name__}.{name} is not a slot")
        offsets[i] = (<PyMemberDescrObject*>descriptor).d_member.offset
    return 0


cdef inline void _put(object obj, Py_ssize_t offset, object value):
    """Store ``value`` in the slot at ``offset`` of a freshly allocated ``obj``."""
    cdef PyObject** where = <PyObject**>((<char*><PyObject*>obj) + offset)
    cdef PyObject* old = where[0]
    Py_INCREF(value)
    where[0] = <PyObject*>value
    Py_XDECREF(old)
cdef inline object _slot(object obj, int slot):
    """Slot number ``slot`` of ``obj``, a Message (set: Message's constructor, copies
    and the decoder set every slot), read without the attribute look-up."""
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>obj) + _msg_offset[slot]))[0]
    if value == NULL:
        raise AttributeError(_MESSAGE_SLOTS[slot])
    return <object>value


cdef object _IPv4 = ipaddress.IPv4Address
cdef bytes _HEADER = HEADER
cdef Py_ssize_t _HEADER_LEN = len(HEADER)
cdef Py_ssize_t _MAX_SIZE = MAX_MESSAGE_SIZE
if ORIGIN_SIZE != 16:
    raise ImportError("rvasync_native.codec writes 16-byte origins: update it")
cdef int _MAX_DEPTH = MAX_NESTING_DEPTH

cdef enum:
    T_MSG = 1
    T_DATETIME = 3
    T_OPAQUE = 7
    T_STRING = 8
    T_BOOL = 9
    T_I8 = 14
    T_U8 = 15
    T_I16 = 16
    T_U16 = 17
    T_I32 = 18
    T_U32 = 19
    T_I64 = 20
    T_U64 = 21
    T_F32 = 24
    T_F64 = 25
    T_IPPORT16 = 26
    T_IPADDR32 = 27
    T_I8ARRAY = 34
    T_U8ARRAY = 35
    T_I16ARRAY = 36
    T_U16ARRAY = 37
    T_I32ARRAY = 38
    T_U32ARRAY = 39
    T_I64ARRAY = 40
    T_U64ARRAY = 41
    T_F32ARRAY = 44
    T_F64ARRAY = 45
    T_XML = 47
    T_STRINGARRAY = 48
    T_MSGARRAY = 49
    N_CODES = 50

# type code -> FieldType member (None for unused codes)
cdef list _TYPES = [None] * N_CODES
for _t in FieldType:
    _TYPES[<int>_t] = _t

# element size of numeric arrays, 0 for other codes
cdef int _ELEM_SIZE[N_CODES]
cdef int _i
for _i in range(N_CODES):
    _ELEM_SIZE[_i] = 0
_ELEM_SIZE[T_I8ARRAY] = 1
_ELEM_SIZE[T_U8ARRAY] = 1
_ELEM_SIZE[T_I16ARRAY] = 2
_ELEM_SIZE[T_U16ARRAY] = 2
_ELEM_SIZE[T_I32ARRAY] = 4
_ELEM_SIZE[T_U32ARRAY] = 4
_ELEM_SIZE[T_F32ARRAY] = 4
_ELEM_SIZE[T_I64ARRAY] = 8
_ELEM_SIZE[T_U64ARRAY] = 8
_ELEM_SIZE[T_F64ARRAY] = 8


cdef inline bint _int_in_range(int code, bint negative, int64_t i, uint64_t u):
    """Whether an integer (``i`` if negative, else ``u``) fits type ``code``."""
    if negative:
        if code == T_I8:
            return i >= -128
        if code == T_I16:
            return i >= -32768
        if code == T_I32:
            return i >= -2147483648
        if code == T_I64:
            return True
        return False
    if code == T_I8:
        return u <= 127
    if code == T_U8:
        return u <= 255
    if code == T_I16:
        return u <= 32767
    if code == T_U16 or code == T_IPPORT16:
        return u <= 65535
    if code == T_I32:
        return u <= 2147483647
    if code == T_U32:
        return u <= 4294967295
    if code == T_I64:
        return u <= 9223372036854775807
    return code == T_U64


# =============================================================================
# writer
# =============================================================================

cdef struct Writer:
    unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t cap
    # Large str/bytes payloads are not copied into ``buf``: each is noted as
    # (position in buf, object) in this list and copied once, straight into the
    # result, by ``_assemble``. A 64 MiB payload then costs one copy into one
    # fresh buffer instead of two (a buffer that grows to hold it, then the
    # result), and fresh memory is what a large message pays for most.
    PyObject* deferred
    Py_ssize_t deferred_bytes


#: Payloads at least this long are deferred (see Writer); shorter ones are
#: cheaper to copy into the buffer than to note.
cdef Py_ssize_t _DEFER_MIN = 64 * 1024


cdef int _grow(Writer* w, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap = w.cap * 2
    cdef unsigned char* grown
    if cap < w.pos + n:
        cap = w.pos + n
    grown = <unsigned char*>PyMem_Realloc(w.buf, cap)
    if grown == NULL:
        raise MemoryError()
    w.buf = grown
    w.cap = cap
    return 0


cdef inline int _reserve(Writer* w, Py_ssize_t n) except -1:
    if w.pos + n > w.cap:
        _grow(w, n)
    return 0


cdef inline int _put1(Writer* w, uint8_t b) except -1:
    _reserve(w, 1)
    w.buf[w.pos] = b
    w.pos += 1
    return 0


cdef inline int _put_be(Writer* w, uint8_t tag, uint64_t v, int nbytes) except -1:
    """``tag`` then ``v`` as ``nbytes`` big-endian bytes (msgpack's byte order)."""
    cdef int k
    _reserve(w, 1 + nbytes)
    w.buf[w.pos] = tag
    for k in range(nbytes):
        w.buf[w.pos + nbytes - k] = <uint8_t>(v >> (8 * k))
    w.pos += 1 + nbytes
    return 0


cdef inline int _put_raw(Writer* w, const char* data, Py_ssize_t n) except -1:
    _reserve(w, n)
    if n:
        memcpy(w.buf + w.pos, data, n)
    w.pos += n
    return 0


cdef int _w_uint(Writer* w, uint64_t u) except -1:
    if u < 128:
        return _put1(w, <uint8_t>u)
    if u < 256:
        return _put_be(w, 0xCC, u, 1)
    if u < 65536:
        return _put_be(w, 0xCD, u, 2)
    if u < 4294967296:
        return _put_be(w, 0xCE, u, 4)
    return _put_be(w, 0xCF, u, 8)


cdef int _w_sint(Writer* w, int64_t i) except -1:
    if i >= -32:
        if i >= 0:
            return _w_uint(w, <uint64_t>i)
        return _put1(w, <uint8_t>(i & 0xFF))
    if i >= -128:
        return _put_be(w, 0xD0, <uint64_t>i, 1)
    if i >= -32768:
        return _put_be(w, 0xD1, <uint64_t>i, 2)
    if i >= -2147483648:
        return _put_be(w, 0xD2, <uint64_t>i, 4)
    return _put_be(w, 0xD3, <uint64_t>i, 8)



cdef int _w_int(Writer* w, object value) except -1:
    """A Python int, in the smallest msgpack format (as msgpack-python chooses)."""
    cdef int overflow = 0
    cdef long long i = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow == 0:
        return _w_sint(w, i)
    if overflow > 0:
        return _w_uint(w, PyLong_AsUnsignedLongLong(value))
    raise OverflowError("int too small for msgpack")


cdef int _w_double(Writer* w, double d) except -1:
    cdef uint64_t bits
    memcpy(&bits, &d, 8)
    return _put_be(w, 0xCB, bits, 8)


cdef int _w_str(Writer* w, object text) except -1:
    cdef Py_ssize_t n
    cdef const char* data = PyUnicode_AsUTF8AndSize(text, &n)
    if n < 32:
        _put1(w, <uint8_t>(0xA0 | n))
    elif n < 256:
        _put_be(w, 0xD9, n, 1)
    elif n < 65536:
        _put_be(w, 0xDA, n, 2)
    else:
        _put_be(w, 0xDB, n, 4)
    if n >= _DEFER_MIN:
        return _defer(w, text, n)
    return _put_raw(w, data, n)


cdef int _w_bin_header(Writer* w, Py_ssize_t n) except -1:
    if n < 256:
        return _put_be(w, 0xC4, n, 1)
    if n < 65536:
        return _put_be(w, 0xC5, n, 2)
    return _put_be(w, 0xC6, n, 4)


cdef int _w_bytes(Writer* w, bytes data) except -1:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    _w_bin_header(w, n)
    if n >= _DEFER_MIN:
        return _defer(w, data, n)
    return _put_raw(w, PyBytes_AS_STRING(data), n)


cdef int _defer(Writer* w, object payload, Py_ssize_t n) except -1:
    """Note a large str or bytes payload for ``_assemble`` instead of copying it now."""
    (<list>w.deferred).append((w.pos, payload))
    w.deferred_bytes += n
    return 0


cdef bytes _assemble(Writer* w):
    """The wire bytes: ``buf`` with the deferred payloads copied in at their positions."""
    cdef Py_ssize_t total = w.pos + w.deferred_bytes
    cdef Py_ssize_t src = 0, at, n
    cdef const char* data
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* dst = PyBytes_AS_STRING(out)
    for at, payload in <list>w.deferred:
        memcpy(dst, w.buf + src, at - src)
        dst += at - src
        src = at
        if isinstance(payload, bytes):
            data = PyBytes_AS_STRING(payload)
            n = PyBytes_GET_SIZE(payload)
        else:
            data = PyUnicode_AsUTF8AndSize(payload, &n)
        _copy(dst, data, n)
        dst += n
    memcpy(dst, w.buf + src, w.pos - src)
    return out


cdef int _w_array(Writer* w, Py_ssize_t n) except -1:
    if n < 16:
        return _put1(w, <uint8_t>(0x90 | n))
    if n < 65536:
        return _put_be(w, 0xDC, n, 2)
    return _put_be(w, 0xDD, n, 4)


cdef int _w_opt_str(Writer* w, object value, str what) except -1:
    if value is None:
        return _put1(w, 0xC0)
    if not isinstance(value, str):
        raise InvalidArgument(f"message {what} must be a str or None, got {type(value).__name__}")
    return _w_str(w, value)


cdef inline int _put_le(Writer* w, uint64_t v, int nbytes) except -1:
    cdef int k
    for k in range(nbytes):
        w.buf[w.pos + k] = <uint8_t>(v >> (8 * k))
    w.pos += nbytes
    return 0


cdef object _modified(object name, int code, object exc):
    return InvalidArgument(
        f"{field_label(name)}: {_TYPES[code].name} list was changed in place and no longer "
        f"holds valid elements ({exc})"
    )


cdef int _w_numbers(Writer* w, int code, object name, object value) except -1:
    """A numeric array as bin of little-endian elements, range-checked like array.array."""
    cdef list items = value
    cdef Py_ssize_t n = len(items), k
    cdef int size = _ELEM_SIZE[code]
    cdef object item
    cdef double d
    cdef float f
    cdef uint32_t bits32
    cdef uint64_t bits64, u
    cdef long long i
    cdef int overflow
    cdef bint ok
    _w_bin_header(w, n * size)
    _reserve(w, n * size)
    for k in range(n):
        item = items[k]
        try:
            if code == T_F64ARRAY:
                d = PyFloat_AsDouble(item)
                memcpy(&bits64, &d, 8)
                _put_le(w, bits64, 8)
                continue
            if code == T_F32ARRAY:
                d = PyFloat_AsDouble(item)
                f = <float>d
                if isinf(f) and not isinf(d) and d == d:
                    raise OverflowError("float too large to pack with f format")
                memcpy(&bits32, &f, 4)
                _put_le(w, bits32, 4)
                continue
            if type(item) is not int:
                item = PyNumber_Index(item)
            overflow = 0
            i = PyLong_AsLongLongAndOverflow(item, &overflow)
            if overflow == 0:
                ok = _elem_fits(code, i < 0, i, <uint64_t>i)
                u = <uint64_t>i
            elif overflow > 0 and code == T_U64ARRAY:
                u = PyLong_AsUnsignedLongLong(item)
                ok = True
            else:
                ok = False
            if not ok:
                raise OverflowError(f"{item} out of range for {_TYPES[code].name} elements")
            _put_le(w, u, size)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _modified(name, code, exc) from None
    return 0


cdef inline bint _elem_fits(int code, bint negative, int64_t i, uint64_t u):
    if code == T_I8ARRAY:
        return _int_in_range(T_I8, negative, i, u)
    if code == T_U8ARRAY:
        return _int_in_range(T_U8, negative, i, u)
    if code == T_I16ARRAY:
        return _int_in_range(T_I16, negative, i, u)
    if code == T_U16ARRAY:
        return _int_in_range(T_U16, negative, i, u)
    if code == T_I32ARRAY:
        return _int_in_range(T_I32, negative, i, u)
    if code == T_U32ARRAY:
        return _int_in_range(T_U32, negative, i, u)
    if code == T_I64ARRAY:
        return True
    return not negative  # U64ARRAY


cdef int _w_child(Writer* w, object value, object name, int depth) except -1:
    if not isinstance(value, Message):
        raise InvalidArgument(
            f"{field_label(name)}: a MSGARRAY list was changed in place and holds a "
            f"{type(value).__name__}, not a Message"
        )
    if depth >= _MAX_DEPTH:
        raise InvalidArgument(
            f"{field_label(name)}: messages nested deeper than {_MAX_DEPTH} levels "
            f"cannot be encoded"
        )
    return _w_message(w, value, depth + 1)


cdef int _origin_wire(object origin, unsigned char* out) except -1:
    """Write ``Message.origin`` (an int in [0, 2**128)) as 16 big-endian bytes at ``out``."""
    if type(origin) is int:
        try:
            return rv_origin_to_bytes(origin, out)
        except (OverflowError, ValueError):
            pass
    raise InvalidArgument(
        f"message origin must be an int in [0, 2**{8 * ORIGIN_SIZE}) or None, got {origin!r}"
    )


cdef int _w_cm_label(Writer* w, object cm) except -1:
    """A CM label's three elements: sender, sequence (nil when uncertified), time limit."""
    _w_str(w, cm.sender)
    if cm.sequence is None:
        _put1(w, 0xC0)
    else:
        _w_int(w, cm.sequence)
    _w_double(w, PyFloat_AsDouble(cm.time_limit))
    return 0


cdef int _w_label_with_correlation(
    Writer* w, object cm, object origin, unsigned char* origin_bytes, object correlation
) except -1:
    """The label slot of a message with a publisher correlation id (not the usual path):
    ``[origin or nil, id]``, or ``[sender, sequence, limit, origin or nil, id]``."""
    try:
        correlation = check_publisher_correlation(correlation)
    except InvalidArgument as exc:
        raise InvalidArgument(f"message publisher_correlation: {exc}") from None
    if cm is not None:
        if not isinstance(cm, CmLabel):
            raise InvalidArgument(f"message cm must be a CmLabel or None, got {type(cm).__name__}")
        _w_array(w, 5)
        _w_cm_label(w, cm)
    else:
        _w_array(w, 2)
    if origin is None:
        _put1(w, 0xC0)
    else:
        _put_raw(w, <char*>origin_bytes, 18)
    if type(correlation) is str:
        _w_str(w, correlation)
    elif type(correlation) is bytes:
        _w_bytes(w, correlation)
    else:
        _w_int(w, correlation)
    return 0


cdef int _w_message(Writer* w, object msg, int depth) except -1:
    cdef list fields
    cdef Py_ssize_t n, k, m
    cdef tuple entry
    cdef object name, value, cm, origin, item
    cdef list items
    cdef int code
    cdef int64_t seconds, micros
    cdef unsigned char origin_bytes[18]
    cdef object correlation

    _w_array(w, 4)
    if type(msg) is Message:
        # The slots at their offsets: an attribute look-up costs about 170 instructions,
        # five of them a fifth of encoding a small message.
        fields = _slot(msg, M_FIELDS)
        _w_opt_str(w, _slot(msg, M_SUBJECT), "subject")
        _w_opt_str(w, _slot(msg, M_REPLY), "reply_subject")
        cm = _slot(msg, M_CM)
        origin = _slot(msg, M_ORIGIN)
        correlation = _slot(msg, M_PUBCORR)
    else:
        fields = msg._fields
        _w_opt_str(w, msg.subject, "subject")
        _w_opt_str(w, msg.reply_subject, "reply_subject")
        cm = msg.cm
        origin = msg.origin
        correlation = msg.publisher_correlation
    n = len(fields)
    if origin is not None:
        # bin8 of 16 bytes: the header, then the int big-endian
        origin_bytes[0] = 0xC4
        origin_bytes[1] = 16
        _origin_wire(origin, &origin_bytes[2])
    if correlation is not None:
        _w_label_with_correlation(w, cm, origin, origin_bytes, correlation)
    elif cm is None:
        if origin is None:
            _put1(w, 0xC0)
        else:
            _put_raw(w, <char*>origin_bytes, 18)
    else:
        if not isinstance(cm, CmLabel):
            raise InvalidArgument(f"message cm must be a CmLabel or None, got {type(cm).__name__}")
        _w_array(w, 3 if origin is None else 4)
        _w_cm_label(w, cm)
        if origin is not None:
            _put_raw(w, <char*>origin_bytes, 18)
    _w_array(w, 4 * n)
    for k in range(n):
        entry = <tuple>fields[k]
        name = entry[0]
        if name is None:
            _put1(w, 0xC0)
        else:
            _w_str(w, name)
        _w_int(w, entry[1])
        code = entry[2]
        _w_uint(w, <uint64_t>code)
        value = entry[3]
        if code == T_STRING:
            _w_str(w, value)
        elif (T_I8 <= code <= T_U64) or code == T_IPPORT16:
            _w_int(w, value)
        elif code == T_F64:
            _w_double(w, PyFloat_AsDouble(value))
        elif code == T_BOOL:
            _put1(w, 0xC3 if value is True else 0xC2)
        elif code == T_OPAQUE or code == T_XML:
            _w_bytes(w, value)
        elif code == T_MSG:
            _w_child(w, value, name, depth)
        elif code == T_DATETIME:
            seconds = value._seconds
            micros = value._microseconds
            _w_sint(w, seconds * 16777216 + micros)
        elif code == T_F32:
            _w_f32(w, PyFloat_AsDouble(value))
        elif code == T_IPADDR32:
            _w_bytes(w, value.packed)
        elif code == T_STRINGARRAY:
            items = value
            for m in range(len(items)):
                if not isinstance(items[m], str):
                    raise InvalidArgument(
                        f"{field_label(name)}: STRINGARRAY list was changed in place; element "
                        f"{m} is a {type(items[m]).__name__}, not a str"
                    )
            m = len(items)
            _w_array(w, m)
            for item in items:
                _w_str(w, item)
        elif code == T_MSGARRAY:
            items = value
            m = len(items)
            _w_array(w, m)
            for item in items:
                _w_child(w, item, name, depth)
        else:
            _w_numbers(w, code, name, value)
    return 0


cdef int _w_f32(Writer* w, double d) except -1:
    cdef float f = <float>d
    cdef uint32_t bits
    memcpy(&bits, &f, 4)
    _reserve(w, 6)
    w.buf[w.pos] = 0xC4
    w.buf[w.pos + 1] = 4
    w.pos += 2
    return _put_le(w, bits, 4)


def encode(msg):
    """The wire form of ``msg`` (see ``rvasync.fallback.codec.encode``)."""
    cdef Writer w
    cdef list deferred = []
    if not isinstance(msg, Message):
        raise InvalidArgument(f"encode needs a Message, got {type(msg).__name__}")
    w.cap = 512
    w.pos = 0
    w.deferred = <PyObject*>deferred
    w.deferred_bytes = 0
    w.buf = <unsigned char*>PyMem_Malloc(w.cap)
    if w.buf == NULL:
        raise MemoryError()
    try:
        _put_raw(&w, PyBytes_AS_STRING(_HEADER), _HEADER_LEN)
        try:
            _w_message(&w, msg, 0)
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                f"message holds a string that is not valid Unicode ({exc.reason})"
            ) from None
        if w.pos + w.deferred_bytes > _MAX_SIZE:
            raise MessageTooLarge(
                f"encoded message is {w.pos + w.deferred_bytes} bytes, "
                f"over the {_MAX_SIZE}-byte limit"
            )
        if w.deferred_bytes:
            return _assemble(&w)
        return PyBytes_FromStringAndSize(<char*>w.buf, w.pos)
    finally:
        PyMem_Free(w.buf)


# =============================================================================
# reader
# =============================================================================

cdef enum Kind:
    K_NIL
    K_FALSE
    K_TRUE
    K_UINT      # non-negative integer in .u
    K_NEGINT    # negative integer in .i
    K_FLOAT     # .d (from float32 or float64)
    K_STR       # .ptr, .n
    K_BIN       # .ptr, .n
    K_ARRAY     # .n elements follow
    K_NONE      # no item (an optional one that is absent)


cdef struct Reader:
    const unsigned char* p
    const unsigned char* end


cdef struct Item:
    int kind
    uint64_t u
    int64_t i
    double d
    const unsigned char* ptr
    Py_ssize_t n


cdef inline uint64_t _be(const unsigned char* p, int nbytes):
    cdef uint64_t v = 0
    cdef int k
    for k in range(nbytes):
        v = (v << 8) | p[k]
    return v


cdef inline uint64_t _le(const unsigned char* p, int nbytes):
    cdef uint64_t v = 0
    cdef int k
    for k in range(nbytes - 1, -1, -1):
        v = (v << 8) | p[k]
    return v


cdef int _bad(str text) except -1:
    raise MalformedMessage(text)


cdef inline int _need(Reader* r, Py_ssize_t n) except -1:
    if r.end - r.p < n:
        raise MalformedMessage("truncated message: data ends inside a value")
    return 0


cdef int _payload(Reader* r, Item* it, int kind, int lenbytes) except -1:
    """A str/bin header with a ``lenbytes`` length, then skip over its bytes."""
    _need(r, lenbytes)
    it.n = <Py_ssize_t>_be(r.p, lenbytes)
    r.p += lenbytes
    if r.end - r.p < it.n:
        raise MalformedMessage(f"truncated message: a value declares {it.n} bytes")
    it.kind = kind
    it.ptr = r.p
    r.p += it.n
    return 0


cdef int _array_len(Reader* r, Item* it, Py_ssize_t n) except -1:
    # Every element takes at least one byte: refuse impossible lengths up front.
    if n > r.end - r.p:
        raise MalformedMessage(
            f"truncated message: an array declares {n} elements but only "
            f"{r.end - r.p} bytes remain"
        )
    it.kind = K_ARRAY
    it.n = n
    return 0


cdef int _next(Reader* r, Item* it) except -1:
    """Parse the next msgpack value header into ``it`` (str/bin bytes are skipped over)."""
    cdef unsigned char b
    cdef uint32_t bits32
    cdef float f
    cdef uint64_t raw
    cdef int64_t signed_value
    it.u = 0
    it.i = 0
    _need(r, 1)
    b = r.p[0]
    r.p += 1
    if b <= 0x7F:
        it.kind = K_UINT
        it.u = b
    elif b >= 0xE0:
        it.kind = K_NEGINT
        it.i = <int64_t>b - 256
    elif 0xA0 <= b <= 0xBF:
        it.n = b & 0x1F
        if r.end - r.p < it.n:
            raise MalformedMessage("truncated message: data ends inside a string")
        it.kind = K_STR
        it.ptr = r.p
        r.p += it.n
    elif 0x90 <= b <= 0x9F:
        _array_len(r, it, b & 0x0F)
    elif b == 0xC0:
        it.kind = K_NIL
    elif b == 0xC2:
        it.kind = K_FALSE
    elif b == 0xC3:
        it.kind = K_TRUE
    elif b == 0xC4:
        _payload(r, it, K_BIN, 1)
    elif b == 0xC5:
        _payload(r, it, K_BIN, 2)
    elif b == 0xC6:
        _payload(r, it, K_BIN, 4)
    elif b == 0xCA:
        _need(r, 4)
        bits32 = <uint32_t>_be(r.p, 4)
        r.p += 4
        memcpy(&f, &bits32, 4)
        it.kind = K_FLOAT
        it.d = f
    elif b == 0xCB:
        _need(r, 8)
        raw = _be(r.p, 8)
        r.p += 8
        memcpy(&it.d, &raw, 8)
        it.kind = K_FLOAT
    elif 0xCC <= b <= 0xCF:
        _need(r, 1 << (b - 0xCC))
        it.kind = K_UINT
        it.u = _be(r.p, 1 << (b - 0xCC))
        r.p += 1 << (b - 0xCC)
    elif 0xD0 <= b <= 0xD3:
        _need(r, 1 << (b - 0xD0))
        raw = _be(r.p, 1 << (b - 0xD0))
        r.p += 1 << (b - 0xD0)
        if b == 0xD0:
            signed_value = <signed char>raw
        elif b == 0xD1:
            signed_value = <short>raw
        elif b == 0xD2:
            signed_value = <int>raw
        else:
            signed_value = <int64_t>raw
        if signed_value < 0:
            it.kind = K_NEGINT
            it.i = signed_value
        else:
            it.kind = K_UINT
            it.u = <uint64_t>signed_value
    elif 0xD9 <= b <= 0xDB:
        _payload(r, it, K_STR, 1 << (b - 0xD9))
    elif b == 0xDC:
        _need(r, 2)
        raw = _be(r.p, 2)
        r.p += 2
        _array_len(r, it, <Py_ssize_t>raw)
    elif b == 0xDD:
        _need(r, 4)
        raw = _be(r.p, 4)
        r.p += 4
        _array_len(r, it, <Py_ssize_t>raw)
    elif (0x80 <= b <= 0x8F) or b == 0xDE or b == 0xDF:
        raise MalformedMessage("unexpected msgpack map (the format has none)")
    elif (0xC7 <= b <= 0xC9) or (0xD4 <= b <= 0xD8):
        raise MalformedMessage("unexpected msgpack extension type (the format has none)")
    else:
        raise MalformedMessage(f"invalid msgpack byte 0x{b:02x}")
    return 0


cdef str _kind_name(Item* it):
    if it.kind == K_NIL:
        return "nil"
    if it.kind == K_FALSE or it.kind == K_TRUE:
        return "bool"
    if it.kind == K_UINT or it.kind == K_NEGINT:
        return "int"
    if it.kind == K_FLOAT:
        return "float"
    if it.kind == K_STR:
        return "str"
    if it.kind == K_BIN:
        return "bytes"
    return "list"


cdef extern from *:
    """
    /* Short ASCII strings decoded lately (subjects, field names), by a hash of their
       bytes: a stream repeats a few of them in every message, and a hit saves the
       decode, the allocation and (the str keeps it) the hash of every dict lookup. */
    #define RV_TEXT_SLOTS 256
    #define RV_TEXT_MAX 64
    static PyObject *rv_text_cache[RV_TEXT_SLOTS];

    static inline unsigned int rv_text_slot(const unsigned char *p, Py_ssize_t n) {
        return ((unsigned int)n * 131u + p[0] * 31u + p[n - 1] * 7u + p[n >> 1])
               & (RV_TEXT_SLOTS - 1);
    }

    /* A new reference to the cached str equal to the n bytes at p, or NULL. */
    static inline PyObject *rv_text_hit(const unsigned char *p, Py_ssize_t n) {
        PyObject *s;
        if (n <= 0 || n > RV_TEXT_MAX) return NULL;
        s = rv_text_cache[rv_text_slot(p, n)];
        if (s == NULL || PyUnicode_GET_LENGTH(s) != n || memcmp(PyUnicode_DATA(s), p, n) != 0)
            return NULL;
        Py_INCREF(s);
        return s;
    }

    /* Remember s (just decoded from the n bytes at p) if it is short and ASCII: its
       characters are then those bytes, which is what rv_text_hit compares. */
    static inline void rv_text_keep(const unsigned char *p, Py_ssize_t n, PyObject *s) {
        unsigned int slot;
        if (n <= 0 || n > RV_TEXT_MAX || !PyUnicode_IS_COMPACT_ASCII(s)) return;
        slot = rv_text_slot(p, n);
        Py_INCREF(s);
        Py_XSETREF(rv_text_cache[slot], s);
    }
    """
    PyObject* rv_text_hit(const unsigned char* p, Py_ssize_t n)
    void rv_text_keep(const unsigned char* p, Py_ssize_t n, object s)


cdef inline object _text(Item* it):
    cdef object text
    cdef PyObject* hit = rv_text_hit(it.ptr, it.n)
    if hit != NULL:
        text = <object>hit
        Py_XDECREF(hit)  # <object> took a reference of its own
        return text
    try:
        text = PyUnicode_DecodeUTF8(<char*>it.ptr, it.n, NULL)
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"invalid msgpack body: a string is not valid UTF-8 ({exc.reason})") from None
    rv_text_keep(it.ptr, it.n, text)
    return text


cdef int _check_text(Item* it) except -1:
    """What ``_text`` checks (strict UTF-8), without keeping a str: ASCII needs no decode."""
    cdef Py_ssize_t k
    for k in range(it.n):
        if it.ptr[k] >= 0x80:
            _text(it)  # the decoder's own check (and error) for anything beyond ASCII
            return 0
    return 0


cdef inline object _bytes(Item* it):
    cdef bytes out
    if <size_t>it.n < SPLIT_COPY_MIN:
        return PyBytes_FromStringAndSize(<char*>it.ptr, it.n)
    out = PyBytes_FromStringAndSize(NULL, it.n)
    _copy(PyBytes_AS_STRING(out), <const char*>it.ptr, it.n)
    return out


cdef object _int_object(Item* it):
    if it.kind == K_UINT:
        return PyLong_FromUnsignedLongLong(it.u)
    return PyLong_FromLongLong(it.i)


cdef object _read_opt_str(Reader* r, str what, bint build):
    cdef Item it
    _next(r, &it)
    if it.kind == K_NIL:
        return None
    if it.kind != K_STR:
        _bad(f"{what} must be a str or nil, got {_kind_name(&it)}")
    if not build:
        _check_text(&it)
        return None
    return _text(&it)


cdef const unsigned char* _read_origin(Item* it) except NULL:
    """Where a publication origin's 16 bytes are in the input (it must be bin of 16)."""
    if it.kind != K_BIN or it.n != 16:  # ORIGIN_SIZE (checked at import)
        _bad(f"origin must be bin of {ORIGIN_SIZE} bytes, got {_kind_name(it)}")
    return it.ptr


cdef object _read_cm(Reader* r, bint build, const unsigned char** origin, Item* correlation):
    """The label slot: nil, a CM label (array of 3), an origin (bin: stored in
    ``origin[0]``, which is left alone otherwise), or both (array of 4); with a
    publisher correlation id (left in ``correlation``, whose kind is K_NONE
    otherwise), ``[origin or nil, id]`` or ``[label..., origin or nil, id]``."""
    cdef Item it
    cdef object sender
    cdef object sequence = None
    cdef Py_ssize_t n
    _next(r, &it)
    if it.kind == K_NIL:
        return None
    if it.kind == K_BIN:
        origin[0] = _read_origin(&it)
        return None
    if it.kind != K_ARRAY or it.n < 2 or it.n > 5:
        _bad(
            "CM label must be an array of 3 (or 4 with an origin), or a publisher's "
            f"[origin, correlation id] (2, or 5 with a label), got {_kind_name(&it)}"
        )
    n = it.n
    if n == 2:
        _read_origin_and_correlation(r, origin, correlation)
        return None
    _next(r, &it)
    if it.kind != K_STR or it.n == 0:
        _bad("CM label sender must be a non-empty str")
    if build:
        sender = _text(&it)
    else:
        _check_text(&it)
    _next(r, &it)
    if it.kind == K_NIL:
        sequence = None
    elif it.kind == K_UINT:
        sequence = PyLong_FromUnsignedLongLong(it.u) if build else None
    else:
        _bad(f"CM label sequence must be nil or an unsigned int, got {_kind_name(&it)}")
    _next(r, &it)
    if it.kind != K_FLOAT:
        _bad(f"CM label time_limit must be a float, got {_kind_name(&it)}")
    if not (0.0 <= it.d and not isinf(it.d)):
        _bad(f"CM label time_limit must be finite and >= 0, got {it.d}")
    label = CmLabel(sender, sequence, it.d) if build else None
    if n == 4:
        _next(r, &it)
        origin[0] = _read_origin(&it)
    elif n == 5:
        _read_origin_and_correlation(r, origin, correlation)
    return label


cdef int _read_origin_and_correlation(
    Reader* r, const unsigned char** origin, Item* correlation
) except -1:
    """An origin (or nil), then a publisher correlation id: a non-empty str, a
    non-zero bin or a non-zero int (checked here, built by the caller)."""
    cdef Item it
    cdef Py_ssize_t k
    cdef bint zero = True
    _next(r, &it)
    if it.kind != K_NIL:
        origin[0] = _read_origin(&it)
    _next(r, correlation)
    if correlation.kind == K_STR:
        zero = correlation.n == 0
        if not zero:
            _check_text(correlation)
    elif correlation.kind == K_BIN:
        for k in range(correlation.n):
            if correlation.ptr[k] != 0:
                zero = False
                break
    elif correlation.kind == K_UINT:
        zero = correlation.u == 0
    elif correlation.kind == K_NEGINT:
        zero = False
    else:
        _bad(
            "publisher correlation id must be a non-empty str, a non-zero bin or a non-zero "
            f"int, got {_kind_name(correlation)}"
        )
    if zero:
        _bad(
            "publisher correlation id must be a non-empty str, a non-zero bin or a non-zero "
            f"int, got an empty or zero {_kind_name(correlation)}"
        )
    return 0


cdef object _correlation_object(Item* it):
    """The Python value of a publisher correlation id item (K_NONE: None)."""
    if it.kind == K_NONE:
        return None
    if it.kind == K_STR:
        return _text(it)
    if it.kind == K_BIN:
        return _bytes(it)
    return _int_object(it)


cdef list _read_numbers(Item* it, int code, bint build):
    cdef int size = _ELEM_SIZE[code]
    cdef Py_ssize_t n, k
    cdef const unsigned char* p = it.ptr
    cdef list out
    cdef uint64_t raw
    cdef uint32_t bits32
    cdef float f
    cdef double d
    if it.kind != K_BIN:
        _bad(f"{_TYPES[code].name} value must be bin, got {_kind_name(it)}")
    if it.n % size:
        _bad(f"{_TYPES[code].name} holds {it.n} bytes, not a multiple of {size}")
    n = it.n // size
    if not build:
        return None
    out = [None] * n
    for k in range(n):
        raw = _le(p + k * size, size)
        if code == T_I8ARRAY:
            out[k] = <long>(<signed char>raw)
        elif code == T_I16ARRAY:
            out[k] = <long>(<short>raw)
        elif code == T_I32ARRAY:
            out[k] = <long>(<int>raw)
        elif code == T_I64ARRAY:
            out[k] = PyLong_FromLongLong(<int64_t>raw)
        elif code == T_U64ARRAY:
            out[k] = PyLong_FromUnsignedLongLong(raw)
        elif code == T_F32ARRAY:
            bits32 = <uint32_t>raw
            memcpy(&f, &bits32, 4)
            out[k] = PyFloat_FromDouble(f)
        elif code == T_F64ARRAY:
            memcpy(&d, &raw, 8)
            out[k] = PyFloat_FromDouble(d)
        else:  # U8, U16, U32
            out[k] = PyLong_FromUnsignedLongLong(raw)
    return out


cdef object _read_child(Reader* r, int depth, bint build):
    if depth >= _MAX_DEPTH:
        _bad(f"messages nested deeper than {_MAX_DEPTH} levels")
    return _read_message(r, depth + 1, build)


cdef object _read_value(Reader* r, int code, int depth, bint build):
    cdef Item it
    cdef list out
    cdef Py_ssize_t k
    cdef uint64_t low
    cdef int64_t wire = 0
    cdef float f
    cdef uint32_t bits32
    cdef object dt, value
    if code == T_MSG:
        return _read_child(r, depth, build)
    _next(r, &it)
    if code == T_STRING:
        if it.kind != K_STR:
            _bad(f"STRING value must be a str, got {_kind_name(&it)}")
        if not build:
            _check_text(&it)
            return None
        return _text(&it)
    if (T_I8 <= code <= T_U64) or code == T_IPPORT16:
        if it.kind != K_UINT and it.kind != K_NEGINT:
            _bad(f"{_TYPES[code].name} value must be an int, got {_kind_name(&it)}")
        if not _int_in_range(code, it.kind == K_NEGINT, it.i, it.u):
            _bad(f"value {_int_object(&it)} out of range for {_TYPES[code].name}")
        if not build:
            return None
        return _int_object(&it)
    if code == T_F64:
        if it.kind != K_FLOAT:
            _bad(f"F64 value must be a float, got {_kind_name(&it)}")
        if not build:
            return None
        return PyFloat_FromDouble(it.d)
    if code == T_BOOL:
        if it.kind == K_TRUE:
            return True
        if it.kind == K_FALSE:
            return False
        _bad(f"BOOL value must be a bool, got {_kind_name(&it)}")
    if code == T_OPAQUE or code == T_XML:
        if it.kind != K_BIN:
            _bad(f"value must be bin, got {_kind_name(&it)}")
        if not build:
            return None
        return _bytes(&it)
    if code == T_DATETIME:
        if it.kind == K_UINT:
            if it.u > 9223372036854775807:
                _bad(f"DATETIME value {it.u} is not a signed 64-bit value")
            wire = <int64_t>it.u
        elif it.kind == K_NEGINT:
            wire = it.i
        else:
            _bad(f"DATETIME value must be an int, got {_kind_name(&it)}")
        low = (<uint64_t>wire) & 0xFFFFFF
        if low > 999999:
            _bad(f"DATETIME microseconds {low} over 999999")
        if not build:
            return None
        dt = PyType_GenericAlloc(DateTime, 0)
        _put(dt, _dt_offset[0], (wire - <int64_t>low) // 16777216)
        _put(dt, _dt_offset[1], low)
        return dt
    if code == T_F32:
        if it.kind != K_BIN or it.n != 4:
            _bad(f"F32 value must be 4 bytes of bin, got {_kind_name(&it)}")
        if not build:
            return None
        bits32 = <uint32_t>_le(it.ptr, 4)
        memcpy(&f, &bits32, 4)
        return PyFloat_FromDouble(f)
    if code == T_IPADDR32:
        if it.kind != K_BIN or it.n != 4:
            _bad(f"IPADDR32 value must be 4 bytes of bin, got {_kind_name(&it)}")
        if not build:
            return None
        return _IPv4(_bytes(&it))
    if code == T_STRINGARRAY:
        if it.kind != K_ARRAY:
            _bad(f"STRINGARRAY value must be an array, got {_kind_name(&it)}")
        if not build:
            for k in range(it.n):
                _read_array_str(r, k, False)
            return None
        out = [None] * it.n
        for k in range(it.n):
            out[k] = _read_array_str(r, k, True)
        return out
    if code == T_MSGARRAY:
        if it.kind != K_ARRAY:
            _bad(f"MSGARRAY value must be an array, got {_kind_name(&it)}")
        out = [None] * it.n if build else None
        for k in range(it.n):
            try:
                value = _read_child(r, depth, build)
            except MalformedMessage as exc:
                raise MalformedMessage(f"element {k}: {exc}") from None
            if build:
                out[k] = value
        return out
    return _read_numbers(&it, code, build)


cdef object _read_array_str(Reader* r, Py_ssize_t index, bint build):
    cdef Item it
    _next(r, &it)
    if it.kind != K_STR:
        _bad(f"STRINGARRAY element {index} must be a str, got {_kind_name(&it)}")
    if not build:
        _check_text(&it)
        return None
    return _text(&it)


cdef object _read_message(Reader* r, int depth, bint build):
    """The next message (None when not ``build``: then it is only checked, and every
    check, error and message text is the same as when building)."""
    cdef Item it
    cdef Item name_it
    cdef bint named
    cdef object subject, reply, cm, name, ftype, value, fid_obj
    cdef list fields
    cdef dict ids = None
    cdef tuple entry
    cdef Py_ssize_t nfields, k
    cdef uint64_t fid
    cdef int code
    cdef const unsigned char* origin = NULL
    cdef Item correlation
    correlation.kind = K_NONE
    _next(r, &it)
    if it.kind != K_ARRAY or it.n != 4:
        _bad(
            f"a message must be an array of 4 (subject, reply, cm, fields), got {_kind_name(&it)}"
        )
    subject = _read_opt_str(r, "subject", build)
    reply = _read_opt_str(r, "reply subject", build)
    cm = _read_cm(r, build, &origin, &correlation)
    _next(r, &it)
    if it.kind != K_ARRAY:
        _bad(f"fields must be an array, got {_kind_name(&it)}")
    if it.n & 3:
        _bad(f"fields array has {it.n} items, not a multiple of 4")
    nfields = it.n >> 2
    fields = [None] * nfields if build else None
    # One try around the loop, not one per field (each try saves the
    # exception state on entry); ``k`` and ``name`` still say where it broke.
    k = 0
    name = None
    named = False
    try:
        while k < nfields:
            name = None
            named = False
            _next(r, &it)
            if it.kind == K_STR and it.n > 0:
                if build:
                    name = _text(&it)
                else:
                    _check_text(&it)
                    name_it = it  # decoded only to name the field in an error
                named = True
            elif it.kind != K_NIL:
                _bad(f"name must be a non-empty str or nil, got {_kind_name(&it)}")
            _next(r, &it)
            if it.kind != K_UINT or it.u > 65535:
                _bad(f"field id must be an int 0..65535, got {_kind_name(&it)}")
            fid = it.u
            _next(r, &it)
            if it.kind != K_UINT or it.u >= N_CODES or _TYPES[it.u] is None:
                _bad(f"unknown field type code ({_kind_name(&it)})")
            code = <int>it.u
            value = _read_value(r, code, depth, build)
            fid_obj = <long>fid
            if not build:
                if fid:
                    if not named:
                        _bad(f"field id {fid} on an unnamed field")
                    if ids is None:
                        ids = {}
                    elif fid_obj in ids:
                        _bad(f"duplicate field id {fid}")
                    ids[fid_obj] = None
                k += 1
                continue
            ftype = _TYPES[code]
            entry = (name, fid_obj, ftype, value)
            if fid:
                if name is None:
                    _bad(f"field id {fid} on an unnamed field")
                if ids is None:
                    ids = {}
                elif fid_obj in ids:
                    _bad(f"duplicate field id {fid}")
                ids[fid_obj] = entry
            fields[k] = entry
            k += 1
    except MalformedMessage as exc:
        if named and name is None:
            name = _text(&name_it)  # checked already: it decodes
        where = f"field {name!r}" if name is not None else f"field {k}"
        raise MalformedMessage(f"{where}: {exc}") from None
    if not build:
        return None
    msg = PyType_GenericAlloc(Message, 0)
    _put(msg, _msg_offset[M_SUBJECT], subject)
    _put(msg, _msg_offset[M_REPLY], reply)
    _put(msg, _msg_offset[M_LISTENER], None)
    _put(msg, _msg_offset[M_CLOSURE], None)
    _put(msg, _msg_offset[M_CM], cm)
    _put(msg, _msg_offset[M_ORIGIN], None if origin == NULL else rv_origin_from_bytes(origin))
    _put(msg, _msg_offset[M_FIELDS], fields)
    _put(msg, _msg_offset[M_IDS], ids)
    _put(msg, _msg_offset[M_SHARED], False)
    _put(msg, _msg_offset[M_PUBCORR], _correlation_object(&correlation))
    return msg


cdef object _decode_raw(const unsigned char* base, Py_ssize_t size, bint build):
    cdef Reader r
    if size > _MAX_SIZE:
        raise MessageTooLarge(f"input is {size} bytes, over the {_MAX_SIZE}-byte limit")
    if size < _HEADER_LEN or memcmp(base, PyBytes_AS_STRING(_HEADER), _HEADER_LEN - 1) != 0:
        raise MalformedMessage("not an rvasync message (missing the \\xc1RV header)")
    if base[_HEADER_LEN - 1] != <unsigned char>PyBytes_AS_STRING(_HEADER)[_HEADER_LEN - 1]:
        raise MalformedMessage(
            f"unsupported wire format version {base[_HEADER_LEN - 1]} "
            f"(this build reads {_HEADER[_HEADER_LEN - 1]})"
        )
    r.p = base + _HEADER_LEN
    r.end = base + size
    try:
        msg = _read_message(&r, 0, build)
    except MalformedMessage:
        raise
    except Exception as exc:  # a check this module forgot must still not escape as non-RvError
        raise MalformedMessage(f"invalid message: {type(exc).__name__}: {exc}") from None
    if r.p != r.end:
        raise MalformedMessage("trailing bytes after the message")
    return msg


def decode(data):
    """The Message whose wire form is ``data`` (see ``rvasync.fallback.codec.decode``)."""
    return _decode_any(data, True)


def check(data):
    """Raise what ``decode(data)`` would raise, else return None (see
    ``rvasync.fallback.codec.check``): the same parse and checks, without building
    the Message, its fields' values or their strings."""
    _decode_any(data, False)


def check_subject(data):
    """``check(data)``, then the message's subject (None when it has none): what the
    daemon needs of a published message, in one call (see
    ``rvasync.fallback.codec.check_subject``)."""
    cdef Reader r
    cdef Item it
    if type(data) is not bytes:
        return decode(data).subject
    _decode_any(data, False)
    # Checked: the header and the message array are there, and the subject is a valid
    # str or nil.
    r.p = <const unsigned char*>PyBytes_AS_STRING(data) + _HEADER_LEN
    r.end = r.p + (PyBytes_GET_SIZE(data) - _HEADER_LEN)
    _next(&r, &it)
    return _read_opt_str(&r, "subject", True)


cdef object _decode_any(object data, bint build):
    cdef Py_buffer view
    if type(data) is bytes:
        return _decode_raw(
            <const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), build
        )
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedMessage(
            f"decode needs bytes, bytearray or memoryview, got {type(data).__name__}"
        )
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (BufferError, TypeError, ValueError):
        # Not one C-contiguous block (a strided view): decode a contiguous copy.
        return _decode_any(memoryview(data).tobytes(), build)
    try:
        return _decode_raw(<const unsigned char*>view.buf, view.len, build)
    finally:
        PyBuffer_Release(&view)


_learn_slots(Message, _MESSAGE_SLOTS, _msg_offset)
_learn_slots(DateTime, _DATETIME_SLOTS, _dt_offset)
