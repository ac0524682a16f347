"""Fault tolerance protocol core, sans-IO: members, ranking, heartbeats and monitors.

This module decides *who is active* in a fault tolerance group. It owns no
socket, no timer and no task: a driver (``rv.FtMember`` / ``rv.FtMonitor``)
feeds it the records that arrive from the group, the current time ``now`` and
timer expiries, and carries out what it returns: actions for the program's
callback, records to multicast to the group, advisories to present on the
local transport, and the next moment it wants to be woken
(:meth:`FtMemberCore.next_deadline`). The same inputs always give the same
outputs, which is what lets the tests drive whole groups through partitions,
losses and crashes on a simulated clock.

Concepts follow the specification's chapters "Fault Tolerance Concepts",
"Fault Tolerance Programming" and "Developing Fault-Tolerant Programs", and
its appendix "Fault Tolerance (RVFT) Advisory Messages"; the docstrings below
name the section each rule comes from. The records exchanged on the wire are
this package's own design (the specification does not define them):

``HELLO``
    sent once when a member joins ("New Member Situations": the new member
    identifies itself, then waits one activation interval to hear the others).
    Every member that receives it answers at once with its own record.
``HEARTBEAT``
    sent by every *active* member at its heartbeat interval ("Heartbeats").
``STATUS``
    sent by every *inactive* member, and at once whenever a member
    deactivates, changes its weight or changes its sending period. The
    specification only has active members send heartbeats, yet ranking needs
    to know the inactive members too, and a successor that died silently must
    not hold up a failover. So the *ranking inactive* members (the first
    ``active_goal`` inactive members by rank: those a failure would call upon)
    send status at the heartbeat interval, and every other inactive member
    only once per activation interval.

Every record announces its sender's sending ``period``. A receiver forgets an
active member whose heartbeats are silent for its own activation interval
(the specification's rule), and an inactive one once silent for
``INACTIVE_EXPIRY_FACTOR`` announced periods, never sooner than the activation
interval: the ranking inactive members are watched as closely as the active
ones, the rest of the group cheaply.
``BYE``
    sent when a member withdraws ("Independent Confirmation"): the others drop
    it at once instead of waiting for its heartbeats to stop.
"""

from __future__ import annotations

import enum
import hashlib
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from rvasync.errors import InvalidArgument, MalformedMessage, NotPermitted
from rvasync.subjects import validate_subject

__all__ = [
    "ADVISORY_SOURCE",
    "CONTROL_SUBJECT_PREFIX",
    "DESC_ACTIVATION_DIFFERS",
    "DESC_ACTIVE_GOAL_DIFFERS",
    "DESC_HEARTBEAT_DIFFERS",
    "DESC_OTHER_PREPARES_EARLY",
    "DESC_THIS_PREPARES_EARLY",
    "DISABLING_MEMBER",
    "INACTIVE_EXPIRY_FACTOR",
    "PARAM_MISMATCH",
    "RECORD_VERSION",
    "STATUS_PERIOD_FACTOR",
    "TOO_FEW_ACTIVE",
    "TOO_MANY_ACTIVE",
    "FtAction",
    "FtAdvisory",
    "FtMemberCore",
    "FtMemberInfo",
    "FtMonitorCore",
    "FtOutputs",
    "FtRecord",
    "RecordKind",
    "control_subject",
    "validate_group",
    "validate_member_parameters",
    "validate_weight",
]

RECORD_VERSION = 1
"""Version of the record layout; :meth:`FtRecord.from_fields` refuses others."""

CONTROL_SUBJECT_PREFIX = "_RVFT."
"""Records of group G travel on ``_RVFT.G`` (the spec's routers forward ``_RVFT.>``)."""

ADVISORY_SOURCE = "RVFT"

STATUS_PERIOD_FACTOR = 1.0
"""Inactive members other than the ranking ones send STATUS every this many activation intervals."""

INACTIVE_EXPIRY_FACTOR = 3.0
"""An inactive peer silent for this many of its announced periods is forgotten.

Three periods ride out two consecutive lost status records before a live
backup is wrongly dropped from the ranking.
"""

