# cython: language_level=3, boundscheck=False, wraparound=False, binding=True
"""Compiled ``Message.__init__``, ``Message.add`` and ``Message.delivery_copy`` (twin of ``rvasync.fallback.msgbuild``).

A message built per send spent more instructions in Python-level checks
(name, type inference, the I64 range) than in encoding and sending it. Here
the usual field -- a plain ASCII name not starting with ``_``, no explicit
type or identifier, and a value that is exactly a str (ASCII), an int in the
I64 range, a float, a bool or bytes -- is checked in C and appended to the
message's field list as the same ``(name, 0, type, value)`` tuple the Python
path stores. Every other case goes to ``Message._add_checked`` (or
``_extend``), the Python checks, so errors and unusual values behave exactly
as there. ``delivery_copy`` (one per listener of a delivered message, one
per message a virtual circuit sends) allocates the copy and writes its slots
at their offsets, as the codec's decoder does. ``rvasync.message`` installs
these functions as the methods; with
``binding=True`` they bind to the instance like Python functions.
"""

from cpython.dict cimport PyDict_Next
from cpython.list cimport PyList_Append, PyList_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport uint64_t

from rvasync.errors import InvalidArgument
from rvasync.fieldtypes import FieldType

__all__ = ["Origins", "add", "delivery_copy", "init"]

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    Py_UCS4 PyUnicode_READ_CHAR(object, Py_ssize_t)

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    bint PyObject_TypeCheck(object, type)
    object PyType_GenericAlloc(type, Py_ssize_t)

# The Message slots this module writes, in this order.
cdef tuple _SLOTS = (
    "subject", "reply_subject", "listener", "closure", "cm", "origin", "_fields", "_ids",
    "_shared", "publisher_correlation",
)
cdef enum:
    S_SUBJECT, S_REPLY, S_LISTENER, S_CLOSURE, S_CM, S_ORIGIN, S_FIELDS, S_IDS, S_SHARED, \
        S_PUBCORR, S_COUNT

# Writing a slot through setattr looks the attribute up on the type each time;
# init() writes the message's slots at their offsets instead. The offsets come
# from the slot descriptors of the class that declares them (Message), learnt
# on the first call; any other object takes the setattr path.
cdef type _layout = None
cdef Py_ssize_t _offset[S_COUNT]
cdef bint _learnt = False


cdef int _learn(object obj) except -1:
    """Find the class in ``type(obj).__mro__`` that declares every slot of _SLOTS."""
    global _layout, _learnt
    cdef Py_ssize_t i
    for klass in type(obj).__mro__:
        own = klass.__dict__
        descriptors = [own.get(name) for name in _SLOTS]
        if all(d is not None and type(d).__name__ == "member_descriptor" for d in descriptors):
            for i in range(S_COUNT):
                _offset[i] = (<PyMemberDescrObject*>descriptors[i]).d_member.offset
            _layout = klass
            break
    _learnt = True
    if _layout is not None:
        declared = set()
        for klass in _layout.__mro__:
            declared.update(klass.__dict__.get("__slots__", ()))
        if declared != set(_SLOTS):
            # delivery_copy() allocates a copy and writes exactly _SLOTS: a slot it does
            # not know would stay unset (AttributeError on first read). Fail loudly.
            raise RuntimeError(
                f"rvasync_native.msgbuild writes the Message slots {sorted(_SLOTS)}, "
                f"but {_layout.__name__} declares {sorted(declared)}: update msgbuild"
            )
    return 0


cdef inline void _put(object obj, int slot, object value):
    """Store ``value`` in slot number ``slot`` of ``obj`` (a ``_layout`` instance)."""
    cdef PyObject** where = <PyObject**>((<char*><PyObject*>obj) + _offset[slot])
    cdef PyObject* old = where[0]
    Py_INCREF(value)
    where[0] = <PyObject*>value
    Py_XDECREF(old)


