"""The reliable multicast protocol core, sans-IO (what a daemon runs per service).

One :class:`ReliableEndpoint` per daemon per service. It sends one multicast
stream (to the service group) and one point-to-point stream per destination
address, and receives every other endpoint's streams, delivering each in the
sender's order, exactly once, or reporting exactly which messages were lost.
It owns no socket, clock or task: the driver feeds it inputs and drains its
outputs::

    ep = ReliableEndpoint(now=loop.time(), reliability=5.0)
    ep.send_multicast(payload)               # application sends: queued, no time
    ep.send_ptp(addr, payload)
    ep.receive_datagram(data, src, now)      # every UDP datagram that arrives
    ep.handle_timer(now)                     # when now >= ep.next_deadline()
    ep.flush(now)                            # once per event-loop turn
    for data, dest in ep.datagrams_to_send(): ...   # dest None = service group
    for event in ep.events(): ...            # Delivered, InboundDataLoss, ...

Time contract (as aioquic's connection): the current time ``now`` (seconds,
any monotonic origin) enters only through the calls that receive, make
datagrams leave or run timers: the constructor, :meth:`receive_datagram` /
:meth:`receive`, :meth:`handle_timer`, :meth:`flush` / :meth:`flush_datagrams`
/ :meth:`flush_lone`, and :meth:`close`. Send calls only queue, so they take
no time: a time a send call could take is a time a driver could get wrong
(the daemon once passed 0.0, which made every new point-to-point stream look
ancient, so receivers joined it mid-stream and the loss of its first datagram
went unnoticed). A stream is stamped (the origin of the age its datagrams
carry) when it is first flushed, with that flush's ``now``.

The protocol itself (datagram format, NAKs, heartbeats, retention, the rules
for declaring loss) is described in docs/reliable-multicast.md; the per-packet
framing lives in the ``rmframe`` hot path (pure twin: rvasync/fallback/rmframe.py).

Driver contract: ``src`` must be the address of the sending endpoint's own
(unique) unicast socket, and the driver must send everything, multicast
included, from its own unicast socket, because NAKs and retransmissions are
sent back to ``src``.
"""

from __future__ import annotations

import math
import os
import random
from collections import deque
from collections.abc import Hashable, Sequence
from types import ModuleType
from typing import Any

from rvasync import _accel, _rmwire
from rvasync.errors import InvalidArgument, MessageTooLarge, TransportClosed
from rvasync.protocol.reliable_events import (
    Delivered,
    InboundDataLoss,
    OutboundDataLoss,
    PeerDiscovered,
    PeerSilent,
    ReliableEvent,
    ReliableStats,
    RetransmissionNotRequested,
    RetransmissionRequested,
    RetransmissionSent,
    RetransmissionSuppressed,
)

__all__ = ["DEFAULT_MAX_RETENTION", "MAX_MESSAGE", "SHARED_PEERS", "ReliableEndpoint"]

Address = Hashable
#: A datagram as rmframe's parse() returns it (its kind decides the layout).
_Parsed = tuple[Any, ...]

#: Largest payload a message may have (64 MiB); larger sends raise MessageTooLarge.
MAX_MESSAGE = _rmwire.MAX_MESSAGE

_MIB = 1024 * 1024
_U64 = (1 << 64) - 1

#: Default bound on the bytes retained for retransmission, over all outbound streams.
DEFAULT_MAX_RETENTION = 256 * _MIB

#: How fast a sender's stream is taken to be able to advance at most, in datagrams per
#: second: far above what any daemon sends (a datagram carries a loop turn's messages),
#: and what makes a claim of a stream 2**64 datagrams ahead impossible. A datagram or a
#: heartbeat claiming more than this rate (plus PLAUSIBLE_SLACK seconds) since the stream
#: was last heard, or since it began for a new one, is dropped and counted
#: (``stats.implausible``): it is forged, and must not inflate the loss counters.
PLAUSIBLE_RATE = 1_000_000
PLAUSIBLE_SLACK = 0.1
#: Most messages one datagram can carry (a record header is 4 bytes).
_MAX_RECORDS = _rmwire.MAX_DATAGRAM // 4

# Record kinds, types, flags and limits of the wire format (rvasync._rmwire, the one
# definition both rmframe twins use), bound to module globals for the hot paths.
_AGE_MAX = _rmwire.AGE_MAX
_K_WHOLE, _K_FIRST = _rmwire.K_WHOLE, _rmwire.K_FIRST
_K_MIDDLE, _K_LAST = _rmwire.K_MIDDLE, _rmwire.K_LAST
_T_DATA, _T_HEARTBEAT, _T_NAK = _rmwire.T_DATA, _rmwire.T_HEARTBEAT, _rmwire.T_NAK
_F_NO_RETENTION = _rmwire.F_NO_RETENTION
_HB_FINAL = _rmwire.HB_FINAL
_E_NO_RETENTION = _rmwire.E_NO_RETENTION
_E_LOW_CONT, _E_NEXT_CONT = _rmwire.E_LOW_CONT, _rmwire.E_NEXT_CONT
_E_SHARED = _rmwire.E_SHARED

#: _repair_route's answer for a request not served now (the datagram was just resent).
_HOLD = object()
#: A sender that hears more daemons than this flags its multicast stream as shared
#: (E_SHARED) from the start: among that many hosts a loss on its own link would
#: otherwise bring one NAK from each before the first resend to the group.
SHARED_PEERS = 64


def _age_ms(seconds: float) -> int:
    if seconds <= 0:
        return 0
    return min(int(seconds * 1000.0), _AGE_MAX)


def _stream_age(ob: _Outbound, now: float) -> int:
    """The age in ms of stream ``ob`` at ``now`` (0 before its first flush)."""
    return 0 if ob.start is None else _age_ms(now - ob.start)


class _Outbound:
    """One outbound stream: its packer and the datagrams retained for retransmission."""

    __slots__ = (
        "askers",
        "counted",
        "dest",
        "grouped",
        "holdoff",
        "last_send",
        "low",
        "packer",
        "ptp",
        "retained",
        "shared_at",
        "start",
        "stream_id",
    )

    def __init__(self, stream_id: int, dest: Address | None, packer: Any, now: float) -> None:
        self.stream_id = stream_id
        self.dest = dest
        self.ptp = stream_id != 0
        self.packer = packer
        #: (time sent, datagram) for sequence numbers low, low + 1, ... packer.seq.
        self.retained: deque[tuple[float, bytes]] = deque()
        self.low = 1
        #: When the stream began: None until its first datagram is flushed, then that
        #: flush's time. Receivers compare the stream's age (now - start, carried by
        #: every datagram and status entry) with their own to decide whether it began
        #: while they listened (recover it from datagram 1) or before (join where first
        #: heard). A stream created long before its first flush must not look old.
        self.start: float | None = None
        #: ``now``: the time of the core's last time-bearing call (for idle housekeeping).
        self.last_send = now
        #: (requester, seq) -> when it was last resent to that requester.
        self.holdoff: dict[tuple[Address, int], float] = {}
        #: Multicast stream only: seq -> (the first host that asked for it, when), and
        #: seq -> when it was resent to the group (see ReliableEndpoint._repair_route).
        self.askers: dict[int, tuple[Address, float]] = {}
        self.grouped: dict[int, float] = {}
        #: When a datagram was last resent to the group (losses shared by several hosts):
        #: for peer_timeout after it, heartbeats say so (E_SHARED) and receivers spread
        #: their NAKs.
        self.shared_at = -math.inf
        #: messages already added to stats.messages_sent
        self.counted = 0


