"""The hand-over of ``listen(subject, retained=True)``: retained messages first, then live.

The listener subscribes to the live stream *before* it asks the caches, so
nothing published after that moment can be missed; the difficulty is the
overlap: a live update may arrive before the answer, and the answer may hold
a publication whose live copy is still on its way (the cache's path can be
faster than the listener's own, by any amount of time after loss and repair).

Publications are told apart by their **identity** ``(publisher, sequence)``
(the origin network transports stamp on each message they send: a random
publisher id and its send counter), not by content and not by time. Each
publisher's messages reach every receiver in the order sent, so for one
publisher and one subject a higher sequence is a newer publication. The rule,
per subject:

1. Until the answer arrives, live messages wait, so the retained messages
   come first. When it arrives, for the retained message ``R = (P, r)`` of a
   subject: if a waiting live message of that subject from ``P`` has a
   sequence ``>= r`` (the copy of ``R`` itself, or newer), ``R`` is dropped;
   otherwise the waiting messages of that subject from ``P`` (all older than
   ``R``) are delivered first, then ``R``. Then every other waiting message,
   in arrival order.
2. A subject whose ``R`` was delivered remembers ``(P, r)``: a later live
   message of it from ``P`` with sequence ``r`` is ``R``'s copy and is
   dropped; one with a higher sequence is delivered (and the subject forgets
   ``R``: its copy can no longer come); one with a lower sequence is older
   than what was delivered, so it is *superseded*: not delivered (that would
   put an old value after a newer one) and counted, so the driver reports it
   in an advisory. Messages of other publishers pass through.

So each publication is delivered once, per subject and publisher in order;
one that would break the order is counted, never silently lost. A retained
message without identity (made by a sender that stamps none, such as the
process transport, where a publication reaches its in-process listeners
before any answer can) keeps the rule without one: a waiting live message of
its subject is at least as new, else it is delivered and nothing is
remembered.

Sans-IO and clock-free: the driver passes each live message and the answer,
delivers what the calls return, and reports :meth:`HandOver.take_superseded`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["HandOver", "Identity", "Subjected", "origin_identity"]

#: A publication's identity: the publisher, and its sequence (higher is newer).
Identity = tuple[int, int]

_SEQUENCE_MASK = (1 << 64) - 1


class Subjected(Protocol):
    """What the hand-over needs of a message: its subject."""

    @property
    def subject(self) -> Any: ...


M = TypeVar("M", bound=Subjected)


def origin_identity(origin: int | None) -> Identity | None:
    """The identity in a ``Message.origin``: (publisher id, its send sequence), the high
    and low 64 bits of the int."""
    if origin is None:
        return None
    return origin >> 64, origin & _SEQUENCE_MASK


class HandOver(Generic[M]):
    """Merges one answer of retained messages into a live stream (see the module text).

    ``identify`` gives a message's :data:`Identity`, or None if it has none.
    """

    __slots__ = ("_answered", "_dropped", "_early", "_identify", "_pending", "_superseded")

    def __init__(self, identify: Callable[[M], Identity | None]) -> None:
        if not callable(identify):
            raise TypeError(f"identify must be callable, got {type(identify).__name__}")
        self._identify = identify
        self._early: list[M] = []  # live messages waiting for the answer
        self._pending: dict[Any, Identity] = {}  # subject -> delivered R whose copy may come
        self._answered = False
        self._superseded = 0
        self._dropped: list[M] = []  # live messages not delivered (copies, superseded)

    @property
    def answered(self) -> bool:
        """True once the answer (possibly empty) was merged."""
        return self._answered

    @property
    def done(self) -> bool:
        """True once answered and no delivered retained message awaits its live copy."""
        return self._answered and not self._pending

    @property
    def pending(self) -> int:
        """How many subjects still remember a delivered retained message."""
        return len(self._pending)

    def take_superseded(self) -> int:
        """Live messages not delivered because a newer one was (since the last call)."""
        taken, self._superseded = self._superseded, 0
        return taken

    def take_dropped(self) -> list[M]:
        """The live messages not delivered since the last call: copies of delivered
        retained publications, and superseded ones (a certified listener confirms them)."""
        taken, self._dropped = self._dropped, []
        return taken

    def on_live(self, msg: M) -> list[M]:
        """A live message arrived: the messages to deliver now (it, or none)."""
        if not self._answered:
            self._early.append(msg)
            return []
        pending = self._pending
        if not pending:
            return [msg]
        subject = msg.subject
        retained = pending.get(subject)
        if retained is None:
            return [msg]
        ident = self._identify(msg)
        if ident is None or ident[0] != retained[0]:
            return [msg]
        if ident[1] == retained[1]:
            del pending[subject]  # the live copy of the retained publication
            self._dropped.append(msg)
            return []
        if ident[1] < retained[1]:
            self._superseded += 1
            self._dropped.append(msg)
            return []
        del pending[subject]  # newer: the copy of R can no longer come
        return [msg]

    def on_answer(self, retained: Iterable[M]) -> list[M]:
        """The merged answer arrived (or the request gave up: pass nothing)."""
        out: list[M] = []
        if self._answered:
            return out
        self._answered = True
        early, self._early = self._early, []
        identify = self._identify
        waiting: dict[Any, list[int]] = {}
        for index, msg in enumerate(early):
            waiting.setdefault(msg.subject, []).append(index)
        taken: set[int] = set()
        seen: set[Any] = set()
        for msg in retained:
            subject = msg.subject
            if subject in seen:
                continue  # an answer naming a subject twice: the first counts
            seen.add(subject)
            ident = identify(msg)
            indexes = waiting.get(subject, [])
            if ident is None:
                if not indexes:
                    out.append(msg)
                continue
            older: list[int] = []
            newer_seen = False
            for index in indexes:
                live = identify(early[index])
                if live is None:
                    newer_seen = True  # no identity to compare: take the live one as newer
                    break
                if live[0] == ident[0]:
                    if live[1] >= ident[1]:
                        newer_seen = True
                        break
                    older.append(index)
            if newer_seen:
                continue
            for index in older:
                out.append(early[index])
                taken.add(index)
            out.append(msg)
            self._pending[subject] = ident
        out.extend(msg for index, msg in enumerate(early) if index not in taken)
        return out
