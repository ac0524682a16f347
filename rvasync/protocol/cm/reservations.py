"""Sequence numbers reserved ahead of use, so a restarted sender never hands one out twice.

A sender records, in one ``SubjectMark``, that numbers up to a bound may be
handed out on a subject, half a block before the last reservation runs out.
A number counts as handed out only once a *durable* record covers it: the
driver waits for :meth:`Reservations.hold` when it is not None. After a
crash the restarted sender continues after the durable bound, so even a
message whose own record died with the process never shares its number
with a later one; the skipped numbers are reported unavailable to the
listeners that ask for them.

A block starts at ``CmTiming.sequence_reserve`` numbers and doubles (up to
:data:`MAX_BLOCK`) each time a new reservation is made while the previous
one is not written yet: a program that sends faster than its ledger writes
soon never waits.
"""

from __future__ import annotations

from collections import deque

from rvasync.protocol.cm.context import Context
from rvasync.protocol.cm.ledger import SubjectMark

__all__ = ["MAX_BLOCK", "Reservations"]

MAX_BLOCK = 8192
"""The largest reservation block (numbers a crash may skip on one subject)."""


class Reservations:
    """Every subject's reservations: made, known durable, and the block size in use."""

    __slots__ = ("_blocks", "_covered", "_ctx", "_marks")

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        # The highest bound known durable, per subject (the replayed ledger's are).
        self._covered: dict[str, int] = {
            subject: entry.last_sent for subject, entry in ctx.ledger.subjects.items()
        }
        # Reservations (lsn, bound) made but not yet known durable.
        self._marks: dict[str, deque[tuple[int, int]]] = {}
        self._blocks: dict[str, int] = {}

    def number(self, subject: str, seq: int, recorded: int) -> int | None:
        """``seq`` is about to be handed out; ``recorded`` is the subject's recorded bound.

        Reserves the next block when ``seq`` is within half a block of the
        bound; returns the append to wait for before ``seq`` is safe, or None.
        """
        ctx = self._ctx
        block = self._blocks.get(subject, ctx.timing.sequence_reserve)
        if seq + block // 2 > recorded:
            marks = self._marks.get(subject)
            if marks and marks[-1][0] > ctx.durable_lsn and block < MAX_BLOCK:
                block = self._blocks[subject] = block * 2
            self._reserve(subject, seq + block - 1)
        if ctx.file_ledger and seq > self._covered.get(subject, 0):
            return self.hold(subject, seq)
        return None

    def _reserve(self, subject: str, bound: int) -> None:
        ctx = self._ctx
        ctx.record(SubjectMark(subject, bound))
        if ctx.file_ledger:
            marks = self._marks.get(subject)
            if marks is None:
                marks = self._marks[subject] = deque()
            marks.append((ctx.lsn, bound))

    def hold(self, subject: str, seq: int) -> int | None:
        """The append to wait for before ``seq`` on ``subject`` is covered, or None if it is."""
        durable = self._ctx.durable_lsn
        covered = self._covered.get(subject, 0)
        marks = self._marks.get(subject)
        while marks and marks[0][0] <= durable:
            covered = max(covered, marks.popleft()[1])
        self._covered[subject] = covered
        if seq <= covered or not marks:
            return None
        for lsn, bound in marks:
            if bound >= seq:
                return lsn
        return marks[-1][0]
