"""The records members multicast to their group, and what a core remembers of departed senders.

The record layout is this package's own design (see :mod:`rvasync.protocol.ft`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from rvasync.errors import MalformedMessage

__all__ = [
    "CONTROL_SUBJECT_PREFIX",
    "RECORD_VERSION",
    "FtRecord",
    "RecordKind",
    "Tombstone",
    "control_subject",
]

RECORD_VERSION = 1
"""Version of the record layout; :meth:`FtRecord.from_fields` refuses others."""

CONTROL_SUBJECT_PREFIX = "_RVFT."
"""Records of group G travel on ``_RVFT.G`` (the spec's routers forward ``_RVFT.>``)."""


class RecordKind(enum.StrEnum):
    """The four kinds of record members multicast (described in :mod:`rvasync.protocol.ft`)."""

    HELLO = "HELLO"
    STATUS = "STATUS"
    HEARTBEAT = "HEARTBEAT"
    BYE = "BYE"


def control_subject(group: str) -> str:
    """The subject a driver should multicast the records of ``group`` on."""
    return CONTROL_SUBJECT_PREFIX + group


@dataclass(frozen=True, slots=True)
class FtRecord:
    """One control record a member multicasts to its group.

    Every record carries the sender's parameters, so any record suffices to
    rank the sender and to detect parameter mismatches. ``seq`` grows by one
    with each record a member sends; receivers ignore a record whose ``seq`` is
    not above the last one they took from that member (duplicates, reordering).
    ``member`` must be unique to one membership: a process that rejoins uses
    a fresh id. ``period`` is the time until the sender's next record at the
    latest (its heartbeat interval, or a slower status period).
    """

    kind: RecordKind
    group: str
    member: str
    seq: int
    weight: int
    active_goal: int
    heartbeat: float
    activation: float
    preparation: float
    period: float

    @property
    def active(self) -> bool:
        """True for a heartbeat: only active members send them."""
        return self.kind is RecordKind.HEARTBEAT

    def to_fields(self) -> dict[str, str | int | float]:
        """A flat mapping of simple values, ready to become message fields."""
        return {
            "version": RECORD_VERSION,
            "kind": self.kind.value,
            "group": self.group,
            "member": self.member,
            "seq": self.seq,
            "weight": self.weight,
            "active_goal": self.active_goal,
            "heartbeat": self.heartbeat,
            "activation": self.activation,
            "preparation": self.preparation,
            "period": self.period,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, object]) -> FtRecord:
        """Rebuild a record from :meth:`to_fields` output.

        Raises :class:`~rvasync.errors.MalformedMessage` naming the missing or
        bad field; a driver drops (and counts) such records.
        """

        def get(name: str) -> object:
            try:
                return fields[name]
            except KeyError:
                raise MalformedMessage(f"fault tolerance record lacks field {name!r}") from None

        def integer(name: str, minimum: int) -> int:
            value = get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise MalformedMessage(
                    f"fault tolerance record field {name!r} must be an integer >= {minimum}, "
                    f"got {value!r}"
                )
            return value

        def seconds(name: str, *, zero_allowed: bool = False) -> float:
            value = get(name)
            ok = not isinstance(value, bool) and isinstance(value, int | float)
            if ok:
                value = float(value)  # type: ignore[arg-type]
                ok = math.isfinite(value) and (value > 0 or (zero_allowed and value == 0))
            if not ok:
                raise MalformedMessage(
                    f"fault tolerance record field {name!r} must be a finite "
                    f"{'non-negative' if zero_allowed else 'positive'} number, got {value!r}"
                )
            return value  # type: ignore[return-value]

        def text(name: str) -> str:
            value = get(name)
            if not isinstance(value, str) or not value:
                raise MalformedMessage(
                    f"fault tolerance record field {name!r} must be a non-empty string, "
                    f"got {value!r}"
                )
            return value

        version = get("version")
        if version != RECORD_VERSION or isinstance(version, bool):
            raise MalformedMessage(
                f"fault tolerance record version {version!r} is not supported "
                f"(this implementation speaks version {RECORD_VERSION})"
            )
        kind_text = text("kind")
        try:
            kind = RecordKind(kind_text)
        except ValueError:
            raise MalformedMessage(f"unknown fault tolerance record kind {kind_text!r}") from None
        return cls(
            kind=kind,
            group=text("group"),
            member=text("member"),
            seq=integer("seq", 0),
            weight=integer("weight", 0),
            active_goal=integer("active_goal", 1),
            heartbeat=seconds("heartbeat"),
            activation=seconds("activation"),
            preparation=seconds("preparation", zero_allowed=True),
            period=seconds("period"),
        )


@dataclass(slots=True)
class Tombstone:
    """The last sequence taken from a member that left or was declared gone.

    Records still in flight must not bring it back; ``final`` (it said BYE)
    refuses every later record, and the entry is forgotten at ``until``.
    """

    seq: int
    final: bool
    until: float