class _Peer:
    """Another endpoint (sender session) this one hears from.

    A new session is *unconfirmed* until it is heard again at least half a
    heartbeat interval after its first datagram (a live daemon heartbeats every
    interval; a forger inventing a session per datagram never gets there). Until
    then it draws on the endpoint's small budgets for new sources (see
    ``max_new_peers`` and ``probation_naks``), so sessions nobody has vouched for
    cannot crowd out or disturb the known ones.
    """

    __slots__ = ("closing", "confirmed", "first_heard", "last_heard", "session", "src", "streams")

    def __init__(self, session: int, src: Address, now: float) -> None:
        self.session = session
        self.src = src
        self.first_heard = now
        self.last_heard = now
        self.closing = False
        self.confirmed = False
        self.streams: dict[int, _Inbound] = {}


class _Inbound:
    """Receive state of one sender stream: ordering, gaps, reassembly."""

    __slots__ = (
        "asked_high",
        "asm",
        "buf",
        "buf_bytes",
        "gone_below",
        "gone_cont",
        "gone_msg",
        "gone_reason",
        "high",
        "last_activity",
        "nak_at",
        "nak_tries",
        "next_msg",
        "next_seq",
        "no_retention",
        "noted",
        "peer",
        "ptp",
        "spread",
        "stream_id",
        "tail_cont",
        "tail_msg",
        "tail_seq",
    )

    def __init__(self, peer: _Peer, stream_id: int, now: float) -> None:
        self.peer = peer
        self.stream_id = stream_id
        self.ptp = stream_id != 0
        #: next datagram to deliver, and the index of the next message to complete
        self.next_seq = 1
        self.next_msg = 1
        #: highest sequence number known to exist (received or announced)
        self.high = 0
        #: out-of-order datagrams: seq -> (parsed, size)
        self.buf: dict[int, tuple[tuple[Any, ...], int]] = {}
        self.buf_bytes = 0
        #: the message being reassembled (an rmframe Assembly)
        self.asm: Any = None
        #: everything below gone_below that is missing will never come; gone_msg and
        #: gone_cont describe datagram gone_below's first record (for counting).
        self.gone_below = 0
        self.gone_msg = 1
        self.gone_cont = False
        self.gone_reason = "retention"
        #: what the sender last said about the datagram after its last one
        self.tail_seq = 0
        self.tail_msg = 1
        self.tail_cont = False
        self.no_retention = False
        #: missing datagrams up to this seq have been counted in stats.datagrams_missed
        self.noted = 0
        self.nak_at: float | None = None
        self.nak_tries = 0
        #: the highest sequence number the last NAK of the current gap asked for (0: none)
        self.asked_high = 0
        #: the sender says this stream's losses are shared (E_SHARED): spread NAKs
        self.spread = False
        self.last_activity = now


def _check_interval(name: str, value: float, *, zero_ok: bool = False) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise InvalidArgument(f"{name} must be finite and {bound} seconds, got {value!r}")
    return value