cdef inline object _get(object obj, int slot):
    """Slot number ``slot`` of ``obj`` (a ``_layout`` instance), or None when unset."""
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>obj) + _offset[slot]))[0]
    if value == NULL:
        return None
    return <object>value


cdef object _STRING = FieldType.STRING
cdef object _I64 = FieldType.I64
cdef object _F64 = FieldType.F64
cdef object _BOOL = FieldType.BOOL
cdef object _OPAQUE = FieldType.OPAQUE
cdef object _ZERO = 0


cdef inline bint _plain_name(object name):
    """An exact, non-empty ASCII str not starting with '_' (the names add() takes as they are)."""
    return (
        type(name) is str
        and PyUnicode_IS_ASCII(name)
        and PyUnicode_GET_LENGTH(name) > 0
        and PyUnicode_READ_CHAR(name, 0) != 95  # '_'
    )


cdef inline object _inferred(object value):
    """The FieldType infer() picks for a value it stores unchanged, or None for the other cases."""
    cdef type cls = type(value)
    cdef int overflow
    if cls is str:
        return _STRING if PyUnicode_IS_ASCII(value) else None
    if cls is int:
        PyLong_AsLongLongAndOverflow(value, &overflow)
        return _I64 if overflow == 0 else None
    if cls is float:
        return _F64
    if cls is bytes:
        return _OPAQUE
    if cls is bool:
        return _BOOL
    return None


cdef inline tuple _entry(object name, object ftype, object value):
    cdef tuple entry = PyTuple_New(4)
    Py_INCREF(name)
    PyTuple_SET_ITEM(entry, 0, name)
    Py_INCREF(_ZERO)
    PyTuple_SET_ITEM(entry, 1, _ZERO)
    Py_INCREF(ftype)
    PyTuple_SET_ITEM(entry, 2, ftype)
    Py_INCREF(value)
    PyTuple_SET_ITEM(entry, 3, value)
    return entry


cdef inline int _add_one(object self, list fields, object name, object value) except -1:
    """Append ``name = value`` to a fresh (unshared) message's ``fields`` list."""
    cdef object ftype
    if _plain_name(name):
        ftype = _inferred(value)
        if ftype is not None:
            PyList_Append(fields, _entry(name, ftype, value))
            return 0
    self._add_checked(name, value, None, 0)
    return 0


def init(self, subject=None, fields=None, *, reply_subject=None):
    """``Message(subject=None, fields=None, *, reply_subject=None)``: see the class docstring."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* item
    cdef list stored
    if subject is not None and type(subject) is not str and not isinstance(subject, str):
        raise InvalidArgument(f"subject must be a str or None, got {type(subject).__name__}")
    if (
        reply_subject is not None
        and type(reply_subject) is not str
        and not isinstance(reply_subject, str)
    ):
        raise InvalidArgument(
            f"reply_subject must be a str or None, got {type(reply_subject).__name__}"
        )
    stored = []
    if not _learnt:
        _learn(self)
    if _layout is not None and PyObject_TypeCheck(self, _layout):
        _put(self, S_SUBJECT, subject)
        _put(self, S_REPLY, reply_subject)
        _put(self, S_LISTENER, None)
        _put(self, S_CLOSURE, None)
        _put(self, S_CM, None)
        _put(self, S_ORIGIN, None)
        _put(self, S_FIELDS, stored)
        _put(self, S_IDS, None)
        _put(self, S_SHARED, False)
        _put(self, S_PUBCORR, None)
    else:
        self.subject = subject
        self.reply_subject = reply_subject
        self.listener = None
        self.closure = None
        self.cm = None
        self.origin = None
        self.publisher_correlation = None
        self._fields = stored
        self._ids = None
        self._shared = False
    if fields is None:
        return
    if type(fields) is not dict:
        self._extend(fields)
        return
    # Every item plain (the usual case): store them all, no Python code runs meanwhile.
    if all_plain(<dict>fields):
        while PyDict_Next(<dict>fields, &pos, &key, &item):
            PyList_Append(stored, _entry(<object>key, _inferred(<object>item), <object>item))
        return
    for name, value in (<dict>fields).items():
        _add_one(self, self._fields, name, value)


cdef bint all_plain(dict fields):
    """True if every item of ``fields`` takes the fast path (checked before anything is stored)."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* item
    while PyDict_Next(fields, &pos, &key, &item):
        if not _plain_name(<object>key) or _inferred(<object>item) is None:
            return False
    return True


