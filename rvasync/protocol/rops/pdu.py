"""The PDUs two remote-operation endpoints exchange, and their compact byte form.

The specification's remote operations service carries an invocation, its
result or error, and (on the 3-way service) the invoker's acknowledgment of
that result. This module adds the two verify exchanges as PDUs of their own:
``VERIFY`` (invoker asks the performer what became of an invocation) and
``RVERIFY`` (performer asks the invoker whether it holds a result). Every PDU
names its sender (``src``): endpoints are addressed by name, so an answer
goes back to whoever asked, across restarts of either side.

The byte form is a msgpack array. The argument and result travel as opaque
bytes: the core never looks inside them (the driver encodes rvasync messages).

Acknowledgments ride along: an INVOKE (or an ACK) carries in ``acks`` the ids
of other results its sender acknowledges to the same performer, so a 3-way
caller invoking in a loop sends no ACK message of its own. The array has a
twelfth item for them; an eleven-item array (no acknowledgments) is accepted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import msgpack

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
    "Kind",
    "Pdu",
    "PduError",
    "VerifyStatus",
    "decode_pdu",
    "encode_pdu",
]

_WIRE_VERSION = 1


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


def encode_pdu(pdu: Pdu) -> bytes:
    """The byte form of ``pdu``."""
    status = pdu.status
    items: list[Any] = [
        _WIRE_VERSION,
        pdu.kind,  # an IntEnum: msgpack packs it as the int it is
        pdu.src,
        pdu.invoke_id,
        pdu.operation,
        pdu.handshake,
        pdu.body,
        pdu.code,
        pdu.transient,
        pdu.detail,
        0 if status is None else status,
    ]
    if pdu.acks:
        items.append(list(pdu.acks))
    return _pack(items)


# One packer for every PDU (msgpack.packb builds a Packer, and its buffer, per call).
# pack() resets it after each use, so it holds nothing between calls.
_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


# msgpack's defaults since 1.0 (pyproject asks for >= 1.0): raw=False (str for
# strings) and strict_map_key=True. Passed as keywords they cost a fifth of the call.
_unpackb = msgpack.unpackb

_KINDS: dict[int, Kind] = {int(k): k for k in Kind}
_STATUSES: dict[int, VerifyStatus | None] = {0: None, **{int(v): v for v in VerifyStatus}}
_NEEDS_STATUS = (Kind.VERIFY_REPLY, Kind.RVERIFY_REPLY)


def decode_pdu(data: bytes) -> Pdu:
    """Parse ``data``; raises :class:`PduError` naming what is wrong.

    Runs for every PDU received, so each check is one plain comparison where
    one will do (exact types, table look-ups instead of enum calls).
    """
    try:
        items: Any = _unpackb(data)
    except Exception as exc:  # msgpack raises several types on garbage
        raise PduError(f"not msgpack: {exc}") from None
    if items.__class__ is not list:
        raise PduError("not an 11- or 12-item array")
    count = len(items)
    if count != 11 and count != 12:
        raise PduError("not an 11- or 12-item array")
    acks: tuple[str, ...] = ()
    if count == 12:
        raw_acks = items.pop()
        if raw_acks.__class__ is not list or not all(a.__class__ is str and a for a in raw_acks):
            raise PduError("acks is not a list of invocation ids")
        acks = tuple(raw_acks)
    version, kind, src, invoke_id, operation, handshake, body, code, transient, detail, status = (
        items
    )
    if version != _WIRE_VERSION:
        raise PduError(f"unknown wire version {version!r}")
    parsed_kind = _KINDS.get(kind) if kind.__class__ is int else None
    if parsed_kind is None:
        raise PduError(f"unknown kind {kind!r}")
    if src.__class__ is not str or invoke_id.__class__ is not str:
        raise PduError("src or invoke_id is not a string")
    if operation.__class__ is not str:
        raise PduError("operation is not a string")
    if not src or not invoke_id:
        raise PduError("empty sender or invocation id")
    if handshake.__class__ is not int or (handshake != 2 and handshake != 3):
        raise PduError(f"handshake must be 2 or 3, got {handshake!r}")
    if body.__class__ is not bytes:
        raise PduError("body is not bytes")
    if code.__class__ is not str or detail.__class__ is not str:
        raise PduError("error code or detail is not a string")
    if transient.__class__ is not bool:
        raise PduError("transient is not a bool")
    if status == 0 and status.__class__ is int:
        parsed_status = None
        if parsed_kind in _NEEDS_STATUS:
            raise PduError("a verify reply without a status")
    else:
        parsed_status = _STATUSES.get(status) if status.__class__ is int else None
        if parsed_status is None:
            raise PduError(f"unknown verify status {status!r}")
    return Pdu(
        parsed_kind,
        src,
        invoke_id,
        operation,
        handshake,
        body,
        code,
        transient,
        detail,
        parsed_status,
        acks,
    )