def _check_count(name: str, value: int, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"within {low}..{high}"
        raise InvalidArgument(f"{name} must be {span}, got {value}")
    return value


class ReliableEndpoint:
    """Reliable multicast and point-to-point streams for one daemon on one service.

    Parameters (all keyword-only; times in seconds):

    ``now``
        Creation time. A receiver that existed when a sender's stream began asks
        for that stream from its first datagram; one that joined later starts
        where it first hears the stream (no history).
    ``reliability``
        How long sent datagrams are retained for retransmission (the Rendezvous
        reliability interval; daemons use 60 standalone, 5 in-process). 0
        disables retention: receivers then report gaps as loss without NAKing.
    ``max_retention``
        Most bytes retained for retransmission, over all outbound streams.
        Past it the oldest retained datagrams are dropped before their
        reliability interval is over (``stats.retention_trimmed``); a receiver
        that asks for them is told they are gone (OutboundDataLoss here,
        InboundDataLoss there), as for datagrams that aged out.
    ``max_datagram``
        Largest datagram built (256..65507). 60000 suits loopback; use about
        1400 on real networks to stay under the path MTU (no IP fragmentation).
    ``heartbeat_interval``
        Period of the multicast heartbeat (liveness and tail-loss detection) and
        of housekeeping (retention purge, peer timeouts).
    ``peer_timeout``
        A sender silent this long is forgotten (:class:`PeerSilent`) and its
        pending gaps are reported lost. Also the backfill window: a stream first
        heard when already older than this is joined mid-stream.
    ``nak_delay``
        Wait after noticing a gap before the first NAK (lets reordered
        datagrams arrive); also the quiet time after retransmissions stop
        arriving before asking for what is still missing.
    ``nak_spread``
        On a multicast stream whose sender says its losses are shared by
        several hosts (it resent a datagram to the group within the last
        ``peer_timeout``, or it hears more than SHARED_PEERS (64) daemons: its
        heartbeats carry the flag), a random extra wait
        of up to this long before that NAK, drawn from a truncated exponential distribution
        (most hosts wait nearly all of it, a few ask early): when many hosts
        miss the same datagram, the first requests bring a retransmission to
        the group before the others ask, so requests stay few however many
        hosts there are (NAK suppression, as in SRM and PGM). Where nobody
        shares losses (two daemons, a quiet LAN) nothing waits longer than
        ``nak_delay``. 0 disables it.
    ``nak_interval`` / ``nak_max_interval``
        First NAK retry interval, doubled on every retry without progress up to
        the maximum.
    ``tail_probe``
        Delay after sending data before an extra heartbeat, so the loss of the
        last datagrams of a burst is noticed quickly.
    ``max_nak_datagrams``
        Most datagrams one NAK asks for, and most one NAK is served.
    ``retransmit_burst_bytes``
        Most bytes resent for one NAK (the receiver asks again for the rest).
    ``reorder_limit_bytes`` / ``reorder_limit_datagrams``
        Bound on out-of-order datagrams buffered per inbound stream; beyond it
        they are dropped (and requested again later), so memory stays bounded.
    ``max_peers`` / ``max_new_peers``
        Most sender sessions tracked at once, and most of them still unconfirmed
        (see ``_Peer``). A datagram of a further new session is dropped and
        counted (``stats.peers_refused``): the state unknown sources can cause is
        bounded, and the sessions already known keep being served.
    ``max_streams_per_peer``
        Most inbound streams one session may open here (a daemon sends us its
        multicast stream and one point-to-point stream; a few more cover
        streams it reopened). Beyond it datagrams are dropped, counted.
    ``probation_naks``
        Most NAKs sent per heartbeat interval to unconfirmed sessions, all
        together; the rest wait for the next interval (``stats.naks_deferred``).
        Bounds the retransmission requests (and the traffic to spoofed source
        addresses) forged datagrams can cause, without touching known peers.
    ``session_id``
        This endpoint's 64-bit session id (default: random, so a restarted
        daemon is a new sender). Tests pass fixed ids.
    ``frame``
        The ``rmframe`` implementation (default ``_accel.load("rmframe")``);
        tests pass each of ``_accel.implementations("rmframe")``.
    """

    def __init__(
        self,
        *,
        now: float,
        reliability: float = 60.0,
        max_retention: int = DEFAULT_MAX_RETENTION,
        max_datagram: int = 60000,
        heartbeat_interval: float = 1.0,
        peer_timeout: float = 10.0,
        nak_delay: float = 0.01,
        nak_spread: float = 0.02,
        nak_interval: float = 0.05,
        nak_max_interval: float = 1.0,
        tail_probe: float = 0.05,
        max_nak_datagrams: int = 1024,
        retransmit_burst_bytes: int = 2 * _MIB,
        reorder_limit_bytes: int = 32 * _MIB,
        reorder_limit_datagrams: int = 32768,
        max_peers: int = 1024,
        max_new_peers: int = 64,
        max_streams_per_peer: int = 8,
        probation_naks: int = 64,
        session_id: int | None = None,
        frame: ModuleType | None = None,
    ) -> None:
        now = float(now)
        self.reliability = _check_interval("reliability", reliability, zero_ok=True)
        self.heartbeat_interval = _check_interval("heartbeat_interval", heartbeat_interval)
        self.peer_timeout = _check_interval("peer_timeout", peer_timeout)
        if self.peer_timeout <= self.heartbeat_interval:
            raise InvalidArgument(
                f"peer_timeout ({self.peer_timeout}) must exceed heartbeat_interval "
                f"({self.heartbeat_interval}), or live peers would be forgotten"
            )
        self.nak_delay = _check_interval("nak_delay", nak_delay, zero_ok=True)
        self.nak_spread = _check_interval("nak_spread", nak_spread, zero_ok=True)
        self.nak_interval = _check_interval("nak_interval", nak_interval)
        self.nak_max_interval = _check_interval("nak_max_interval", nak_max_interval)
        if self.nak_max_interval < self.nak_interval:
            raise InvalidArgument(
                f"nak_max_interval ({self.nak_max_interval}) must be >= nak_interval "
                f"({self.nak_interval})"
            )
        self.tail_probe = _check_interval("tail_probe", tail_probe)
        self.max_nak_datagrams = _check_count("max_nak_datagrams", max_nak_datagrams, 1)
        self.retransmit_burst_bytes = _check_count(
            "retransmit_burst_bytes", retransmit_burst_bytes, 1
        )
        self.reorder_limit_bytes = _check_count("reorder_limit_bytes", reorder_limit_bytes, 1)
        self.reorder_limit_datagrams = _check_count(
            "reorder_limit_datagrams", reorder_limit_datagrams, 1
        )
        self.max_retention = _check_count("max_retention", max_retention, 1)
        #: bytes currently retained, over all outbound streams
        self._retained_bytes = 0
        self.max_peers = _check_count("max_peers", max_peers, 1)
        self.max_new_peers = _check_count("max_new_peers", max_new_peers, 1)
        self.max_streams_per_peer = _check_count("max_streams_per_peer", max_streams_per_peer, 1)
        self.probation_naks = _check_count("probation_naks", probation_naks, 0)
        self.frame = frame if frame is not None else _accel.load("rmframe")
        self.max_datagram = _check_count(
            "max_datagram", max_datagram, _rmwire.MIN_DATAGRAM, _rmwire.MAX_DATAGRAM
        )
        if session_id is None:
            session_id = int.from_bytes(os.urandom(8), "little") or 1
        self.session_id = _check_count("session_id", session_id, 1, _U64)

        self.stats = ReliableStats()
        #: the last exception contained by the core (for diagnosis; see stats.internal_errors)
        self.last_internal_error: BaseException | None = None
        self._parse = self.frame.parse
        self._build_hb = self.frame.build_heartbeat
        self._assembly = self.frame.Assembly
        self._build_nak = self.frame.build_nak
        self._created = now
        self._now = now
        self._closed = False
        self._flags = _F_NO_RETENTION if self.reliability == 0 else 0
        # A resend to the same requester within this window is suppressed.
        self._holdoff = self.nak_interval / 2
        # A second host asking for a datagram within this window makes its resend go to
        # the group (see _repair_route).
        self._share_window = self.nak_max_interval
        # The NAK spread's distribution (see _nak_wait): rate ln(max_peers) + 1 keeps
        # the expected number of requests bounded up to max_peers hosts (Nonnenmacher and
        # Biersack's truncated exponential timers). Seeded by the session: reproducible.
        self._spread_rate = math.log(self.max_peers) + 1.0
        self._spread_scale = math.expm1(self._spread_rate)
        self._random = random.Random(self.session_id).random
        # ptp heartbeats continue this long after a stream's last send: as long as the
        # data may be recovered, and at least as long as a receiver cut off for less than
        # peer_timeout (which it survives) needs to learn of a lost tail.
        self._ptp_hb_span = max(self.reliability, self.peer_timeout)
        self._nak_ranges = max(
            1, min(0xFFFF, (self.max_datagram - _rmwire.NAK_HEADER) // _rmwire.RANGE_SIZE)
        )
        self._hb_entries = max(1, (self.max_datagram - _rmwire.HB_HEADER) // _rmwire.ENTRY_SIZE)

        self._mc = _Outbound(0, None, self._new_packer(0), now)
        self._mc_add = self._mc.packer.add
        self._out_by_id: dict[int, _Outbound] = {0: self._mc}
        self._ptp_out: dict[Address, _Outbound] = {}
        self._next_stream_id = 1
        self._touched: set[_Outbound] = set()
        self._dirty: set[_Outbound] = set()
        self._peers: dict[int, _Peer] = {}
        #: the addresses of the known sessions (how many sessions each), for knows_address
        self._addresses: dict[Address, int] = {}
        #: how many of _peers are unconfirmed, and the NAKs they may still cause this interval
        self._unconfirmed = 0
        self._probation_left = self.probation_naks
        self._confirm_after = self.heartbeat_interval / 2
        self._nak_streams: set[_Inbound] = set()

        self._out: list[tuple[bytes, Address | None]] = []
        self._events: list[ReliableEvent] = []
        self._tick_at = now
        self._probe_at: float | None = None

    # ------------------------------------------------------------------ outputs

    def datagrams_to_send(self) -> list[tuple[Any, Address | None]]:
        """Datagrams produced since the last call, as (datagram, dest); dest None means the group.

        A datagram is ``bytes``, or an rmframe ``Gathered`` (a large message's middle
        fragment: header plus a view of the message) to send with ``sendmsg(d.parts)``.
        Takes no time: it hands out what the time-bearing calls produced. Datagrams
        a send call closed since the last of them (the fragments of a large message)
        are collected too, retained from that call's time; a driver flushes first
        (:meth:`flush_datagrams`), which collects them with the current time.
        """
        self._collect(self._now)
        out = self._out
        self._out = []
        return out

    def events(self) -> list[ReliableEvent]:
        """Events produced since the last call, in the order they happened."""
        events = self._events
        self._events = []
        return events

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next be called (None once closed)."""
        if self._closed:
            return None
        deadline = self._tick_at
        if self._probe_at is not None and self._probe_at < deadline:
            deadline = self._probe_at
        for st in self._nak_streams:
            if st.nak_at is not None and st.nak_at < deadline:
                deadline = st.nak_at
        return deadline

    def retention_deadline(self) -> float | None:
        """When everything retained so far will have aged out (None if nothing is retained).

        A driver that wants receivers to be able to recover everything waits
        until then (as IPM does on close) before calling :meth:`close`.
        """
        self._collect(self._now)
        latest = None
        for ob in self._out_by_id.values():
            if ob.retained:
                t = ob.retained[-1][0] + self.reliability
                if latest is None or t > latest:
                    latest = t
        return latest

    def datagrams_for(self, size: int) -> int:
        """How many datagrams a message of ``size`` bytes spans (the ``lost`` of MSG_TOO_LARGE)."""
        room = self.max_datagram - _rmwire.DATA_HEADER - 4
        if size <= room:
            return 1
        first = room - 4
        return 1 + -(-(size - first) // room)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def buffered_bytes(self) -> int:
        """Bytes held for inbound streams (out-of-order datagrams and partial messages)."""
        total = 0
        for peer in self._peers.values():
            for st in peer.streams.values():
                total += st.buf_bytes + (st.asm.size if st.asm is not None else 0)
        return total

    def retained_datagrams(self) -> int:
        """Datagrams currently kept for retransmission, over all outbound streams."""
        return sum(len(ob.retained) for ob in self._out_by_id.values())

    def knows_address(self, address: Address) -> bool:
        """Whether a sender session currently known here was heard from ``address``.

        A driver sends point-to-point traffic only to such addresses (or ones it
        verified otherwise): an address read from a message (an inbox) may be made up.
        """
        try:
            return address in self._addresses
        except TypeError:  # unhashable: no address of ours
            return False

    def peers(self) -> dict[int, Address]:
        """The sender sessions currently known, with the address each was last heard from."""
        return {session: peer.src for session, peer in self._peers.items()}

    # ------------------------------------------------------------------- sending

    def send_multicast(self, payload: bytes) -> None:
        """Queue ``payload`` on the multicast stream (packed until :meth:`flush` or datagram full).

        Takes no time: the datagrams leave, and are stamped, at the next flush.
        Raises :class:`MessageTooLarge` above 64 MiB (nothing is sent) and
        :class:`TransportClosed` after :meth:`close`.
        """
        if type(payload) is not bytes:
            payload = self._coerce(payload)
        if len(payload) > MAX_MESSAGE:
            raise self._too_large(payload)
        self._mc_add(payload)

    def send_multicast_many(self, payloads: list[bytes]) -> None:
        """Queue several payloads on the multicast stream, in order (one call, less overhead).

        All are validated before any is queued.
        """
        checked = []
        for payload in payloads:
            if type(payload) is not bytes:
                payload = self._coerce(payload)
            if len(payload) > MAX_MESSAGE:
                raise self._too_large(payload)
            checked.append(payload)
        if self._closed:
            raise TransportClosed("the reliable endpoint is closed")
        self._mc.packer.add_many(checked)

    def send_ptp(self, dest: Address, payload: bytes) -> None:
        """Queue ``payload`` on the point-to-point stream to ``dest`` (a driver-known address).

        The first send to ``dest`` opens a new stream, which begins (is stamped) at the
        flush that first sends it, so receivers recover it from its first datagram.
        """
        if type(payload) is not bytes:
            payload = self._coerce(payload)
        if len(payload) > MAX_MESSAGE:
            raise self._too_large(payload)
        if self._closed:
            raise TransportClosed("the reliable endpoint is closed")
        try:
            ob = self._ptp_out.get(dest)
        except TypeError:
            raise InvalidArgument(f"dest must be a hashable address, got {dest!r}") from None
        if ob is None:
            if dest is None:
                raise InvalidArgument("dest must be an address; None means multicast")
            ob = self._new_ptp(dest)
        ob.packer.add(payload)
        self._touched.add(ob)

    def flush_lone(self, payload: bytes, dest: Address | None, now: float) -> bytes | None:
        """Flush ``payload`` alone, at once: its datagram, for the driver to transmit now; or
        None, with nothing done, when that is not possible.

        A send and a flush in one call, so like every flush it takes the current
        time: the datagram is sealed here, carrying the stream's age, and retained
        from ``now``. (A ``now`` earlier than the core's last time-bearing call is
        taken as that call's time: time never runs backwards in the core.)
        Possible when the stream (``dest``: an address already sent to, or None
        for multicast) has nothing packed or waiting, the payload is ``bytes`` and
        fits one datagram, and the endpoint is open. The datagram is numbered,
        retained and counted exactly as :meth:`send_multicast` or
        :meth:`send_ptp` followed by :meth:`flush_datagrams` would, but it never
        enters :meth:`datagrams_to_send`: the driver sends it itself, before any
        other bookkeeping, which takes a lone request or reply off the latency
        path of the driver's end-of-turn flush. On None, take the usual way.
        """
        if self._closed or payload.__class__ is not bytes:
            return None
        ob = self._mc if dest is None else self._ptp_out.get(dest)
        if ob is None:
            return None
        if now < self._now:
            now = self._now
        start = ob.start
        datagram: bytes | None = ob.packer.seal_one(
            payload, 0 if start is None else _age_ms(now - start)
        )
        if datagram is None:
            return None
        if start is None:
            ob.start = now  # the stream's first datagram: it begins now (see flush)
        self._now = now
        self._account(ob, (datagram,), len(datagram), now)
        return datagram

    def flush(self, now: float) -> None:
        """Close the datagrams being packed so they go out now (call once per event-loop turn)."""
        self._now = now
        mc = self._mc
        packer = mc.packer
        if packer.pending:
            # A stream's age counts from its first flushed datagram, not from when it
            # was created (the endpoint's creation, a first send call): see _Outbound.start.
            start = mc.start
            if start is None:
                mc.start = start = now
            packer.age_ms = _age_ms(now - start)
            packer.flush()
        self._collect_one(mc, now)
        touched = self._touched
        if touched:
            for ob in touched:
                packer = ob.packer
                if packer.pending:
                    start = ob.start
                    if start is None:
                        ob.start = start = now
                    packer.age_ms = _age_ms(now - start)
                    packer.flush()
                self._collect_one(ob, now)
            touched.clear()

    def flush_datagrams(self, now: float) -> list[tuple[Any, Address | None]]:
        """:meth:`flush`, then :meth:`datagrams_to_send`, in one call (a driver's end of turn)."""
        self.flush(now)
        out = self._out
        self._out = []
        return out

    def close(self, now: float) -> None:
        """Send what is pending and a final status so peers stop waiting for us; then refuse sends.

        Receivers report whatever they still miss as lost (reason
        ``"sender-closed"``) and forget this session. Retained data is dropped.
        """
        if self._closed:
            return
        self.flush(now)
        entries = []
        for ob in self._out_by_id.values():
            p = ob.packer
            flags = _E_NO_RETENTION if self._flags else 0
            if p.head_cont:
                flags |= _E_LOW_CONT | _E_NEXT_CONT
            entries.append(
                (
                    ob.stream_id,
                    flags,
                    _stream_age(ob, now),
                    p.seq + 1,
                    p.head_msg,
                    p.seq,
                    p.head_msg,
                )
            )
        for i in range(0, len(entries), self._hb_entries):
            chunk = entries[i : i + self._hb_entries]
            self._emit(self._build_hb(self.session_id, _HB_FINAL, chunk), None)
            self.stats.heartbeats_sent += 1
        for ob in self._out_by_id.values():
            ob.retained.clear()
            ob.holdoff.clear()
            ob.askers.clear()
            ob.grouped.clear()
        self._retained_bytes = 0
        self._closed = True
        self._mc_add = self._refuse

    # ----------------------------------------------------------------- receiving

    def receive_datagram(self, data: bytes, src: Address, now: float) -> None:
        """Take one datagram that came from ``src``. Never raises: bad input is dropped, counted.

        Everything it produces is collected with :meth:`events` and
        :meth:`datagrams_to_send`.
        """
        delivered = self.receive(data, src, now)
        if delivered is not None:
            self._events.append(delivered)

    def receive(self, data: bytes, src: Address, now: float) -> Delivered | None:
        """:meth:`receive_datagram` for a driver in a hurry.

        When the datagram is the next one of its stream and carries whole
        messages only (nearly every datagram), and no other event is waiting,
        its :class:`Delivered` is returned instead of queued: the driver hands
        it on at once, and has nothing else to collect, since that case sends
        nothing and moves no deadline. Otherwise returns None, and the outputs
        wait for :meth:`events`, :meth:`datagrams_to_send` and
        :meth:`next_deadline` as usual.
        """
        self._now = now
        stats = self.stats
        try:
            if self._closed:
                return None
            if data.__class__ is not bytes and hasattr(data, "parts"):
                # Another endpoint's Gathered datagram, handed over in memory (tests).
                data = bytes(data)
            p = self._parse(data)
            if p is None:
                stats.malformed += 1
                return None
            session = p[1]
            if session == self.session_id:
                stats.own_datagrams += 1
                return None
            stats.datagrams_received += 1
            stats.bytes_received += len(data)
            peer = self._peers.get(session)
            if peer is None:
                peer = self._admit(session, src, now)
                if peer is None:
                    return None
            elif peer.src != src:
                # A session is pinned to the address it was first heard from: NAKs and
                # point-to-point replies go there, and a datagram naming the session from
                # elsewhere must not redirect them or feed its streams.
                stats.wrong_source += 1
                return None
            else:
                peer.last_heard = now
                if not peer.confirmed and now - peer.first_heard >= self._confirm_after:
                    peer.confirmed = True
                    self._unconfirmed -= 1
            kind = p[0]
            if kind == _T_DATA:
                st = peer.streams.get(p[2])
                seq = p[3]
                if (
                    st is not None
                    and seq == st.next_seq
                    and st.high < seq
                    and st.asm is None
                    and p[7] == 0
                    and p[8] == 0
                ):
                    # The common case: the next datagram, whole messages only, no gap.
                    st.next_seq = seq + 1
                    st.high = seq
                    st.last_activity = now
                    st.no_retention = p[6] & _F_NO_RETENTION
                    payloads = p[10]
                    st.next_msg += len(payloads)
                    stats.messages_delivered += len(payloads)
                    delivered = Delivered(session, src, st.ptp, payloads)
                    if self._events:
                        self._events.append(delivered)  # after what happened before it
                        return None
                    return delivered
                self._on_data(peer, st, p, len(data), now)
            elif kind == _T_HEARTBEAT:
                self._on_heartbeat(peer, p, now)
            else:
                self._on_nak(p, src, now, peer.confirmed)
        except Exception as exc:  # containment: a daemon must survive any datagram
            stats.internal_errors += 1
            self.last_internal_error = exc
        return None

    def handle_timer(self, now: float) -> None:
        """Do whatever is due at ``now``: NAKs, heartbeats, retention purge, peer timeouts."""
        self._now = now
        if self._closed:
            return
        try:
            if self._probe_at is not None and self._probe_at <= now:
                self._probe(now)
            if self._nak_streams:
                due = [s for s in self._nak_streams if s.nak_at is not None and s.nak_at <= now]
                for st in due:
                    self._nak_due(st, now)
            if self._tick_at <= now:
                self._tick(now)
        except Exception as exc:
            # Containment, and no busy loop: whatever was due is pushed back.
            self.stats.internal_errors += 1
            self.last_internal_error = exc
            if self._tick_at <= now:
                self._tick_at = now + self.heartbeat_interval
            for st in self._nak_streams:
                if st.nak_at is not None and st.nak_at <= now:
                    st.nak_at = now + self.nak_max_interval

    # ------------------------------------------------------------ sender helpers

    def _new_packer(self, stream_id: int) -> Any:
        return self.frame.Packer(self.max_datagram, self.session_id, stream_id, self._flags)

    def _new_ptp(self, dest: Address) -> _Outbound:
        stream_id = self._next_stream_id
        while stream_id in self._out_by_id:  # only after 2**32 destinations
            stream_id = stream_id + 1 if stream_id < 0xFFFFFFFF else 1
        self._next_stream_id = stream_id + 1 if stream_id < 0xFFFFFFFF else 1
        ob = _Outbound(stream_id, dest, self._new_packer(stream_id), self._now)
        self._ptp_out[dest] = ob
        self._out_by_id[stream_id] = ob
        return ob

    @staticmethod
    def _coerce(payload: Any) -> bytes:
        if isinstance(payload, bytearray | memoryview):
            return bytes(payload)
        raise InvalidArgument(
            f"payload must be bytes (an encoded message), got {type(payload).__name__}"
        )

    def _too_large(self, payload: bytes) -> MessageTooLarge:
        return MessageTooLarge(
            f"message payload is {len(payload)} bytes, over the {MAX_MESSAGE}-byte (64 MiB) "
            f"limit; it was not sent ({self.datagrams_for(len(payload))} datagrams)"
        )

    def _refuse(self, payload: bytes) -> None:
        raise TransportClosed("the reliable endpoint is closed")

    def _emit(self, data: bytes, dest: Address | None) -> None:
        self._out.append((data, dest))
        self.stats.datagrams_sent += 1
        self.stats.bytes_sent += len(data)

    def _collect(self, now: float) -> None:
        """Move closed datagrams from the packers to the output and the retention buffers."""
        self._collect_one(self._mc, now)
        for ob in self._touched:
            self._collect_one(ob, now)

    def _collect_one(self, ob: _Outbound, now: float) -> None:
        closed = ob.packer.take()
        if not closed:
            return
        if ob.start is None:
            # Datagrams a send call closed (a message bigger than the open datagram's
            # room) of a stream not flushed before: they carry age 0, it begins now.
            ob.start = now
        dest = ob.dest
        out = self._out
        size = 0
        for data in closed:
            out.append((data, dest))
            size += len(data)
        self._account(ob, closed, size, now)

    def _account(self, ob: _Outbound, closed: Sequence[Any], size: int, now: float) -> None:
        """Count, retain and note datagrams ``closed`` (``size`` bytes in all) of ``ob``
        that were just sent or handed out for sending."""
        packer = ob.packer
        stats = self.stats
        stats.datagrams_sent += len(closed)
        stats.bytes_sent += size
        stats.messages_sent += packer.msg_next - 1 - ob.counted
        ob.counted = packer.msg_next - 1
        if self.reliability > 0:
            retained = ob.retained
            if not retained:
                ob.low = packer.seq - len(closed) + 1
            if len(closed) == 1:
                retained.append((now, closed[0]))
            else:
                retained.extend([(now, data) for data in closed])
            self._retained_bytes += size
            if self._retained_bytes > self.max_retention:
                self._trim_retention(ob)
        ob.last_send = now
        self._dirty.add(ob)
        if self._probe_at is None:
            self._probe_at = now + self.tail_probe

    def _purge(self, ob: _Outbound, now: float) -> None:
        retained = ob.retained
        horizon = now - self.reliability
        freed = 0
        while retained and retained[0][0] < horizon:
            freed += len(retained.popleft()[1])
            ob.low += 1
        self._retained_bytes -= freed

    def _trim_retention(self, ob: _Outbound) -> None:
        """Over ``max_retention``: drop the oldest retained datagrams, of ``ob`` first."""
        over = self._retained_bytes - self.max_retention
        dropped = 0
        for cand in (ob, *self._out_by_id.values()):
            retained = cand.retained
            while over > 0 and retained:
                size = len(retained.popleft()[1])
                cand.low += 1
                over -= size
                self._retained_bytes -= size
                dropped += 1
            if over <= 0:
                break
        self.stats.retention_trimmed += dropped

    def retained_bytes(self) -> int:
        """Bytes currently kept for retransmission, over all outbound streams."""
        return self._retained_bytes

    def _entry(self, ob: _Outbound, now: float) -> tuple[Any, ...]:
        """The status of ``ob``: what is retained, what was sent, how old the stream is."""
        p = ob.packer
        flags = _E_NO_RETENTION if self._flags else 0
        if ob.retained:
            low = ob.low
            _, low_msg, low_cont = self.frame.data_info(ob.retained[0][1])
        else:
            low = p.seq + 1
            low_msg = p.head_msg
            low_cont = p.head_cont
        if low_cont:
            flags |= _E_LOW_CONT
        if p.head_cont:
            flags |= _E_NEXT_CONT
        if not ob.ptp and (
            now - ob.shared_at < self.peer_timeout or len(self._peers) > SHARED_PEERS
        ):
            flags |= _E_SHARED
        return (ob.stream_id, flags, _stream_age(ob, now), low, low_msg, p.seq, p.head_msg)

    def _heartbeat(self, ob: _Outbound, dest: Address | None, now: float) -> None:
        self._emit(self._build_hb(self.session_id, 0, [self._entry(ob, now)]), dest)
        self.stats.heartbeats_sent += 1

    def _probe(self, now: float) -> None:
        """Tail probe: a heartbeat on every stream that sent data since its last heartbeat."""
        self._probe_at = None
        self._collect(now)
        dirty = list(self._dirty)
        self._dirty.clear()
        for ob in dirty:
            self._heartbeat(ob, ob.dest, now)

    def _tick(self, now: float) -> None:
        """Periodic work: heartbeats, retention purge, forgetting silent peers and idle streams."""
        self._tick_at = now + self.heartbeat_interval
        self._probation_left = self.probation_naks
        self._collect(now)
        mc = self._mc
        self._purge(mc, now)
        self._heartbeat(mc, None, now)
        self._dirty.discard(mc)
        # Datagrams a send call closes (a message too big for the open datagram) carry
        # the age the packer was last given, as send calls take no time: keep it at
        # most one heartbeat old.
        if mc.start is not None:
            mc.packer.age_ms = _age_ms(now - mc.start)
        idle_after = self._ptp_hb_span + self.heartbeat_interval
        for dest, ob in list(self._ptp_out.items()):
            self._purge(ob, now)
            if ob.start is not None:
                ob.packer.age_ms = _age_ms(now - ob.start)
            idle = now - ob.last_send
            if idle <= self._ptp_hb_span:
                self._heartbeat(ob, dest, now)
                self._dirty.discard(ob)
            elif idle > idle_after and not ob.retained and not ob.packer.pending:
                del self._ptp_out[dest]
                del self._out_by_id[ob.stream_id]
                self._touched.discard(ob)
                self._dirty.discard(ob)
        for ob in self._out_by_id.values():
            if ob.holdoff:
                horizon = now - self._holdoff
                ob.holdoff = {k: t for k, t in ob.holdoff.items() if t >= horizon}
            if ob.askers or ob.grouped:
                horizon = now - self._share_window
                ob.askers = {k: a for k, a in ob.askers.items() if a[1] >= horizon}
                ob.grouped = {k: t for k, t in ob.grouped.items() if t >= horizon}
        self._housekeep_peers(now)

    def _on_nak(self, p: _Parsed, src: Address, now: float, confirmed: bool) -> None:
        _, requester, target, stream_id, ranges = p
        stats = self.stats
        ob = self._out_by_id.get(stream_id)
        if target != self.session_id or ob is None:
            stats.naks_ignored += 1
            return
        budget = self.retransmit_burst_bytes
        if not confirmed:
            # A requester nobody vouched for yet (its source address may be spoofed): its
            # NAKs share the new sources' budget, and each is served at most one datagram's
            # worth, so forged NAKs cannot turn this endpoint into an amplifier.
            if self._probation_left <= 0:
                stats.naks_deferred += 1
                return
            self._probation_left -= 1
            budget = min(budget, self.max_datagram)
        stats.naks_received += 1
        self._collect_one(ob, now)
        self._purge(ob, now)
        last = ob.packer.seq
        low = ob.low if ob.retained else last + 1
        retained = ob.retained
        route = self._repair_route
        allowance = self.max_nak_datagrams
        gone = sent = grouped = suppressed = resent_bytes = 0
        beyond = False
        for first, count in ranges:
            seq = first
            end = min(first + count, last + 1)
            if first + count > last + 1:
                beyond = True
            if seq < low:
                gone += min(end, low) - seq
                seq = low
            while seq < end and allowance > 0:
                allowance -= 1
                data = retained[seq - low][1]
                if budget < len(data) and sent:
                    allowance = 0
                    break
                dest = route(ob, src, seq, now, confirmed)
                if dest is _HOLD:
                    suppressed += 1
                else:
                    budget -= len(data)
                    self._emit(data, dest)
                    sent += 1
                    resent_bytes += len(data)
                    if dest is None:
                        grouped += 1
                seq += 1
            if allowance <= 0:
                break
        if beyond:
            stats.naks_ignored += 1
        if sent:
            stats.datagrams_retransmitted += sent
            stats.retransmissions_to_group += grouped
            stats.bytes_retransmitted += resent_bytes
            self._events.append(RetransmissionSent(src, ob.ptp, sent, requester))
        if suppressed:
            stats.retransmissions_suppressed += suppressed
            self._events.append(RetransmissionSuppressed(src, ob.ptp, suppressed, requester))
        if gone:
            stats.datagrams_lost_outbound += gone
            self._events.append(OutboundDataLoss(src, ob.ptp, gone, requester))
            self._heartbeat(ob, src, now)

    def _repair_route(
        self, ob: _Outbound, src: Address, seq: int, now: float, confirmed: bool
    ) -> Address | object | None:
        """Where a datagram ``src`` asked for is resent: to ``src``, to the group (None),
        or nowhere (_HOLD: it was resent there a moment ago).

        A loss one host suffers alone is repaired to that host only, so the others never
        see it. When a second host asks for the same datagram of the multicast stream
        (within ``nak_max_interval`` of the first), the loss is shared: it is resent once
        to the group, which serves every host that misses it. Requests for it in the
        next ``nak_interval`` crossed that copy on its way (a host whose NAK was due just
        before the copy arrived, or whose daemon is slow to read): they are held back.
        A request after that comes from a host that lost the group's copy too, and is
        answered to that host alone: a datagram goes to the group at most once per
        ``nak_max_interval``, however many requests keep coming (under overload, resends
        to the group must not breed the losses that ask for more of them). A requester
        nobody vouched for yet (``confirmed`` False) never causes a resend to the group.
        """
        if not ob.ptp:
            grouped = ob.grouped.get(seq)
            if grouped is not None:
                if now - grouped < self.nak_interval:
                    return _HOLD  # on its way to every host
            elif confirmed:
                first = ob.askers.get(seq)
                if first is None or now - first[1] >= self._share_window:
                    ob.askers[seq] = (src, now)
                elif first[0] != src:
                    ob.grouped[seq] = now
                    ob.shared_at = now
                    return None
        key = (src, seq)
        holdoff = ob.holdoff
        when = holdoff.get(key)
        if when is not None and now - when < self._holdoff:
            return _HOLD
        holdoff[key] = now
        return src

    # ---------------------------------------------------------- receiver helpers

    def _admit(self, session: int, src: Address, now: float) -> _Peer | None:
        """A new session: tracked (unconfirmed) if the tables have room, else None (counted)."""
        if self._unconfirmed >= self.max_new_peers or len(self._peers) >= self.max_peers:
            self.stats.peers_refused += 1
            return None
        peer = _Peer(session, src, now)
        self._peers[session] = peer
        self._addresses[src] = self._addresses.get(src, 0) + 1
        self._unconfirmed += 1
        self._events.append(PeerDiscovered(session, src))
        return peer

    def _open_stream(self, peer: _Peer, stream_id: int, now: float) -> _Inbound | None:
        """A new inbound stream of ``peer``, or None (counted) past ``max_streams_per_peer``."""
        if len(peer.streams) >= self.max_streams_per_peer:
            self.stats.streams_refused += 1
            return None
        return self._new_stream(peer, stream_id, now)

    def _joins_from_start(self, age_ms: int, now: float) -> bool:
        """Whether a stream first heard at this age began while we were listening."""
        age = age_ms / 1000.0
        return age <= now - self._created and age <= self.peer_timeout

    def _new_stream(self, peer: _Peer, stream_id: int, now: float) -> _Inbound:
        st = _Inbound(peer, stream_id, now)
        peer.streams[stream_id] = st
        return st

    def _on_data(self, peer: _Peer, st: _Inbound | None, p: _Parsed, size: int, now: float) -> None:
        stats = self.stats
        seq = p[3]
        opened = st is None
        span = now - st.last_activity if st is not None else 0.0
        if st is None:
            st = self._open_stream(peer, p[2], now)
            if st is None:
                return
            if not self._joins_from_start(p[5], now):
                # Joined mid-stream: start here; a leading continuation belongs to a
                # message that began before we listened, so it is skipped, not lost.
                st.next_seq = seq
                st.high = seq - 1
                st.next_msg = p[4] + (1 if p[7] == _K_MIDDLE or p[7] == _K_LAST else 0)
            span = p[5] / 1000.0
        if seq > st.high + 1 and not self._plausible(st, seq, p[4], span):
            if opened:
                del peer.streams[st.stream_id]
            return
        st.last_activity = now
        st.no_retention = p[6] & _F_NO_RETENTION
        if seq < st.next_seq or seq in st.buf:
            stats.duplicates += 1
            return
        gap_before = st.high >= st.next_seq
        if seq == st.next_seq:
            self._deliver(st, p)
            st.next_seq = seq + 1
            if seq > st.high:
                st.high = seq
            if st.buf or st.next_seq < st.gone_below:
                self._advance(st)
        else:
            if (
                len(st.buf) >= self.reorder_limit_datagrams
                or st.buf_bytes + size > self.reorder_limit_bytes
            ):
                stats.over_limit += 1
                return
            st.buf[seq] = (p, size)
            st.buf_bytes += size
            if seq > st.high:
                st.high = seq
        if gap_before and seq <= st.asked_high:
            # A hole we asked for was filled (a retransmission): ask again for what is
            # still missing once they stop arriving. A hole filled above what was asked
            # for is only reordering, and moves no NAK: under steady reordering a
            # postponed NAK would never be sent while the stream flows.
            st.nak_tries = 0
            st.nak_at = now + self._nak_wait(st)
        self._gap_check(st, now)

    def _gap_check(self, st: _Inbound, now: float) -> None:
        if st.high >= st.next_seq:
            if st.nak_at is None:
                st.nak_at = now + self._nak_wait(st)
                st.nak_tries = 0
            self._nak_streams.add(st)
        elif st.nak_at is not None:
            st.nak_at = None
            st.nak_tries = 0
            st.asked_high = 0
            self._nak_streams.discard(st)

    def _nak_wait(self, st: _Inbound) -> float:
        """How long a gap noticed now waits before its NAK: ``nak_delay``, plus on a
        multicast stream whose losses are shared (``st.spread``) a random share of
        ``nak_spread``.

        The share is drawn from a truncated exponential distribution on [0, 1), rate
        ln(max_peers) + 1: most hosts wait nearly the whole spread and a few ask early, so
        when k hosts miss the same datagram the expected number that ask before the
        repair reaches them stays near one whatever k (up to max_peers); a uniform draw
        would let it grow with k.
        """
        if not st.spread or not self.nak_spread:
            return self.nak_delay
        share = math.log1p(self._random() * self._spread_scale) / self._spread_rate
        return self.nak_delay + self.nak_spread * share

    def _deliver(self, st: _Inbound, p: _Parsed) -> None:
        """Deliver the messages datagram ``p`` completes (it is the next one in sequence)."""
        payloads = p[10]
        head = p[7]
        tail = p[8]
        n = len(payloads)
        first = 0
        stop = n
        done: list[bytes] = []
        if head in (_K_MIDDLE, _K_LAST):
            first = 1
            asm = st.asm
            if asm is not None:
                if not asm.add(payloads[0]):
                    self._lose_partial(st, "inconsistent")
                elif head == _K_LAST:
                    if asm.size == asm.total:
                        done.append(asm.result())
                        st.asm = None
                        st.next_msg += 1
                    else:
                        self._lose_partial(st, "inconsistent")
                elif asm.size >= asm.total:
                    self._lose_partial(st, "inconsistent")
            # else: the continuation of a message already counted lost (or begun
            # before we joined): nothing to deliver.
        elif st.asm is not None:
            self._lose_partial(st, "inconsistent")
        if tail == _K_FIRST:
            stop = n - 1
            st.asm = self._assembly(p[9], payloads[stop])
        if stop > first:
            wholes = payloads if (first == 0 and stop == n) else payloads[first:stop]
            st.next_msg += len(wholes)
            if done:
                done.extend(wholes)
            else:
                done = wholes
        if done:
            self.stats.messages_delivered += len(done)
            peer = st.peer
            self._events.append(Delivered(peer.session, peer.src, st.ptp, done))

    def _lose_partial(self, st: _Inbound, reason: str) -> None:
        """Drop the message being reassembled: its fragments cannot complete."""
        peer = st.peer
        self._events.append(
            InboundDataLoss(peer.session, peer.src, st.ptp, 1, 0, st.next_msg, reason)
        )
        self.stats.messages_lost_inbound += 1
        st.next_msg += 1
        st.asm = None

    def _advance(self, st: _Inbound) -> None:
        """Deliver buffered datagrams in order, skipping runs the sender said are gone."""
        buf = st.buf
        while True:
            seq = st.next_seq
            item = buf.pop(seq, None)
            if item is not None:
                st.buf_bytes -= item[1]
                self._deliver(st, item[0])
                st.next_seq = seq + 1
            elif seq < st.gone_below:
                self._skip(st)
            else:
                return

    def _skip(self, st: _Inbound) -> None:
        """Declare the missing run starting at next_seq lost, counting its messages exactly.

        The run ends at the next buffered datagram or at gone_below; the first
        record of that datagram tells which message index comes next, so the
        run carried exactly the messages between.
        """
        end = st.gone_below
        msg = st.gone_msg
        cont = st.gone_cont
        if st.buf:
            first = min(st.buf)
            if first <= end:
                end = first
                p = st.buf[first][0]
                msg = p[4]
                cont = p[7] == _K_MIDDLE or p[7] == _K_LAST
        datagrams = end - st.next_seq
        self._note_missed(st, st.next_seq, end - 1)
        lost = msg - st.next_msg + (1 if cont else 0)
        if lost < 0:
            lost = 0
        first_message = st.next_msg
        st.asm = None
        st.next_msg = max(st.next_msg, msg + (1 if cont else 0))
        st.next_seq = end
        stats = self.stats
        stats.datagrams_lost_inbound += datagrams
        stats.messages_lost_inbound += lost
        peer = st.peer
        self._events.append(
            InboundDataLoss(
                peer.session, peer.src, st.ptp, lost, datagrams, first_message, st.gone_reason
            )
        )

    def _set_gone(self, st: _Inbound, below: int, msg: int, cont: bool, reason: str) -> None:
        if below > st.gone_below:
            st.gone_below = below
            st.gone_msg = msg
            st.gone_cont = cont
            st.gone_reason = reason

    def _give_up(self, st: _Inbound, reason: str, *, tail: bool) -> None:
        """Stop waiting: everything missing below what we know of is lost; deliver the rest."""
        if tail and st.tail_seq:
            self._set_gone(st, st.tail_seq, st.tail_msg, st.tail_cont, reason)
        if st.buf:
            top = max(st.buf)
            p = st.buf[top][0]
            self._set_gone(st, top, p[4], p[7] == _K_MIDDLE or p[7] == _K_LAST, reason)
        st.gone_reason = reason
        self._advance(st)
        if tail and st.asm is not None:
            self._lose_partial(st, reason)

    def _on_heartbeat(self, peer: _Peer, p: _Parsed, now: float) -> None:
        _, _session, flags, entries = p
        self.stats.heartbeats_received += 1
        final = bool(flags & _HB_FINAL)
        for stream_id, eflags, age, low, low_msg, last, next_msg in entries:
            st = peer.streams.get(stream_id)
            opened = st is None
            if st is None:
                if final:
                    continue
                st = self._open_stream(peer, stream_id, now)
                if st is None:
                    continue
                if not self._joins_from_start(age, now):
                    # Joined mid-stream: the next datagram may open with the rest of a
                    # message that began before we listened; it is skipped, not lost.
                    st.next_seq = last + 1
                    st.high = last
                    st.next_msg = next_msg + (1 if eflags & _E_NEXT_CONT else 0)
            span = age / 1000.0 if opened else now - st.last_activity
            if not self._plausible_entry(st, low, low_msg, last + 1, next_msg, span):
                if opened:
                    del peer.streams[stream_id]
                continue
            st.last_activity = now
            no_retention = bool(eflags & _E_NO_RETENTION)
            st.no_retention = no_retention
            st.spread = not st.ptp and bool(eflags & _E_SHARED)
            if last > st.high:
                st.high = last
            if last + 1 > st.tail_seq:
                st.tail_seq = last + 1
                st.tail_msg = next_msg
                st.tail_cont = bool(eflags & _E_NEXT_CONT)
            if final:
                self._give_up(st, "sender-closed", tail=True)
            else:
                reason = "no-retention" if no_retention else "retention"
                self._set_gone(st, low, low_msg, bool(eflags & _E_LOW_CONT), reason)
                if st.next_seq < st.gone_below:
                    self._advance(st)
            self._gap_check(st, now)
        if final:
            peer.closing = True

    def _plausible(self, st: _Inbound, seq: int, msg: int, span: float) -> bool:
        """Whether stream ``st`` can have reached datagram ``seq`` (its first message
        ``msg``) ``span`` seconds after we last heard it (or after it began, for a new
        one): at most PLAUSIBLE_RATE datagrams per second, and no more messages than
        those datagrams can carry. False is counted in ``stats.implausible``."""
        ahead = seq - st.high
        if ahead <= PLAUSIBLE_RATE * (max(span, 0.0) + PLAUSIBLE_SLACK) and (
            msg - st.next_msg <= (seq - st.next_seq + 1) * _MAX_RECORDS
        ):
            return True
        self.stats.implausible += 1
        return False

    def _plausible_entry(
        self, st: _Inbound, low: int, low_msg: int, after: int, next_msg: int, span: float
    ) -> bool:
        """:meth:`_plausible` for a heartbeat's claims: its stream ends before ``after``
        (message ``next_msg`` next), and everything below ``low`` (message ``low_msg``)
        is gone; the low mark cannot pass the end."""
        if low > after or low_msg > next_msg:
            self.stats.implausible += 1
            return False
        if after <= st.high + 1:
            return True  # nothing new claimed
        return self._plausible(st, after, next_msg, span)

    def _nak_due(self, st: _Inbound, now: float) -> None:
        if st.high < st.next_seq:
            self._gap_check(st, now)
            return
        peer = st.peer
        if st.no_retention:
            # The sender keeps nothing: waiting nak_delay was only for reordering.
            self._give_up(st, "no-retention", tail=False)
            if st.high < st.next_seq:
                self._gap_check(st, now)
                return
            self._backoff(st, now)
            return
        if not peer.confirmed:
            if self._probation_left <= 0:
                # New sources have spent this interval's requests: wait for the next one.
                self.stats.naks_deferred += 1
                st.nak_at = max(self._tick_at, now + self.nak_interval)
                missing = st.high - st.next_seq + 1 - len(st.buf)
                self._events.append(
                    RetransmissionNotRequested(peer.session, peer.src, st.ptp, missing)
                )
                return
            self._probation_left -= 1
        ranges: list[tuple[int, int]] = []
        total = 0
        limit = self.max_nak_datagrams
        buf = st.buf
        seq = st.next_seq
        high = st.high
        while seq <= high and total < limit and len(ranges) < self._nak_ranges:
            if seq in buf:
                seq += 1
                continue
            start = seq
            while seq <= high and total < limit and seq not in buf:
                seq += 1
                total += 1
            ranges.append((start, seq - start))
            self._note_missed(st, start, seq - 1)
        st.asked_high = seq - 1
        data = self._build_nak(self.session_id, peer.session, st.stream_id, ranges)
        self._emit(data, peer.src)
        self.stats.naks_sent += 1
        self._events.append(RetransmissionRequested(peer.session, peer.src, st.ptp, total))
        self._backoff(st, now)

    def _note_missed(self, st: _Inbound, first: int, last: int) -> None:
        """Count datagrams first..last as missed, each once: when first asked for or given up."""
        if last > st.noted:
            self.stats.datagrams_missed += last - max(first, st.noted + 1) + 1
            st.noted = last

    def _backoff(self, st: _Inbound, now: float) -> None:
        st.nak_tries += 1
        st.nak_at = now + min(
            self.nak_interval * (2 ** min(st.nak_tries - 1, 30)), self.nak_max_interval
        )

    def _housekeep_peers(self, now: float) -> None:
        horizon = now - self.peer_timeout
        stream_idle = now - 3 * self.peer_timeout
        for session, peer in list(self._peers.items()):
            if peer.closing or peer.last_heard < horizon:
                reason = "closed" if peer.closing else "timeout"
                loss_reason = "sender-closed" if peer.closing else "sender-silent"
                for st in peer.streams.values():
                    self._give_up(st, loss_reason, tail=True)
                    self._nak_streams.discard(st)
                del self._peers[session]
                if not peer.confirmed:
                    self._unconfirmed -= 1
                left = self._addresses.pop(peer.src, 1) - 1
                if left > 0:
                    self._addresses[peer.src] = left
                self._events.append(PeerSilent(session, peer.src, reason))
                continue
            for stream_id, st in list(peer.streams.items()):
                if st.ptp and st.last_activity < stream_idle:
                    self._give_up(st, "sender-silent", tail=True)
                    self._nak_streams.discard(st)
                    del peer.streams[stream_id]
