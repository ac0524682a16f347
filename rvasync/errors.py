"""The exceptions rvasync raises on purpose.

Every one derives from :class:`RvError`, so ``except rv.RvError`` catches all of
them; each also derives from the closest built-in (``ValueError``,
``TypeError`` ...) so code written against plain Python conventions still works.
"""

from __future__ import annotations

__all__ = [
    "ConversionError",
    "DaemonUnavailable",
    "DeliveryFailed",
    "InvalidArgument",
    "InvalidSubject",
    "LedgerCorrupt",
    "ListenerClosed",
    "MalformedMessage",
    "MessageTooLarge",
    "NotPermitted",
    "OperationError",
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


class LedgerCorrupt(RvError, ValueError):
    """A ledger or state file is damaged beyond what a crash explains.

    ``path`` and ``offset`` say where, ``reason`` what was found there.
    Raised when such a file is opened (certified-delivery and relay agent
    ledgers, remote-operations state files, the value cache's store): the
    program refuses to start on it rather than forget what it recorded.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"ledger file {path!r} is corrupt at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class TransportClosed(RvError):
    """The transport, or its link to the daemon, is closed."""


class QueueDestroyed(RvError):
    """The queue was destroyed while a consumer waited on it."""


class ListenerClosed(TransportClosed, QueueDestroyed):
    """``listener.get()`` on a listener that is closed (or closes while it waits).

    A :class:`TransportClosed` (the API's error for what was closed under the
    caller), and a :class:`QueueDestroyed` for code written when that was what
    a closed listener's own queue raised.
    """


class RequestTimeout(RvError, TimeoutError):
    """``send_request`` received no reply within its timeout."""


class DaemonUnavailable(RvError, ConnectionError):
    """No daemon could be reached or started."""


class OperationError(RvError):
    """A remote operation's error: raised by a handler, and raised to its invoker.

    ``code`` names the error; ``transient=True`` means "not performed, try
    again later" (the invoker retries the same invocation), otherwise the
    error is permanent and reaches the invoker as the operation's outcome
    (its non-delivery report). On the invoker's side ``invoke_id`` names the
    invocation and ``detail`` carries the performer's explanation.
    """

    def __init__(
        self,
        code: str,
        *,
        transient: bool = False,
        detail: str = "",
        invoke_id: str | None = None,
    ) -> None:
        if not isinstance(code, str) or not code:
            raise InvalidArgument(f"OperationError code must be a non-empty str, got {code!r}")
        text = f"operation error {code!r}" + (f": {detail}" if detail else "")
        if invoke_id is not None:
            text += f" (invocation {invoke_id})"
        super().__init__(text)
        self.code = code
        self.transient = bool(transient)
        self.detail = detail
        self.invoke_id = invoke_id


class DeliveryFailed(RvError):
    """A remote invocation got no answer within its retry budget, verify included.

    ``executed`` is False when the performer confirmed it never performed the
    invocation (and never will: the id is fenced), None when nobody could
    tell (the performer stayed silent). ``last_error`` is the last transient
    :class:`OperationError` seen, if any.
    """

    def __init__(
        self,
        invoke_id: str,
        executed: bool | None,
        reason: str,
        last_error: OperationError | None = None,
    ) -> None:
        super().__init__(f"invocation {invoke_id}: {reason}")
        self.invoke_id = invoke_id
        self.executed = executed
        self.last_error = last_error
