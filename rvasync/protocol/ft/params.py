"""Fault tolerance parameters: timing factors and the checks every member and monitor applies.

Rules from the specification's "Step 1: Choose a Group Name" and "Step 4:
Choose the Intervals"; ranking ties from "Ranking Members with Equal Weight".
"""

from __future__ import annotations

import hashlib
import math

from rvasync.errors import InvalidArgument
from rvasync.subjects import validate_subject

__all__ = [
    "INACTIVE_EXPIRY_FACTOR",
    "STATUS_PERIOD_FACTOR",
    "TOMBSTONE_FACTOR",
    "check_interval",
    "same_seconds",
    "tiebreak",
    "validate_group",
    "validate_member_id",
    "validate_member_parameters",
    "validate_weight",
]

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


def check_interval(name: str, value: object, *, zero_allowed: bool = False) -> float:
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
    hb = check_interval("heartbeat", heartbeat)
    act = check_interval("activation", activation)
    prep = check_interval("preparation", preparation, zero_allowed=True)
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


def validate_member_id(member_id: object) -> str:
    if not isinstance(member_id, str) or not member_id:
        raise InvalidArgument(f"member_id must be a non-empty string, got {member_id!r}")
    return member_id


def tiebreak(member_id: str) -> bytes:
    # Equal weights are ordered by a hash of the member id: stable, identical in
    # every process, and unrelated to start order, so programs cannot come to
    # rely on it ("Ranking Members with Equal Weight").
    return hashlib.blake2b(member_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def same_seconds(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
