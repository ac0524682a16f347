"""The byte form of remote-operation PDUs (pure twin of ``rvasync_native.ropspdu``).

``encode(pdu) -> bytes`` and ``decode(data) -> Pdu`` (raising
:class:`~rvasync.protocol.rops.pdutypes.PduError` naming what is wrong). The
form is described in :mod:`rvasync.protocol.rops.pdu`: a msgpack array of
eleven items, or twelve with piggybacked acknowledgments. This twin hands
the array to msgpack; the compiled one writes and reads it itself and comes
here for anything outside its fast path, so both give the same bytes, the
same PDUs and the same errors.
"""

from __future__ import annotations

from typing import Any

import msgpack

from rvasync.protocol.rops.pdutypes import WIRE_VERSION, Kind, Pdu, PduError, VerifyStatus

__all__ = ["decode", "encode", "new"]


new = Pdu
"""``new(kind, src, invoke_id, operation, handshake, body, code, transient, detail, status,
acks)``: a Pdu of all eleven fields (the compiled twin skips ``__init__``; here it is the class)."""


def encode(pdu: Pdu) -> bytes:
    """The byte form of ``pdu``."""
    status = pdu.status
    items: list[Any] = [
        WIRE_VERSION,
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


def decode(data: bytes) -> Pdu:
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
    if version != WIRE_VERSION:
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
