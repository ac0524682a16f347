"""Subject names: syntax checks, wildcard matching and the subject index.

Every message carries a subject, a dot-separated list of elements such as
``NEWS.SPORTS.BASEBALL``; listeners name the subjects they want with patterns
in which ``*`` stands for one element and a final ``>`` for the rest. See
docs/subjects.md for the rules.

The per-message work (validating on send, finding the listeners of an inbound
subject) is a hot path: it comes from ``rvasync_native.subjects`` when that is
built and from its pure-Python twin ``rvasync.fallback.subjects`` otherwise,
chosen by :func:`rvasync._accel.load`. Both have the same interface and give
the same answers and error messages; type checkers see the annotated twin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rvasync._accel import load
from rvasync.errors import InvalidSubject
from rvasync.fallback.subjects import (
    ADVISORY_ELEMENT,
    INBOX_ELEMENT,
    LOCAL_ELEMENT,
    MAX_ELEMENT_LENGTH,
    MAX_SUBJECT_LENGTH,
    describe_invalid,
)

if TYPE_CHECKING:
    from rvasync.fallback.subjects import (
        SubjectIndex,
        check_listen_subject,
        check_send_subject,
        clear_caches,
        has_wildcards,
        subject_matches,
        validate_subject,
    )
else:
    _impl = load("subjects")
    SubjectIndex = _impl.SubjectIndex
    check_listen_subject = _impl.check_listen_subject
    check_send_subject = _impl.check_send_subject
    clear_caches = _impl.clear_caches
    has_wildcards = _impl.has_wildcards
    subject_matches = _impl.subject_matches
    validate_subject = _impl.validate_subject

__all__ = [
    "ADVISORY_ELEMENT",
    "INBOX_ELEMENT",
    "LOCAL_ELEMENT",
    "MAX_ELEMENT_LENGTH",
    "MAX_SUBJECT_LENGTH",
    "SubjectIndex",
    "check_listen_subject",
    "check_send_subject",
    "clear_caches",
    "has_wildcards",
    "is_advisory",
    "is_inbox",
    "is_local",
    "subject_matches",
    "validate_name",
    "validate_subject",
]


def _first_element_is(subject: str, element: str) -> bool:
    return subject.startswith(element) and (
        len(subject) == len(element) or subject[len(element)] == "."
    )


def is_inbox(subject: str) -> bool:
    """True for an inbox name (first element ``_INBOX``): delivered point-to-point."""
    return _first_element_is(subject, INBOX_ELEMENT)


def is_local(subject: str) -> bool:
    """True for a ``_LOCAL`` subject: it reaches only transports of the sender's daemon."""
    return _first_element_is(subject, LOCAL_ELEMENT)


def is_advisory(subject: str) -> bool:
    """True for an advisory subject (first element ``_RV``)."""
    return _first_element_is(subject, ADVISORY_ELEMENT)


def validate_name(name: str, *, what: str = "name", allow_reserved: bool = False) -> None:
    """Check a reusable name (certified correspondent, distributed queue, fault-tolerance group).

    Such names follow subject syntax without wildcards; unless
    ``allow_reserved``, their first element may not start with ``_`` (names
    like ``_INBOX`` or ``_RV`` would collide with the system's own subjects).
    ``what`` is how the error message refers to the name.
    Raises :class:`~rvasync.errors.InvalidSubject`.
    """
    problem = describe_invalid(name, False, what)
    if problem is not None:
        raise InvalidSubject(problem)
    if not allow_reserved and name.startswith("_"):
        first = name.partition(".")[0]
        raise InvalidSubject(
            f"{what} {name!r} begins with the reserved element {first!r}; "
            "names may not start with '_'"
        )
