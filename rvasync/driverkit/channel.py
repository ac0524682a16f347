"""How a fault tolerance group's records and advisories travel on an rvasync transport.

Every driver that takes part in a fault tolerance group uses it:
``rv.FtMember`` and ``rv.FtMonitor``, and the distributed queue members,
whose scheduler such a group elects. Members multicast their records on
``_RVFT.<group>``. That subject is reserved: the user-facing ``send`` refuses
subjects that start with ``_``, so records go straight to the transport's
routing hook, which is the same path a validated user message takes after its
checks. Every transport (intra-process or network) therefore carries them
without knowing about fault tolerance.

Received records are decoded with :meth:`FtRecord.from_fields`; malformed ones
are dropped and counted (the first is logged, so a misconfigured peer is
visible without flooding the log).

Independent confirmation: when a record's sender can be tied to a transport
(records carry the sending transport's id when the transport has one), an
``_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.<id>`` advisory (a daemon saying that
transport ended, or that a whole peer daemon is gone: then ``<id>`` is the
daemon's id, the prefix of its transports' ids) marks every member heard from
it as gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from rvasync._logging import stderr_logger
from rvasync.errors import MalformedMessage
from rvasync.message import Message
from rvasync.protocol.ft import FtAdvisory, FtRecord, RecordKind, control_subject
from rvasync.subjects import validate_subject

if TYPE_CHECKING:
    from rvasync.transport.base import BaseTransport
    from rvasync.transport.listener import Listener

__all__ = [
    "ORIGIN_FIELD",
    "ORIGIN_MEMORY",
    "UNREACHABLE_PREFIX",
    "GroupChannel",
    "send_internal",
    "transport_id",
]

ORIGIN_FIELD = "origin"
"""Driver-level record field: id of the transport that sent the record (when it has one)."""

UNREACHABLE_PREFIX = "_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT."

ORIGIN_MEMORY = 10.0
"""Senders are remembered this many activation (or lost) intervals after their last record."""


def transport_id(transport: BaseTransport) -> str | None:
    """The id a daemon names this transport by in UNREACHABLE.TRANSPORT, if it has a daemon.

    The transport's ``transport_id`` (a network transport's id in its daemon,
    the middle of its ``_INBOX.<transport id>.<n>`` inboxes). Transports
    without a daemon (the process transport) have none: nobody could ever
    report them unreachable.
    """
    value = getattr(transport, "transport_id", None)
    if isinstance(value, str) and value:
        return value
    return None


def send_internal(transport: BaseTransport, msg: Message) -> None:
    """Send ``msg`` on a reserved subject, bypassing the user-facing reserved-subject rule.

    Raises :class:`~rvasync.errors.TransportClosed` when the transport is closed;
    whatever else the transport raises (a failing socket) reaches the caller.
    """
    # A full send backlog is not waited for: records are periodic, the next one follows.
    transport.send_internal(msg)


def _ended(origin: str, gone_id: str) -> bool:
    """Does the end of ``gone_id`` take transport ``origin`` with it?

    A daemon reports one transport by its id, and a whole peer daemon (all of
    its transports, whose ids are ``<daemon id>.<token>``) by the daemon's id.
    """
    return origin == gone_id or origin.startswith(gone_id + ".")


class GroupChannel:
    """The control subject of one group on one transport: records in and out, advisories.

    ``on_record(record, now)`` receives each well-formed record (its own
    included: cores ignore their own); ``on_gone(member_ids)`` receives the
    members an UNREACHABLE.TRANSPORT advisory showed to be gone.
    """

    __slots__ = (
        "_gone_listener",
        "_listener",
        "_logged_malformed",
        "_memory",
        "_on_gone",
        "_on_record",
        "_senders",
        "_transport",
        "group",
        "malformed",
        "subject",
    )

    def __init__(
        self,
        transport: BaseTransport,
        group: str,
        *,
        memory: float,
        on_record: Callable[[FtRecord], None],
        on_gone: Callable[[list[str]], None],
    ) -> None:
        self._transport = transport
        self.group = group
        self.subject = control_subject(group)
        # The group name is valid; the prefix may still push it past the subject limits.
        validate_subject(self.subject, wildcards=False)
        self._on_record = on_record
        self._on_gone = on_gone
        self._memory = memory
        self._listener: Listener | None = None
        self._gone_listener: Listener | None = None
        # member id -> (transport id, loop time of its last record)
        self._senders: dict[str, tuple[str, float]] = {}
        self.malformed = 0
        self._logged_malformed = False

    @property
    def open(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        """Listen to the group's records (and to transport-ended advisories)."""
        self._listener = self._transport.listen(self.subject, callback=self._on_message)
        self._gone_listener = self._transport.listen(
            UNREACHABLE_PREFIX + ">", callback=self._on_unreachable
        )

    def stop(self) -> None:
        for listener in (self._listener, self._gone_listener):
            if listener is not None:
                listener.close_now()
        self._listener = self._gone_listener = None
        self._senders.clear()

    def send(self, record: FtRecord) -> None:
        msg = Message(self.subject, record.to_fields())
        # Asked at every send: a link that reconnects gets a new transport id.
        origin = transport_id(self._transport)
        if origin is not None:
            msg.add(ORIGIN_FIELD, origin)
        send_internal(self._transport, msg)

    def present(self, advisory: FtAdvisory) -> None:
        """Present ``advisory`` to this transport's own listeners (never on the network)."""
        self._transport.present(Message(advisory.subject, advisory.fields()))

    # -- inbound --------------------------------------------------------------

    def _on_message(self, msg: Message) -> None:
        if self._listener is None:
            return
        fields = {f.name: f.value for f in msg if f.name}
        try:
            record = FtRecord.from_fields(fields)
        except MalformedMessage as exc:
            self.malformed += 1
            if not self._logged_malformed:
                self._logged_malformed = True
                stderr_logger().warning(
                    "dropped a malformed fault tolerance record (further ones are only counted)",
                    group=self.group,
                    problem=str(exc),
                )
            return
        origin = fields.get(ORIGIN_FIELD)
        if isinstance(origin, str) and origin:
            if record.kind is RecordKind.BYE:
                self._senders.pop(record.member, None)
            else:
                self._remember(record.member, origin)
        self._on_record(record)

    def _remember(self, member: str, origin: str) -> None:
        now = asyncio.get_running_loop().time()
        self._senders[member] = (origin, now)
        if len(self._senders) > 64:
            horizon = now - self._memory
            for stale in [m for m, (_, t) in self._senders.items() if t < horizon]:
                del self._senders[stale]

    def _on_unreachable(self, msg: Message) -> None:
        if self._listener is None or not msg.subject:
            return
        gone_id = msg.subject[len(UNREACHABLE_PREFIX) :]
        gone = [m for m, (origin, _) in self._senders.items() if _ended(origin, gone_id)]
        for member in gone:
            del self._senders[member]
        if gone:
            self._on_gone(gone)
