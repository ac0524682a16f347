"""What the fault tolerance cores return: callback actions, outputs of one input, ranking rows."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rvasync.protocol.ft.advisories import FtAdvisory
from rvasync.protocol.ft.records import FtRecord

__all__ = ["FtAction", "FtMemberInfo", "FtOutputs"]


class FtAction(enum.IntEnum):
    """What the fault tolerance callback must do ("Fault Tolerance Callback Actions").

    PREPARE_TO_ACTIVATE is only a hint: an ACTIVATE may follow, or not.
    """

    PREPARE_TO_ACTIVATE = 1
    ACTIVATE = 2
    DEACTIVATE = 3


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
