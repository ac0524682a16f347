"""The base class of :class:`~rvasync.message.Message`, for the modules below it.

Field conversion (:mod:`rvasync.fieldtypes`) must recognise messages (MSG and
MSGARRAY values), yet ``message.py`` is built on ``fieldtypes``. Both import
this leaf instead of each other: ``Message`` derives from :class:`MessageBase`,
and ``fieldtypes`` tests ``isinstance(value, MessageBase)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["MessageBase"]


class MessageBase:
    """What a module below ``message.py`` may rely on: the class, and ``copy()``.

    A marker class with no behaviour of its own: ``Message`` is its only
    subclass and defines ``copy``. The declaration below exists for the type
    checker only, so no placeholder method can ever be called at run time.
    """

    __slots__ = ()

    if TYPE_CHECKING:

        def copy(self) -> Any:
            """A copy-on-write copy (:meth:`rvasync.message.Message.copy`)."""
