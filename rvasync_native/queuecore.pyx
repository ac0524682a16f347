# cython: language_level=3
"""Compiled twin of ``rvasync.fallback.queuecore``: a queue's storage and fast paths.

Same interface and behaviour as the pure-Python module (see its docstring for
the hooks the subclass supplies). Two things make it faster:

* the items live in a ring buffer over a Python list (no method calls per item);
* ``__anext__`` on a non-empty queue returns a tiny awaitable whose ``am_send``
  slot hands the item over at once: no coroutine, no frame, no exception per
  item. If that awaitable is dropped without being awaited, its item goes back
  to the head of the queue, so nothing is lost that a coroutine would have kept.
"""

from cpython.pyport cimport PY_SSIZE_T_MAX

cdef extern from *:
    """
    /* An awaitable that completes at once with a value taken from a queue. */
    typedef struct {
        PyObject_HEAD
        PyObject *queue;
        PyObject *value;
    } RvReady;

    static PyTypeObject RvReady_Type;

    #define RV_READY_FREELIST 64
    static RvReady *rv_ready_free[RV_READY_FREELIST];
    static int rv_ready_nfree = 0;

    static PyObject *rv_ready_self(PyObject *self) {
        Py_INCREF(self);
        return self;
    }

    static PySendResult rv_ready_send(PyObject *self, PyObject *arg, PyObject **result) {
        RvReady *r = (RvReady *)self;
        if (r->value == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "this queue item was already delivered");
            *result = NULL;
            return PYGEN_ERROR;
        }
        *result = r->value;  /* ownership moves to the caller */
        r->value = NULL;
        return PYGEN_RETURN;
    }

    static PyObject *rv_ready_next(PyObject *self) {
        /* The generator protocol, for callers that do not use am_send. */
        RvReady *r = (RvReady *)self;
        PyObject *v = r->value;
        if (v == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "this queue item was already delivered");
            return NULL;
        }
        r->value = NULL;
        if (PyTuple_Check(v) || PyExceptionInstance_Check(v)) {
            /* These would be misread as constructor arguments: wrap explicitly. */
            PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, v);
            Py_DECREF(v);
            if (stop != NULL) {
                PyErr_SetObject(PyExc_StopIteration, stop);
                Py_DECREF(stop);
            }
            return NULL;
        }
        PyErr_SetObject(PyExc_StopIteration, v);
        Py_DECREF(v);
        return NULL;
    }

    static void rv_ready_dealloc(PyObject *self) {
        RvReady *r = (RvReady *)self;
        if (r->value != NULL && r->queue != NULL) {
            /* Never awaited: give the item back to the head of its queue. */
            PyObject *et, *ev, *etb, *res;
            PyErr_Fetch(&et, &ev, &etb);
            res = PyObject_CallMethod(r->queue, "_push_front", "O", r->value);
            if (res == NULL) {
                PyErr_WriteUnraisable(r->queue);
            } else {
                Py_DECREF(res);
            }
            PyErr_Restore(et, ev, etb);
        }
        Py_CLEAR(r->value);
        Py_CLEAR(r->queue);
        if (rv_ready_nfree < RV_READY_FREELIST) {
            rv_ready_free[rv_ready_nfree++] = r;
        } else {
            PyObject_Free(self);
        }
    }

    static PyAsyncMethods rv_ready_async = {
        rv_ready_self,  /* am_await */
        0,              /* am_aiter */
        0,              /* am_anext */
        rv_ready_send,  /* am_send */
    };

    static PyTypeObject RvReady_Type = {
        PyVarObject_HEAD_INIT(NULL, 0)
        .tp_name = "rvasync_native.queuecore.ReadyItem",
        .tp_basicsize = sizeof(RvReady),
        .tp_dealloc = rv_ready_dealloc,
        .tp_as_async = &rv_ready_async,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "An awaitable queue item that is already there.",
        .tp_iter = rv_ready_self,
        .tp_iternext = rv_ready_next,
    };

    static PyObject *rv_make_ready(PyObject *queue, PyObject *value) {
        RvReady *r;
        if (rv_ready_nfree > 0) {
            r = rv_ready_free[--rv_ready_nfree];
            PyObject_Init((PyObject *)r, &RvReady_Type);
        } else {
            r = PyObject_New(RvReady, &RvReady_Type);
            if (r == NULL) {
                return NULL;
            }
        }
        Py_INCREF(queue);
        r->queue = queue;
        Py_INCREF(value);
        r->value = value;
        return (PyObject *)r;
    }

    static int rv_ready_init(void) {
        return PyType_Ready(&RvReady_Type);
    }
    """
    object rv_make_ready(object queue, object value)
    int rv_ready_init() except -1

rv_ready_init()

DISCARD_NONE = 0
DISCARD_FIRST = 1
DISCARD_LAST = 2
DISCARD_NEW = 3

cdef enum:
    _NONE = 0
    _FIRST = 1
    _LAST = 2
    _NEW = 3
    _INITIAL_SIZE = 8
    _SHRINK_FROM = 1024

cdef Py_ssize_t _UNBOUNDED = PY_SSIZE_T_MAX


