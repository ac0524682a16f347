"""The sending half of a correspondent: sequencing, storage, agreements, confirmations.

Every message gets the next sequence number of its subject. While at least
one listener is registered on the subject the message is stored (in the
ledger) until each registered listener has confirmed it (DELIVERY.CONFIRM per
listener, then DELIVERY.COMPLETE) or its time limit passes (DELIVERY.FAILED
naming the listeners still missing). A listener that leaves messages
unconfirmed for a while is asked to confirm (DELIVERY.NO_RESPONSE); a
listener missing messages asks for them and gets them point-to-point, or an
``Unavailable`` record for the ones that are gone.

Which listeners still need message ``n`` is not stored per message: it is
every registration with ``begin <= n`` and ``confirmed < n``. That keeps the
ledger to one record per message, one per confirmation and one per removal.

Sequence numbers are reserved in blocks ahead of use
(:mod:`~rvasync.protocol.cm.reservations`), and :class:`SendResult.hold_lsn`
tells the driver when a number is not yet covered by a durable record: a
number the program was given is never given again after a restart. Replies to inboxes
(unique to their transport, never reused) take no ledger space at all
unless a listener registered on the inbox, and then only until their
messages are resolved.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.protocol.cm import advisories as adv
from rvasync.protocol.cm.context import Context
from rvasync.protocol.cm.ledger import (
    Allowed,
    Disallowed,
    LedgerRecord,
    ListenerConfirmed,
    MessageRemoved,
    MessagesRemoved,
    Registration,
    RegistrationRemoved,
    RegistrationState,
    SenderSubject,
    StoredMessage,
    SubjectMark,
    is_inbox,
)
from rvasync.protocol.cm.names import (
    any_instance_address,
    check_cm_send_subject,
    check_correspondent_name,
    check_listen_pattern,
)
from rvasync.protocol.cm.outputs import SendResult
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
from rvasync.protocol.cm.reservations import Reservations
from rvasync.subjects import has_wildcards, subject_matches

__all__ = ["ListenerReview", "SenderHalf", "SubjectReview"]

#: Invitations repeated after a listener's announcement of a new instance (one
#: per register_retry_interval), in case it announced itself before listening.
_HELLO_REMINDERS = 5
#: Inboxes whose sequence counter is remembered (the oldest is forgotten beyond).
_INBOX_COUNTERS = 65536


@dataclass(frozen=True, slots=True)
class ListenerReview:
    """One registered listener of a subject, as ``review_ledger`` reports it."""

    name: str
    last_confirmed: int
    unconfirmed: int
    """Stored messages this listener has yet to confirm."""
    anticipated: bool
    """Added by ``add_listener`` and not yet claimed by the listener itself."""


@dataclass(frozen=True, slots=True)
class SubjectReview:
    """The ledger's view of one outbound subject."""

    subject: str
    last_sent: int
    total_messages: int
    total_size: int
    """Sum of the stored payload sizes, in bytes."""
    listeners: tuple[ListenerReview, ...]


def _unconfirmed(messages: dict[int, StoredMessage], above: int) -> int:
    """How many stored messages have a sequence above ``above``.

    Messages are stored in sequence order (see ``SenderHalf._owes``), so when
    the oldest is above, all are: the usual answer costs no scan, which a
    program polling ``review_ledger`` while thousands of messages wait needs.
    """
    if not messages or next(iter(messages)) > above:
        return len(messages)
    return sum(1 for seq in messages if seq > above)