TOMBSTONE_FACTOR = 10.0
"""How many activation intervals a departed member's last sequence is remembered.

Records that were in flight when a member left (or was declared gone) must not
bring it back; after this long none can still be travelling.
"""

# Advisory names (appendix "Fault Tolerance (RVFT) Advisory Messages", Table 47).
PARAM_MISMATCH = "PARAM_MISMATCH"
DISABLING_MEMBER = "DISABLING_MEMBER"
TOO_MANY_ACTIVE = "TOO_MANY_ACTIVE"
TOO_FEW_ACTIVE = "TOO_FEW_ACTIVE"

# RVADV_DESC texts of PARAM_MISMATCH, exactly as the appendix lists them.
DESC_ACTIVE_GOAL_DIFFERS = "Active goal differs"
DESC_ACTIVATION_DIFFERS = "Activation interval differs"
DESC_HEARTBEAT_DIFFERS = "Heartbeat interval differs"
DESC_OTHER_PREPARES_EARLY = "Other prepares before this member's heartbeat"
DESC_THIS_PREPARES_EARLY = "This member prepares before other's heartbeat"

_ERROR = "ERROR"
_WARN = "WARN"


class FtAction(enum.IntEnum):
    """What the fault tolerance callback must do ("Fault Tolerance Callback Actions").

    PREPARE_TO_ACTIVATE is only a hint: an ACTIVATE may follow, or not.
    """

    PREPARE_TO_ACTIVATE = 1
    ACTIVATE = 2
    DEACTIVATE = 3


class RecordKind(enum.StrEnum):
    """The four kinds of record members multicast to their group (see module doc)."""

    HELLO = "HELLO"
    STATUS = "STATUS"
    HEARTBEAT = "HEARTBEAT"
    BYE = "BYE"


def control_subject(group: str) -> str:
    """The subject a driver should multicast the records of ``group`` on."""
    return CONTROL_SUBJECT_PREFIX + group


# ---------------------------------------------------------------------------
# Parameter validation ("Step 1: Choose a Group Name", "Step 4: Choose the Intervals")


def validate_group(group: str) -> str:
    """A group name obeys subject syntax and has no wildcards ("Group Name Syntax").

    Raises :class:`~rvasync.errors.InvalidSubject` naming the broken rule.
    """
    validate_subject(group, wildcards=False)
    return group


def validate_weight(weight: object) -> int:
    """Programs give weights of at least 1 ("Weight Values"): 0 marks a disabled member."""
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise InvalidArgument(f"weight must be an integer, got {weight!r}")
    if weight < 1:
        raise InvalidArgument(
            f"weight must be at least 1 (0 is reserved for members the fault tolerance "
            f"software disables), got {weight}"
        )
    return weight


def _interval(name: str, value: object, *, zero_allowed: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} interval must be a number of seconds, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise InvalidArgument(f"{name} interval must be finite, got {value}")
    if value < 0 or (value == 0 and not zero_allowed):
        rule = "zero or positive" if zero_allowed else "positive"
        raise InvalidArgument(f"{name} interval must be {rule}, got {value}")
    return value


def validate_member_parameters(
    *,
    weight: object,
    active_goal: object,
    heartbeat: object,
    preparation: object,
    activation: object,
) -> tuple[int, int, float, float, float]:
    """Check a member's parameters; return them normalised (ints and floats).

    The relations are the specification's: the heartbeat interval is strictly
    less than the activation interval ("Recommended Relationship between
    Activation and Heartbeat Interval"), and a non-zero preparation interval
    lies strictly between the two ("Recommended Relationship between
    Preparation and Activation Interval").
    """
    weight = validate_weight(weight)
    if isinstance(active_goal, bool) or not isinstance(active_goal, int):
        raise InvalidArgument(f"active_goal must be an integer, got {active_goal!r}")
    if active_goal < 1:
        raise InvalidArgument(f"active_goal must be at least 1, got {active_goal}")
    hb = _interval("heartbeat", heartbeat)
    act = _interval("activation", activation)
    prep = _interval("preparation", preparation, zero_allowed=True)
    if hb >= act:
        raise InvalidArgument(
            f"heartbeat interval ({hb}) must be strictly less than the activation interval ({act})"
        )
    if prep and not hb < prep < act:
        raise InvalidArgument(
            f"a non-zero preparation interval ({prep}) must be strictly greater than the "
            f"heartbeat interval ({hb}) and strictly less than the activation interval ({act})"
        )
    return weight, active_goal, hb, prep, act


