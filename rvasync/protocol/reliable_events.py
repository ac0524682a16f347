"""What the reliable multicast core reports to its driver: events and counters.

The core (:mod:`rvasync.protocol.reliable`) never calls back into its driver;
it queues these plain objects and the driver collects them with
``ReliableEndpoint.events()``. Delivery is batched per datagram
(:class:`Delivered` holds every message one datagram completed) because one
object per message would cost more than the rest of the receive path.

Advisory-like events map onto Rendezvous system advisories as follows (the
daemon builds the advisory messages; the core only supplies the facts):

=============================  ================================================
event                          advisory
=============================  ================================================
InboundDataLoss                DATALOSS.INBOUND.BCAST / .PTP
OutboundDataLoss               DATALOSS.OUTBOUND.BCAST / .PTP
RetransmissionRequested        RETRANSMISSION.INBOUND.EXPECTED
RetransmissionSent             RETRANSMISSION.OUTBOUND.SENT
RetransmissionSuppressed       RETRANSMISSION.OUTBOUND.SUPPRESSED
RetransmissionNotRequested     RETRANSMISSION.INBOUND.REQUEST_NOT_SENT
PeerSilent                     the peer daemon is gone (UNREACHABLE.TRANSPORT-like)
=============================  ================================================

Addresses (``src``, ``dest``) are whatever opaque hashable values the driver
passed in; sessions are the peers' random 64-bit session ids.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, fields

__all__ = [
    "Delivered",
    "InboundDataLoss",
    "OutboundDataLoss",
    "PeerDiscovered",
    "PeerSilent",
    "ReliableEvent",
    "ReliableStats",
    "RetransmissionNotRequested",
    "RetransmissionRequested",
    "RetransmissionSent",
    "RetransmissionSuppressed",
]

Address = Hashable


@dataclass(slots=True)
class Delivered:
    """Messages from one sender, in that sender's order for this stream kind.

    ``payloads`` are the opaque message bytes exactly as the sender passed them;
    ``ptp`` tells a point-to-point stream (sent to this endpoint's address) from
    the sender's multicast stream.
    """

    session: int
    src: Address
    ptp: bool
    payloads: list[bytes]


@dataclass(slots=True)
class InboundDataLoss:
    """Messages from ``session`` that will never be delivered here.

    ``messages`` counts them exactly; they are the stream's message indices
    ``first_message .. first_message + messages - 1`` (per sender and stream,
    from 1), which is how tests check that loss reports are exact.
    ``datagrams`` is how many datagrams were missing. ``reason``: ``"retention"``
    (the sender no longer had them), ``"no-retention"`` (the sender runs with
    reliability 0), ``"sender-silent"`` (the sender stopped answering and was
    forgotten), ``"sender-closed"`` (it said goodbye) or ``"inconsistent"`` (a
    fragment sequence that does not add up was discarded).
    """

    session: int
    src: Address
    ptp: bool
    messages: int
    datagrams: int
    first_message: int
    reason: str


@dataclass(slots=True)
class OutboundDataLoss:
    """A receiver at ``dest`` asked for ``datagrams`` datagrams this endpoint already discarded.

    ``session`` is that receiver's own session id (from its NAK), so a report names the
    requesting daemon exactly, not only its address (0 when not known).
    """

    dest: Address
    ptp: bool
    datagrams: int
    session: int = 0


@dataclass(slots=True)
class RetransmissionRequested:
    """This endpoint noticed ``datagrams`` missing datagrams from ``session`` and sent a NAK."""

    session: int
    src: Address
    ptp: bool
    datagrams: int


@dataclass(slots=True)
class RetransmissionSent:
    """This endpoint resent ``datagrams`` retained datagrams to the receiver at ``dest``
    (whose session id, from its NAK, is ``session``)."""

    dest: Address
    ptp: bool
    datagrams: int
    session: int = 0


@dataclass(slots=True)
class RetransmissionSuppressed:
    """Requests from ``dest`` (session ``session``) for ``datagrams`` datagrams were ignored:
    they were just resent."""

    dest: Address
    ptp: bool
    datagrams: int
    session: int = 0


@dataclass(slots=True)
class RetransmissionNotRequested:
    """This endpoint held back its NAK for ``datagrams`` datagrams missing from ``session``:
    sessions not yet vouched for have spent this interval's NAK budget (``probation_naks``);
    it asks again in the next interval."""

    session: int
    src: Address
    ptp: bool
    datagrams: int


@dataclass(slots=True)
class PeerDiscovered:
    """The first datagram from a new sender session arrived from ``src``."""

    session: int
    src: Address


@dataclass(slots=True)
class PeerSilent:
    """A sender session is forgotten.

    ``reason`` is ``"timeout"`` (silent for ``peer_timeout``) or ``"closed"`` (it said goodbye).
    """

    session: int
    src: Address
    reason: str


ReliableEvent = (
    Delivered
    | InboundDataLoss
    | OutboundDataLoss
    | RetransmissionRequested
    | RetransmissionSent
    | RetransmissionSuppressed
    | RetransmissionNotRequested
    | PeerDiscovered
    | PeerSilent
)


@dataclass(slots=True)
class ReliableStats:
    """Cumulative counters since the endpoint was created (what HOST.STATUS reports).

    "Datagrams" are UDP payloads of any kind (data, heartbeat, NAK); "messages"
    are the opaque payloads the driver sends and receives.
    """

    datagrams_sent: int = 0
    bytes_sent: int = 0
    datagrams_received: int = 0
    bytes_received: int = 0
    datagrams_retransmitted: int = 0
    #: Of datagrams_retransmitted, those resent to the group (a loss several hosts shared).
    retransmissions_to_group: int = 0
    bytes_retransmitted: int = 0
    heartbeats_sent: int = 0
    heartbeats_received: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    messages_sent: int = 0
    messages_delivered: int = 0
    #: Datagrams found missing: first asked for in a NAK, or given up on unasked (each once).
    datagrams_missed: int = 0
    #: Inbound loss: datagrams given up on, and the messages they carried.
    datagrams_lost_inbound: int = 0
    messages_lost_inbound: int = 0
    #: Outbound loss: datagrams requested by receivers after they were discarded.
    datagrams_lost_outbound: int = 0
    retransmissions_suppressed: int = 0
    #: Dropped on arrival: not a valid datagram of this protocol (bad magic, CRC, layout ...).
    malformed: int = 0
    #: Dropped on arrival: a data datagram already received or delivered.
    duplicates: int = 0
    #: Dropped on arrival: our own multicast looped back to us.
    own_datagrams: int = 0
    #: Dropped on arrival: out-of-order data beyond the reorder buffer limits (asked again later).
    over_limit: int = 0
    #: NAKs ignored: for another (e.g. previous) session, an unknown stream, or unsent data.
    naks_ignored: int = 0
    #: Unexpected exceptions contained inside the core (always 0 unless there is a bug).
    internal_errors: int = 0
    #: Dropped on arrival: a datagram of a new sender session while the table of
    #: unconfirmed (or of all) sessions was full (``max_new_peers`` / ``max_peers``).
    peers_refused: int = 0
    #: Dropped on arrival: a known session's datagram from another address than the one
    #: the session was first heard from (a forgery, or a clash of random session ids).
    wrong_source: int = 0
    #: Dropped on arrival: a datagram opening a stream beyond ``max_streams_per_peer``.
    streams_refused: int = 0
    #: Dropped on arrival: a datagram (data or heartbeat) whose sequence numbers cannot
    #: be true: a stream further ahead than any sender could have got in the time it
    #: claims or we have known it (a forgery meant to inflate the loss counters).
    implausible: int = 0
    #: Retained datagrams dropped before their reliability interval was over, to keep
    #: retention within ``max_retention`` bytes.
    retention_trimmed: int = 0
    #: NAKs to unconfirmed sessions put off to the next heartbeat: the per-interval
    #: budget of requests new sources may cause (``probation_naks``) was spent.
    naks_deferred: int = 0

    def as_dict(self) -> dict[str, int]:
        """A snapshot of every counter by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
