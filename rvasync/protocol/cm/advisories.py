"""Certified-delivery advisories as plain values, ready for the driver to present.

Subjects follow ``_RV.<class>.RVCM.<category>.<condition>.<subject or name>``;
the fields are those the specification lists for each advisory, in that
order. A field can repeat (DELIVERY.FAILED names each listener that did not
confirm), so fields are an ordered tuple of pairs, not a dict. Each field has a
type tag the driver maps onto message field types: ``"string"``, ``"u64"``
(sequence numbers) and ``"msg"`` (the bytes of an encoded message, to be
decoded and nested: the ``data`` field of DELIVERY.FAILED).
Subjects and messages come from the one advisory builder, :mod:`rvasync.advmsg`;
:meth:`Advisory.to_message` is what a driver presents.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from rvasync.advmsg import RVCM, advisory_message, advisory_subject
from rvasync.errors import MalformedMessage, RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.cm._flat import fast_init

__all__ = [
    "Advisory",
    "FieldTag",
    "collision",
    "delivery_complete",
    "delivery_confirm",
    "delivery_failed",
    "delivery_no_response",
    "delivery_unavailable",
    "ledger_compaction_failed",
    "ledger_write_failed",
    "ledger_write_resumed",
    "registration_certified",
    "registration_closed",
    "registration_discovery",
    "registration_moved",
    "registration_no_response",
    "registration_not_certified",
    "registration_request",
]

FieldTag = Literal["string", "u64", "msg"]
AdvisoryClassName = Literal["INFO", "WARN", "ERROR"]


@fast_init
@dataclass(frozen=True, slots=True)
class Advisory:
    """One advisory: its full subject, its class and condition, and its typed fields."""

    subject: str
    adv_class: AdvisoryClassName
    condition: str
    """``<category>.<condition>``, e.g. ``DELIVERY.CONFIRM``."""
    fields: tuple[tuple[str, FieldTag, str | int | bytes], ...]

    def get(self, name: str) -> str | int | bytes | None:
        """Value of the first field called ``name`` (None if absent)."""
        for field_name, _tag, value in self.fields:
            if field_name == name:
                return value
        return None

    def get_all(self, name: str) -> list[str | int | bytes]:
        """Values of every field called ``name``, in order."""
        return [value for field_name, _tag, value in self.fields if field_name == name]

    def as_dict(self) -> dict[str, object]:
        """Fields as a dict; a repeated name maps to a list of its values."""
        out: dict[str, object] = {}
        for field_name, _tag, value in self.fields:
            if field_name in out:
                prior = out[field_name]
                if isinstance(prior, list):
                    prior.append(value)
                else:
                    out[field_name] = [prior, value]
            else:
                out[field_name] = value
        return out

    def to_message(self) -> Message:
        """The advisory as a message: ``u64`` fields as U64, ``msg`` bytes decoded and nested."""
        return advisory_message(
            self.subject,
            [(name, _value(tag, value), _TYPES[tag]) for name, tag, value in self.fields],
        )


_TYPES: dict[str, FieldType | None] = {"string": None, "u64": FieldType.U64, "msg": None}


def _value(tag: str, value: str | int | bytes) -> object:
    if tag == "msg" and isinstance(value, bytes):
        try:
            return Message.from_bytes(value)
        except (MalformedMessage, RvError):
            # Only our own encoder made these bytes; keep them if they ever do not decode.
            return value
    return value


def _make(
    adv_class: AdvisoryClassName,
    condition: str,
    tail: str,
    fields: Iterable[tuple[str, FieldTag, str | int | bytes]],
) -> Advisory:
    return Advisory(
        subject=advisory_subject(adv_class, RVCM, condition, tail),
        adv_class=adv_class,
        condition=condition,
        fields=tuple(fields),
    )


def delivery_confirm(subject: str, listener: str, seqno: int) -> Advisory:
    """Sender: ``listener`` confirmed message ``seqno`` on ``subject``."""
    return _make(
        "INFO",
        "DELIVERY.CONFIRM",
        subject,
        [("subject", "string", subject), ("listener", "string", listener), ("seqno", "u64", seqno)],
    )


def delivery_complete(subject: str, seqno: int) -> Advisory:
    """Sender: no listener still needs message ``seqno``; it left the ledger."""
    return _make(
        "INFO",
        "DELIVERY.COMPLETE",
        subject,
        [("subject", "string", subject), ("seqno", "u64", seqno)],
    )


def delivery_no_response(listener: str) -> Advisory:
    """Sender: ``listener`` has not confirmed; a confirmation request went to it."""
    return _make("WARN", "DELIVERY.NO_RESPONSE", listener, [("listener", "string", listener)])


def delivery_failed(subject: str, seqno: int, data: bytes, listeners: Iterable[str]) -> Advisory:
    """Sender: message ``seqno`` expired before these listeners confirmed it."""
    fields: list[tuple[str, FieldTag, str | int | bytes]] = [
        ("subject", "string", subject),
        ("seqno", "u64", seqno),
        ("data", "msg", data),
    ]
    fields.extend(("listener", "string", name) for name in listeners)
    return _make("ERROR", "DELIVERY.FAILED", subject, fields)


def delivery_unavailable(subject: str, seqno_begin: int, seqno_end: int, sender: str) -> Advisory:
    """Listener: messages ``seqno_begin``..``seqno_end`` from ``sender`` can never arrive."""
    return _make(
        "ERROR",
        "DELIVERY.UNAVAILABLE",
        subject,
        [
            ("subject", "string", subject),
            ("seqno_begin", "u64", seqno_begin),
            ("seqno_end", "u64", seqno_end),
            ("sender", "string", sender),
        ],
    )


def registration_request(subject: str, listener: str) -> Advisory:
    """Sender: it accepted ``listener``'s registration for ``subject``."""
    return _make(
        "INFO",
        "REGISTRATION.REQUEST",
        subject,
        [("subject", "string", subject), ("listener", "string", listener)],
    )


