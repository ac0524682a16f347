"""Subject syntax, wildcard matching and the subject index, in pure Python.

This is the reference twin of ``rvasync_native.subjects``: both expose the same
names with the same behaviour, and the compiled one also borrows
:func:`describe_invalid` and :func:`describe_reserved` from here so that both
report a broken rule with exactly the same words (errors are the slow path;
only acceptance has to be fast).

A subject is a string of elements separated by dots. A *pattern* may use two
wildcards, each a whole element: ``*`` stands for exactly one element, ``>``
(last element only) for one or more trailing elements. Matching is
case-sensitive and element-wise; a wildcard character inside a *subject* (a
discouraged but legal wildcard send) is just text, so only patterns that
match that text receive it.
"""

from __future__ import annotations

import re
from typing import Any, Generic, TypeVar

from rvasync.errors import InvalidSubject, NotPermitted

#: A lone surrogate: a str that holds one cannot be encoded as UTF-8, so never sent.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A control character (C0, DEL, C1): refused in subjects, which tools print to terminals.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

__all__ = [
    "ADVISORY_ELEMENT",
    "DEFAULT_INDEX_CACHE_SIZE",
    "INBOX_ELEMENT",
    "LOCAL_ELEMENT",
    "MAX_ELEMENT_LENGTH",
    "MAX_SUBJECT_LENGTH",
    "VALIDATION_CACHE_LIMIT",
    "SubjectIndex",
    "check_listen_subject",
    "check_send_subject",
    "clear_caches",
    "describe_invalid",
    "describe_reserved",
    "has_wildcards",
    "subject_matches",
    "validate_subject",
]

MAX_SUBJECT_LENGTH = 255
"""Longest subject, in characters, dots included."""
MAX_ELEMENT_LENGTH = 127
"""Longest element, in characters."""

INBOX_ELEMENT = "_INBOX"
"""First element of every inbox name (point-to-point destinations)."""
LOCAL_ELEMENT = "_LOCAL"
"""First element of subjects that never leave the daemon they are sent to."""
ADVISORY_ELEMENT = "_RV"
"""First element of advisory subjects, which only the library itself sends."""

VALIDATION_CACHE_LIMIT = 16384
"""How many accepted subjects each validation cache remembers before starting over.

The caches turn the per-message check on the send path into one set lookup;
the bound keeps an application that puts one-time tokens into subjects (which
the naming advice warns against) from growing them without limit.
"""
DEFAULT_INDEX_CACHE_SIZE = 8192
"""How many subjects a :class:`SubjectIndex` remembers the matches of, by default."""

_WILDCARDS = ("*", ">")
_INBOX_PREFIX = INBOX_ELEMENT + "."

# Subjects already known to be valid, per rule set. Only accepted subjects are
# stored, so a cache hit can never hide an error.
_valid_plain: set[str] = set()
_valid_wild: set[str] = set()
_sendable: set[str] = set()


def _show(subject: str) -> str:
    """The subject as quoted in an error message, shortened if it is huge."""
    if len(subject) <= 64:
        return repr(subject)
    return f"{subject[:48]!r}..."


def describe_invalid(subject: object, wildcards: bool, what: str = "subject") -> str | None:
    """The first syntax rule ``subject`` breaks, as a sentence, or None if it is valid.

    Rules are checked in a fixed order (type, emptiness, total length, then
    each element from the left) so the same bad subject always gets the same
    explanation, whichever implementation found it bad. ``what`` names the
    thing being checked ("subject", "correspondent name" ...).
    """
    if not isinstance(subject, str):
        return f"{what} must be a str, not {type(subject).__name__}"
    if not subject:
        return f"{what} is empty; it needs at least one element"
    shown = _show(subject)
    if len(subject) > MAX_SUBJECT_LENGTH:
        return (
            f"{what} {shown} is {len(subject)} characters long; "
            f"the limit is {MAX_SUBJECT_LENGTH}, dots included"
        )
    elements = subject.split(".")
    count = len(elements)
    for position, element in enumerate(elements, 1):
        if not element:
            if position == 1:
                where = "it starts with a dot"
            elif position == count:
                where = "it ends with a dot"
            else:
                where = "two dots in a row"
            return (
                f"{what} {shown} has an empty element at position {position} of {count} ({where})"
            )
        if len(element) > MAX_ELEMENT_LENGTH:
            return (
                f"{what} {shown}: element {position} is {len(element)} characters long; "
                f"the limit is {MAX_ELEMENT_LENGTH}"
            )
        for char in _WILDCARDS:
            if char in element and element != char:
                return (
                    f"{what} {shown}: '{char}' must be a whole element, "
                    f"but element {position} is {element!r}"
                )
        if element == ">" and position != count:
            return (
                f"{what} {shown}: '>' must be the last element, "
                f"but it is element {position} of {count}"
            )
        if element in _WILDCARDS and not wildcards:
            return (
                f"{what} {shown}: element {position} is the wildcard '{element}', "
                "and wildcards are not allowed here"
            )
    control = _CONTROL.search(subject)
    if control is not None:
        return (
            f"{what} {shown} holds the control character U+{ord(control.group()):04X} at "
            f"position {control.start() + 1}; subjects may not contain control characters "
            "(tabs, line breaks, NUL ...)"
        )
    if not subject.isascii() and _SURROGATE.search(subject):
        return f"{what} {shown} is not valid Unicode (a lone surrogate has no UTF-8 form)"
    return None