def _validate_member_id(member_id: object) -> str:
    if not isinstance(member_id, str) or not member_id:
        raise InvalidArgument(f"member_id must be a non-empty string, got {member_id!r}")
    return member_id


def _tiebreak(member_id: str) -> bytes:
    # Equal weights are ordered by a hash of the member id: stable, identical in
    # every process, and unrelated to start order, so programs cannot come to
    # rely on it ("Ranking Members with Equal Weight").
    return hashlib.blake2b(member_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


# ---------------------------------------------------------------------------
# Records and outputs


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


@dataclass(frozen=True, slots=True)
class FtAdvisory:
    """An advisory the driver presents on its own transport (never on the network).

    ``subject`` is ``_RV.<class>.RVFT.<name>.<group>``; :meth:`fields` gives the
    message fields (``RVADV_DESC`` when there is a description: the spec has
    DISABLING_MEMBER carry none). ``peer`` names the other member involved, for
    logs; it is not part of the advisory message.
    """

    adv_class: str
    name: str
    group: str
    description: str | None
    peer: str | None = None

    @property
    def subject(self) -> str:
        return f"_RV.{self.adv_class}.{ADVISORY_SOURCE}.{self.name}.{self.group}"

    def fields(self) -> dict[str, str]:
        return {} if self.description is None else {"RVADV_DESC": self.description}


@dataclass(slots=True)
class FtOutputs:
    """Everything one input produced, in the order a driver should carry it out.

    Send ``records`` first (the group learns of a change as early as possible),
    then present ``advisories``, then call the callback with each of
    ``actions`` in order.
    """

    actions: list[FtAction] = field(default_factory=list)
    records: list[FtRecord] = field(default_factory=list)
    advisories: list[FtAdvisory] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.actions or self.records or self.advisories)


@dataclass(frozen=True, slots=True)
class FtMemberInfo:
    """One member as a core currently sees it (for introspection and tests)."""

    member: str
    weight: int
    active: bool
    is_self: bool


# ---------------------------------------------------------------------------
# Member core


class _Peer:
    __slots__ = (
        "activation",
        "active",
        "active_goal",
        "heartbeat",
        "key",
        "last_heard",
        "member",
        "period",
        "preparation",
        "reported",
        "seq",
        "tiebreak",
        "weight",
    )

    def __init__(self, member: str) -> None:
        self.member = member
        self.tiebreak = _tiebreak(member)
        self.seq = -1
        self.weight = 0
        self.active = False
        self.last_heard = 0.0
        self.active_goal = 0
        self.heartbeat = 0.0
        self.activation = 0.0
        self.preparation = 0.0
        self.period = 0.0
        self.reported: set[str] = set()
        self.key: tuple[int, bytes, str] = (0, self.tiebreak, member)

    def update(self, record: FtRecord, now: float) -> None:
        self.seq = record.seq
        self.weight = record.weight
        self.active = record.active
        self.last_heard = now
        self.active_goal = record.active_goal
        self.heartbeat = record.heartbeat
        self.activation = record.activation
        self.preparation = record.preparation
        self.period = record.period
        self.key = (-record.weight, self.tiebreak, self.member)


@dataclass(slots=True)
class _Tombstone:
    seq: int
    final: bool
    until: float


class _State(enum.Enum):
    NEW = "new"
    JOINED = "joined"
    WITHDRAWN = "withdrawn"


