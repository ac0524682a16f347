"""Fan-out of messages to the listeners of one transport or daemon.

A router holds the listeners registered on it in a subject index, so finding
the listeners for a subject costs about the same with 100,000 listeners as with
ten, and hands each matching listener its own delivery of the message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rvasync.subjects import SubjectIndex

if TYPE_CHECKING:
    from collections.abc import Callable

    from rvasync.message import Message
    from rvasync.transport.listener import Listener

__all__ = ["Router"]


class Router:
    """Listeners by subject pattern, and delivery of messages to them."""

    __slots__ = ("_index", "_listeners")

    def __init__(self) -> None:
        self._index: SubjectIndex[Listener] = SubjectIndex()
        self._listeners: dict[Listener, None] = {}  # insertion-ordered set

    def add(self, listener: Listener) -> None:
        self._index.add(listener.subject, listener)
        self._listeners[listener] = None

    def remove(self, listener: Listener) -> None:
        """Forget ``listener``; KeyError if it was not registered."""
        del self._listeners[listener]
        self._index.remove(listener.subject, listener)

    @property
    def match(self) -> Callable[[str], tuple[Listener, ...]]:
        """The index's lookup itself, for transports' per-message fast paths."""
        return self._index.match

    def listeners(self) -> list[Listener]:
        return list(self._listeners)

    def interested(self, subject: str) -> bool:
        """True if at least one listener matches ``subject``."""
        return bool(self._index.match(subject))

    def patterns(self) -> list[str]:
        return list(self._index.patterns())

    def __len__(self) -> int:
        return len(self._listeners)

    def deliver(self, msg: Message) -> int:
        """Queue a delivery of ``msg`` for every matching listener; return how many took it."""
        # A routed message has a subject (send checks it; the codec decodes one).
        listeners = self._index.match(msg.subject)  # type: ignore[arg-type]
        # Inlined per-listener work: this loop is the hottest path of local delivery.
        copy = msg.delivery_copy
        for listener in listeners:
            listener.deliver(copy(listener, listener.closure))
        return len(listeners)