def _quick_valid(subject: str, wildcards: bool) -> bool:
    """Acceptance test built from C-level string operations; errors are explained elsewhere."""
    length = len(subject)
    if not 0 < length <= MAX_SUBJECT_LENGTH:
        return False
    if subject[0] == "." or subject[-1] == "." or ".." in subject:
        return False
    if length > MAX_ELEMENT_LENGTH:
        for element in subject.split("."):
            if len(element) > MAX_ELEMENT_LENGTH:
                return False
    if "*" in subject or ">" in subject:
        if not wildcards:
            return False
        elements = subject.split(".")
        last = len(elements) - 1
        for position, element in enumerate(elements):
            if ("*" in element or ">" in element) and not (
                element == "*" or (element == ">" and position == last)
            ):
                return False
    if _CONTROL.search(subject) is not None:
        return False
    # A lone surrogate has no UTF-8 form, so such a subject could never be sent.
    return subject.isascii() or _SURROGATE.search(subject) is None


def _remember(cache: set[str], subject: str) -> None:
    if len(cache) >= VALIDATION_CACHE_LIMIT:
        cache.clear()
    cache.add(subject)


def _raise_invalid(subject: object, wildcards: bool) -> None:
    raise InvalidSubject(describe_invalid(subject, wildcards) or f"invalid subject {subject!r}")


def validate_subject(subject: str, *, wildcards: bool = False) -> None:
    """Raise :class:`~rvasync.errors.InvalidSubject` naming the rule ``subject`` breaks.

    With ``wildcards=True`` the subject may be a pattern (``*`` and a final
    ``>`` as whole elements). Accepted subjects are remembered, so checking the
    same subject again (every message on a send path does) is a set lookup.
    """
    cache = _valid_wild if wildcards else _valid_plain
    try:
        if subject in cache:
            return
    except TypeError:  # unhashable, hence not a str
        _raise_invalid(subject, wildcards)
    if isinstance(subject, str) and _quick_valid(subject, wildcards):
        _remember(cache, subject)
        return
    _raise_invalid(subject, wildcards)


def has_wildcards(subject: str) -> bool:
    """True if some element of ``subject`` is a wildcard (``*``, or ``>`` in last place).

    Certified delivery and distributed queues must refuse to send to such
    subjects; plain transports only discourage it.
    """
    if "*" not in subject and ">" not in subject:
        return False
    elements = subject.split(".")
    return "*" in elements or elements[-1] == ">"


def describe_reserved(subject: str) -> str | None:
    """Why an application may not send to ``subject`` (assumed valid), or None if it may.

    Subjects whose first element starts with ``_`` belong to the system, except
    ``_INBOX`` (replies to inboxes) and ``_LOCAL`` (daemon-local traffic);
    inbox names cannot carry wildcards.
    """
    if not subject.startswith("_"):
        return None
    first = subject.partition(".")[0]
    shown = _show(subject)
    if first == INBOX_ELEMENT:
        if has_wildcards(subject):
            return f"cannot use {shown}: inbox names ({INBOX_ELEMENT}.) cannot contain wildcards"
        return None
    if first == LOCAL_ELEMENT:
        return None
    if first == ADVISORY_ELEMENT:
        return (
            f"cannot send to {shown}: the prefix '{ADVISORY_ELEMENT}.' is reserved for "
            "advisories that rvasync itself publishes"
        )
    return (
        f"cannot send to {shown}: its first element {first!r} starts with '_', and such "
        f"subjects are reserved for internal use (only {INBOX_ELEMENT}. and {LOCAL_ELEMENT}. "
        "are open to applications)"
    )


def check_send_subject(subject: str) -> None:
    """Check a destination subject on the send path, remembering the ones that pass.

    Raises :class:`~rvasync.errors.InvalidSubject` for bad syntax (wildcards
    are allowed: the model discourages wildcard sends but does not forbid them
    on plain transports; use :func:`has_wildcards` where they are illegal) and
    :class:`~rvasync.errors.NotPermitted` for reserved subjects.
    """
    try:
        if subject in _sendable:
            return
    except TypeError:
        _raise_invalid(subject, True)
    if (
        subject.__class__ is str
        and subject.startswith(_INBOX_PREFIX)
        and _quick_valid(subject, False)
    ):
        # A reply's inbox: a new name for every request, so checked but never
        # remembered (it would only push reusable subjects out of the cache).
        # Without wildcards it is sendable; with them, the full path explains why not.
        return
    validate_subject(subject, wildcards=True)
    problem = describe_reserved(subject)
    if problem is not None:
        raise NotPermitted(problem)
    _remember(_sendable, subject)