def add(self, name, value, type=None, field_id=0):
    """Append a field.

    Several fields may share a name. ``type=None`` infers the type from the
    value; an explicit type converts and range-checks it. A non-zero
    ``field_id`` (1..65535) must be unique in this message and needs a name.
    Names starting with ``_`` are reserved.
    """
    cdef object ftype
    cdef object fields
    if not _learnt:
        _learn(self)
    if (
        type is None
        and field_id is _ZERO
        and _layout is not None
        and PyObject_TypeCheck(self, _layout)
        and _get(self, S_SHARED) is False
        and _plain_name(name)
    ):
        ftype = _inferred(value)
        fields = _get(self, S_FIELDS)
        if ftype is not None and PyList_CheckExact(fields):
            PyList_Append(fields, _entry(name, ftype, value))
            return
    self._add_checked(name, value, type, field_id)


def delivery_copy(self, listener, closure):
    """A new Message for one delivery, sharing this one's field storage copy-on-write.

    Both sides are marked shared; whichever changes its fields first copies
    them. Nested values (sub-messages, array lists) are not copied.
    """
    if not _learnt:
        _learn(self)
    if type(self) is not _layout:  # not a plain Message: the attribute path
        clone = object.__new__(type(self))
        clone.subject = self.subject
        clone.reply_subject = self.reply_subject
        clone.listener = listener
        clone.closure = closure
        clone.cm = self.cm
        clone.origin = self.origin
        clone.publisher_correlation = self.publisher_correlation
        clone._fields = self._fields
        clone._ids = self._ids
        clone._shared = True
        self._shared = True
        return clone
    clone = PyType_GenericAlloc(_layout, 0)
    _put(clone, S_SUBJECT, _get(self, S_SUBJECT))
    _put(clone, S_REPLY, _get(self, S_REPLY))
    _put(clone, S_LISTENER, listener)
    _put(clone, S_CLOSURE, closure)
    _put(clone, S_CM, _get(self, S_CM))
    _put(clone, S_ORIGIN, _get(self, S_ORIGIN))
    _put(clone, S_FIELDS, _get(self, S_FIELDS))
    _put(clone, S_IDS, _get(self, S_IDS))
    _put(clone, S_SHARED, True)
    _put(clone, S_PUBCORR, _get(self, S_PUBCORR))
    _put(self, S_SHARED, True)
    return clone


# A publication origin (Message.origin) is ``(publisher id << 64) | sequence``, an
# int below 2**128. On CPython 3.11 (30-bit digits) Origins builds it from the two
# 64-bit halves straight into a new int's digits (the id's digits precomputed);
# elsewhere through the general conversion. Either way: one int per send, no
# shifts or additions of Python ints.
cdef extern from *:
    """
    #if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    #define RV_STAMP_DIGITS 1
    #endif

    static PyObject* rv_stamp_origin(uint64_t hi, uint64_t lo) {
    #ifdef RV_STAMP_DIGITS
        digit x[5];
        Py_ssize_t n = 5, i;
        PyLongObject* out;
        if (hi == 0) return PyLong_FromUnsignedLongLong(lo);
        x[0] = (digit)(lo & 0x3FFFFFFF);
        x[1] = (digit)((lo >> 30) & 0x3FFFFFFF);
        x[2] = (digit)(((lo >> 60) | (hi << 4)) & 0x3FFFFFFF);
        x[3] = (digit)((hi >> 26) & 0x3FFFFFFF);
        x[4] = (digit)(hi >> 56);
        while (x[n - 1] == 0) n--;  /* hi != 0: a digit from x[2] up is not zero */
        out = _PyLong_New(n);
        if (out == NULL) return NULL;
        for (i = 0; i < n; i++) out->ob_digit[i] = x[i];
        return (PyObject*)out;
    #else
        unsigned char b[16];
        int k;
        for (k = 7; k >= 0; k--) { b[k] = (unsigned char)hi; hi >>= 8; }
        for (k = 15; k >= 8; k--) { b[k] = (unsigned char)lo; lo >>= 8; }
    #if PY_VERSION_HEX >= 0x030D0000
        return PyLong_FromUnsignedNativeBytes(b, 16, Py_ASNATIVEBYTES_BIG_ENDIAN);
    #else
        return _PyLong_FromByteArray(b, 16, 0, 0);
    #endif
    #endif
    }
    """
    object rv_stamp_origin(uint64_t hi, uint64_t lo)


