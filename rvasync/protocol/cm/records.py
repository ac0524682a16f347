"""The records certified correspondents exchange, as plain values.

Each record is a frozen dataclass that turns into a flat mapping of simple
values (``str``, ``int``, ``float``, ``bool``, ``bytes``) with
:meth:`to_fields`, and back with :func:`parse_record`. The driver carries
those mappings in ordinary rvasync messages: data records on the application
subject (multicast, so plain listeners see the message too) or point-to-point
to a correspondent's address when retransmitted; every other record
point-to-point to the address of the correspondent it concerns (the address is
whatever the driver chose, typically an inbox), except :class:`Hello`, which
goes to :func:`~rvasync.protocol.cm.names.hello_subject`.

Every record names its origin correspondent and that instance's address, so
the receiver can tell when a familiar name speaks from a new place (the
correspondent moved) or when two live instances claim one name (a collision).

Sequence numbers start at 1; ``0`` means "none" wherever a count of confirmed
or sent messages is carried.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from rvasync.errors import MalformedMessage
from rvasync.protocol.cm._flat import FlatError, fast_init, from_flat, to_flat

__all__ = [
    "PROTOCOL_VERSION",
    "Cancel",
    "Confirm",
    "ConfirmRequest",
    "DataRecord",
    "Hello",
    "Invite",
    "NotCertified",
    "Record",
    "RegisterReply",
    "RegisterRequest",
    "RetransmitRequest",
    "Unavailable",
    "parse_record",
]

PROTOCOL_VERSION = 1
"""Carried as field ``rvcm`` in every record; a record of another version is rejected."""


@fast_init
@dataclass(frozen=True, slots=True)
class Record:
    """Common part of every record: who sent it, and from which instance."""

    KIND: ClassVar[str] = ""

    origin: str
    """Correspondent name of the sender of this record."""
    address: str
    """Point-to-point address of that correspondent instance."""

    def to_fields(self) -> dict[str, Any]:
        """The record as a flat mapping of simple values (``kind`` and ``rvcm`` included)."""
        out: dict[str, Any] = {"rvcm": PROTOCOL_VERSION, "kind": self.KIND}
        out.update(to_flat(self))
        return out

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Self:
        """Rebuild a record of this class (any class, on ``Record``) from its mapping.

        Raises :class:`~rvasync.errors.MalformedMessage` for a wrong field or
        a record of another kind.
        """
        record = parse_record(fields)
        if not isinstance(record, cls):
            raise MalformedMessage(
                f"expected a {cls.KIND or 'certified-delivery'} record, got {record.KIND!r}"
            )
        return record

    def problem(self) -> str | None:
        """Semantic checks beyond field types; the problem as a sentence, or None.

        Public because :func:`parse_record` (outside the class) asks every
        parsed record; subclasses override it with their own rules.
        """
        return None


def _nonneg(record: Record, *names: str) -> str | None:
    for name in names:
        if getattr(record, name) < 0:
            return f"field {name!r} must be >= 0, got {getattr(record, name)}"
    return None


def _positive(record: Record, *names: str) -> str | None:
    for name in names:
        if getattr(record, name) < 1:
            return f"field {name!r} must be >= 1, got {getattr(record, name)}"
    return None


def _range_problem(record: RetransmitRequest | Unavailable) -> str | None:
    """What is wrong with a ``first``..``last`` sequence range, or None."""
    problem = _positive(record, "first", "last")
    if problem is None and record.last < record.first:
        problem = f"field 'last' ({record.last}) is below 'first' ({record.first})"
    return problem


@fast_init
@dataclass(frozen=True, slots=True)
class DataRecord(Record):
    """A labeled message: sender name, per-subject sequence, time limit, opaque payload.

    ``retransmit`` is True when the sender repeats a stored message to one
    listener point-to-point (after a retransmission request or a resumed
    registration) rather than multicasting it on the subject.
    """

    KIND: ClassVar[str] = "data"

    subject: str
    sequence: int
    time_limit: float
    payload: bytes
    retransmit: bool = False

    def problem(self) -> str | None:
        if math.isnan(self.time_limit) or math.isinf(self.time_limit) or self.time_limit < 0:
            return f"field 'time_limit' must be finite and >= 0, got {self.time_limit}"
        return _positive(self, "sequence")


@fast_init
@dataclass(frozen=True, slots=True)
class RegisterRequest(Record):
    """Listener to sender: please certify ``subject`` to me.

    ``last_confirmed`` is what this listener's ledger says it last confirmed
    from the sender (0 if nothing); with ``require_old`` the sender keeps and
    retransmits what it stored for the listener name, otherwise it drops it.
    ``held_from`` is the lowest sequence the listener already holds from this
    sender on the subject (it heard the labeled message and holds it while it
    registers), 0 for none: the sender pushes only what comes before it (the
    rest is already there or on its way, and a gap in it is asked for), so a
    listener that registers while the sender streams (an anticipated one, a
    restarted one) is not sent everything twice. Senders that do not know the
    field push everything, as before.
    """

    KIND: ClassVar[str] = "register"

    subject: str
    require_old: bool
    last_confirmed: int
    held_from: int = 0

    def problem(self) -> str | None:
        return _nonneg(self, "last_confirmed", "held_from")


@fast_init
@dataclass(frozen=True, slots=True)
class RegisterReply(Record):
    """Sender to listener: accepted; certified delivery starts at ``begin``.

    ``last_sent`` is the sender's latest sequence on the subject, so the
    listener knows which messages to expect; ``resumed`` says whether the
    agreement continues an earlier one (the listener keeps its progress) or
    starts afresh. ``to`` is the address of the listener instance whose
    request this answers: every instance of a name receives on
    ``_RVCM.P2P.*.<name>``, and a relay agent hands a restarted listener the
    answers its dead predecessor never collected, minutes late; an instance
    must not take another's answer for its own (empty from senders that do
    not say: taken as before).
    """

    KIND: ClassVar[str] = "registered"

    subject: str
    begin: int
    last_sent: int
    resumed: bool
    to: str = ""

    def problem(self) -> str | None:
        return _positive(self, "begin") or _nonneg(self, "last_sent")


@fast_init
@dataclass(frozen=True, slots=True)
class NotCertified(Record):
    """Sender to listener: no (longer a) certified agreement on ``subject``.

    ``disallowed`` distinguishes a refusal (the listener is disallowed) from
    the sender removing the listener. ``to``, when not empty, is the
    listener instance whose record this answers (as on
    :class:`RegisterReply`); a removal announced to the name leaves it empty.
    """

    KIND: ClassVar[str] = "not_certified"

    subject: str
    disallowed: bool
    to: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class Confirm(Record):
    """Listener to sender: every message up to ``sequence`` on ``subject`` is confirmed.

    Confirmation is cumulative: a listener confirms the longest run of
    consumed messages, never past a message it has not finished with.
    """

    KIND: ClassVar[str] = "confirm"

    subject: str
    sequence: int

    def problem(self) -> str | None:
        return _nonneg(self, "sequence")


@fast_init
@dataclass(frozen=True, slots=True)
class ConfirmRequest(Record):
    """Sender to listener: you have not confirmed for a while; I have sent up to ``last_sent``."""

    KIND: ClassVar[str] = "confirm_request"

    subject: str
    last_sent: int

    def problem(self) -> str | None:
        return _nonneg(self, "last_sent")


@fast_init
@dataclass(frozen=True, slots=True)
class RetransmitRequest(Record):
    """Listener to sender: please resend messages ``first`` to ``last`` on ``subject``."""

    KIND: ClassVar[str] = "retransmit_request"

    subject: str
    first: int
    last: int

    def problem(self) -> str | None:
        return _range_problem(self)


@fast_init
@dataclass(frozen=True, slots=True)
class Unavailable(Record):
    """Sender to listener: messages ``first`` to ``last`` are gone (expired); skip them."""

    KIND: ClassVar[str] = "unavailable"

    subject: str
    first: int
    last: int

    def problem(self) -> str | None:
        return _range_problem(self)


@fast_init
@dataclass(frozen=True, slots=True)
class Cancel(Record):
    """Listener to sender: I close my certified agreement on ``subject``."""

    KIND: ClassVar[str] = "cancel"

    subject: str


@fast_init
@dataclass(frozen=True, slots=True)
class Invite(Record):
    """Sender to listener: you are allowed again; register for ``subject`` if you still care."""

    KIND: ClassVar[str] = "invite"

    subject: str


@fast_init
@dataclass(frozen=True, slots=True)
class Hello(Record):
    """A reusable-named instance announcing itself (``reply`` when answering an announcement).

    ``started`` (the instance's start time) decides a collision: of two live
    instances of one name the older keeps it and the younger stands by;
    ``leaving`` tells a standing-by instance that the older one closed; a
    reply names the instance it answers (``to``), so only an answer to its
    own announcement or probe (proof that the other is alive now, not a dead
    predecessor's announcement a relay agent kept) makes an instance stand
    by. Records from releases without them read as 0.0 (older than any),
    False and "".
    """

    KIND: ClassVar[str] = "hello"

    reply: bool = False
    started: float = 0.0
    leaving: bool = False
    to: str = ""


_KINDS: dict[str, type[Record]] = {
    cls.KIND: cls
    for cls in (
        DataRecord,
        RegisterRequest,
        RegisterReply,
        NotCertified,
        Confirm,
        ConfirmRequest,
        RetransmitRequest,
        Unavailable,
        Cancel,
        Invite,
        Hello,
    )
}


def parse_record(fields: Mapping[str, Any]) -> Record:
    """Rebuild a record from its flat mapping; a wrong or missing field raises MalformedMessage.

    Extra fields are ignored (a later protocol version may add some); the
    message names the field and the rule it broke, for the driver's drop log.
    """
    version = fields.get("rvcm")
    if version != PROTOCOL_VERSION:
        raise MalformedMessage(
            f"not a certified-delivery record of version {PROTOCOL_VERSION} (rvcm={version!r})"
        )
    kind = fields.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MalformedMessage(f"unknown certified-delivery record kind {kind!r}")
    try:
        record = from_flat(cls, fields, what=f"{kind} record")
    except FlatError as exc:
        raise MalformedMessage(str(exc)) from None
    for name in ("origin", "address", "subject"):
        if getattr(record, name, None) == "":
            raise MalformedMessage(f"{kind} record field {name!r} is empty")
    problem = record.problem()
    if problem is not None:
        raise MalformedMessage(f"{kind} record: {problem}")
    return record
