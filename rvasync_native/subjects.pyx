# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""Compiled twin of ``rvasync.fallback.subjects``: same names, same behaviour.

What is compiled is the work done per message: the character scan that
accepts a subject, the element-wise wildcard comparison (done in place, with
no splitting), and the trie walk and result merge of ``SubjectIndex.match``.
Error paths are not hot, so a rejected subject is explained by the pure
twin's ``describe_invalid``/``describe_reserved``: both implementations then
report every broken rule in the same words.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_KIND, PyUnicode_READ
from libc.limits cimport LLONG_MAX

import types

from rvasync.errors import InvalidSubject, NotPermitted
from rvasync.fallback import subjects as _pure

__all__ = _pure.__all__

MAX_SUBJECT_LENGTH = _pure.MAX_SUBJECT_LENGTH
MAX_ELEMENT_LENGTH = _pure.MAX_ELEMENT_LENGTH
INBOX_ELEMENT = _pure.INBOX_ELEMENT
LOCAL_ELEMENT = _pure.LOCAL_ELEMENT
ADVISORY_ELEMENT = _pure.ADVISORY_ELEMENT
VALIDATION_CACHE_LIMIT = _pure.VALIDATION_CACHE_LIMIT
DEFAULT_INDEX_CACHE_SIZE = _pure.DEFAULT_INDEX_CACHE_SIZE
describe_invalid = _pure.describe_invalid
describe_reserved = _pure.describe_reserved

cdef Py_ssize_t _MAX_SUBJECT = _pure.MAX_SUBJECT_LENGTH
cdef Py_ssize_t _MAX_ELEMENT = _pure.MAX_ELEMENT_LENGTH
cdef Py_ssize_t _CACHE_LIMIT = _pure.VALIDATION_CACHE_LIMIT

cdef Py_UCS4 _DOT = 46    # '.'
cdef Py_UCS4 _STAR = 42   # '*'
cdef Py_UCS4 _GT = 62     # '>'
cdef Py_UCS4 _UNDERSCORE = 95

# Only accepted subjects are stored, so a hit can never hide an error.
cdef set _valid_plain = set()
cdef set _valid_wild = set()
cdef set _sendable = set()


cdef bint _scan(str s, bint wildcards):
    """One pass over the characters: lengths, empty elements, wildcard placement."""
    cdef Py_ssize_t n = len(s)
    cdef Py_ssize_t i, start = 0
    cdef int kind
    cdef void *data
    cdef Py_UCS4 c
    if n == 0 or n > _MAX_SUBJECT:
        return False
    kind = PyUnicode_KIND(s)
    data = PyUnicode_DATA(s)
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if c == _DOT:
            if i == start or i - start > _MAX_ELEMENT:
                return False
            start = i + 1
        elif c == _STAR or c == _GT:
            if not wildcards or i != start:
                return False
            if i + 1 < n and (c == _GT or PyUnicode_READ(kind, data, i + 1) != _DOT):
                return False
        elif c < 0x20 or 0x7F <= c <= 0x9F:
            return False  # a control character (tools print subjects to terminals)
        elif 0xD800 <= c <= 0xDFFF:
            return False  # a lone surrogate: no UTF-8 form, so it could never be sent
    return start < n and n - start <= _MAX_ELEMENT


cdef inline void _remember(set cache, str subject):
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache.add(subject)


cdef int _validate(object subject, bint wildcards) except -1:
    cdef set cache = _valid_wild if wildcards else _valid_plain
    if isinstance(subject, str):
        if subject in cache:
            return 0
        if _scan(<str>subject, wildcards):
            _remember(cache, <str>subject)
            return 0
    problem = _pure.describe_invalid(subject, wildcards)
    if problem is None:  # the two rule sets disagree: a bug, never a user error
        raise AssertionError(f"native and pure subject rules disagree on {subject!r}")
    raise InvalidSubject(problem)


def validate_subject(subject, *, bint wildcards=False):
    """Raise InvalidSubject naming the rule ``subject`` breaks.

    With ``wildcards=True`` the subject may be a pattern. Accepted subjects
    are remembered, so checking the same one again is a set lookup.
    """
    _validate(subject, wildcards)


cdef bint _has_wildcards(str s):
    cdef Py_ssize_t n = len(s)
    cdef Py_ssize_t i
    cdef int kind = PyUnicode_KIND(s)
    cdef void *data = PyUnicode_DATA(s)
    cdef Py_UCS4 c
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if c == _STAR or c == _GT:
            if i > 0 and PyUnicode_READ(kind, data, i - 1) != _DOT:
                continue
            if i + 1 == n:
                return True
            if c == _STAR and PyUnicode_READ(kind, data, i + 1) == _DOT:
                return True
    return False


def has_wildcards(str subject):
    """True if some element is a wildcard (``*``, or ``>`` in last place)."""
    return _has_wildcards(subject)