def check_listen_subject(subject: str) -> None:
    """Check a subject a listener is created on: any valid pattern, except a wildcard inbox.

    Reserved subjects may be listened to (advisories arrive on ``_RV.`` subjects).
    """
    validate_subject(subject, wildcards=True)
    if subject.partition(".")[0] == INBOX_ELEMENT and has_wildcards(subject):
        raise NotPermitted(
            f"cannot listen to {_show(subject)}: inbox names ({INBOX_ELEMENT}.) "
            "cannot contain wildcards"
        )


def _matches(pattern: str, subject: str) -> bool:
    """Element-wise match of two valid strings (no validation)."""
    if "*" not in pattern and ">" not in pattern:
        return pattern == subject
    wanted = pattern.split(".")
    elements = subject.split(".")
    if wanted[-1] == ">":
        del wanted[-1]
        if len(elements) <= len(wanted):  # '>' needs at least one element of its own
            return False
    elif len(elements) != len(wanted):
        return False
    for want, element in zip(wanted, elements, strict=False):
        if want != "*" and want != element:
            return False
    return True


def subject_matches(pattern: str, subject: str) -> bool:
    """True if ``subject`` is one of the subjects ``pattern`` names.

    ``*`` matches exactly one element, a final ``>`` one or more trailing
    elements; everything else must be equal, case included. Both arguments
    are validated (wildcards allowed in both; in ``subject`` they are text).
    """
    validate_subject(pattern, wildcards=True)
    validate_subject(subject, wildcards=True)
    return _matches(pattern, subject)


def clear_caches() -> None:
    """Forget every remembered valid subject (for tests and benchmarks)."""
    _valid_plain.clear()
    _valid_wild.clear()
    _sendable.clear()


T = TypeVar("T")


class _Bucket:
    """Registrations that end at one trie position, in registration order.

    ``seqs`` (registration numbers) and ``items`` are parallel lists so that a
    single-bucket match is one ``tuple(items)``.
    """

    __slots__ = ("items", "seqs")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.items: list[Any] = []  # the SubjectIndex's T (a bucket is not generic)


class _Node:
    """One trie position: literal children, the ``*`` child, and two buckets.

    ``exact`` holds patterns that end here; ``rest`` holds patterns whose next
    (and last) element is ``>``, which match when the subject goes on.
    """

    __slots__ = ("children", "exact", "rest", "star")

    def __init__(self) -> None:
        self.children: dict[str, _Node] | None = None
        self.star: _Node | None = None
        self.exact: _Bucket | None = None
        self.rest: _Bucket | None = None

    def is_empty(self) -> bool:
        return not self.children and self.star is None and self.exact is None and self.rest is None


def _collect(node: _Node, elements: list[str], position: int, buckets: list[_Bucket]) -> None:
    """Append every bucket matching ``elements[position:]`` below ``node``.

    Follows the single literal path iteratively and recurses only where a
    ``*`` child offers a second way, so the work is proportional to the
    subject's depth times the number of live wildcard branches.
    """
    end = len(elements)
    while True:
        if position == end:
            if node.exact is not None:
                buckets.append(node.exact)
            return
        if node.rest is not None:
            buckets.append(node.rest)
        children = node.children
        child = children.get(elements[position]) if children else None
        if node.star is not None:
            if child is not None:
                _collect(child, elements, position + 1, buckets)
            child = node.star
        if child is None:
            return
        node = child
        position += 1


