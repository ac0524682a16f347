"""The listening half of a correspondent: discovery, registration, ordering, confirmation.

For every (sender, subject) it hears labeled messages from, the listener
keeps a *source*:

* ``idle``: known from the ledger (a previous instance had an agreement) but
  not yet heard in this one;
* ``pending``: a registration request is out; inbound messages are held;
* ``certified``: messages are delivered strictly in sequence order with their
  sequence number; a gap holds later messages and asks the sender to resend
  the missing ones; consumed messages are confirmed cumulatively, never past
  one the application has not finished with;
* ``uncertified``: the sender refused, removed us, or never answered;
  messages are delivered as they come, without sequence numbers.

Held messages that turn out to precede the agreement (the one that caused
discovery, typically) are delivered uncertified, in order, when the sender's
acceptance arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from rvasync.errors import InvalidArgument
from rvasync.protocol.cm import advisories as adv
from rvasync.protocol.cm.context import Context
from rvasync.protocol.cm.ledger import Source, SourceConfirmed, SourceDone, SourceRemoved
from rvasync.protocol.cm.names import check_listen_pattern, check_sequence
from rvasync.protocol.cm.outputs import Deliver
from rvasync.protocol.cm.records import (
    Cancel,
    Confirm,
    ConfirmRequest,
    DataRecord,
    Invite,
    NotCertified,
    RegisterReply,
    RegisterRequest,
    RetransmitRequest,
    Unavailable,
)
from rvasync.subjects import SubjectIndex, subject_matches

__all__ = ["ListenerHalf", "SourceReview"]

IDLE = "idle"
PENDING = "pending"
CERTIFIED = "certified"
UNCERTIFIED = "uncertified"

# At most this many retransmission requests (missing ranges) go out per source at once.
_MAX_RANGES_PER_REQUEST = 32
# Subjects whose covering listener ids are remembered (the cache restarts when full).
_IDS_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class SourceReview:
    """Listener-side view of one (sender, subject), for inspection and tests."""

    sender: str
    subject: str
    status: str
    confirmed: int
    expected: int
    held: int
    unconfirmed_deliveries: int


@dataclass(slots=True)
class _CmListener:
    pattern: str
    explicit_confirm: bool


@dataclass(slots=True)
class _Source:
    sender: str
    subject: str
    address: str
    confirmed: int
    status: str = IDLE
    why: str = ""
    registering: bool = False
    quiet: bool = False  # a resumption attempt that gives up silently, back to idle
    attempts: int = 0
    reg_deadline: float | None = None
    gap_deadline: float | None = None
    expected: int = 1
    last_seen: int = 0
    # sequence -> record, or None for a sequence the sender reported unavailable
    held: dict[int, DataRecord | None] = field(default_factory=dict)
    # delivered certified sequence -> ids of listeners that have not yet consumed it
    pending: dict[int, set[int]] = field(default_factory=dict)
    # consumed (or reported gone) above ``confirmed``, waiting for the gap below
    done: set[int] = field(default_factory=set)
    # the part of ``done`` the ledger holds (SourceDone): skipped when sent again
    recorded: set[int] = field(default_factory=set)
    seen: set[int] = field(default_factory=set)
    seen_order: deque[int] = field(default_factory=deque)
    highest_uncertified: int = 0
    # Sequences strictly between these two were sent before the agreement (and
    # after what an earlier instance confirmed): one arriving after the
    # registration reply is delivered uncertified, as it would have been before.
    late_low: int = 0
    late_high: int = 0


class ListenerHalf:
    """Inbound certified delivery for one correspondent (driven by ``CmCorrespondent``)."""

    def __init__(self, ctx: Context, require_old: bool) -> None:
        self._ctx = ctx
        self._require_old = require_old
        self._listeners: dict[int, _CmListener] = {}
        self._index: SubjectIndex[int] = SubjectIndex()
        self._ids_cache: dict[str, tuple[int, ...]] = {}
        self._next_id = 1
        self._sources: dict[tuple[str, str], _Source] = {}
        for (sender, subject), state in ctx.ledger.sources.items():
            self._sources[(sender, subject)] = _Source(
                sender,
                subject,
                state.address,
                state.confirmed,
                expected=state.confirmed + 1,
                done=set(state.done),
                recorded=set(state.done),
            )
            if state.address:
                ctx.peers.setdefault(sender, state.address)

    # --- listeners ----------------------------------------------------------------------

    def listen(self, pattern: str, explicit_confirm: bool, now: float) -> int:
        """Open a CM listener; agreements a previous instance left in the ledger resume now.

        Waiting for the sender's next message would stall when the sender has
        nothing new to say and keeps asking our previous instance's address
        for confirmations; so known senders are asked at once (quietly: if
        they do not answer, the source waits for their next message).
        """
        check_listen_pattern(pattern)
        listener_id = self._next_id
        self._next_id += 1
        self._listeners[listener_id] = _CmListener(pattern, bool(explicit_confirm))
        self._index.add(pattern, listener_id)
        self._ids_cache.clear()
        if not self._ctx.standby:
            self.resume(pattern, now)
        return listener_id

    def resume(self, pattern: str, now: float) -> None:
        """Ask the senders of the idle sources ``pattern`` covers to resume (quietly)."""
        for src in self._sources.values():
            if src.status == IDLE and src.address and subject_matches(pattern, src.subject):
                self._register(src, now)
                src.quiet = True

    def resume_all(self, now: float) -> None:
        """This instance takes the name over (a collision ended): resume every open listener."""
        for listener in self._listeners.values():
            self.resume(listener.pattern, now)

    def _check_listener(self, listener_id: object) -> _CmListener:
        if isinstance(listener_id, bool) or not isinstance(listener_id, int):
            raise InvalidArgument(f"listener_id must be an int, not {type(listener_id).__name__}")
        listener = self._listeners.get(listener_id)
        if listener is None:
            raise InvalidArgument(f"no open CM listener has id {listener_id}")
        return listener

    def listener_ids(self, subject: str) -> tuple[int, ...]:
        """Ids of the open listeners covering ``subject``, ascending (cached per subject)."""
        ids = self._ids_cache.get(subject)
        if ids is None:
            if len(self._ids_cache) >= _IDS_CACHE_SIZE:
                self._ids_cache.clear()
            ids = self._ids_cache[subject] = tuple(sorted(self._index.match(subject)))
        return ids

    def close(self, listener_id: int, cancel_agreements: bool, now: float) -> None:
        """Close a CM listener; with ``cancel_agreements``, end agreements nobody else needs.

        Deliveries it had not consumed count as consumed when another listener
        still covers the subject (this one simply dropped its copy). When none
        does, the agreement either ends (``cancel_agreements``: the sender is
        told, and presents REGISTRATION.CLOSED) or stands, in which case the
        unconfirmed messages are forgotten here so that the sender, which
        still stores them, redelivers them to a later listener.
        """
        listener = self._check_listener(listener_id)
        del self._listeners[listener_id]
        self._index.remove(listener.pattern, listener_id)
        self._ids_cache.clear()
        ctx = self._ctx
        for key, src in list(self._sources.items()):
            if not subject_matches(listener.pattern, src.subject):
                continue
            if self._index.match(src.subject):
                for seq in [s for s, ids in src.pending.items() if listener_id in ids]:
                    ids = src.pending[seq]
                    ids.discard(listener_id)
                    if not ids:
                        del src.pending[seq]
                        src.done.add(seq)
                self._advance_confirmed(src)
            elif cancel_agreements:
                # An idle source is an agreement a previous instance made: the
                # sender still stores for us, so it is cancelled too.
                refused = src.status == UNCERTIFIED and src.why in ("removed", "disallowed")
                if src.address and not refused:
                    ctx.send_to(
                        src.address,
                        Cancel(origin=ctx.name, address=ctx.address, subject=src.subject),
                    )
                if key in ctx.ledger.sources:
                    ctx.record(SourceRemoved(sender=src.sender, subject=src.subject))
                del self._sources[key]
            else:
                # What the application consumed stays consumed (skipped when the
                # sender sends it again); what it had not is delivered again.
                src.pending.clear()
                src.held.clear()
                src.gap_deadline = None
                if src.status == CERTIFIED:
                    src.expected = src.confirmed + 1

    # --- delivery -------------------------------------------------------------------------

    def _deliver(self, rec: DataRecord, sequence: int | None) -> list[int]:
        ids = self.listener_ids(rec.subject)
        deliver = self._ctx.deliver
        subject, origin, time_limit, payload = rec.subject, rec.origin, rec.time_limit, rec.payload
        for listener_id in ids:
            deliver(Deliver(listener_id, subject, origin, sequence, time_limit, payload))
        return list(ids)

    def deliver_plain(self, subject: str, payload: bytes) -> int:
        """An unlabeled message (from an ordinary transport) on ``subject``."""
        ids = self.listener_ids(subject)
        for listener_id in ids:
            self._ctx.deliver(Deliver(listener_id, subject, None, None, 0.0, payload))
        return len(ids)

    def deliver_own(self, rec: DataRecord) -> None:
        """A labeled message this correspondent sent itself: delivered uncertified."""
        self._deliver(rec, None)

    def deliver_stray(self, rec: DataRecord) -> None:
        """A labeled message delivered without making an agreement (standing by, ledger full)."""
        if not rec.retransmit:
            self._deliver(rec, None)

    def _deliver_uncertified(self, src: _Source, rec: DataRecord) -> None:
        seq = rec.sequence
        if seq in src.seen:
            return
        src.seen.add(seq)
        src.seen_order.append(seq)
        if len(src.seen_order) > self._ctx.timing.duplicate_window:
            src.seen.discard(src.seen_order.popleft())
        src.highest_uncertified = max(src.highest_uncertified, seq)
        self._deliver(rec, None)

    def _release_held_uncertified(self, src: _Source, below: int | None = None) -> None:
        for seq in sorted(src.held):
            if below is not None and seq >= below:
                break
            rec = src.held.pop(seq)
            if rec is not None:
                self._deliver_uncertified(src, rec)

    def _deliver_certified(self, src: _Source, rec: DataRecord) -> None:
        ids = self._deliver(rec, rec.sequence)
        if ids:
            src.pending[rec.sequence] = set(ids)
        else:
            src.done.add(rec.sequence)

    def _drain(self, src: _Source) -> None:
        """Deliver every held message that is next in sequence, reporting gone ones first."""
        run_start: int | None = None
        while src.expected in src.held:
            seq = src.expected
            rec = src.held.pop(seq)
            src.expected += 1
            if seq in src.done:
                continue  # consumed by this name before (the ledger says so): not again
            if rec is None:
                if run_start is None:
                    run_start = seq
                src.done.add(seq)
                continue
            if run_start is not None:
                self._ctx.advise(
                    adv.delivery_unavailable(src.subject, run_start, seq - 1, src.sender)
                )
                run_start = None
            self._deliver_certified(src, rec)
        if run_start is not None:
            self._ctx.advise(
                adv.delivery_unavailable(src.subject, run_start, src.expected - 1, src.sender)
            )
        self._advance_confirmed(src)

    def _advance_confirmed(self, src: _Source) -> None:
        if src.status != CERTIFIED:
            return
        confirmed = src.confirmed
        while confirmed + 1 in src.done:
            confirmed += 1
            src.done.discard(confirmed)
        if src.done:
            self._record_done(src, confirmed)
        if confirmed > src.confirmed:
            src.confirmed = confirmed
            if src.recorded:
                src.recorded = {seq for seq in src.recorded if seq > confirmed}
            ctx = self._ctx
            ctx.record(SourceConfirmed(sender=src.sender, subject=src.subject, sequence=confirmed))
            if src.address:
                ctx.send_to(
                    src.address,
                    Confirm(
                        origin=ctx.name,
                        address=ctx.address,
                        subject=src.subject,
                        sequence=confirmed,
                    ),
                )

    def _record_done(self, src: _Source, confirmed: int) -> None:
        """Record what was consumed above a gap, so a restart does not deliver it again."""
        ctx = self._ctx
        for seq in sorted(src.done - src.recorded):
            if seq > confirmed:
                ctx.record(SourceDone(sender=src.sender, subject=src.subject, sequence=seq))
                src.recorded.add(seq)

    def confirm(self, listener_id: int, sender: str, subject: str, sequence: int | None) -> bool:
        """The consumer behind ``listener_id`` is done with message ``sequence``.

        Returns True if that settled a pending delivery; False for an
        uncertified message (``sequence`` None), a repeat, or a message this
        listener was not given (nothing to do in each case).
        """
        return self.confirm_many(((listener_id, sender, subject, sequence),)) > 0

    def confirm_many(self, items: Iterable[tuple[int, str, str, int | None]]) -> int:
        """:meth:`confirm` for many ``(listener_id, sender, subject, sequence)`` at once.

        Each source then advances (one ledger record, one confirmation to its
        sender) once for the whole batch instead of once per message, which is
        what lets a driver confirm at the rate messages are consumed. Returns
        how many deliveries were settled.
        """
        touched: dict[int, _Source] = {}
        settled = 0
        listeners = self._listeners
        sources = self._sources
        for listener_id, sender, subject, sequence in items:
            # Exact types first: this runs once per message consumed; the
            # checks raise for anything else that is wrong.
            if listener_id.__class__ is not int or listener_id not in listeners:
                self._check_listener(listener_id)
            if sequence is None:
                continue
            if sequence.__class__ is not int or sequence < 1:
                check_sequence(sequence)
            src = sources.get((sender, subject))
            if src is None or src.status != CERTIFIED:
                continue
            ids = src.pending.get(sequence)
            if ids is None or listener_id not in ids:
                continue  # uncertified, a repeat, or not given to this listener
            ids.discard(listener_id)
            if not ids:
                del src.pending[sequence]
                src.done.add(sequence)
            settled += 1
            touched[id(src)] = src
        for src in touched.values():
            self._advance_confirmed(src)
        return settled

    # --- gaps -------------------------------------------------------------------------------

    def _missing_ranges(self, src: _Source) -> list[tuple[int, int]]:
        ranges: list[tuple[int, int]] = []
        cursor = src.expected
        for seq in sorted(s for s in src.held if s >= cursor):
            if seq > cursor:
                ranges.append((cursor, seq - 1))
                if len(ranges) >= _MAX_RANGES_PER_REQUEST:
                    return ranges
            cursor = seq + 1
        if cursor <= src.last_seen:
            ranges.append((cursor, src.last_seen))
        return ranges

    def _request_missing(self, src: _Source, now: float) -> None:
        ctx = self._ctx
        if src.status != CERTIFIED or src.expected > src.last_seen or not src.address:
            src.gap_deadline = None
            return
        if not self._index.match(src.subject):
            src.gap_deadline = None
            return
        for first, last in self._missing_ranges(src):
            ctx.send_to(
                src.address,
                RetransmitRequest(
                    origin=ctx.name,
                    address=ctx.address,
                    subject=src.subject,
                    first=first,
                    last=last,
                ),
            )
        src.gap_deadline = now + ctx.timing.retransmit_interval

    def _after_progress(self, src: _Source, now: float) -> None:
        """Keep the gap timer in step: ask at once for a new gap, stop when none is left."""
        if src.expected > src.last_seen:
            src.gap_deadline = None
        elif src.gap_deadline is None:
            self._request_missing(src, now)

    # --- registration -------------------------------------------------------------------------

    def _register(self, src: _Source, now: float, heard: int = 0) -> None:
        """Ask ``src``'s sender to certify to us; ``heard``: the sequence of the live
        labeled message that made us ask (held from now on), 0 if none."""
        ctx = self._ctx
        if src.status != CERTIFIED:
            src.status = PENDING
            src.why = ""
        src.registering = True
        src.quiet = False
        src.attempts = 1
        src.reg_deadline = now + ctx.timing.register_retry_interval
        self._send_request(src, heard)

    def _send_request(self, src: _Source, heard: int = 0) -> None:
        ctx = self._ctx
        # The live stream heard while registering is held: the sender need not push it
        # (a retransmission says nothing of where the stream is).
        live = [seq for seq, rec in src.held.items() if rec is not None and not rec.retransmit]
        if heard:
            live.append(heard)
        held = min(live) if live else 0
        ctx.send_to(
            src.address,
            RegisterRequest(
                origin=ctx.name,
                address=ctx.address,
                subject=src.subject,
                require_old=self._require_old,
                last_confirmed=src.confirmed,
                held_from=held,
            ),
        )

    def on_data(self, rec: DataRecord, now: float) -> None:
        if not self.deliver_next(
            rec.origin, rec.subject, rec.sequence, rec.time_limit, rec.payload, now
        ):
            self._on_data(rec, now)

    def deliver_next(
        self, origin: str, subject: str, seq: int, time_limit: float, payload: bytes, now: float
    ) -> bool:
        """:meth:`on_data` for the usual case, from the labeled message's parts.

        Handles a message nobody listens to, and the next message in sequence
        of a certified source with nothing held, which is delivered at once
        (the source's confirmed count cannot move: the delivery is pending
        with every listener, so it is not advanced). Returns False, having
        done nothing, for every other case.
        """
        ids = self._ids_cache.get(subject)
        if ids is None:
            ids = self.listener_ids(subject)
        if not ids:
            return True
        src = self._sources.get((origin, subject))
        if src is None or src.status != CERTIFIED or src.held or seq != src.expected:
            return False
        if src.done and seq in src.done:
            return False
        src.expected = seq + 1
        deliver = self._ctx.deliver
        for listener_id in ids:
            deliver(Deliver(listener_id, subject, origin, seq, time_limit, payload))
        src.pending[seq] = set(ids)
        if seq >= src.last_seen:
            src.last_seen = seq
            src.gap_deadline = None  # caught up
        elif src.gap_deadline is None:
            self._request_missing(src, now)
        return True

    def _on_data(self, rec: DataRecord, now: float) -> None:
        """:meth:`on_data` for every case :meth:`deliver_next` leaves."""
        ctx = self._ctx
        key = (rec.origin, rec.subject)
        src = self._sources.get(key)
        if src is None:
            if not ctx.ledger_writable:
                # An agreement the ledger could not record is not made: the
                # message is delivered uncertified, as from an ordinary sender.
                self.deliver_stray(rec)
                return
            src = self._sources[key] = _Source(rec.origin, rec.subject, rec.address, 0)
            ctx.advise(adv.registration_discovery(rec.subject, rec.origin))
            ctx.record(
                Source(sender=rec.origin, subject=rec.subject, address=rec.address, confirmed=0)
            )
        seq = rec.sequence
        if src.status == IDLE:
            src.address = rec.address
            self._register(src, now, heard=0 if rec.retransmit else seq)
        if src.status == PENDING:
            src.last_seen = max(src.last_seen, seq)
            if seq not in src.held and seq not in src.seen:
                src.held[seq] = rec
        elif src.status == UNCERTIFIED:
            self._deliver_uncertified(src, rec)
        else:
            if seq > src.last_seen:
                src.last_seen = seq
            if seq < src.expected or seq in src.held:
                if src.late_low < seq < src.late_high:
                    # Sent before the agreement, overtaken by the registration
                    # reply: still a message this listener never had.
                    self._deliver_uncertified(src, rec)
                return
            src.held[seq] = rec
            self._drain(src)
            self._after_progress(src, now)

    def _source_or_cancel(self, rec: RegisterReply | ConfirmRequest) -> _Source | None:
        """The source ``rec`` is about; if there is none, tell its sender we have no agreement."""
        src = self._sources.get((rec.origin, rec.subject))
        if src is None:
            ctx = self._ctx
            ctx.send_to(
                rec.address, Cancel(origin=ctx.name, address=ctx.address, subject=rec.subject)
            )
        return src

    def _for_another_instance(self, rec: RegisterReply | NotCertified) -> bool:
        """``rec`` answers a record of another instance of our name (a dead predecessor's).

        Such answers reach us because every instance receives on the name's
        route, and a relay agent stores them while the name is away. Taken
        for our own, an acceptance sent to a predecessor would restart our
        agreement where that predecessor stood, below what our ledger has
        confirmed since; our own request gets its own answer.
        """
        return bool(rec.to) and rec.to != self._ctx.address

    def on_reply(self, rec: RegisterReply, now: float) -> None:
        ctx = self._ctx
        if self._for_another_instance(rec):
            return
        src = self._source_or_cancel(rec)
        if src is None:
            return
        late = src.status == UNCERTIFIED and src.why == "no_response"
        if not (src.registering or late):
            return
        src.registering = False
        src.reg_deadline = None
        src.attempts = 0
        begin = rec.begin
        if rec.resumed and src.status == CERTIFIED:
            src.expected = max(src.expected, begin)
            src.confirmed = max(src.confirmed, begin - 1)
        else:
            if src.status == CERTIFIED:
                # The sender started over (it lost its state): so do we.
                src.pending.clear()
                src.done.clear()
            # Held messages we (an earlier instance) already confirmed are
            # duplicates; others before the agreement arrive uncertified.
            src.late_low, src.late_high = src.confirmed, begin
            for seq in [s for s in src.held if s <= src.confirmed]:
                del src.held[seq]
            self._release_held_uncertified(src, below=begin)
            # A resumed agreement keeps its numbering: what an earlier
            # instance confirmed (our ledger says so) stays confirmed, even
            # if the sender had not heard of it when it answered.
            floor = src.confirmed + 1 if rec.resumed else 1
            src.expected = max(begin, src.highest_uncertified + 1, floor)
            src.confirmed = src.expected - 1
            src.done = {s for s in src.done if s > src.confirmed}
            src.pending = {s: ids for s, ids in src.pending.items() if s > src.confirmed}
        for seq in [s for s in src.held if s < src.expected]:
            del src.held[seq]
        src.status = CERTIFIED
        src.why = ""
        src.address = rec.address
        src.last_seen = max(src.last_seen, rec.last_sent)
        ctx.record(
            Source(
                sender=src.sender, subject=src.subject, address=src.address, confirmed=src.confirmed
            )
        )
        ctx.advise(adv.registration_certified(src.subject, src.sender, begin))
        if src.confirmed >= begin:
            ctx.send_to(
                src.address,
                Confirm(
                    origin=ctx.name,
                    address=ctx.address,
                    subject=src.subject,
                    sequence=src.confirmed,
                ),
            )
        self._drain(src)
        # The sender pushes what we are owed; ask ourselves only if it does not arrive.
        if src.expected <= src.last_seen:
            src.gap_deadline = now + ctx.timing.retransmit_interval
        else:
            src.gap_deadline = None

    def on_not_certified(self, rec: NotCertified, now: float) -> None:
        ctx = self._ctx
        if self._for_another_instance(rec):
            return
        src = self._sources.get((rec.origin, rec.subject))
        if src is None or src.status == IDLE:
            return
        if src.status == UNCERTIFIED and src.why in ("removed", "disallowed"):
            return
        if src.registering and not rec.disallowed:
            # A sender answers a registration request by accepting it or, when
            # it disallows us, with a refusal; any other "not certified" crossed
            # our request (a restarted sender that did not know us yet, answering
            # an older confirmation). The answer to the request decides.
            return
        was = src.status
        ctx.advise(adv.registration_not_certified(src.subject, src.sender))
        if was == PENDING and rec.disallowed:
            src.held.clear()  # a disallowed listener does not get the triggering message
        else:
            self._release_held_uncertified(src)
        src.held.clear()
        src.pending.clear()
        src.done.clear()
        src.status = UNCERTIFIED
        src.why = "disallowed" if rec.disallowed else "removed"
        src.registering = False
        src.reg_deadline = None
        src.gap_deadline = None
        if (src.sender, src.subject) in ctx.ledger.sources:
            ctx.record(SourceRemoved(sender=src.sender, subject=src.subject))

    def on_confirm_request(self, rec: ConfirmRequest, now: float) -> None:
        ctx = self._ctx
        if (
            self._require_old
            and (rec.origin, rec.subject) not in self._sources
            and self._index.match(rec.subject)
        ):
            self._adopt(rec, now)
            return
        src = self._source_or_cancel(rec)
        if src is None:
            return
        covered = bool(self._index.match(src.subject))
        if src.status == IDLE or (src.status == UNCERTIFIED and src.why == "no_response"):
            if covered:
                src.address = rec.address
                self._register(src, now)
            return
        if src.status == PENDING:
            self._send_request(src)
            return
        if src.status != CERTIFIED:
            return
        src.last_seen = max(src.last_seen, rec.last_sent)
        ctx.send_to(
            src.address,
            Confirm(
                origin=ctx.name, address=ctx.address, subject=src.subject, sequence=src.confirmed
            ),
        )
        if src.expected <= src.last_seen:
            self._request_missing(src, now)

    def _adopt(self, rec: ConfirmRequest | Invite, now: float) -> None:
        """Take over an agreement an earlier instance of this name made, instead of cancelling it.

        A listener that requires old messages (a distributed queue's new
        scheduler, a restarted process-ledger correspondent) registers with
        the sender that asks it to confirm; the sender then resumes where the
        earlier instance stopped and retransmits what it had not confirmed.
        """
        ctx = self._ctx
        if not ctx.ledger_writable:
            return  # asked again later; an agreement needs the ledger
        src = self._sources[rec.origin, rec.subject] = _Source(
            rec.origin, rec.subject, rec.address, 0
        )
        ctx.advise(adv.registration_discovery(rec.subject, rec.origin))
        ctx.record(Source(sender=rec.origin, subject=rec.subject, address=rec.address, confirmed=0))
        self._register(src, now)

    def on_unavailable(self, rec: Unavailable, now: float) -> None:
        src = self._sources.get((rec.origin, rec.subject))
        if src is None or src.status != CERTIFIED:
            return
        # The sender only reports ranges we asked for, all at or below last_seen.
        for seq in range(max(rec.first, src.expected), min(rec.last, src.last_seen) + 1):
            src.held.setdefault(seq, None)
        self._drain(src)
        self._after_progress(src, now)

    def on_invite(self, rec: Invite, now: float) -> None:
        src = self._sources.get((rec.origin, rec.subject))
        if src is None and self._require_old and self._index.match(rec.subject):
            # A sender keeps messages for this name (an earlier instance's, or
            # anticipated): take them over, as a confirmation request would.
            self._adopt(rec, now)
            return
        if src is None or src.status != UNCERTIFIED or not self._index.match(src.subject):
            return
        src.address = rec.address
        self._register(src, now)

    def peer_moved(self, name: str, address: str, now: float) -> None:
        """Sender ``name`` now speaks from ``address``: re-establish our agreements with it."""
        ctx = self._ctx
        for src in self._sources.values():
            if src.sender != name:
                continue
            src.address = address
            if (src.sender, src.subject) in ctx.ledger.sources:
                ctx.record(
                    Source(
                        sender=src.sender,
                        subject=src.subject,
                        address=address,
                        confirmed=src.confirmed,
                    )
                )
            if src.status != IDLE and self._index.match(src.subject):
                self._register(src, now)

    # --- time ----------------------------------------------------------------------------------

    def handle_timer(self, now: float) -> None:
        ctx = self._ctx
        for src in list(self._sources.values()):
            if src.reg_deadline is not None and src.reg_deadline <= now:
                if src.attempts < ctx.timing.register_attempts:
                    src.attempts += 1
                    src.reg_deadline = now + ctx.timing.register_retry_interval
                    self._send_request(src)
                elif src.quiet and src.status == PENDING:
                    src.registering = False
                    src.reg_deadline = None
                    src.status = IDLE
                    src.held.clear()  # the next message restarts registration
                else:
                    src.registering = False
                    src.reg_deadline = None
                    ctx.advise(adv.registration_no_response(src.subject, src.sender))
                    if src.status == PENDING:
                        src.status = UNCERTIFIED
                        src.why = "no_response"
                        self._release_held_uncertified(src)
            if src.gap_deadline is not None and src.gap_deadline <= now:
                self._request_missing(src, now)

    def next_deadline(self) -> float | None:
        best: float | None = None
        for src in self._sources.values():
            for when in (src.reg_deadline, src.gap_deadline):
                if when is not None and (best is None or when < best):
                    best = when
        return best

    def review(self) -> list[SourceReview]:
        return [
            SourceReview(
                sender=src.sender,
                subject=src.subject,
                status=src.status,
                confirmed=src.confirmed,
                expected=src.expected,
                held=sum(1 for r in src.held.values() if r is not None),
                unconfirmed_deliveries=len(src.pending),
            )
            for src in sorted(self._sources.values(), key=lambda s: (s.sender, s.subject))
        ]
