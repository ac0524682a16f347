"""The base class of :class:`~rvasync.message.Message`, for the modules below it.

Field conversion (:mod:`rvasync.fieldtypes`) must recognise messages (MSG and
MSGARRAY values), yet ``message.py`` is built on ``fieldtypes``. Both import
this leaf instead of each other: ``Message`` derives from :class:`MessageBase`,
and ``fieldtypes`` tests ``isinstance(value, MessageBase)``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MessageBase"]


class MessageBase:
    """What a module below ``message.py`` may rely on: the class, and :meth:`copy`."""

    __slots__ = ()

    def copy(self) -> Any:
        """A copy-on-write copy (:meth:`rvasync.message.Message.copy`)."""
        raise NotImplementedError