cdef class Origins:
    """A transport's publication origins (twin of ``rvasync.fallback.msgbuild.Origins``).

    ``Origins(publisher_id, sequence=1, tick=0, *, correlation=None)``:
    ``publisher_id`` (an int in [0, 2**64)) is the high half of every origin;
    the low half counts from ``sequence``. ``stamp(msg)`` is what a network
    send does to the message it is given: mark its fields shared (the
    transport keeps a reference, see ``Message.share``), write the next origin
    in place and the publisher's ``correlation`` id as
    ``msg.publisher_correlation``; one call, no attribute look-ups, one int
    built. It returns True when the low half of the origin it wrote is a
    multiple of ``tick`` (a power of two; 0: never), else False: the send
    pacer's tick (rvasync.sendpace), counted where the send already counts.
    ``next()`` returns the next origin without touching a message. After 2**64
    origins the count carries into the id (after 2**128 - 1 there is none).
    """

    cdef uint64_t _hi
    cdef uint64_t _lo
    cdef uint64_t _tick_mask
    cdef bint _ticking
    cdef bint _spent
    cdef readonly object correlation

    def __init__(self, publisher_id, sequence=1, tick=0, *, correlation=None):
        if type(publisher_id) is not int or not 0 <= publisher_id < 2**64:
            raise InvalidArgument(
                f"publisher id must be an int in [0, 2**64), got {publisher_id!r}"
            )
        if type(sequence) is not int or not 0 <= sequence < 2**64:
            raise InvalidArgument(f"sequence must be an int in [0, 2**64), got {sequence!r}")
        if type(tick) is not int or not 0 <= tick < 2**63 or tick & (tick - 1):
            raise InvalidArgument(f"tick must be 0 or a power of two, got {tick!r}")
        self._hi = publisher_id
        self._lo = sequence
        self._ticking = tick != 0
        self._tick_mask = tick - 1 if tick else 0
        self.correlation = correlation

    cdef inline object _take(self):
        if self._spent:
            raise InvalidArgument("no origin left: 2**128 - 1 was the last")
        origin = rv_stamp_origin(self._hi, self._lo)
        self._lo += 1
        if self._lo == 0:
            self._hi += 1
            self._spent = self._hi == 0
        return origin

    def next(self):
        """The next origin (an int): a new publication's identity."""
        return self._take()

    def stamp(self, msg):
        """Mark ``msg`` shared and give it the next origin, in place; True on a tick."""
        cdef uint64_t lo = self._lo
        # _learn() is left to init() (every built Message has been through it): an
        # object of another class must not become the layout.
        if _learnt and type(msg) is _layout:
            _put(msg, S_ORIGIN, self._take())
            _put(msg, S_SHARED, True)
            _put(msg, S_PUBCORR, self.correlation)
        else:
            origin = self._take()
            msg.share()
            msg.origin = origin
            msg.publisher_correlation = self.correlation
        return self._ticking and (lo & self._tick_mask) == 0

    def __repr__(self):
        if self._spent:
            return "<Origins spent>"
        return f"<Origins id={self._hi:016x} next={self._lo}>"