class SenderHalf:
    """Outbound certified delivery for one correspondent (driven by ``CmCorrespondent``)."""

    def __init__(self, ctx: Context, now: float, *, sync_sends: bool = False) -> None:
        self._ctx = ctx
        # With sync_sends the driver completes a send only once its record is
        # durable, so a certified message's own record covers its number.
        self._reserve_certified = not sync_sends
        self._last_sent: dict[str, int] = {}
        self._inbox_seq: OrderedDict[str, int] = OrderedDict()
        self._reservations = Reservations(ctx)
        self._expiries: list[tuple[float, str, int]] = []
        # (subject, listener) -> when to ask that listener to confirm, if it owes any.
        self._asks: dict[tuple[str, str], float] = {}
        # While the network is out of reach (a relay client disconnected from
        # its agent), nobody is asked: the requests could not leave, and a
        # silence we caused ourselves is no DELIVERY.NO_RESPONSE.
        self._asks_held = False
        # Listeners refused or cut off by disallow: where they were, for invites on allow.
        self._refused: dict[str, tuple[str, set[str]]] = {}
        # (subject, listener) -> (new instance's address, next reminder, reminders left):
        # a listener that announced a new instance while owing messages, until it registers.
        self._reminders: dict[tuple[str, str], tuple[str, float, int]] = {}
        for subject, entry in ctx.ledger.subjects.items():
            self._last_sent[subject] = entry.last_sent
            for seq, message in entry.messages.items():
                if message.expiry:
                    heapq.heappush(self._expiries, (message.expiry, subject, seq))
            for listener, reg in entry.registrations.items():
                if reg.address:
                    ctx.peers.setdefault(listener, reg.address)
                if self._owes(entry, reg):
                    self._asks[(subject, listener)] = now + ctx.timing.confirm_request_interval
        self.invite_owed(now)

    def invite_owed(self, now: float) -> None:
        """Invite every listener the ledger owes messages to (a start, a take-over)."""
        for subject, entry in self._ctx.ledger.subjects.items():
            for listener, reg in entry.registrations.items():
                if self._owes(entry, reg):
                    self._invite(subject, listener, reg.address, now)

    def _invite(self, subject: str, listener: str, address: str, now: float) -> None:
        """Invite ``listener`` to take back what it is owed on ``subject`` (a few times).

        A restarted sender does it at once for every listener its ledger owes
        messages to (at its last address, or any instance of its name when it
        never registered), rather than wait for its next message or for the
        listener to restart: a listener that requires old messages registers
        and gets them within a retry interval of hearing it.
        """
        ctx = self._ctx
        target = address or any_instance_address(listener)
        ctx.send_to(target, Invite(origin=ctx.name, address=ctx.address, subject=subject))
        self._reminders[(subject, listener)] = (
            target,
            now + ctx.timing.register_retry_interval,
            _HELLO_REMINDERS,
        )

    # --- helpers -----------------------------------------------------------------

    @staticmethod
    def _owes(entry: SenderSubject, reg: RegistrationState) -> bool:
        """True if ``reg`` has stored messages still to confirm (messages are in order)."""
        if not entry.messages:
            return False
        return next(reversed(entry.messages)) > reg.confirmed

    def last_sent(self, subject: str) -> int:
        last = self._last_sent.get(subject)
        if last is None:
            return self._inbox_seq.get(subject, 0)
        return last

    def _pending(self, entry: SenderSubject, seq: int) -> list[str]:
        return [
            name
            for name, reg in entry.registrations.items()
            if reg.begin <= seq and reg.confirmed < seq
        ]

    def _resolve_if_complete(
        self, subject: str, entry: SenderSubject, seq: int, advise: bool | None = None
    ) -> None:
        """Remove message ``seq`` (DELIVERY.COMPLETE) if no registered listener still needs it.

        ``advise`` is whether to present DELIVERY.COMPLETE (None: ask the
        driver's filter); callers resolving a run of messages ask once.
        """
        if seq not in entry.messages:
            return
        for reg in entry.registrations.values():  # _pending, without building the list
            if reg.begin <= seq and reg.confirmed < seq:
                return
        ctx = self._ctx
        ctx.record(MessageRemoved(subject, seq))
        if advise is None:
            advise = ctx.wants_info("DELIVERY.COMPLETE", subject)
        if advise:
            ctx.advise(adv.delivery_complete(subject, seq))

    def _resolve_all(self, subject: str, entry: SenderSubject) -> None:
        for seq in list(entry.messages):
            self._resolve_if_complete(subject, entry, seq)

    def _release_spent_inbox(self, subject: str, entry: SenderSubject) -> None:
        """An inbox's messages are all resolved: its agreements (and entry) go.

        An inbox belongs to one transport's life and is never reused, so an
        agreement on one would otherwise stay in the ledger for ever (one per
        certified request answered).
        """
        if entry.messages or not entry.registrations or not is_inbox(subject):
            return
        for listener in list(entry.registrations):
            self._asks.pop((subject, listener), None)
            self._ctx.record(RegistrationRemoved(subject=subject, listener=listener))

    def _write_registration(
        self, subject: str, listener: str, reg: RegistrationState, entry: SenderSubject
    ) -> None:
        self._ctx.record(
            Registration(
                subject=subject,
                listener=listener,
                address=reg.address,
                begin=reg.begin,
                confirmed=reg.confirmed,
                last_sent=self.last_sent(subject),
                anticipated=reg.anticipated,
            )
        )

    def _schedule_ask(self, subject: str, listener: str, now: float) -> None:
        entry = self._ctx.ledger.subjects.get(subject)
        reg = entry.registrations.get(listener) if entry is not None else None
        if entry is not None and reg is not None and self._owes(entry, reg):
            self._asks[(subject, listener)] = now + self._ctx.timing.confirm_request_interval
        else:
            self._asks.pop((subject, listener), None)

    def _refuse(self, subject: str, listener: str, address: str) -> None:
        if address:
            _, subjects = self._refused.setdefault(listener, (address, set()))
            self._refused[listener] = (address, subjects | {subject})

    # --- application calls ---------------------------------------------------------

    def send(self, subject: str, payload: bytes, time_limit: float, now: float) -> SendResult:
        ctx = self._ctx
        lsn_before = ctx.lsn
        entry = ctx.ledger.subjects.get(subject)
        certified = bool(entry is not None and entry.registrations)
        if not certified and is_inbox(subject):
            return self._send_to_inbox(subject, payload, time_limit)
        last_sent = self._last_sent
        seq = last_sent.get(subject, 0) + 1
        last_sent[subject] = seq
        if certified:
            assert entry is not None
            expiry = now + time_limit if time_limit > 0 else 0.0
            # Positional arguments: this runs once per certified message sent.
            ctx.record(StoredMessage(subject, seq, time_limit, expiry, payload))
            if expiry:
                heapq.heappush(self._expiries, (expiry, subject, seq))
            asks = self._asks
            for listener in entry.registrations:
                key = (subject, listener)
                if key not in asks:
                    asks[key] = now + ctx.timing.confirm_request_interval
        hold = None
        if not certified or self._reserve_certified:
            recorded = entry.last_sent if entry is not None else 0
            hold = self._reservations.number(subject, seq, recorded)
        ctx.transmit(
            subject, DataRecord(ctx.name, ctx.address, subject, seq, time_limit, payload), False
        )
        return SendResult(seq, ctx.lsn if ctx.lsn > lsn_before else None, certified, hold)

    def _send_to_inbox(self, subject: str, payload: bytes, time_limit: float) -> SendResult:
        """A reply to an inbox nobody registered on: numbered in memory, nothing recorded."""
        ctx = self._ctx
        counters = self._inbox_seq
        seq = counters.pop(subject, self._last_sent.pop(subject, 0)) + 1
        counters[subject] = seq
        if len(counters) > _INBOX_COUNTERS:
            counters.popitem(last=False)
        ctx.transmit(
            subject, DataRecord(ctx.name, ctx.address, subject, seq, time_limit, payload), False
        )
        return SendResult(seq, None, False)

    def report_unrecorded(self, records: Iterable[LedgerRecord]) -> int:
        """DELIVERY.FAILED for each stored message whose record never reached the file.

        Only numbers a send returned count: one above every durable
        reservation belongs to a send still waiting, which raises instead
        (and the number may be used again: nobody was given it).
        """
        ctx = self._ctx
        count = 0
        for record in records:
            if isinstance(record, StoredMessage):
                if self._reservations.hold(record.subject, record.sequence) is not None:
                    continue
                entry = ctx.ledger.subjects.get(record.subject)
                missing = self._pending(entry, record.sequence) if entry is not None else []
                ctx.advise(
                    adv.delivery_failed(record.subject, record.sequence, record.payload, missing)
                )
                count += 1
        return count

    def close(self) -> None:
        """A clean close: record the exact last number of every subject reserved beyond it.

        The next instance then continues right after the last message sent,
        and listeners see no gap (after a crash they do, reported unavailable).
        """
        ctx = self._ctx
        for subject, last in self._last_sent.items():
            entry = ctx.ledger.subjects.get(subject)
            if entry is not None and entry.last_sent > last:
                ctx.record(SubjectMark(subject, last))

    def add_listener(self, listener: str, subject: str) -> bool:
        ctx = self._ctx
        check_correspondent_name(listener, what="listener name", allow_transient=True)
        check_cm_send_subject(subject)
        if listener == ctx.name:
            raise InvalidArgument(
                f"cannot add {listener!r} as a listener: it is this correspondent's own name"
            )
        if listener in ctx.ledger.disallowed:
            raise NotPermitted(
                f"cannot add listener {listener!r}: it is disallowed (allow it first)"
            )
        entry = ctx.ledger.subject(subject)
        if listener in entry.registrations:
            return False
        last = self.last_sent(subject)
        reg = RegistrationState(address="", begin=last + 1, confirmed=last, anticipated=True)
        self._write_registration(subject, listener, reg, entry)
        return True

    def remove_listener(self, listener: str, subject: str, now: float) -> None:
        ctx = self._ctx
        check_correspondent_name(listener, what="listener name", allow_transient=True)
        check_cm_send_subject(subject)
        entry = ctx.ledger.subjects.get(subject)
        if entry is None or listener not in entry.registrations:
            raise InvalidArgument(
                f"{listener!r} is not a registered listener for subject {subject!r}"
            )
        self._end_agreement(subject, listener, notify=True, disallowed=False)

    def disallow(self, listener: str, now: float) -> None:
        ctx = self._ctx
        check_correspondent_name(listener, what="listener name", allow_transient=True)
        if listener not in ctx.ledger.disallowed:
            ctx.record(Disallowed(listener=listener))
        for subject, entry in list(ctx.ledger.subjects.items()):
            reg = entry.registrations.get(listener)
            if reg is not None:
                self._refuse(subject, listener, reg.address)
                self._end_agreement(subject, listener, notify=True, disallowed=True)

    def allow(self, listener: str) -> None:
        ctx = self._ctx
        check_correspondent_name(listener, what="listener name", allow_transient=True)
        if listener in ctx.ledger.disallowed:
            ctx.record(Allowed(listener=listener))
        refused = self._refused.pop(listener, None)
        if refused is not None:
            address, subjects = refused
            for subject in sorted(subjects):
                ctx.send_to(address, Invite(origin=ctx.name, address=ctx.address, subject=subject))

    def expire_messages(self, subject: str, sequence: int) -> int:
        check_cm_send_subject(subject)
        entry = self._ctx.ledger.subjects.get(subject)
        if entry is None:
            return 0
        doomed = [seq for seq in entry.messages if seq <= sequence]
        for seq in doomed:
            self._fail(subject, entry, seq)
        return len(doomed)

    def review(self, pattern: str) -> list[SubjectReview]:
        check_listen_pattern(pattern)
        wild = has_wildcards(pattern)
        out = []
        for subject, entry in sorted(self._ctx.ledger.subjects.items()):
            if (wild and not subject_matches(pattern, subject)) or (
                not wild and subject != pattern
            ):
                continue
            listeners = tuple(
                ListenerReview(
                    name=name,
                    last_confirmed=reg.confirmed,
                    unconfirmed=_unconfirmed(entry.messages, max(reg.confirmed, reg.begin - 1)),
                    anticipated=reg.anticipated,
                )
                for name, reg in sorted(entry.registrations.items())
            )
            out.append(
                SubjectReview(
                    subject=subject,
                    last_sent=self.last_sent(subject),
                    total_messages=len(entry.messages),
                    total_size=entry.stored_bytes,
                    listeners=listeners,
                )
            )
        return out

    # --- ending agreements and messages ----------------------------------------------

    def _end_agreement(
        self, subject: str, listener: str, *, notify: bool, disallowed: bool
    ) -> None:
        ctx = self._ctx
        entry = ctx.ledger.subjects[subject]
        reg = entry.registrations[listener]
        ctx.record(RegistrationRemoved(subject=subject, listener=listener))
        self._asks.pop((subject, listener), None)
        ctx.advise(
            adv.registration_closed(subject, listener, self.last_sent(subject), reg.confirmed)
        )
        if notify and reg.address:
            ctx.send_to(
                reg.address,
                NotCertified(
                    origin=ctx.name, address=ctx.address, subject=subject, disallowed=disallowed
                ),
            )
        self._resolve_all(subject, entry)

    def _fail(self, subject: str, entry: SenderSubject, seq: int) -> None:
        message = entry.messages[seq]
        missing = self._pending(entry, seq)
        self._ctx.record(MessageRemoved(subject=subject, sequence=seq))
        self._ctx.advise(adv.delivery_failed(subject, seq, message.payload, missing))
        if not entry.messages:
            self._release_spent_inbox(subject, entry)

    # --- records from listeners ---------------------------------------------------------

    def on_register(self, rec: RegisterRequest, now: float) -> None:
        ctx = self._ctx
        subject, listener = rec.subject, rec.origin
        if has_wildcards(subject):
            return
        if listener in ctx.ledger.disallowed:
            self._refuse(subject, listener, rec.address)
            ctx.send_to(
                rec.address,
                NotCertified(
                    origin=ctx.name,
                    address=ctx.address,
                    subject=subject,
                    disallowed=True,
                    to=rec.address,
                ),
            )
            return
        self._reminders.pop((subject, listener), None)
        entry = ctx.ledger.subject(subject)
        last = self.last_sent(subject)
        old = entry.registrations.get(listener)
        if old is None:
            reg = RegistrationState(rec.address, last + 1, last, False)
            resumed, announce, confirmed_now = False, True, False
        elif old.address == rec.address or rec.require_old:
            confirmed = max(old.confirmed, min(rec.last_confirmed, last))
            reg = RegistrationState(rec.address, confirmed + 1, confirmed, False)
            resumed = True
            announce = old.address != rec.address or old.anticipated
            confirmed_now = confirmed > old.confirmed
        else:
            # A new instance that does not want old messages: drop what we kept for it.
            reg = RegistrationState(rec.address, last + 1, last, False)
            resumed, announce, confirmed_now = False, True, False
        if old != reg:
            self._write_registration(subject, listener, reg, entry)
        if confirmed_now:
            assert old is not None
            for seq in list(entry.messages):
                if old.confirmed < seq <= reg.confirmed:
                    ctx.advise(adv.delivery_confirm(subject, listener, seq))
        self._resolve_all(subject, entry)
        ctx.send_to(
            rec.address,
            RegisterReply(
                origin=ctx.name,
                address=ctx.address,
                subject=subject,
                begin=reg.begin,
                last_sent=last,
                resumed=resumed,
                to=rec.address,
            ),
        )
        if announce:
            ctx.advise(adv.registration_request(subject, listener))
            # Push what the listener is owed right away rather than wait for it to ask,
            # short of what it says it holds already (it heard it while registering).
            below = rec.held_from or math.inf
            for seq, message in list(entry.messages.items()):
                if reg.begin <= seq < below:
                    self._retransmit(rec.address, subject, message)
        self._schedule_ask(subject, listener, now)

    def _retransmit(self, address: str, subject: str, message: StoredMessage) -> None:
        ctx = self._ctx
        ctx.send_to(
            address,
            DataRecord(
                origin=ctx.name,
                address=ctx.address,
                subject=subject,
                sequence=message.sequence,
                time_limit=message.time_limit,
                payload=message.payload,
                retransmit=True,
            ),
        )

    def _not_registered(self, subject: str, listener: str, address: str) -> None:
        ctx = self._ctx
        ctx.send_to(
            address,
            NotCertified(
                origin=ctx.name,
                address=ctx.address,
                subject=subject,
                disallowed=listener in ctx.ledger.disallowed,
                to=address,
            ),
        )

    def on_hello(self, listener: str, address: str, now: float) -> None:
        """Listener ``listener`` announced a new instance at ``address``: tell it what waits.

        A restarted (or anticipated, first started) listener only discovers a
        sender when a labeled message from it arrives; if the sender has
        nothing new to send, the stored messages would wait for the next one.
        The spec wants them retransmitted when the listener comes back, so the
        sender invites the new instance to register on every subject it owes
        messages on (a listener that requires old messages registers and gets
        them; one that does not ignores the invitation). Invitations repeat a
        few times, since the new instance may announce itself before it has
        created its listeners.
        """
        ctx = self._ctx
        for subject, entry in ctx.ledger.subjects.items():
            reg = entry.registrations.get(listener)
            if reg is None or reg.address == address or not self._owes(entry, reg):
                continue
            ctx.send_to(address, Invite(origin=ctx.name, address=ctx.address, subject=subject))
            self._reminders[(subject, listener)] = (
                address,
                now + ctx.timing.register_retry_interval,
                _HELLO_REMINDERS,
            )

    def _remind(self, now: float) -> None:
        ctx = self._ctx
        for key, (address, when, left) in list(self._reminders.items()):
            if when > now:
                continue
            subject, listener = key
            entry = ctx.ledger.subjects.get(subject)
            reg = entry.registrations.get(listener) if entry is not None else None
            if entry is None or reg is None or not self._owes(entry, reg) or left <= 0:
                del self._reminders[key]
                continue
            ctx.send_to(address, Invite(origin=ctx.name, address=ctx.address, subject=subject))
            self._reminders[key] = (address, now + ctx.timing.register_retry_interval, left - 1)

    def on_confirm(self, rec: Confirm, now: float) -> None:
        ctx = self._ctx
        subject, listener = rec.subject, rec.origin
        entry = ctx.ledger.subjects.get(subject)
        reg = entry.registrations.get(listener) if entry is not None else None
        if entry is None or reg is None:
            self._not_registered(subject, listener, rec.address)
            return
        upto = min(rec.sequence, self.last_sent(subject))
        if upto > reg.confirmed:
            before = reg.confirmed
            ctx.record(ListenerConfirmed(subject=subject, listener=listener, sequence=upto))
            if upto - before <= len(entry.messages):
                candidates = [s for s in range(before + 1, upto + 1) if s in entry.messages]
            else:
                candidates = [s for s in entry.messages if before < s <= upto]
            # Another listener needs every message from its own threshold on, so
            # the messages this confirmation completes are a prefix of the run:
            # they leave the ledger in one record.
            threshold = min(
                (
                    max(other.begin, other.confirmed + 1)
                    for name, other in entry.registrations.items()
                    if name != listener
                ),
                default=upto + 1,
            )
            completed = [seq for seq in candidates if seq < threshold]
            if len(completed) > 1:
                ctx.record(MessagesRemoved(subject, completed[0], completed[-1]))
            elif completed:
                ctx.record(MessageRemoved(subject, completed[0]))
            advise = ctx.wants_info("DELIVERY.CONFIRM", subject)
            complete = bool(completed) and ctx.wants_info("DELIVERY.COMPLETE", subject)
            done = len(completed)
            for index, seq in enumerate(candidates):
                if advise and seq >= reg.begin:
                    ctx.advise(adv.delivery_confirm(subject, listener, seq))
                if complete and index < done:
                    ctx.advise(adv.delivery_complete(subject, seq))
            if done and not entry.messages:
                self._release_spent_inbox(subject, entry)
        self._schedule_ask(subject, listener, now)

    def on_cancel(self, rec: Cancel, now: float) -> None:
        entry = self._ctx.ledger.subjects.get(rec.subject)
        if entry is not None and rec.origin in entry.registrations:
            self._end_agreement(rec.subject, rec.origin, notify=False, disallowed=False)

    def on_retransmit_request(self, rec: RetransmitRequest, now: float) -> None:
        ctx = self._ctx
        subject, listener = rec.subject, rec.origin
        entry = ctx.ledger.subjects.get(subject)
        reg = entry.registrations.get(listener) if entry is not None else None
        if entry is None or reg is None:
            self._not_registered(subject, listener, rec.address)
            return
        last = min(rec.last, self.last_sent(subject))
        if rec.first <= min(reg.confirmed, last):
            # The listener's name confirmed these already (an earlier
            # instance did, or the request is stale): we keep nothing of
            # them. Silence would leave a listener that lost track asking
            # forever; it is told they are gone and reports them.
            ctx.send_to(
                rec.address, self._unavailable(subject, rec.first, min(reg.confirmed, last))
            )
        first = max(rec.first, reg.confirmed + 1)
        if first > last:
            return
        if last - first < len(entry.messages):
            stored = [s for s in range(first, last + 1) if s in entry.messages]
        else:
            stored = sorted(s for s in entry.messages if first <= s <= last)
        cursor = first
        for seq in stored:
            if seq > cursor:
                ctx.send_to(rec.address, self._unavailable(subject, cursor, seq - 1))
            self._retransmit(rec.address, subject, entry.messages[seq])
            cursor = seq + 1
        if cursor <= last:
            ctx.send_to(rec.address, self._unavailable(subject, cursor, last))

    def _unavailable(self, subject: str, first: int, last: int) -> Unavailable:
        ctx = self._ctx
        return Unavailable(
            origin=ctx.name, address=ctx.address, subject=subject, first=first, last=last
        )

    # --- time -----------------------------------------------------------------------------

    def hold_asks(self, held: bool, now: float) -> None:
        """Stop (``held``) or resume asking listeners for confirmations.

        On resuming, every listener that owes confirmations is asked at once:
        the reconnection is exactly when answers can come back.
        """
        if held == self._asks_held:
            return
        self._asks_held = held
        if not held:
            for key, when in self._asks.items():
                if when > now:
                    self._asks[key] = now

    def handle_timer(self, now: float) -> None:
        ctx = self._ctx
        while self._expiries and self._expiries[0][0] <= now:
            expiry, subject, seq = heapq.heappop(self._expiries)
            entry = ctx.ledger.subjects.get(subject)
            message = entry.messages.get(seq) if entry is not None else None
            if entry is not None and message is not None and message.expiry == expiry:
                self._fail(subject, entry, seq)
        if self._asks_held or ctx.standby:
            return
        if self._reminders:
            self._remind(now)
        warned: set[str] = set()
        for key, when in list(self._asks.items()):
            if when > now:
                continue
            subject, listener = key
            entry = ctx.ledger.subjects.get(subject)
            reg = entry.registrations.get(listener) if entry is not None else None
            if entry is None or reg is None or not self._owes(entry, reg):
                del self._asks[key]
                continue
            self._asks[key] = now + ctx.timing.confirm_request_interval
            if not reg.address:
                # Anticipated and never heard from: invite whichever instance of
                # the name runs (a listener already running never announces itself).
                ctx.send_to(
                    any_instance_address(listener),
                    Invite(origin=ctx.name, address=ctx.address, subject=subject),
                )
                continue
            ctx.send_to(
                reg.address,
                ConfirmRequest(
                    origin=ctx.name,
                    address=ctx.address,
                    subject=subject,
                    last_sent=self.last_sent(subject),
                ),
            )
            if listener not in warned:
                warned.add(listener)
                ctx.advise(adv.delivery_no_response(listener))

    def next_deadline(self) -> float | None:
        ctx = self._ctx
        while self._expiries:
            expiry, subject, seq = self._expiries[0]
            entry = ctx.ledger.subjects.get(subject)
            message = entry.messages.get(seq) if entry is not None else None
            if message is not None and message.expiry == expiry:
                break
            heapq.heappop(self._expiries)
        candidates: list[float] = []
        if not self._asks_held and not ctx.standby:
            candidates.extend(self._asks.values())
            candidates.extend(when for _, when, _ in self._reminders.values())
        if self._expiries:
            candidates.append(self._expiries[0][0])
        return min(candidates) if candidates else None
