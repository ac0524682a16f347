"""What a remote-operation PDU is: its kinds, verify answers, fields and parse error.

The types alone, without the byte form: :mod:`rvasync.protocol.rops.pdu`
documents that form and picks its codec (compiled ``rvasync_native.ropspdu``
or its pure twin ``rvasync.fallback.ropspdu``), and both twins build on the
types here, so they live in a module that imports neither.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "K_ACK",
    "K_ERROR",
    "K_INVOKE",
    "K_RESULT",
    "K_RVERIFY",
    "K_RVERIFY_REPLY",
    "K_VERIFY",
    "K_VERIFY_REPLY",
    "V_ACKNOWLEDGED",
    "V_BUSY",
    "V_EXECUTING",
    "V_KNOWN",
    "V_NOT_EXECUTED",
    "V_PENDING",
    "V_UNKNOWN",
    "WIRE_VERSION",
    "Kind",
    "Pdu",
    "PduError",
    "VerifyStatus",
]

WIRE_VERSION = 1
"""The first item of every PDU's byte form."""


class Kind(enum.IntEnum):
    """What a PDU is."""

    INVOKE = 1
    RESULT = 2
    ERROR = 3
    ACK = 4
    VERIFY = 5
    VERIFY_REPLY = 6
    RVERIFY = 7
    RVERIFY_REPLY = 8


class VerifyStatus(enum.IntEnum):
    """A ``VERIFY_REPLY``'s or ``RVERIFY_REPLY``'s answer.

    Performer → invoker (``VERIFY_REPLY``): ``NOT_EXECUTED`` (never performed,
    and now fenced: a late copy of the invocation is refused), ``EXECUTING``,
    ``ACKNOWLEDGED`` (performed, and its result was acknowledged earlier),
    ``BUSY`` (no room to record a fence; ask again). A performed invocation is
    answered with its RESULT or ERROR PDU instead.

    Invoker → performer (``RVERIFY_REPLY``): ``KNOWN`` (the invoker holds the
    outcome), ``PENDING`` (it still waits for it), ``UNKNOWN`` (it does not
    hold it: it gave up, or lost its state).
    """

    NOT_EXECUTED = 1
    EXECUTING = 2
    ACKNOWLEDGED = 3
    BUSY = 4
    KNOWN = 5
    PENDING = 6
    UNKNOWN = 7


# The members again as module globals (K_ for Kind, V_ for VerifyStatus), for the
# modules that read them per PDU: on Python 3.11 reading a member through its class
# costs about 0.2 us (EnumType defines __getattr__, which puts every look-up on the
# class on a slow path); a global costs about 15 ns. Importers take them by name.
K_INVOKE, K_RESULT, K_ERROR, K_ACK, K_VERIFY, K_VERIFY_REPLY, K_RVERIFY, K_RVERIFY_REPLY = Kind
V_NOT_EXECUTED, V_EXECUTING, V_ACKNOWLEDGED, V_BUSY, V_KNOWN, V_PENDING, V_UNKNOWN = VerifyStatus


class PduError(ValueError):
    """Bytes that are not a remote-operation PDU (the driver drops and counts them)."""


@dataclass(slots=True)
class Pdu:
    """One PDU. Fields a kind does not use keep their defaults.

    Treat it as immutable. It is not a frozen dataclass only because one is
    made for every PDU sent and received, and a frozen dataclass's
    constructor costs several times as much.
    """

    kind: Kind
    src: str
    invoke_id: str
    operation: str = ""
    handshake: int = 2
    body: bytes = b""
    """The argument (INVOKE) or the result (RESULT)."""
    code: str = ""
    """ERROR: the error code."""
    transient: bool = False
    """ERROR: True when the invoker may retry (the operation was not performed)."""
    detail: str = ""
    """ERROR: a human-readable explanation."""
    status: VerifyStatus | None = None
    """VERIFY_REPLY / RVERIFY_REPLY: the answer."""
    acks: tuple[str, ...] = ()
    """INVOKE / ACK: ids of further results the sender acknowledges (piggybacked)."""
