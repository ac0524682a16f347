"""The member core: the fault tolerance state machine of one member of one group."""

from __future__ import annotations

import enum
import math
import uuid

from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.protocol.ft import advisories as adv
from rvasync.protocol.ft.outputs import FtAction, FtMemberInfo, FtOutputs
from rvasync.protocol.ft.params import (
    INACTIVE_EXPIRY_FACTOR,
    STATUS_PERIOD_FACTOR,
    TOMBSTONE_FACTOR,
    same_seconds,
    tiebreak,
    validate_group,
    validate_member_id,
    validate_member_parameters,
    validate_weight,
)
from rvasync.protocol.ft.records import FtRecord, RecordKind, Tombstone

__all__ = ["FtMemberCore"]


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
        self.tiebreak = tiebreak(member)
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


class _State(enum.Enum):
    NEW = "new"
    JOINED = "joined"
    WITHDRAWN = "withdrawn"


# _State members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_S_JOINED, _S_NEW, _S_WITHDRAWN = (_State.JOINED, _State.NEW, _State.WITHDRAWN)


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
        self.member_id = validate_member_id(uuid.uuid4().hex if member_id is None else member_id)
        self._tiebreak = tiebreak(self.member_id)
        self._state = _S_NEW
        self._active = False
        self._now = -math.inf
        self._seq = 0
        self._peers: dict[str, _Peer] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._hold_until = math.inf
        self._hold_hint_at = math.inf
        self._next_send = math.inf
        self._announced = math.inf
        self._hint_outstanding = False
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
        return self._state is _S_JOINED

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
        if self._state is _S_JOINED:
            rows.append(
                (self._key(), FtMemberInfo(self.member_id, self._weight, self._active, True))
            )
        rows.sort(key=lambda row: row[0])
        return [info for _, info in rows]

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next run, or None (not joined, or withdrawn)."""
        if self._state is not _S_JOINED:
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
        if self._state is not _S_NEW:
            raise NotPermitted(
                f"member {self.member_id!r} of group {self.group!r} cannot join twice; "
                "a new membership needs a new member core"
            )
        now = self._clock(now)
        out = FtOutputs()
        self._state = _S_JOINED
        self._start_hold(now)
        self._send(RecordKind.HELLO, now, out)
        return out

    def withdraw(self, now: float) -> FtOutputs:
        """Leave the group: tell the others (so a successor takes over at once).

        An active member is told to DEACTIVATE first, so the program stops
        serving as it leaves. Withdrawing twice, or before joining, does nothing.
        """
        out = FtOutputs()
        if self._state is not _S_JOINED:
            return out
        now = self._clock(now)
        if self._active:
            self._active = False
            out.actions.append(FtAction.DEACTIVATE)
        self._send(RecordKind.BYE, now, out)
        self._state = _S_WITHDRAWN
        self._peers.clear()
        self._tombstones.clear()
        return out

    def receive(self, record: FtRecord, now: float) -> FtOutputs:
        """Take a record a peer multicast to the group (records of others groups are ignored)."""
        out = FtOutputs()
        if self._state is not _S_JOINED:
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
        if self._state is not _S_JOINED:
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
        if self._state is _S_WITHDRAWN:
            return out
        if self._state is _S_NEW:
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
        if self._state is not _S_JOINED or self._weight == 0:
            return out
        now = self._clock(now)
        self._advance(now, out)
        self._weight = 0
        out.advisories.append(adv.disabling_member(self.group))
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
        if self._state is not _S_JOINED:
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
        self._tombstones[member] = Tombstone(seq, final, now + TOMBSTONE_FACTOR * self.activation)

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
            found.append((adv.ERROR, adv.DESC_ACTIVE_GOAL_DIFFERS))
        if not same_seconds(peer.activation, self.activation):
            found.append((adv.ERROR, adv.DESC_ACTIVATION_DIFFERS))
        if not same_seconds(peer.heartbeat, self.heartbeat):
            found.append((adv.WARN, adv.DESC_HEARTBEAT_DIFFERS))
        if peer.preparation and peer.preparation <= self.heartbeat:
            found.append((adv.WARN, adv.DESC_OTHER_PREPARES_EARLY))
        if self.preparation and self.preparation <= peer.heartbeat:
            found.append((adv.WARN, adv.DESC_THIS_PREPARES_EARLY))
        for adv_class, desc in found:
            if desc not in peer.reported:
                peer.reported.add(desc)
                out.advisories.append(adv.param_mismatch(adv_class, self.group, desc, peer.member))

    def _active_above(self) -> int:
        key = self._key()
        return sum(1 for p in self._peers.values() if p.active and p.key < key)

    def _check_too_many(self, newcomer: _Peer, out: FtOutputs) -> None:
        """TOO_MANY_ACTIVE (appendix C): checked when a heartbeat reveals a new active member.

        Presented only by an active member whose rank keeps it active, when more
        members send heartbeats than the active goal, and only when the
        newcomer is one of the extras: "one or more other members are active
        that should not be active". A newcomer that outranks all but fewer
        than ``active_goal`` of the active members belongs among them: it is
        a preemption (a heavier member, a planned weight change), and the
        member it displaces steps down as soon as it hears it. With an active
        goal of 1 that member is this one, which the rank condition already
        silences; with a larger goal it is another, and the advisory used to
        come with every planned weight change (issue 44 item 10).
        """
        count = self.active_count
        goal = self.active_goal
        if not (self._active and count > goal and self._active_above() < goal):
            return
        key = newcomer.key
        above = sum(1 for p in self._peers.values() if p.active and p.key < key)
        if above + (self._key() < key) < goal:
            return
        out.advisories.append(adv.too_many_active(self.group, count, goal, newcomer.member))

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
        # before ACTIVATE, and one only. An outstanding hint is never older
        # than activation - preparation on time: it was given when this member
        # became the candidate, and _update_hint withdraws it the moment the
        # member stops being one; the ACTIVATE then comes when the suspects'
        # silence reaches the activation interval, as their hint came when it
        # reached the preparation interval (or at the end of the first
        # interval, as its hint came at preparation). So its age is not
        # checked: a late event loop delays the ACTIVATE, and measuring the
        # age in the loop's time used to turn the hint stale and give a second
        # one right with the ACTIVATE (issue 34 item 4, issue 44 item 10).
        if self.preparation and not self._hint_outstanding:
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
                adv.too_few_active(self.group, self.active_count, self.active_goal)
            )
