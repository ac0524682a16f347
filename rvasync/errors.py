"""The exceptions rvasync raises on purpose.

Every one derives from :class:`RvError`, so ``except rv.RvError`` catches all of
them; each also derives from the closest built-in (``ValueError``,
``TypeError`` ...) so code written against plain Python conventions still works.
"""

from __future__ import annotations

__all__ = [
    "ConversionError",
    "DaemonUnavailable",
    "InvalidArgument",
    "InvalidSubject",
    "MalformedMessage",
    "MessageTooLarge",
    "NotPermitted",
    "QueueDestroyed",
    "RequestTimeout",
    "RvError",
    "TransportClosed",
]


class RvError(Exception):
    """Base of every error the package raises on purpose."""


class InvalidSubject(RvError, ValueError):
    """A subject, correspondent name or group name breaks a syntax rule (the message names it)."""


class InvalidArgument(RvError, ValueError):
    """Any other bad argument: a value out of range, a duplicate field id, a reserved name ..."""


class ConversionError(RvError, TypeError):
    """A field value cannot be converted to the requested field type."""


class NotPermitted(RvError):
    """Legal Python, forbidden by the model (sending to ``_RV.`` subjects, for instance)."""


class MessageTooLarge(RvError):
    """A message whose wire form is over the 64 MiB limit."""


class MalformedMessage(RvError, ValueError):
    """Bytes that are not a valid rvasync wire message (truncated, corrupt or forged)."""


class TransportClosed(RvError):
    """The transport, or its link to the daemon, is closed."""


class QueueDestroyed(RvError):
    """The queue was destroyed while a consumer waited on it."""


class RequestTimeout(RvError, TimeoutError):
    """``send_request`` received no reply within its timeout."""


class DaemonUnavailable(RvError, ConnectionError):
    """No daemon could be reached or started."""
