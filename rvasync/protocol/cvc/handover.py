"""The hand-over of ``listen(subject, retained=True)``: retained messages first, then live.

The listener subscribes to the live stream *before* it asks the caches, so
nothing published after that moment can be missed; the difficulty is the
overlap: a live update may arrive before the answer, and the answer may hold
a message that is also still on its way live. The rule, per subject (every
publisher's messages reach every receiver in the order sent):

1. Until the answer arrives, live messages wait (so the retained messages
   come first, as the API promises). When it arrives, the retained message
   of every subject with *no* live message waiting is delivered, then the
   waiting live messages in arrival order. A subject with a live message
   waiting gets no retained message: the live one is at least as new (the
   cache stored its value no later than it answered, so the value is that
   same publication, an older one, or one still on its way live).
2. A subject whose retained message was delivered may still see the live
   copy of that very publication: for the ``settle`` seconds that follow,
   live messages for the subject are *held*. When one equal to the retained
   message arrives, it and the ones held before it (older: they were sent
   before it) are dropped and the subject goes live. If none arrives within
   ``settle`` (the retained value was published before the listener
   subscribed, which is the common case), the held messages are delivered
   in arrival order and the subject goes live.
3. Once a subject is live, every live message is delivered at once.

So per subject nothing is delivered twice and nothing older than what was
already delivered follows it, as long as a retained publication's live copy
arrives within ``settle`` of the answer; the one residual case (a live copy
later than that, after loss and long repair) is a duplicate, never a gap.
Two different publications with equal content are indistinguishable here:
an update equal to the retained value while held counts as its copy.

Sans-IO: the driver passes each live message and the answer with ``now``,
delivers what the calls return, and calls :meth:`HandOver.on_timer` at
:attr:`HandOver.deadline`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["HandOver", "Subjected"]


class Subjected(Protocol):
    """What the hand-over needs of a message: its subject, and equality."""

    @property
    def subject(self) -> Any: ...


M = TypeVar("M", bound=Subjected)


@dataclass(slots=True)
class _Hold(Generic[M]):
    retained: M
    until: float
    held: list[M] = field(default_factory=list)


class HandOver(Generic[M]):
    """Merges one answer of retained messages into a live stream (see the module text)."""

    __slots__ = ("_answered", "_early", "_holds", "_live", "settle")

    def __init__(self, settle: float) -> None:
        if not settle > 0:
            raise ValueError(f"settle must be above zero, got {settle!r}")
        self.settle = float(settle)
        self._live: set[Any] = set()  # subjects with live messages before the answer
        self._early: list[M] = []  # those live messages, waiting for the answer
        self._holds: dict[Any, _Hold[M]] = {}
        self._answered = False

    @property
    def answered(self) -> bool:
        """True once the answer (possibly empty) was merged."""
        return self._answered

    @property
    def done(self) -> bool:
        """True once answered and nothing is held: the listener is plainly live."""
        return self._answered and not self._holds

    @property
    def deadline(self) -> float | None:
        """When :meth:`on_timer` must run next (None: no hold pending)."""
        if not self._holds:
            return None
        return min(hold.until for hold in self._holds.values())

    def on_live(self, msg: M, now: float) -> list[M]:
        """A live message arrived: the messages to deliver now (it, or none while held)."""
        subject = msg.subject
        hold = self._holds.get(subject)
        if hold is None:
            if not self._answered:
                self._live.add(subject)
                self._early.append(msg)
                return []
            return [msg]
        if msg == hold.retained:
            # The live copy of the retained publication: it and the older ones drop.
            del self._holds[subject]
            return []
        hold.held.append(msg)
        return self.on_timer(now)

    def on_answer(self, retained: Iterable[M], now: float) -> list[M]:
        """The merged answer arrived (or the request gave up: pass nothing)."""
        out: list[M] = []
        if self._answered:
            return out
        self._answered = True
        for msg in retained:
            subject = msg.subject
            if subject in self._live or subject in self._holds:
                continue
            self._holds[subject] = _Hold(msg, now + self.settle)
            out.append(msg)
        out.extend(self._early)
        self._early = []
        self._live.clear()  # answered: only the holds matter from here on
        return out

    def on_timer(self, now: float) -> list[M]:
        """Release the holds whose settle time is over: their held messages, in order."""
        out: list[M] = []
        expired = [subject for subject, hold in self._holds.items() if hold.until <= now]
        for subject in expired:
            out.extend(self._holds.pop(subject).held)
        return out