class SubjectIndex(Generic[T]):
    """Patterns (wildcards allowed) mapped to items, searched by concrete subject.

    ``match(subject)`` walks a trie of elements instead of testing every
    pattern, and remembers the answer for up to ``cache_size`` subjects, so
    an index with 100,000 listeners costs about what one with ten does.

    Every ``add`` is a separate registration, like a separate listener: the
    same item added under two patterns that both match a subject is returned
    twice. Matches come back in the order they were added.
    """

    __slots__ = ("_cache", "_cache_size", "_count", "_next_seq", "_patterns", "_root")

    def __init__(self, cache_size: int = DEFAULT_INDEX_CACHE_SIZE) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, not {cache_size!r}")
        self._root = _Node()
        self._cache: dict[str, tuple[T, ...]] = {}
        self._cache_size = cache_size
        self._patterns: dict[str, int] = {}
        self._count = 0
        self._next_seq = 0

    def __len__(self) -> int:
        """Number of registrations (not of distinct patterns)."""
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __repr__(self) -> str:
        return (
            f"<SubjectIndex: {self._count} registrations on {len(self._patterns)} patterns, "
            f"{len(self._cache)} cached subjects>"
        )

    def patterns(self) -> tuple[str, ...]:
        """The distinct patterns registered now, oldest first."""
        return tuple(self._patterns)

    def _forget(self, pattern: str) -> None:
        """Drop cached answers that ``pattern`` may have changed.

        A literal pattern only ever matches itself, so one entry goes; a
        wildcard pattern could touch any cached subject, so all go.
        """
        if "*" in pattern or ">" in pattern:
            self._cache.clear()
        else:
            self._cache.pop(pattern, None)

    def add(self, pattern: str, item: T) -> None:
        """Register ``item`` under ``pattern``; raises InvalidSubject for a bad pattern."""
        validate_subject(pattern, wildcards=True)
        node = self._root
        elements = pattern.split(".")
        bucket = None
        for element in elements:
            if element == ">":
                if node.rest is None:
                    node.rest = _Bucket()
                bucket = node.rest
                break
            if element == "*":
                if node.star is None:
                    node.star = _Node()
                node = node.star
                continue
            if node.children is None:
                node.children = {}
            child = node.children.get(element)
            if child is None:
                child = node.children[element] = _Node()
            node = child
        if bucket is None:
            if node.exact is None:
                node.exact = _Bucket()
            bucket = node.exact
        bucket.seqs.append(self._next_seq)
        bucket.items.append(item)
        self._next_seq += 1
        self._count += 1
        self._patterns[pattern] = self._patterns.get(pattern, 0) + 1
        self._forget(pattern)

    def remove(self, pattern: str, item: T) -> None:
        """Remove the oldest registration of ``item`` under ``pattern``.

        Items are compared like ``list.remove`` does (identity, then ``==``).
        Raises KeyError if there is no such registration.
        """
        try:
            registered = pattern in self._patterns
        except TypeError:
            registered = False
        if not registered:
            raise KeyError((pattern, item))
        # Walk the pattern's own path, remembering it for pruning.
        path: list[tuple[_Node, str]] = []
        node = self._root
        elements = pattern.split(".")
        bucket = None
        for element in elements:
            if element == ">":
                bucket = node.rest
                break
            path.append((node, element))
            # The pattern is registered, so its path exists.
            if element == "*":
                next_node = node.star
            else:
                assert node.children is not None
                next_node = node.children[element]
            assert next_node is not None
            node = next_node
        if bucket is None:
            bucket = node.exact
        assert bucket is not None
        items = bucket.items
        position = next(
            (n for n, candidate in enumerate(items) if candidate is item or candidate == item), -1
        )
        if position < 0:
            raise KeyError((pattern, item))
        del items[position]
        del bucket.seqs[position]
        if not items:
            if elements[-1] == ">":
                node.rest = None
            else:
                node.exact = None
            self._prune(path, node)
        self._count -= 1
        left = self._patterns[pattern] - 1
        if left:
            self._patterns[pattern] = left
        else:
            del self._patterns[pattern]
        self._forget(pattern)

    @staticmethod
    def _prune(path: list[tuple[_Node, str]], node: _Node) -> None:
        """Unlink trie nodes left empty, bottom up, so churn does not leak memory."""
        while path and node.is_empty():
            parent, element = path.pop()
            if element == "*":
                parent.star = None
            else:
                children = parent.children
                assert children is not None
                del children[element]
                if not children:
                    parent.children = None
            node = parent

    def clear(self) -> None:
        """Remove every registration."""
        self._root = _Node()
        self._cache.clear()
        self._patterns.clear()
        self._count = 0

    def match(self, subject: str) -> tuple[T, ...]:
        """Items whose pattern matches ``subject``, in the order they were added.

        ``subject`` is taken as is (it was validated where it entered the
        system); wildcard characters in it are plain text.
        """
        try:
            return self._cache[subject]
        except KeyError:
            pass
        except TypeError:
            raise InvalidSubject(describe_invalid(subject, True)) from None
        if not isinstance(subject, str):
            raise InvalidSubject(describe_invalid(subject, True))
        buckets: list[_Bucket] = []
        _collect(self._root, subject.split("."), 0, buckets)
        result: tuple[T, ...]
        if not buckets:
            result = ()
        elif len(buckets) == 1:
            result = tuple(buckets[0].items)
        else:
            # Each bucket is in registration order; order their union by sequence number.
            seqs: list[int] = []
            items: list[Any] = []
            for bucket in buckets:
                seqs += bucket.seqs
                items += bucket.items
            order = sorted(range(len(seqs)), key=seqs.__getitem__)
            result = tuple([items[n] for n in order])
        if self._cache_size:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[subject] = result
        return result