def check_send_subject(subject):
    """Check a destination subject on the send path, remembering the ones that pass.

    InvalidSubject for bad syntax (wildcards allowed), NotPermitted for a
    reserved first element (anything starting with '_' but _INBOX and _LOCAL).
    """
    cdef str s
    if isinstance(subject, str):
        if subject in _sendable:
            return
        s = <str>subject
        if s.startswith(u"_INBOX.") and _scan(s, False):
            # A reply's inbox: a new name for every request, so checked but never
            # remembered (it would only push reusable subjects out of the cache).
            # Without wildcards it is sendable; with them, the full path explains why not.
            return
    _validate(subject, True)
    s = <str>subject
    if s[0] == u'_':
        problem = _pure.describe_reserved(s)
        if problem is not None:
            raise NotPermitted(problem)
    _remember(_sendable, s)


def check_listen_subject(subject):
    """Check a listener's subject: any valid pattern, except a wildcard inbox."""
    _validate(subject, True)
    _pure.check_listen_subject(subject)


cdef bint _match(str p, str s):
    """Element-wise comparison in place: no split, no allocation."""
    cdef Py_ssize_t pn = len(p)
    cdef Py_ssize_t sn = len(s)
    cdef Py_ssize_t pi = 0, si = 0, pe, se, k
    cdef int pk = PyUnicode_KIND(p)
    cdef int sk = PyUnicode_KIND(s)
    cdef void *pd = PyUnicode_DATA(p)
    cdef void *sd = PyUnicode_DATA(s)
    cdef Py_UCS4 c
    while True:
        # Both positions are at the start of an element here.
        pe = pi
        while pe < pn and PyUnicode_READ(pk, pd, pe) != _DOT:
            pe += 1
        se = si
        while se < sn and PyUnicode_READ(sk, sd, se) != _DOT:
            se += 1
        if pe - pi == 1 and PyUnicode_READ(pk, pd, pi) == _GT:
            return True  # the subject has at least this element left
        if not (pe - pi == 1 and PyUnicode_READ(pk, pd, pi) == _STAR):
            if se - si != pe - pi:
                return False
            for k in range(pe - pi):
                if PyUnicode_READ(pk, pd, pi + k) != PyUnicode_READ(sk, sd, si + k):
                    return False
        pi = pe + 1
        si = se + 1
        if pi > pn:
            return si > sn
        if si > sn:
            return False


def subject_matches(pattern, subject):
    """True if ``subject`` is one of the subjects ``pattern`` names (both validated)."""
    _validate(pattern, True)
    _validate(subject, True)
    return _match(<str>pattern, <str>subject)


def clear_caches():
    """Forget every remembered valid subject (for tests and benchmarks)."""
    _valid_plain.clear()
    _valid_wild.clear()
    _sendable.clear()


cdef class _Bucket:
    """Registrations ending at one trie position: parallel lists, oldest first."""

    cdef list seqs
    cdef list items

    def __cinit__(self):
        self.seqs = []
        self.items = []


cdef class _Node:
    """One trie position: literal children, the ``*`` child, and two buckets."""

    cdef dict children
    cdef _Node star
    cdef _Bucket exact
    cdef _Bucket rest

    cdef bint is_empty(self):
        return (
            (self.children is None or len(self.children) == 0)
            and self.star is None and self.exact is None and self.rest is None
        )


cdef int _collect(_Node node, list elements, Py_ssize_t position, list buckets) except -1:
    """Append every bucket matching ``elements[position:]``; recurse only at ``*`` forks."""
    cdef Py_ssize_t end = len(elements)
    cdef _Node child
    cdef object found
    while True:
        if position == end:
            if node.exact is not None:
                buckets.append(node.exact)
            return 0
        if node.rest is not None:
            buckets.append(node.rest)
        child = None
        if node.children is not None:
            found = node.children.get(elements[position])
            if found is not None:
                child = <_Node>found
        if node.star is not None:
            if child is not None:
                _collect(child, elements, position + 1, buckets)
            child = node.star
        if child is None:
            return 0
        node = child
        position += 1


cdef tuple _merge(list buckets):
    """Items of several buckets in registration order (k-way merge on sequence numbers)."""
    cdef Py_ssize_t k = len(buckets)
    cdef Py_ssize_t j, best, step, total = 0
    cdef _Bucket bucket
    cdef list out = []
    cdef Py_ssize_t *pos = <Py_ssize_t *>PyMem_Malloc(k * sizeof(Py_ssize_t))
    cdef long long *head = <long long *>PyMem_Malloc(k * sizeof(long long))
    if pos == NULL or head == NULL:
        PyMem_Free(pos)
        PyMem_Free(head)
        raise MemoryError()
    try:
        for j in range(k):
            bucket = <_Bucket>buckets[j]
            pos[j] = 0
            head[j] = bucket.seqs[0]  # buckets in the trie are never empty
            total += len(bucket.items)
        for step in range(total):
            best = 0
            for j in range(1, k):
                if head[j] < head[best]:
                    best = j
            bucket = <_Bucket>buckets[best]
            out.append(bucket.items[pos[best]])
            pos[best] += 1
            if pos[best] < len(bucket.items):
                head[best] = bucket.seqs[pos[best]]
            else:
                head[best] = LLONG_MAX
    finally:
        PyMem_Free(pos)
        PyMem_Free(head)
    return tuple(out)


