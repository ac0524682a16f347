"""The requester's side of a retained request: gathering the caches' answers into one.

Several caches on one network may retain the same subjects (rvcache runs
them as a fault-tolerant group; rvasync lets any number run side by side).
Every cache answers every request, and the *requester merges*:

* per subject it keeps one message, the one with the newest stamp (the time
  the answering cache stored it; equal stamps keep the first received), so
  the result never holds a subject twice;
* it knows which caches to wait for from the answers themselves: each names
  the other caches it has heard (their hellos). The request is complete once
  every cache named so far has sent its last part; a requester that heard
  nothing by its timeout gets an error, one that heard some caches but not
  all of those named gets what it has, and the driver reports the silent ones
  in an advisory.

Parts of one cache may arrive duplicated or out of order (the test drives
every order); a part is identified by ``(cache, part)`` and counted once.
Sans-IO and generic: an item is whatever the driver decoded (a message), with
its subject and stamp given beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["AnswerCollector"]

T = TypeVar("T")


@dataclass(slots=True)
class _CacheAnswer:
    parts: set[int] = field(default_factory=set)
    last: int | None = None  # the number of the part flagged last, once seen

    @property
    def complete(self) -> bool:
        return self.last is not None and len(self.parts) == self.last + 1


class AnswerCollector(Generic[T]):
    """Merges the answer parts of any number of caches to one request."""

    __slots__ = ("_answers", "_best", "_named")

    def __init__(self) -> None:
        self._answers: dict[str, _CacheAnswer] = {}
        self._named: dict[str, None] = {}  # every cache id heard of, in order
        self._best: dict[str, tuple[float, T]] = {}

    def on_part(
        self,
        cache: str,
        peers: Iterable[str],
        part: int,
        last: bool,
        entries: Iterable[tuple[str, float, T]],
    ) -> bool:
        """Take one part (``entries``: subject, stamp, item); returns False for a duplicate."""
        answer = self._answers.setdefault(cache, _CacheAnswer())
        self._named.setdefault(cache, None)
        for peer in peers:
            self._named.setdefault(peer, None)
        if part in answer.parts:
            return False
        answer.parts.add(part)
        if last:
            answer.last = part
        best = self._best
        for subject, stamp, item in entries:
            held = best.get(subject)
            if held is None or stamp > held[0]:
                best[subject] = (stamp, item)
        return True

    @property
    def heard(self) -> bool:
        """True once at least one cache answered completely."""
        return any(answer.complete for answer in self._answers.values())

    @property
    def complete(self) -> bool:
        """True once every cache named so far has answered completely (and one did)."""
        if not self._named:
            return False
        answers = self._answers
        return all(cache in answers and answers[cache].complete for cache in self._named)

    def missing(self) -> list[str]:
        """The caches named by some answer whose own answer is not complete."""
        answers = self._answers
        return [c for c in self._named if c not in answers or not answers[c].complete]

    def result(self) -> list[T]:
        """The merged items, one per subject, ordered by subject."""
        return [self._best[subject][1] for subject in sorted(self._best)]
