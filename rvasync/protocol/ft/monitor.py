"""The monitor core: a passive count of a group's active members."""

from __future__ import annotations

import math

from rvasync.errors import InvalidArgument
from rvasync.protocol.ft.params import TOMBSTONE_FACTOR, check_interval, validate_group
from rvasync.protocol.ft.records import FtRecord, RecordKind, Tombstone

__all__ = ["FtMonitorCore"]


class FtMonitorCore:
    """Passive count of a group's active members ("Passive Monitor").

    A monitor sends nothing, so members never learn it exists. It counts the
    members whose heartbeats it hears; a member is lost when silent for
    ``lost_interval`` (which should equal the group's activation interval,
    "For Monitors: Determine the Lost Interval"), and dropped at once when it
    withdraws, deactivates or is reported gone. Every input returns the list
    of counts the monitor passed through, one entry per change, so a driver
    reports every change and never a non-change.

    A member is never counted lost sooner than its own group would count it:
    after the activation interval its records announce, when ``lost_interval``
    is shorter. Monitors "detect the same number of active members as do
    members of the group", and the activation interval is what holds the
    margin the specification demands over the heartbeat interval (strictly
    less). A monitor whose lost interval was the heartbeat interval used to
    count a punctual member lost at the very moment its next heartbeat was
    due, and flapped 1, 0, 1, 0 every period (issue 34 item 4).
    """

    def __init__(self, group: str, *, lost_interval: float) -> None:
        self.group = validate_group(group)
        self.lost_interval = check_interval("lost", lost_interval)
        self._now = -math.inf
        self._last_heartbeat: dict[str, float] = {}
        # How long each counted member may stay silent: max(lost, its activation interval).
        self._window: dict[str, float] = {}
        # Last sequence seen per member, to ignore reordered records; entries
        # are forgotten after a while to bound memory.
        self._seqs: dict[str, Tombstone] = {}

    @property
    def active_count(self) -> int:
        return len(self._last_heartbeat)

    def active_members(self) -> list[str]:
        return sorted(self._last_heartbeat)

    def next_deadline(self) -> float | None:
        if not self._last_heartbeat:
            return None
        window = self._window
        return min(t + window[m] for m, t in self._last_heartbeat.items())

    def receive(self, record: FtRecord, now: float) -> list[int]:
        now = self._clock(now)
        changes = self._advance(now)
        if record.group != self.group:
            return changes
        seen = self._seqs.get(record.member)
        if seen is not None and (seen.final or record.seq <= seen.seq):
            return changes
        final = record.kind is RecordKind.BYE
        self._seqs[record.member] = Tombstone(
            record.seq, final, now + TOMBSTONE_FACTOR * self.lost_interval
        )
        if record.active:
            known = record.member in self._last_heartbeat
            self._last_heartbeat[record.member] = now
            self._window[record.member] = max(self.lost_interval, record.activation)
            if not known:
                changes.append(self.active_count)
        elif self._forget(record.member):
            changes.append(self.active_count)
        return changes

    def peer_gone(self, member_id: str, now: float) -> list[int]:
        """Independent confirmation that ``member_id`` ended: it stops counting at once."""
        now = self._clock(now)
        changes = self._advance(now)
        if self._forget(member_id):
            changes.append(self.active_count)
        return changes

    def handle_timer(self, now: float) -> list[int]:
        return self._advance(self._clock(now))

    def _forget(self, member: str) -> bool:
        """Stop counting ``member``; True if it was counted."""
        self._window.pop(member, None)
        return self._last_heartbeat.pop(member, None) is not None

    def _clock(self, now: float) -> float:
        if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
            raise InvalidArgument(f"now must be a number of seconds, got {now!r}")
        if now > self._now:
            self._now = float(now)
        return self._now

    def _advance(self, now: float) -> list[int]:
        changes: list[int] = []
        window = self._window
        lost = sorted((t, m) for m, t in self._last_heartbeat.items() if t + window[m] <= now)
        for _, member in lost:
            self._forget(member)
            changes.append(self.active_count)
        if self._seqs:
            for member in [m for m, s in self._seqs.items() if s.until <= now]:
                if member not in self._last_heartbeat:
                    del self._seqs[member]
        return changes
