"""What the relay cores ask their drivers to do, and the relay advisories.

After each input a driver drains the core's outputs and carries them out in
order:

* :class:`SendFrame`: publish ``data`` (an encoded frame) on ``subject`` (an
  inbox address for point-to-point frames, or the locate subject);
* :class:`Inbound` (client): hand an inbound message's bytes, with the role
  of the listening it matched, to the certified transport;
* :class:`Emit` (agent): send a client's outbound message to the network
  (with ``reply`` as its reply subject when the agent substituted one);
* :class:`Interest` (agent): start or stop listening on a subject pattern;
* :class:`AppendRecord` (agent): append a record to the agent's ledger and
  report it written with ``durable(lsn)``;
* :class:`~rvasync.protocol.cm.advisories.Advisory`: present it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rvasync.advmsg import RVCM, advisory_subject
from rvasync.protocol.cm.advisories import Advisory

__all__ = [
    "AppendRecord",
    "Emit",
    "Inbound",
    "Interest",
    "RelayOutput",
    "SendFrame",
    "relay_conflict",
    "relay_connected",
    "relay_disconnected",
    "relay_no_response",
    "relay_reply_lost",
]


@dataclass(frozen=True, slots=True)
class SendFrame:
    subject: str
    data: bytes


@dataclass(slots=True)
class Inbound:
    """(Not frozen: one is made per message a client receives, and frozen ones cost more.)"""

    role: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Emit:
    client: str
    data: bytes
    reply: str | None = None
    """A surrogate inbox to put in place of the message's reply subject (None: keep it)."""


@dataclass(frozen=True, slots=True)
class Interest:
    pattern: str
    listening: bool


@dataclass(frozen=True, slots=True)
class AppendRecord:
    lsn: int
    record: tuple[Any, ...]


RelayOutput = SendFrame | Inbound | Emit | Interest | AppendRecord | Advisory


def _advisory(
    adv_class: str, condition: str, agent: str, *, lost: int | None = None, **fields: str
) -> Advisory:
    typed: list[tuple[str, Any, str | int]] = [
        (name, "string", value) for name, value in fields.items()
    ]
    if lost is not None:
        typed.append(("lost", "u64", lost))
    return Advisory(
        subject=advisory_subject(adv_class, RVCM, condition, agent),
        adv_class=adv_class,  # type: ignore[arg-type]  # one of INFO, WARN, ERROR here
        condition=condition,
        fields=tuple(typed),
    )


def relay_connected(agent: str) -> Advisory:
    """Client: contact with relay agent ``agent`` is established and resynchronised."""
    return _advisory("INFO", "RELAY.CONNECTED", agent, name=agent)


def relay_disconnected(agent: str) -> Advisory:
    """Client: an explicit disconnect from ``agent`` completed; the network may go."""
    return _advisory("INFO", "RELAY.DISCONNECTED", agent, name=agent)


def relay_no_response(agent: str) -> Advisory:
    """Client: relay agent ``agent`` could not be located (it keeps trying)."""
    return _advisory("WARN", "DELIVERY.NO_RESPONSE", agent, listener=agent)


def relay_conflict(agent: str, other: str) -> Advisory:
    """Agent: another live relay agent answers to the same name."""
    return _advisory("ERROR", "RELAY.CONFLICT", agent, name=agent, instance=other)


def relay_reply_lost(agent: str, reason: str, lost: int, **where: str) -> Advisory:
    """A reply a relay could not hand to its requester (reply name substitution).

    ``where`` names it: ``inbox`` (the requester's own inbox, on the client)
    or ``subject`` (the surrogate it arrived on, on the agent). ``lost``
    counts such replies so far in this process.
    """
    return _advisory(
        "WARN", "RELAY.REPLY_LOST", agent, lost=lost, name=agent, reason=reason, **where
    )
