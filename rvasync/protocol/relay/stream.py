"""An ordered, acknowledged stream of items: the relay link's reliability.

Frames between a client and its relay agent may be lost, repeated or
reordered. Each direction is a go-back-N stream: the sender numbers items,
sends a window of them, and starts again after the last acknowledged one
when no acknowledgement moved for ``retry`` seconds; the receiver takes an
item only if it is the next one expected (duplicates and items after a gap
are dropped, the sender repeats them) and acknowledges cumulatively.

An item stays in :class:`OutStream` until acknowledged, across sessions:
that is how the client keeps outbound events while disconnected and the
agent keeps inbound messages for a client that is away.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InStream", "OutStream", "item_size"]

MAX_FRAME_ITEMS = 512
MAX_FRAME_BYTES = 256 * 1024
WINDOW = 8192


def item_size(item: tuple[Any, ...]) -> int:
    """Rough encoded size of an item (its last element is its bytes), to bound a frame."""
    last = item[-1]
    return 24 + (len(last) if last.__class__ is bytes or last.__class__ is str else 9)


class OutStream:
    """Items waiting to be acknowledged, numbered from 1 upward (never reused).

    A list with a moving head rather than a deque: :meth:`take` reads items
    by position, which a deque does in linear time.
    """

    def __init__(self, next_seq: int = 1) -> None:
        self._items: list[tuple[int, tuple[Any, ...], int]] = []  # (seq, item, lsn)
        self._head = 0
        self.next_seq = next_seq
        self.acked = next_seq - 1
        self._sent = self.acked  # highest seq sent since the last go-back
        self._progress_at: float | None = None

    def __len__(self) -> int:
        return len(self._items) - self._head

    @property
    def first(self) -> int:
        """The number of the oldest unacknowledged item (``next_seq`` if none)."""
        items = self._items
        return items[self._head][0] if self._head < len(items) else self.next_seq

    def items(self) -> list[tuple[int, tuple[Any, ...]]]:
        """Every unacknowledged item with its number, oldest first."""
        return [(seq, item) for seq, item, _lsn in self._items[self._head :]]

    def append(self, item: tuple[Any, ...], lsn: int = 0) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self._items.append((seq, item, lsn))
        return seq

    def restore(self, seq: int, item: tuple[Any, ...]) -> None:
        """Put back an item a ledger replay found (in increasing ``seq`` order)."""
        self._items.append((seq, item, 0))
        self.next_seq = max(self.next_seq, seq + 1)
        if len(self) == 1:
            self.acked = seq - 1
            self._sent = self.acked

    def advance(self, next_seq: int) -> None:
        """Numbering continues at ``next_seq`` at least (a ledger replay says where it was)."""
        if next_seq > self.next_seq:
            self.next_seq = next_seq
            if not len(self):
                self.acked = self._sent = next_seq - 1

    def ack(self, seq: int, now: float) -> int:
        """Everything up to ``seq`` arrived; returns how many items that released."""
        if seq > self._sent:
            seq = min(seq, self.next_seq - 1)  # never past what exists
        items = self._items
        head = start = self._head
        end = len(items)
        while head < end and items[head][0] <= seq:
            head += 1
        count = head - start
        if head > 1024 and head * 2 > end:
            del items[:head]
            head = 0
        self._head = head
        if seq > self.acked:
            self.acked = seq
            self._progress_at = now
        if self._sent < self.acked:
            self._sent = self.acked
        return count

    def rewind(self, now: float) -> None:
        """A new session: send again from the oldest unacknowledged item."""
        self._sent = self.first - 1
        self._progress_at = now

    def pending(self) -> bool:
        """Items sent and not acknowledged yet."""
        return self._sent >= self.first

    def take(
        self, now: float, durable_lsn: int | None = None, upto: int | None = None
    ) -> tuple[int, list[tuple[Any, ...]]] | None:
        """The next frame's worth of unsent items as ``(first seq, items)``, or None.

        ``durable_lsn`` holds back items whose ledger record (``lsn``) is not
        written yet, so nothing leaves that a crash could renumber; ``upto``
        holds back items numbered above it.
        """
        items = self._items
        head = self._head
        if head >= len(items):
            return None
        base = items[head][0]
        start = max(self._sent + 1, base)
        index = head + start - base
        if index >= len(items) or start - self.acked > WINDOW:
            return None
        out: list[tuple[Any, ...]] = []
        size = 0
        limit = min(len(items), index + MAX_FRAME_ITEMS)
        last = self.acked + WINDOW
        if upto is not None:
            last = min(last, upto)
        while index < limit and size < MAX_FRAME_BYTES:
            seq, item, lsn = items[index]
            if seq > last or (durable_lsn is not None and lsn > durable_lsn):
                break
            out.append(item)
            size += item_size(item)
            index += 1
        if not out:
            return None
        if not self.pending():
            self._progress_at = now  # the retry clock starts with the first unacked item
        self._sent = start + len(out) - 1
        return start, out

    def retry_at(self, retry: float) -> float | None:
        """When unacknowledged sent items are sent again, if any are outstanding."""
        if not self.pending() or self._progress_at is None:
            return None
        return self._progress_at + retry

    def check_retry(self, now: float, retry: float) -> bool:
        """Go back to the oldest unacknowledged item if no acknowledgement came in time."""
        at = self.retry_at(retry)
        if at is not None and now >= at:
            self.rewind(now)
            return True
        return False


class InStream:
    """The receiving end: takes items strictly in order, remembers the last one taken."""

    def __init__(self) -> None:
        self.received = -1
        """The last item taken (-1: none yet in this process)."""

    def start(self, first: int) -> None:
        """A session begins; the sender's first item will be ``first``."""
        self.received = first - 1

    def accept(self, first: int, items: tuple[Any, ...] | list[Any]) -> list[Any]:
        """The items of a push that are new and in order (possibly none)."""
        expected = self.received + 1
        if first > expected or first + len(items) <= expected:
            return []
        new = list(items[expected - first :])
        self.received += len(new)
        return new
