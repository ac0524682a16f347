"""Remote-operation PDUs as rvasync messages: one subject per endpoint, one opaque field.

Endpoint ``name`` receives on ``_RVOPS.<name>``; every PDU travels as a
message with a single ``rops`` field holding the PDU's byte form. The subject
is reserved (``_`` prefix), so drivers send through the transport's
``send_internal``.
"""

from __future__ import annotations

from rvasync.errors import InvalidArgument, InvalidSubject
from rvasync.message import Message
from rvasync.protocol.rops import Pdu, PduError, decode_pdu, encode_pdu
from rvasync.subjects import validate_subject

__all__ = [
    "SUBJECT_PREFIX",
    "check_endpoint_name",
    "endpoint_subject",
    "pdu_from",
    "pdu_message",
    "pdu_message_at",
]

SUBJECT_PREFIX = "_RVOPS."
_FIELD = "rops"


def check_endpoint_name(name: object, what: str = "name") -> str:
    """A valid endpoint name: a subject without wildcards (it becomes ``_RVOPS.<name>``)."""
    if not isinstance(name, str):
        raise InvalidArgument(f"{what} must be a str, got {type(name).__name__}")
    try:
        validate_subject(SUBJECT_PREFIX + name)
    except InvalidSubject as exc:
        raise InvalidSubject(f"{what} {name!r} is not a valid endpoint name: {exc}") from None
    return name


def endpoint_subject(name: str) -> str:
    return SUBJECT_PREFIX + name


def pdu_message(dest: str, pdu: Pdu) -> Message:
    """``pdu`` addressed to endpoint ``dest``."""
    return Message(SUBJECT_PREFIX + dest, {_FIELD: encode_pdu(pdu)})


def pdu_message_at(subject: str, pdu: Pdu) -> Message:
    """``pdu`` on ``subject`` (an endpoint's subject, or the inbox of a waiting request)."""
    return Message(subject, {_FIELD: encode_pdu(pdu)})  # bytes: an opaque field


def pdu_from(msg: Message) -> Pdu:
    """The PDU a message carries; raises PduError when it carries none."""
    data = msg.get(_FIELD)
    if data.__class__ is not bytes:  # what the codec gives: no check, no copy
        if not isinstance(data, bytes | bytearray):
            raise PduError("no rops field of opaque bytes")
        data = bytes(data)
    return decode_pdu(data)