class FtMemberCore:
    """The fault tolerance state machine of one member of one group.

    Inputs (each takes ``now`` in seconds, any monotonic clock, and returns
    :class:`FtOutputs`): :meth:`join`, :meth:`withdraw`, :meth:`receive`,
    :meth:`peer_gone`, :meth:`set_weight`, :meth:`disable`,
    :meth:`handle_timer`. Call :meth:`handle_timer` once ``now`` reaches
    :meth:`next_deadline`; calling it early or late is harmless.

    Decisions ("Rank and Weight", "Status Quo among Members with Equal Weight"):

    * Rank orders members by weight, highest first; equal weights by an opaque
      but stable hash of the member id.
    * An *inactive* member activates when it is among the first ``active_goal``
      members of the ordering (weight, then already-active first, then rank),
      after its first activation interval ("New Member Situations"). Putting
      the active members first among equal weights is the status quo rule: a
      higher-ranked inactive member never displaces an active one of the same
      weight, yet a heavier one does ("Rank among Members with Different
      Weight").
    * An *active* member deactivates once ``active_goal`` active members
      outrank it. It waits to *see* them active, so service never lapses
      during a preemption, and after a partition heals the extra actives of
      lowest rank step down on the first heartbeat they hear.
    * An active member is lost when its heartbeat is silent for the
      activation interval ("Detecting Member Failure", "Activation Interval"),
      or at once when it withdraws or the driver reports it gone
      ("Independent Confirmation").
    """

    def __init__(
        self,
        group: str,
        *,
        weight: int = 50,
        active_goal: int = 1,
        heartbeat: float = 1.0,
        preparation: float = 0.0,
        activation: float = 3.0,
        member_id: str | None = None,
    ) -> None:
        self.group = validate_group(group)
        (
            self._weight,
            self.active_goal,
            self.heartbeat,
            self.preparation,
            self.activation,
        ) = validate_member_parameters(
            weight=weight,
            active_goal=active_goal,
            heartbeat=heartbeat,
            preparation=preparation,
            activation=activation,
        )
        self.member_id = _validate_member_id(uuid.uuid4().hex if member_id is None else member_id)
        self._tiebreak = _tiebreak(self.member_id)
        self._state = _State.NEW
        self._active = False
        self._now = -math.inf
        self._seq = 0
        self._peers: dict[str, _Peer] = {}
        self._tombstones: dict[str, _Tombstone] = {}
        self._hold_until = math.inf
        self._hold_hint_at = math.inf
        self._next_send = math.inf
        self._announced = math.inf
        self._hint_outstanding = False
        self._hint_time = -math.inf
        self._too_few_since: float | None = None
        self._too_few_reported = False

    # -- read-only views --------------------------------------------------

    @property
    def weight(self) -> int:
        return self._weight

    @property
    def active(self) -> bool:
        """True between an ACTIVATE and the next DEACTIVATE this core issued."""
        return self._active

    @property
    def joined(self) -> bool:
        return self._state is _State.JOINED

    @property
    def disabled(self) -> bool:
        """True once :meth:`disable` set the weight to zero (until :meth:`set_weight`)."""
        return self._weight == 0

    @property
    def active_count(self) -> int:
        """Members this core currently hears heartbeats from, itself included if active."""
        return sum(p.active for p in self._peers.values()) + self._active

    def ranking(self) -> list[FtMemberInfo]:
        """Every member this core knows of (itself included), highest rank first."""
        rows = [
            (p.key, FtMemberInfo(p.member, p.weight, p.active, False)) for p in self._peers.values()
        ]
        if self._state is _State.JOINED:
            rows.append(
                (self._key(), FtMemberInfo(self.member_id, self._weight, self._active, True))
            )
        rows.sort(key=lambda row: row[0])
        return [info for _, info in rows]

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next run, or None (not joined, or withdrawn)."""
        if self._state is not _State.JOINED:
            return None
        candidates = [self._next_send]
        candidates.extend(self._expiry(p) for p in self._peers.values())
        if not self._active:
            candidates.append(self._hold_until)
            if self.preparation:
                candidates.append(self._hold_hint_at)
                candidates.extend(self._suspect_at(p) for p in self._peers.values() if p.active)
        if self._too_few_since is not None and not self._too_few_reported:
            candidates.append(self._too_few_since + self.activation)
        # Times at or before the last input were already acted upon.
        future = [t for t in candidates if t > self._now]
        return min(future) if future else None

    # -- inputs -----------------------------------------------------------

    def join(self, now: float) -> FtOutputs:
        """Become a member: announce this member and start the first activation interval.

        A new member is inactive, and may not activate before one activation
        interval has passed: the time the others have to identify themselves
        ("Active and Inactive", "New Member Situations").
        """
        if self._state is not _State.NEW:
            raise NotPermitted(
                f"member {self.member_id!r} of group {self.group!r} cannot join twice; "
                "a new membership needs a new member core"
            )
        now = self._clock(now)
        out = FtOutputs()
        self._state = _State.JOINED
        self._start_hold(now)
        self._send(RecordKind.HELLO, now, out)
        return out

    def withdraw(self, now: float) -> FtOutputs:
        """Leave the group: tell the others (so a successor takes over at once).

        An active member is told to DEACTIVATE first, so the program stops
        serving as it leaves. Withdrawing twice, or before joining, does nothing.
        """
        out = FtOutputs()
        if self._state is not _State.JOINED:
            return out
        now = self._clock(now)
        if self._active:
            self._active = False
            out.actions.append(FtAction.DEACTIVATE)
        self._send(RecordKind.BYE, now, out)
        self._state = _State.WITHDRAWN
        self._peers.clear()
        self._tombstones.clear()
        return out

    def receive(self, record: FtRecord, now: float) -> FtOutputs:
        """Take a record a peer multicast to the group (records of others groups are ignored)."""
        out = FtOutputs()
        if self._state is not _State.JOINED:
            return out
        now = self._clock(now)
        self._advance(now, out)
        if record.group == self.group and record.member != self.member_id:
            self._apply(record, now, out)
        self._evaluate(now, out)
        return out

    def peer_gone(self, member_id: str, now: float) -> FtOutputs:
        """Independent confirmation that a peer ended (its process or daemon link).

        The peer is dropped at once instead of after its heartbeats fall
        silent, so a successor activates without waiting ("Independent
        Confirmation"). Should the peer still be alive, its next record brings
        it back.
        """
        out = FtOutputs()
        if self._state is not _State.JOINED:
            return out
        now = self._clock(now)
        self._advance(now, out)
        peer = self._peers.pop(member_id, None)
        if peer is not None:
            self._bury(peer.member, peer.seq, now, final=False)
        self._evaluate(now, out)
        return out

    def set_weight(self, weight: int, now: float) -> FtOutputs:
        """Change this member's weight; every member re-ranks at once ("Adjusting Weight").

        Raises :class:`~rvasync.errors.InvalidArgument` for a weight below 1.
        Setting a weight re-enables a member :meth:`disable` set to zero.
        """
        weight = validate_weight(weight)
        out = FtOutputs()
        if self._state is _State.WITHDRAWN:
            return out
        if self._state is _State.NEW:
            self._weight = weight
            return out
        now = self._clock(now)
        self._advance(now, out)
        if weight != self._weight:
            self._weight = weight
            self._send_own(now, out)
        self._evaluate(now, out)
        return out

    def disable(self, now: float) -> FtOutputs:
        """The driver could not function (no memory, no timer, a failed send).

        Deactivates the member, sets its weight to zero so it activates only as
        a last resort, and presents DISABLING_MEMBER (which carries no
        description) to this member alone ("Disabling a Member"). A disabled
        member waits one activation interval before it may activate again, to
        give the others time to take its place.
        """
        out = FtOutputs()
        if self._state is not _State.JOINED or self._weight == 0:
            return out
        now = self._clock(now)
        self._advance(now, out)
        self._weight = 0
        out.advisories.append(FtAdvisory(_ERROR, DISABLING_MEMBER, self.group, None))
        if self._active:
            self._deactivate(now, out)
        else:
            self._send_own(now, out)
        self._start_hold(now)
        self._evaluate(now, out)
        return out

    def handle_timer(self, now: float) -> FtOutputs:
        """Do whatever fell due by ``now``: heartbeats, status, expiries, hints, activation."""
        out = FtOutputs()
        if self._state is not _State.JOINED:
            return out
        now = self._clock(now)
        self._advance(now, out)
        self._evaluate(now, out)
        return out

    # -- internals --------------------------------------------------------

    def _clock(self, now: float) -> float:
        if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
            raise InvalidArgument(f"now must be a number of seconds, got {now!r}")
        # A clock that steps back is treated as standing still.
        if now > self._now:
            self._now = float(now)
        return self._now

    def _key(self) -> tuple[int, bytes, str]:
        return (-self._weight, self._tiebreak, self.member_id)

    def _expiry(self, peer: _Peer) -> float:
        if peer.active:
            return peer.last_heard + self.activation
        return peer.last_heard + max(self.activation, INACTIVE_EXPIRY_FACTOR * peer.period)

    def _suspect_at(self, peer: _Peer) -> float:
        return peer.last_heard + self.preparation

    def _start_hold(self, now: float) -> None:
        self._hold_until = now + self.activation
        self._hold_hint_at = now + self.preparation if self.preparation else math.inf
        self._hint_outstanding = False

    def _send_period(self) -> float:
        """Heartbeat rate for active and ranking inactive members, a slow rate for the rest."""
        if self._active:
            return self.heartbeat
        key = self._key()
        ahead = sum(1 for p in self._peers.values() if not p.active and p.key < key)
        if ahead < self.active_goal:
            return self.heartbeat
        return STATUS_PERIOD_FACTOR * self.activation

    def _send(self, kind: RecordKind, now: float, out: FtOutputs) -> None:
        period = self._send_period()
        out.records.append(
            FtRecord(
                kind=kind,
                group=self.group,
                member=self.member_id,
                seq=self._seq,
                weight=self._weight,
                active_goal=self.active_goal,
                heartbeat=self.heartbeat,
                activation=self.activation,
                preparation=self.preparation,
                period=period,
            )
        )
        self._seq += 1
        self._announced = period
        self._next_send = now + period

    def _send_own(self, now: float, out: FtOutputs) -> None:
        self._send(RecordKind.HEARTBEAT if self._active else RecordKind.STATUS, now, out)

    def _bury(self, member: str, seq: int, now: float, *, final: bool) -> None:
        self._tombstones[member] = _Tombstone(seq, final, now + TOMBSTONE_FACTOR * self.activation)

    def _advance(self, now: float, out: FtOutputs) -> None:
        """Apply the passage of time: forget silent peers and stale tombstones."""
        for member, peer in list(self._peers.items()):
            if self._expiry(peer) <= now:
                del self._peers[member]
                self._bury(member, peer.seq, now, final=False)
        if self._tombstones:
            for member in [m for m, t in self._tombstones.items() if t.until <= now]:
                del self._tombstones[member]

    def _apply(self, record: FtRecord, now: float, out: FtOutputs) -> None:
        member = record.member
        tomb = self._tombstones.get(member)
        if tomb is not None:
            if tomb.final or record.seq <= tomb.seq:
                return
            del self._tombstones[member]
        peer = self._peers.get(member)
        if peer is not None and record.seq <= peer.seq:
            return  # duplicate or overtaken by a later record
        if record.kind is RecordKind.BYE:
            if peer is not None:
                del self._peers[member]
            self._bury(member, record.seq, now, final=True)
            return
        if peer is None:
            peer = self._peers[member] = _Peer(member)
        was_active = peer.active
        peer.update(record, now)
        self._check_parameters(peer, out)
        if record.kind is RecordKind.HELLO:
            # Identify ourselves to the newcomer within its first interval.
            self._send_own(now, out)
        if peer.active and not was_active:
            self._check_too_many(peer, out)

    def _check_parameters(self, peer: _Peer, out: FtOutputs) -> None:
        """PARAM_MISMATCH, once per peer and description (appendix C, "PARAM_MISMATCH")."""
        found: list[tuple[str, str]] = []
        if peer.active_goal != self.active_goal:
            found.append((_ERROR, DESC_ACTIVE_GOAL_DIFFERS))
        if not _same(peer.activation, self.activation):
            found.append((_ERROR, DESC_ACTIVATION_DIFFERS))
        if not _same(peer.heartbeat, self.heartbeat):
            found.append((_WARN, DESC_HEARTBEAT_DIFFERS))
        if peer.preparation and peer.preparation <= self.heartbeat:
            found.append((_WARN, DESC_OTHER_PREPARES_EARLY))
        if self.preparation and self.preparation <= peer.heartbeat:
            found.append((_WARN, DESC_THIS_PREPARES_EARLY))
        for adv_class, desc in found:
            if desc not in peer.reported:
                peer.reported.add(desc)
                out.advisories.append(
                    FtAdvisory(adv_class, PARAM_MISMATCH, self.group, desc, peer.member)
                )

    def _active_above(self) -> int:
        key = self._key()
        return sum(1 for p in self._peers.values() if p.active and p.key < key)

    def _check_too_many(self, newcomer: _Peer, out: FtOutputs) -> None:
        """TOO_MANY_ACTIVE (appendix C): checked when a heartbeat reveals a new active member.

        Presented only by an active member whose rank keeps it active, when more
        members send heartbeats than the active goal.
        """
        count = self.active_count
        if self._active and count > self.active_goal and self._active_above() < self.active_goal:
            out.advisories.append(
                FtAdvisory(
                    _WARN,
                    TOO_MANY_ACTIVE,
                    self.group,
                    f"{count} members are active, more than the active goal of "
                    f"{self.active_goal}; {newcomer.member} is not known to this member "
                    "as active",
                    newcomer.member,
                )
            )

    def _in_target(self, excluded: frozenset[str] = frozenset()) -> bool:
        """Would this (inactive) member be among the first ``active_goal`` members?

        The order is weight first, then active members before inactive ones of
        the same weight (status quo), then rank.
        """
        mine = (-self._weight, 1, self._tiebreak, self.member_id)
        ahead = 0
        for p in self._peers.values():
            if p.member in excluded:
                continue
            if (-p.weight, 0 if p.active else 1, p.tiebreak, p.member) < mine:
                ahead += 1
                if ahead >= self.active_goal:
                    return False
        return True

    def _evaluate(self, now: float, out: FtOutputs) -> None:
        """Re-decide this member's state from what it knows at ``now``, then send what is due.

        The periodic record goes last, so a state change (which sends its own
        record at once) is not preceded by a stale one. A member whose sending
        period changes says so at once: its peers time it out by the period it
        announced last.
        """
        if self._active and self._active_above() >= self.active_goal:
            self._deactivate(now, out)
        if not self._active:
            if now >= self._hold_until and self._in_target():
                self._activate(now, out)
            else:
                self._update_hint(now, out)
        self._update_too_few(now, out)
        if now >= self._next_send or self._send_period() != self._announced:
            self._send_own(now, out)

    def _activate(self, now: float, out: FtOutputs) -> None:
        # "Timing of Hints": a member that asked for hints always gets one
        # before ACTIVATE, never longer before it than activation - preparation.
        if self.preparation:
            window = self.activation - self.preparation
            fresh = self._hint_outstanding and now - self._hint_time <= window * (1 + 1e-9)
            if not fresh:
                out.actions.append(FtAction.PREPARE_TO_ACTIVATE)
        self._hint_outstanding = False
        self._active = True
        out.actions.append(FtAction.ACTIVATE)
        self._send_own(now, out)

    def _deactivate(self, now: float, out: FtOutputs) -> None:
        self._active = False
        out.actions.append(FtAction.DEACTIVATE)
        self._send_own(now, out)

    def _update_hint(self, now: float, out: FtOutputs) -> None:
        """Issue PREPARE_TO_ACTIVATE when this member would activate should silence persist.

        The hint goes to the member that would activate if every active member
        silent for the preparation interval were lost, and to a new member
        that would activate at the end of its first interval, at the same
        distance before activation ("Prepare-to-Activate Hints").
        """
        if not self.preparation:
            return
        candidate = False
        if now >= self._hold_hint_at:
            suspects = frozenset(
                p.member for p in self._peers.values() if p.active and self._suspect_at(p) <= now
            )
            candidate = self._in_target(suspects)
        if candidate and not self._hint_outstanding:
            self._hint_outstanding = True
            self._hint_time = now
            out.actions.append(FtAction.PREPARE_TO_ACTIVATE)
        elif not candidate:
            self._hint_outstanding = False

    def _update_too_few(self, now: float, out: FtOutputs) -> None:
        """TOO_FEW_ACTIVE (appendix C), once the shortfall outlasts an activation interval.

        The conditions are the appendix's: this member is inactive, its rank
        keeps it inactive, and fewer members than the goal send heartbeats.
        During an ordinary failover they hold for a moment (until the
        successor's first heartbeat arrives), so the advisory waits one
        activation interval, the time the group has to restore its goal, and
        is presented once per episode.
        """
        holds = (
            not self._active and now >= self._hold_until and self.active_count < self.active_goal
        )
        if not holds:
            self._too_few_since = None
            self._too_few_reported = False
            return
        if self._too_few_since is None:
            self._too_few_since = now
        elif not self._too_few_reported and now >= self._too_few_since + self.activation:
            self._too_few_reported = True
            out.advisories.append(
                FtAdvisory(
                    _WARN,
                    TOO_FEW_ACTIVE,
                    self.group,
                    f"{self.active_count} active, fewer than the active goal of "
                    f"{self.active_goal}, and this member's rank keeps it inactive",
                )
            )


# ---------------------------------------------------------------------------
# Monitor core


class FtMonitorCore:
    """Passive count of a group's active members ("Passive Monitor").

    A monitor sends nothing, so members never learn it exists. It counts the
    members whose heartbeats it hears; a member is lost when silent for
    ``lost_interval`` (which should equal the group's activation interval,
    "For Monitors: Determine the Lost Interval"), and dropped at once when it
    withdraws, deactivates or is reported gone. Every input returns the list
    of counts the monitor passed through, one entry per change, so a driver
    reports every change and never a non-change.
    """

    def __init__(self, group: str, *, lost_interval: float) -> None:
        self.group = validate_group(group)
        self.lost_interval = _interval("lost", lost_interval)
        self._now = -math.inf
        self._last_heartbeat: dict[str, float] = {}
        # Last sequence seen per member, to ignore reordered records; entries
        # are forgotten after a while to bound memory.
        self._seqs: dict[str, _Tombstone] = {}

    @property
    def active_count(self) -> int:
        return len(self._last_heartbeat)

    def active_members(self) -> list[str]:
        return sorted(self._last_heartbeat)

    def next_deadline(self) -> float | None:
        if not self._last_heartbeat:
            return None
        return min(self._last_heartbeat.values()) + self.lost_interval

    def receive(self, record: FtRecord, now: float) -> list[int]:
        now = self._clock(now)
        changes = self._advance(now)
        if record.group != self.group:
            return changes
        seen = self._seqs.get(record.member)
        if seen is not None and (seen.final or record.seq <= seen.seq):
            return changes
        final = record.kind is RecordKind.BYE
        self._seqs[record.member] = _Tombstone(
            record.seq, final, now + TOMBSTONE_FACTOR * self.lost_interval
        )
        if record.active:
            known = record.member in self._last_heartbeat
            self._last_heartbeat[record.member] = now
            if not known:
                changes.append(self.active_count)
        elif self._last_heartbeat.pop(record.member, None) is not None:
            changes.append(self.active_count)
        return changes

    def peer_gone(self, member_id: str, now: float) -> list[int]:
        """Independent confirmation that ``member_id`` ended: it stops counting at once."""
        now = self._clock(now)
        changes = self._advance(now)
        if self._last_heartbeat.pop(member_id, None) is not None:
            changes.append(self.active_count)
        return changes

    def handle_timer(self, now: float) -> list[int]:
        return self._advance(self._clock(now))

    def _clock(self, now: float) -> float:
        if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
            raise InvalidArgument(f"now must be a number of seconds, got {now!r}")
        if now > self._now:
            self._now = float(now)
        return self._now

    def _advance(self, now: float) -> list[int]:
        changes: list[int] = []
        lost = sorted(
            (t, m) for m, t in self._last_heartbeat.items() if t + self.lost_interval <= now
        )
        for _, member in lost:
            del self._last_heartbeat[member]
            changes.append(self.active_count)
        if self._seqs:
            for member in [m for m, s in self._seqs.items() if s.until <= now]:
                if member not in self._last_heartbeat:
                    del self._seqs[member]
        return changes