cdef class QueueCore:
    """Items in arrival order, bounded by an optional limit with a discard policy."""

    cdef list _buf
    cdef Py_ssize_t _head
    cdef Py_ssize_t _count
    cdef Py_ssize_t _mask
    cdef Py_ssize_t _shrink_below
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _amount
    cdef Py_ssize_t _discarded
    cdef int _policy
    cdef public bint _watched

    def __cinit__(self, *args, **kwargs):
        self._buf = [None] * _INITIAL_SIZE
        self._mask = _INITIAL_SIZE - 1
        self._head = 0
        self._count = 0
        self._shrink_below = -1
        self._cap = _UNBOUNDED
        self._policy = _NONE
        self._amount = 1

    def __init__(self, limit=0, policy=DISCARD_NONE, discard_amount=1):
        self._cap = limit if limit > 0 else _UNBOUNDED
        self._policy = policy
        self._amount = discard_amount
        self._discarded = 0
        self._watched = False

    # -- ring buffer ----------------------------------------------------------------

    cdef void _resize(self, Py_ssize_t size):
        cdef list old = self._buf
        cdef list new = [None] * size
        cdef Py_ssize_t i
        cdef Py_ssize_t oldmask = self._mask
        for i in range(self._count):
            new[i] = old[(self._head + i) & oldmask]
        self._buf = new
        self._head = 0
        self._mask = size - 1
        self._shrink_below = (size >> 4) if size >= _SHRINK_FROM else -1

    cdef inline void _append(self, object item):
        if self._count > self._mask:
            self._resize((self._mask + 1) * 2)
        self._buf[(self._head + self._count) & self._mask] = item
        self._count += 1

    cdef inline object _popleft(self):
        cdef Py_ssize_t head = self._head
        item = self._buf[head]
        self._buf[head] = None
        self._head = (head + 1) & self._mask
        self._count -= 1
        if self._count < self._shrink_below:
            self._resize((self._mask + 1) >> 2)
        return item

    cdef inline object _poptail(self):
        cdef Py_ssize_t index = (self._head + self._count - 1) & self._mask
        item = self._buf[index]
        self._buf[index] = None
        self._count -= 1
        return item

    # -- producer side --------------------------------------------------------------

    def deliver(self, item):
        """Append ``item`` (O(1)); wake one waiting consumer if any might be waiting.

        Public: it is ``Queue.deliver`` (driver API) and what an open listener's
        ``deliver`` is bound to, so transports and drivers call it directly.
        """
        if self._count >= self._cap:
            self._overflow(item)
            return
        self._append(item)
        if self._watched:
            self._notify()

    cdef _overflow(self, item):
        cdef Py_ssize_t count, i
        if self._cap < 0:
            return
        if self._policy == _NEW:
            self._discarded += 1
        elif self._policy == _FIRST or self._policy == _LAST:
            count = self._amount if self._amount < self._count else self._count
            if self._policy == _FIRST:
                for i in range(count):
                    self._popleft()
            else:
                for i in range(count):
                    self._poptail()
            self._discarded += count
            self._append(item)
            if self._watched:
                self._notify()
        else:
            self._append(item)
            if self._watched:
                self._notify()
            return
        self._limit_exceeded()

    def _push_front(self, item):
        """Give back an item taken but never delivered (its consumer was cancelled)."""
        if self._cap < 0:
            return
        if self._count > self._mask:
            self._resize((self._mask + 1) * 2)
        self._head = (self._head - 1) & self._mask
        self._buf[self._head] = item
        self._count += 1
        if self._watched:
            self._notify()

    # -- consumer side --------------------------------------------------------------

    def __len__(self):
        return self._count

    def poll(self):
        """The head item, or None at once if the queue is empty."""
        if self._count:
            return self._popleft()
        return None

    def __aiter__(self):
        return self

    def __anext__(self):
        if self._count:
            return rv_make_ready(self, self._popleft())
        return self._wait_forever(True)

    async def get(self, timeout=None):
        """The head item, waiting for one if needed (at most ``timeout`` seconds)."""
        if timeout is not None:
            timeout = self._check_timeout(timeout)
        if self._count:
            return self._popleft()
        return await self._wait_item(False, timeout)

    # -- maintenance ------------------------------------------------------------------

    @property
    def discarded(self):
        """How many items the limit policy has discarded so far."""
        return self._discarded

    def discard_where(self, predicate):
        """Drop every queued item for which ``predicate`` is true; return how many (O(n)).

        Public: it is ``Queue.discard_where`` (driver API: a closing listener's cleanup).
        """
        cdef Py_ssize_t i, size
        items = [self._buf[(self._head + i) & self._mask] for i in range(self._count)]
        kept = [item for item in items if not predicate(item)]
        removed = len(items) - len(kept)
        if removed:
            size = _INITIAL_SIZE
            while size < len(kept):
                size *= 2
            self._buf = kept + [None] * (size - len(kept))
            self._head = 0
            self._count = len(kept)
            self._mask = size - 1
            self._shrink_below = (size >> 4) if size >= _SHRINK_FROM else -1
        return removed

    def _close_core(self):
        """Drop every item and every later ``deliver``; return how many items were dropped."""
        dropped = self._count
        self._buf = [None] * _INITIAL_SIZE
        self._mask = _INITIAL_SIZE - 1
        self._head = 0
        self._count = 0
        self._shrink_below = -1
        self._cap = -1
        self._watched = False
        return dropped

    # -- hooks the subclass replaces ----------------------------------------------------

    def _notify(self):
        self._watched = False

    def _limit_exceeded(self):
        pass

    def _check_timeout(self, timeout):
        return timeout

    async def _wait_item(self, iterating, timeout):
        if iterating:
            raise StopAsyncIteration
        raise LookupError("queue is empty")

    async def _wait_forever(self, iterating):
        return await self._wait_item(iterating, None)
