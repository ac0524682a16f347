"""Fault tolerance protocol core, sans-IO: members, ranking, heartbeats and monitors.

This package decides *who is active* in a fault tolerance group. It owns no
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

Layout (one concern per module, as in :mod:`rvasync.protocol.cm`):

``params``      timing factors and the checks of groups, weights and intervals
``records``     :class:`FtRecord`, :class:`RecordKind`, the control subject
``advisories``  :class:`FtAdvisory` and the RVFT advisory names and texts
``outputs``     :class:`FtAction`, :class:`FtOutputs`, :class:`FtMemberInfo`
``member``      :class:`FtMemberCore`
``monitor``     :class:`FtMonitorCore`

Everything is re-exported here: ``from rvasync.protocol.ft import X`` is the
import path for drivers and tests.
"""

from __future__ import annotations

from rvasync.protocol.ft.advisories import (
    ADVISORY_SOURCE,
    DESC_ACTIVATION_DIFFERS,
    DESC_ACTIVE_GOAL_DIFFERS,
    DESC_HEARTBEAT_DIFFERS,
    DESC_OTHER_PREPARES_EARLY,
    DESC_THIS_PREPARES_EARLY,
    DISABLING_MEMBER,
    PARAM_MISMATCH,
    TOO_FEW_ACTIVE,
    TOO_MANY_ACTIVE,
    FtAdvisory,
)
from rvasync.protocol.ft.member import FtMemberCore
from rvasync.protocol.ft.monitor import FtMonitorCore
from rvasync.protocol.ft.outputs import FtAction, FtMemberInfo, FtOutputs
from rvasync.protocol.ft.params import (
    INACTIVE_EXPIRY_FACTOR,
    STATUS_PERIOD_FACTOR,
    TOMBSTONE_FACTOR,
    validate_group,
    validate_member_parameters,
    validate_weight,
)
from rvasync.protocol.ft.params import tiebreak as _tiebreak  # noqa: F401  (tests import it)
from rvasync.protocol.ft.records import (
    CONTROL_SUBJECT_PREFIX,
    RECORD_VERSION,
    FtRecord,
    RecordKind,
    control_subject,
)

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
    "TOMBSTONE_FACTOR",
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