def registration_certified(subject: str, sender: str, seqno_begin: int) -> Advisory:
    """Listener: ``sender`` certifies ``subject`` from ``seqno_begin`` on."""
    return _make(
        "INFO",
        "REGISTRATION.CERTIFIED",
        subject,
        [
            ("subject", "string", subject),
            ("sender", "string", sender),
            ("seqno_begin", "u64", seqno_begin),
        ],
    )


def registration_not_certified(subject: str, sender: str) -> Advisory:
    """Listener: ``sender`` refused or cancelled certified delivery of ``subject``."""
    return _make(
        "WARN",
        "REGISTRATION.NOT_CERTIFIED",
        subject,
        [("subject", "string", subject), ("sender", "string", sender)],
    )


def registration_no_response(subject: str, sender: str) -> Advisory:
    """Listener: ``sender`` never answered the registration requests for ``subject``."""
    return _make(
        "WARN",
        "REGISTRATION.NO_RESPONSE",
        subject,
        [("subject", "string", subject), ("sender", "string", sender)],
    )


def registration_closed(
    subject: str, listener: str, seqno_last_sent: int, seqno_last_confirmed: int
) -> Advisory:
    """Sender: the agreement with ``listener`` on ``subject`` ended."""
    return _make(
        "INFO",
        "REGISTRATION.CLOSED",
        subject,
        [
            ("subject", "string", subject),
            ("listener", "string", listener),
            ("seqno_last_sent", "u64", seqno_last_sent),
            ("seqno_last_confirmed", "u64", seqno_last_confirmed),
        ],
    )


def registration_discovery(subject: str, sender: str) -> Advisory:
    """Listener: a labeled message revealed a new sender on ``subject``."""
    return _make(
        "INFO",
        "REGISTRATION.DISCOVERY",
        subject,
        [("subject", "string", subject), ("sender", "string", sender)],
    )


def registration_moved(name: str) -> Advisory:
    """Either side: the familiar correspondent ``name`` now speaks from a new address."""
    return _make("INFO", "REGISTRATION.MOVED", name, [("name", "string", name)])


def collision(name: str) -> Advisory:
    """Either side: another live instance claims the name ``name``."""
    return _make("ERROR", "REGISTRATION.COLLISION", name, [("name", "string", name)])


# --- rvasync's additions: a ledger file that cannot be written ------------------------------
# The specification has no advisory for a ledger file on a full disk; these
# tell the program (sender and listener alike) that its ledger cannot record
# what certified delivery needs, and when it can again.


def ledger_write_failed(name: str, ledger: str, error: str, retrying: bool) -> Advisory:
    """Either side: appends to the ledger file of ``name`` failed.

    ``retrying`` 1: a full disk or quota; nothing is dropped, what was not
    written is kept and retried, new certified sends are refused, nothing
    new is confirmed and no new agreement is made until it fits. 0: any
    other error; the ledger stopped for good.
    """
    return _make(
        "ERROR",
        "LEDGER.WRITE_FAILED",
        name,
        [
            ("name", "string", name),
            ("ledger", "string", ledger),
            ("error", "string", error),
            ("retrying", "u64", int(retrying)),
        ],
    )


def ledger_write_resumed(name: str, ledger: str) -> Advisory:
    """Either side: the ledger file fits again; what was kept is written and sent."""
    return _make(
        "INFO",
        "LEDGER.WRITE_RESUMED",
        name,
        [("name", "string", name), ("ledger", "string", ledger)],
    )


def ledger_compaction_failed(name: str, ledger: str, error: str) -> Advisory:
    """Either side: a rewrite of the ledger file was abandoned (appends go on; retried later)."""
    return _make(
        "WARN",
        "LEDGER.COMPACTION_FAILED",
        name,
        [("name", "string", name), ("ledger", "string", ledger), ("error", "string", error)],
    )
