"""The PDUs two remote-operation endpoints exchange, and their compact byte form.

The specification's remote operations service carries an invocation, its
result or error, and (on the 3-way service) the invoker's acknowledgment of
that result. This module adds the two verify exchanges as PDUs of their own:
``VERIFY`` (invoker asks the performer what became of an invocation) and
``RVERIFY`` (performer asks the invoker whether it holds a result). Every PDU
names its sender (``src``): endpoints are addressed by name, so an answer
goes back to whoever asked, across restarts of either side.

The byte form is a msgpack array: the wire version (1), kind, src,
invoke_id, operation, handshake, body (bin), code, transient (bool), detail,
status (0 for none), and optionally the acknowledgments (an array of ids).
The argument and result travel as opaque bytes: the core never looks inside
them (the driver encodes rvasync messages). Every PDU sent and received is
encoded or parsed once, so the codec is a hot path with a compiled twin
(see :mod:`rvasync._accel`).

Acknowledgments ride along: an INVOKE (or an ACK) carries in ``acks`` the ids
of other results its sender acknowledges to the same performer, so a 3-way
caller invoking in a loop sends no ACK message of its own. The array has a
twelfth item for them; an eleven-item array (no acknowledgments) is accepted.
"""

from __future__ import annotations

from collections.abc import Callable

from rvasync._accel import load
from rvasync.protocol.rops.pdutypes import (
    K_ACK,
    K_ERROR,
    K_INVOKE,
    K_RESULT,
    K_RVERIFY,
    K_RVERIFY_REPLY,
    K_VERIFY,
    K_VERIFY_REPLY,
    V_ACKNOWLEDGED,
    V_BUSY,
    V_EXECUTING,
    V_KNOWN,
    V_NOT_EXECUTED,
    V_PENDING,
    V_UNKNOWN,
    Kind,
    Pdu,
    PduError,
    VerifyStatus,
)

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
    "new_pdu",
]

# The codec: ``rvasync_native.ropspdu`` when built, else ``rvasync.fallback.ropspdu``
# (RVASYNC_PURE=1 forces the twin). Both give the same bytes, PDUs and errors.
_codec = load("ropspdu")

encode_pdu: Callable[[Pdu], bytes] = _codec.encode
"""The byte form of a PDU."""
decode_pdu: Callable[[bytes], Pdu] = _codec.decode
"""Parse bytes into a PDU; raises :class:`PduError` naming what is wrong."""
new_pdu: Callable[
    [Kind, str, str, str, int, bytes, str, bool, str, VerifyStatus | None, tuple[str, ...]], Pdu
] = _codec.new
"""``Pdu(...)`` with all eleven fields in order, for the cores' per-call PDUs: the
compiled twin writes the slots without running the dataclass's ``__init__``."""
