"""What the certified-delivery core asks its driver to do.

The core never performs I/O; after each input the driver drains a list of
these outputs and carries them out in order:

* :class:`Transmit`: send a record, either multicast on a subject (labeled
  data, hello announcements) or point-to-point to a correspondent's address;
* :class:`Deliver`: hand a (labeled or plain) message to one CM listener;
* :class:`~rvasync.protocol.cm.advisories.Advisory`: present an advisory on
  the network transport the CM transport employs (it is not sent to peers);
* :class:`AppendLedger`: append a record to the file ledger (file ledgers
  only), then report it written with ``durable(lsn)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rvasync.protocol.cm._flat import fast_init
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.ledger import LedgerRecord
from rvasync.protocol.cm.records import Record

__all__ = ["AppendLedger", "Deliver", "Output", "SendResult", "Transmit"]


@fast_init
@dataclass(frozen=True, slots=True)
class Transmit:
    """Send ``record`` (as ``record.to_fields()``) to ``destination``.

    ``point_to_point`` False: ``destination`` is a subject to publish on.
    True: it is a correspondent address (as that correspondent gave it in its
    records), reached point-to-point.
    """

    destination: str
    record: Record
    point_to_point: bool


@fast_init
@dataclass(frozen=True, slots=True)
class Deliver:
    """Give a message to CM listener ``listener_id``.

    ``sender`` is None for a message that carried no label (sent by an
    ordinary transport); ``sequence`` is None when delivery is not certified
    to this correspondent. For a certified delivery the driver later calls
    ``confirm(listener_id, sender, subject, sequence)``: automatically when
    the consumer has taken the message, or when the application confirms
    explicitly.

    ``payload`` is the one the received :class:`DataRecord` carried, untouched:
    the core never looks inside a payload it receives, so a driver that has
    the message decoded already (a labeled message that arrived as a message)
    may pass that object instead of its bytes and get it back here.
    """

    listener_id: int
    subject: str
    sender: str | None
    sequence: int | None
    time_limit: float
    payload: bytes


@fast_init
@dataclass(frozen=True, slots=True)
class AppendLedger:
    """Append ``record`` to the ledger file; ``lsn`` numbers appends from 1 upward.

    The driver may batch several appends into one write and one sync (group
    commit); it then calls ``durable(highest lsn written)``. Transmissions
    that follow a ledger record wait inside the core until it is durable, so
    no peer ever hears of something the ledger could forget in a crash.
    """

    lsn: int
    record: LedgerRecord


Output = Transmit | Deliver | Advisory | AppendLedger
"""Anything :meth:`CmCorrespondent.drain` can return."""


@fast_init
@dataclass(frozen=True, slots=True)
class SendResult:
    """What ``send`` assigned: the sequence number and the ledger append to wait for.

    ``lsn`` is None when the send wrote nothing to the ledger (process ledger,
    or an uncertified message inside an already reserved sequence block);
    otherwise a ``sync_ledger`` driver completes the send call once
    ``durable(lsn)`` has been reported.
    """

    sequence: int
    lsn: int | None
    certified: bool
    """True when the message was stored for at least one registered listener."""
    hold_lsn: int | None = None
    """The append that must be durable before the number counts as handed out.

    Numbers are reserved ahead in blocks; when the writer has fallen so far
    behind that the reservation covering this number is not durable yet, a
    driver that does not wait for ``lsn`` anyway (no ``sync_ledger``) waits
    for this one before it gives the number to the program, so a crash can
    never make it give the same number twice. None: already covered.
    """