cdef class SubjectIndex:
    """Patterns (wildcards allowed) mapped to items, searched by concrete subject.

    ``match`` walks a trie of elements and remembers its answer for up to
    ``cache_size`` subjects. Each ``add`` is a separate registration; matches
    come back in the order they were added.
    """

    cdef _Node _root
    cdef dict _cache
    cdef Py_ssize_t _cache_size
    cdef dict _patterns
    cdef Py_ssize_t _count
    cdef long long _next_seq

    def __init__(self, cache_size=DEFAULT_INDEX_CACHE_SIZE):
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, not {cache_size!r}")
        self._root = _Node()
        self._cache = {}
        self._cache_size = cache_size
        self._patterns = {}
        self._count = 0
        self._next_seq = 0

    @classmethod
    def __class_getitem__(cls, item):
        return types.GenericAlias(cls, item)

    def __len__(self):
        """Number of registrations (not of distinct patterns)."""
        return self._count

    def __bool__(self):
        return self._count > 0

    def __repr__(self):
        return (
            f"<SubjectIndex: {self._count} registrations on {len(self._patterns)} patterns, "
            f"{len(self._cache)} cached subjects>"
        )

    def patterns(self):
        """The distinct patterns registered now, oldest first."""
        return tuple(self._patterns)

    cdef void _forget(self, str pattern):
        # A literal pattern only matches itself; a wildcard one may touch any entry.
        if u'*' in pattern or u'>' in pattern:
            self._cache.clear()
        else:
            self._cache.pop(pattern, None)

    def add(self, pattern, item):
        """Register ``item`` under ``pattern``; raises InvalidSubject for a bad pattern."""
        _validate(pattern, True)
        cdef str p = <str>pattern
        cdef _Node node = self._root
        cdef _Node child
        cdef _Bucket bucket = None
        cdef object found
        for element in p.split(u'.'):
            if element == u'>':
                if node.rest is None:
                    node.rest = _Bucket()
                bucket = node.rest
                break
            if element == u'*':
                if node.star is None:
                    node.star = _Node()
                node = node.star
                continue
            if node.children is None:
                node.children = {}
            found = node.children.get(element)
            if found is None:
                child = _Node()
                node.children[element] = child
            else:
                child = <_Node>found
            node = child
        if bucket is None:
            if node.exact is None:
                node.exact = _Bucket()
            bucket = node.exact
        bucket.seqs.append(self._next_seq)
        bucket.items.append(item)
        self._next_seq += 1
        self._count += 1
        self._patterns[p] = self._patterns.get(p, 0) + 1
        self._forget(p)

    def remove(self, pattern, item):
        """Remove the oldest registration of ``item`` under ``pattern``; KeyError if none."""
        try:
            registered = pattern in self._patterns
        except TypeError:
            registered = False
        if not registered:
            raise KeyError((pattern, item))
        cdef str p = <str>pattern
        cdef list elements = p.split(u'.')
        cdef list path = []
        cdef _Node node = self._root
        cdef _Bucket bucket = None
        cdef bint rest = False
        cdef Py_ssize_t position, count
        for element in elements:
            if element == u'>':
                bucket = node.rest
                rest = True
                break
            path.append((node, element))
            if element == u'*':
                node = node.star
            else:
                node = <_Node>node.children[element]
        if not rest:
            bucket = node.exact
        count = len(bucket.items)
        for position in range(count):
            candidate = bucket.items[position]
            if candidate is item or candidate == item:
                break
        else:
            raise KeyError((pattern, item))
        del bucket.items[position]
        del bucket.seqs[position]
        if not bucket.items:
            if rest:
                node.rest = None
            else:
                node.exact = None
            _prune(path, node)
        self._count -= 1
        left = self._patterns[p] - 1
        if left:
            self._patterns[p] = left
        else:
            del self._patterns[p]
        self._forget(p)

    def clear(self):
        """Remove every registration."""
        self._root = _Node()
        self._cache.clear()
        self._patterns.clear()
        self._count = 0

    def match(self, subject):
        """Items whose pattern matches ``subject``, in the order they were added."""
        if not isinstance(subject, str):
            raise InvalidSubject(_pure.describe_invalid(subject, True))
        found = self._cache.get(subject)
        if found is not None:
            return found
        return self._compute(<str>subject)

    cdef tuple _compute(self, str subject):
        cdef list buckets = []
        cdef tuple result
        cdef Py_ssize_t k
        _collect(self._root, subject.split(u'.'), 0, buckets)
        k = len(buckets)
        if k == 0:
            result = ()
        elif k == 1:
            result = tuple((<_Bucket>buckets[0]).items)
        else:
            result = _merge(buckets)
        if self._cache_size:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[subject] = result
        return result


cdef int _prune(list path, _Node node) except -1:
    """Unlink trie nodes left empty, bottom up, so churn does not leak memory."""
    cdef _Node parent
    while path and node.is_empty():
        parent, element = path.pop()
        if element == u'*':
            parent.star = None
        else:
            del parent.children[element]
            if not parent.children:
                parent.children = None
        node = parent
    return 0
