"""The retained store: the last message of every subject, within limits.

Sans-IO: the cache driver hands it each update's subject, wire form and
stamp (the time it arrived, given by the driver), and asks it for the entries
matching a pattern when a request comes. It enforces two limits, the number
of subjects and the bytes of retained wire forms; an update that would exceed
one is refused (the value stored before, if any, stays), and the refusals
are counted so the driver can report them in an advisory (never a silent
loss).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from rvasync.subjects import has_wildcards, subject_matches

__all__ = ["Entry", "Outcome", "Refusals", "RetainedStore"]


class Outcome(enum.Enum):
    """What :meth:`RetainedStore.put` / :meth:`~RetainedStore.delete` did."""

    STORED = "stored"  # a new subject
    REPLACED = "replaced"  # a newer value of a retained subject
    DELETED = "deleted"
    ABSENT = "absent"  # deletion of a subject not retained: nothing to do
    REFUSED_SUBJECTS = "refused-subjects"  # a new subject over max_subjects
    REFUSED_BYTES = "refused-bytes"  # over max_bytes


@dataclass(slots=True)
class Entry:
    """One retained message: subject, when it was stored, and its wire form."""

    subject: str
    stamp: float
    wire: bytes


@dataclass(slots=True)
class Refusals:
    """Updates refused since the last :meth:`RetainedStore.take_refusals`."""

    over_subjects: int = 0
    over_bytes: int = 0

    @property
    def total(self) -> int:
        return self.over_subjects + self.over_bytes


def _check_limit(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return value


class RetainedStore:
    """Subject -> :class:`Entry`, at most ``max_subjects`` of them and ``max_bytes`` of wire."""

    __slots__ = ("_bytes", "_entries", "_refusals", "max_bytes", "max_subjects")

    def __init__(self, *, max_subjects: int | None = None, max_bytes: int | None = None) -> None:
        self.max_subjects = _check_limit("max_subjects", max_subjects)
        self.max_bytes = _check_limit("max_bytes", max_bytes)
        self._entries: dict[str, Entry] = {}
        self._bytes = 0
        self._refusals = Refusals()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, subject: object) -> bool:
        return subject in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    @property
    def size(self) -> int:
        """The bytes of wire forms retained."""
        return self._bytes

    def get(self, subject: str) -> Entry | None:
        return self._entries.get(subject)

    def put(self, subject: str, wire: bytes, stamp: float) -> Outcome:
        """Retain ``wire`` as the current value of ``subject`` (unless a limit refuses it)."""
        old = self._entries.get(subject)
        grow = len(wire) - (0 if old is None else len(old.wire))
        if (
            old is None
            and self.max_subjects is not None
            and len(self._entries) >= self.max_subjects
        ):
            self._refusals.over_subjects += 1
            return Outcome.REFUSED_SUBJECTS
        if self.max_bytes is not None and self._bytes + grow > self.max_bytes:
            self._refusals.over_bytes += 1
            return Outcome.REFUSED_BYTES
        self._bytes += grow
        if old is None:
            self._entries[subject] = Entry(subject, stamp, wire)
            return Outcome.STORED
        old.stamp = stamp
        old.wire = wire
        return Outcome.REPLACED

    def delete(self, subject: str) -> Outcome:
        """Forget ``subject``'s retained value (a deletion was published)."""
        old = self._entries.pop(subject, None)
        if old is None:
            return Outcome.ABSENT
        self._bytes -= len(old.wire)
        return Outcome.DELETED

    def select(self, pattern: str) -> list[Entry]:
        """The entries whose subject matches ``pattern`` (wildcards allowed), by subject."""
        if not has_wildcards(pattern):
            entry = self._entries.get(pattern)
            return [] if entry is None else [entry]
        found = [
            entry for entry in self._entries.values() if subject_matches(pattern, entry.subject)
        ]
        found.sort(key=lambda entry: entry.subject)
        return found

    def take_refusals(self) -> Refusals:
        """The refusals counted since the last call (and start counting afresh)."""
        taken, self._refusals = self._refusals, Refusals()
        return taken
