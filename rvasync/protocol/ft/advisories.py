"""Fault tolerance advisories (appendix "Fault Tolerance (RVFT) Advisory Messages").

A member presents them on its own transport, never on the network, as
``_RV.<class>.RVFT.<name>.<group>`` with an optional ``RVADV_DESC`` string
field ("RVFT Advisory Description Field"). The cores return them as
:class:`FtAdvisory` values; :meth:`FtAdvisory.to_message` builds the message
with the one advisory builder, :mod:`rvasync.advmsg`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rvasync.advmsg import RVFT, advisory_message, advisory_subject
from rvasync.message import Message

__all__ = [
    "ADVISORY_SOURCE",
    "DESC_ACTIVATION_DIFFERS",
    "DESC_ACTIVE_GOAL_DIFFERS",
    "DESC_HEARTBEAT_DIFFERS",
    "DESC_OTHER_PREPARES_EARLY",
    "DESC_THIS_PREPARES_EARLY",
    "DISABLING_MEMBER",
    "ERROR",
    "PARAM_MISMATCH",
    "TOO_FEW_ACTIVE",
    "TOO_MANY_ACTIVE",
    "WARN",
    "FtAdvisory",
    "disabling_member",
    "param_mismatch",
    "too_few_active",
    "too_many_active",
]

ADVISORY_SOURCE = RVFT

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

# The classes RVFT uses (it has no INFO advisories).
ERROR = "ERROR"
WARN = "WARN"


@dataclass(frozen=True, slots=True)
class FtAdvisory:
    """An advisory the driver presents on its own transport (never on the network).

    ``subject`` is ``_RV.<class>.RVFT.<name>.<group>``; :meth:`fields` gives the
    message fields (``RVADV_DESC`` when there is a description: the spec has
    DISABLING_MEMBER carry none); :meth:`to_message` the message itself.
    ``peer`` names the other member involved, for logs; it is not part of the
    advisory message.
    """

    adv_class: str
    name: str
    group: str
    description: str | None
    peer: str | None = None

    @property
    def subject(self) -> str:
        return advisory_subject(self.adv_class, RVFT, self.name, self.group)

    def fields(self) -> dict[str, str]:
        return {} if self.description is None else {"RVADV_DESC": self.description}

    def to_message(self) -> Message:
        """The advisory message to present."""
        return advisory_message(self.subject, self.fields())


def param_mismatch(adv_class: str, group: str, description: str, peer: str) -> FtAdvisory:
    """PARAM_MISMATCH (ERROR or WARN): ``peer``'s parameters differ as ``description`` says."""
    return FtAdvisory(adv_class, PARAM_MISMATCH, group, description, peer)


def disabling_member(group: str) -> FtAdvisory:
    """DISABLING_MEMBER (ERROR): this member could not function; it carries no description."""
    return FtAdvisory(ERROR, DISABLING_MEMBER, group, None)


def too_many_active(group: str, count: int, active_goal: int, newcomer: str) -> FtAdvisory:
    """TOO_MANY_ACTIVE (WARN): ``count`` members send heartbeats, more than the goal."""
    return FtAdvisory(
        WARN,
        TOO_MANY_ACTIVE,
        group,
        f"{count} members are active, more than the active goal of "
        f"{active_goal}; {newcomer} is not known to this member "
        "as active",
        newcomer,
    )


def too_few_active(group: str, count: int, active_goal: int) -> FtAdvisory:
    """TOO_FEW_ACTIVE (WARN): fewer than the goal are active and this member stays inactive."""
    return FtAdvisory(
        WARN,
        TOO_FEW_ACTIVE,
        group,
        f"{count} active, fewer than the active goal of "
        f"{active_goal}, and this member's rank keeps it inactive",
    )
