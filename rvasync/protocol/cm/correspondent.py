"""``CmCorrespondent``: the sans-IO state machine of one CM transport.

It is both a sender and a listener, fed by three kinds of input, each with
the current time ``now`` (wall-clock seconds, e.g. ``time.time()``: message
expiry times are stored in the ledger and must mean the same after a
restart):

* application calls: :meth:`send`, :meth:`listen`, :meth:`close_listener`,
  :meth:`confirm`, :meth:`add_listener`, :meth:`remove_listener`,
  :meth:`disallow_listener`, :meth:`allow_listener`, :meth:`expire_messages`,
  :meth:`review_ledger`;
* records from peers: :meth:`receive` (or :meth:`receive_fields` for the
  flat mapping a message carried), and :meth:`receive_plain` for unlabeled
  messages on a CM listener's subject;
* the clock: :meth:`handle_timer` whenever :meth:`next_deadline` passes,
  and the driver's :meth:`durable` acknowledgement of ledger appends.

After any input the driver calls :meth:`drain` and carries out the outputs
(:mod:`rvasync.protocol.cm.outputs`) in order. Nothing here blocks, sleeps or
touches a socket or a file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rvasync.errors import InvalidArgument, MalformedMessage, NotPermitted
from rvasync.protocol.cm import advisories as adv
from rvasync.protocol.cm.context import CmTiming, Context
from rvasync.protocol.cm.ledger import LedgerRecord, LedgerState
from rvasync.protocol.cm.listener import ListenerHalf, SourceReview
from rvasync.protocol.cm.names import (
    check_cm_send_subject,
    check_correspondent_name,
    check_sequence,
    check_time_limit,
    hello_subject,
    is_transient_name,
    new_transient_name,
)
from rvasync.protocol.cm.outputs import Output, SendResult
from rvasync.protocol.cm.records import (
    Cancel,
    Confirm,
    ConfirmRequest,
    DataRecord,
    Hello,
    Invite,
    NotCertified,
    Record,
    RegisterReply,
    RegisterRequest,
    RetransmitRequest,
    Unavailable,
    parse_record,
)
from rvasync.protocol.cm.sender import SenderHalf, SubjectReview

__all__ = ["CmCorrespondent"]


class CmCorrespondent:
    """One CM transport's certified-delivery protocol, without I/O.

    ``name`` None generates a transient name (or pass one made by
    :func:`~rvasync.protocol.cm.names.new_transient_name`). ``address`` is where peers
    reach this instance point-to-point (the driver's inbox for it); it must
    be unique to the instance, because a familiar name at a new address is
    how peers notice that a correspondent moved. ``ledger`` is the replayed
    state of a file ledger (see
    :func:`~rvasync.protocol.cm.ledger_format.decode_ledger`) or None for a
    fresh one; ``file_ledger`` makes the core emit
    :class:`~rvasync.protocol.cm.outputs.AppendLedger` outputs and hold
    transmissions until the records before them are durable.
    ``require_old`` is the listener-side wish to get messages an earlier
    instance of this name did not confirm. ``sync_sends``: the driver completes
    a send only once its ledger record is durable (``sync_ledger``), so a
    certified message's own record covers its sequence number and no block
    needs reserving ahead for it.
    """

    def __init__(
        self,
        name: str | None,
        address: str,
        *,
        now: float,
        ledger: LedgerState | None = None,
        file_ledger: bool = False,
        require_old: bool = False,
        default_time_limit: float = 0.0,
        timing: CmTiming | None = None,
        sync_sends: bool = False,
    ) -> None:
        if name is None:
            name = new_transient_name()
        else:
            # A generated name is accepted too: a driver makes it first when
            # the instance address it gives here is derived from the name.
            check_correspondent_name(name, allow_transient=True)
        if not isinstance(address, str) or not address:
            raise InvalidArgument(f"address must be a non-empty str, got {address!r}")
        self._default_time_limit = check_time_limit(default_time_limit)
        if ledger is None:
            ledger = LedgerState(name=name)
        elif ledger.name != name:
            raise InvalidArgument(
                f"the ledger belongs to correspondent {ledger.name!r}, not {name!r}; "
                "each correspondent needs its own ledger"
            )
        self._ctx = Context(name, address, ledger, bool(file_ledger), timing or CmTiming())
        self._started = float(now)
        self._collision_state = _Collision()
        self._sender = SenderHalf(self._ctx, now, sync_sends=bool(sync_sends))
        # Subjects whose name was checked (or that the ledger held, checked when
        # first sent on): send checks a subject's name once.
        self._checked_subjects: set[str] = set(ledger.subjects)
        self._listener = ListenerHalf(self._ctx, bool(require_old))
        sender, listener = self._sender, self._listener
        # What each kind of record from a peer goes to (``receive``).
        self._handlers: dict[type[Record], Callable[[Any, float], None]] = {
            DataRecord: listener.on_data,
            RegisterRequest: sender.on_register,
            RegisterReply: listener.on_reply,
            NotCertified: listener.on_not_certified,
            Confirm: sender.on_confirm,
            ConfirmRequest: listener.on_confirm_request,
            RetransmitRequest: sender.on_retransmit_request,
            Unavailable: listener.on_unavailable,
            Cancel: sender.on_cancel,
            Invite: listener.on_invite,
        }
        self._collisions: set[str] = set()
        self.malformed = 0
        """Inbound records dropped as malformed (the driver may log them)."""
        if not is_transient_name(name):
            self._announce()

    def _announce(self) -> None:
        ctx = self._ctx
        hello = Hello(origin=ctx.name, address=ctx.address, started=self._started)
        ctx.transmit(hello_subject(ctx.name), hello, False)

    # --- identity ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """This correspondent's name (reusable, or generated)."""
        return self._ctx.name

    @property
    def address(self) -> str:
        return self._ctx.address

    @property
    def persistent(self) -> bool:
        """A reusable name with a file ledger: a later instance can continue this one."""
        return self._ctx.file_ledger and not is_transient_name(self._ctx.name)

    @property
    def ledger(self) -> LedgerState:
        """The live ledger state (equal to a replay of every record appended so far)."""
        return self._ctx.ledger

    @property
    def control_subjects(self) -> tuple[str, ...]:
        """Subjects the driver must listen on besides its address and the CM listeners' own."""
        if is_transient_name(self._ctx.name):
            return ()
        return (hello_subject(self._ctx.name),)

    def set_info_filter(self, info_filter: Callable[[str, str], bool] | None) -> None:
        """Install ``info_filter(condition, tail)``, asked before each per-message INFO advisory.

        DELIVERY.CONFIRM and DELIVERY.COMPLETE come once per message (and per
        listener); a driver that knows nobody listens to
        ``_RV.INFO.RVCM.<condition>.<tail>`` returns False and the core skips
        making them. None (the default) makes every advisory.
        """
        if info_filter is not None and not callable(info_filter):
            raise InvalidArgument(
                f"info_filter must be callable or None, not {type(info_filter).__name__}"
            )
        self._ctx.info_filter = info_filter

    # --- outputs and time ---------------------------------------------------------------

    def drain(self) -> list[Output]:
        """Every output produced since the last drain, in the order to carry them out."""
        out = self._ctx.outputs
        self._ctx.outputs = []
        return out

    def durable(self, lsn: int) -> None:
        """Ledger appends up to ``lsn`` are written; held transmissions may now leave."""
        if isinstance(lsn, bool) or not isinstance(lsn, int) or lsn < 0:
            raise InvalidArgument(f"lsn must be an int >= 0, got {lsn!r}")
        self._ctx.durable(lsn)

    @property
    def last_lsn(self) -> int:
        """The number of the latest ledger append requested (0 if none)."""
        return self._ctx.lsn

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` next has work, or None if nothing is scheduled."""
        found = [
            when
            for when in (
                self._sender.next_deadline(),
                None if self._ctx.standby else self._listener.next_deadline(),
                self._collision_state.probe_at,
            )
            if when is not None
        ]
        return min(found) if found else None

    def hold_confirm_requests(self, held: bool, now: float) -> None:
        """Stop or resume asking listeners to confirm (a relay client's disconnection).

        A certified sender disconnected from its relay agent stops requesting
        confirmation of outstanding messages, so it presents no
        DELIVERY.NO_RESPONSE for the silence its own absence causes; messages
        still expire on time. Resuming asks every listener that owes
        confirmations at once.
        """
        self._sender.hold_asks(bool(held), now)

    def handle_timer(self, now: float) -> None:
        """Expire messages, ask for confirmations, repeat registrations and gap requests."""
        self._sender.handle_timer(now)
        if self._ctx.standby:
            self._probe(now)
        else:
            self._listener.handle_timer(now)

    # --- sending ---------------------------------------------------------------------------

    def send(
        self, subject: str, payload: bytes, now: float, time_limit: float | None = None
    ) -> SendResult:
        """Send a labeled message; certified to every listener registered on ``subject``.

        ``time_limit`` None uses the default; 0 means the message never
        expires. A wildcard or reserved subject raises NotPermitted.
        """
        if self._ctx.standby:
            raise NotPermitted(
                f"correspondent name {self._ctx.name!r} is held by another live instance "
                f"({self._collision_state.incumbent}); this one stands by until that one "
                "leaves and cannot send meanwhile (see REGISTRATION.COLLISION)"
            )
        if subject not in self._checked_subjects:
            check_cm_send_subject(subject)
            self._checked_subjects.add(subject)
        if payload.__class__ is not bytes:
            if isinstance(payload, (bytearray, memoryview)):
                payload = bytes(payload)
            if not isinstance(payload, bytes):
                raise InvalidArgument(
                    f"payload must be bytes (an encoded message), not {type(payload).__name__}"
                )
        limit = self._default_time_limit if time_limit is None else check_time_limit(time_limit)
        return self._sender.send(subject, payload, limit, now)

    def add_listener(self, listener: str, subject: str) -> bool:
        """Anticipate ``listener``: store messages on ``subject`` for it before it registers.

        Returns False if it is already registered. A disallowed name raises
        NotPermitted.
        """
        return self._sender.add_listener(listener, subject)

    def remove_listener(self, listener: str, subject: str, now: float) -> None:
        """End the agreement with ``listener`` on ``subject`` (it may register again)."""
        self._sender.remove_listener(listener, subject, now)

    def disallow_listener(self, listener: str, now: float) -> None:
        """End every agreement with ``listener`` and refuse its registrations from now on."""
        self._sender.disallow(listener, now)

    def allow_listener(self, listener: str) -> None:
        """Undo :meth:`disallow_listener`; the listener is invited to register again."""
        self._sender.allow(listener)

    def expire_messages(self, subject: str, sequence: int) -> int:
        """Give up on stored messages on ``subject`` up to ``sequence`` (DELIVERY.FAILED each).

        Returns how many were expired.
        """
        check_sequence(sequence)
        return self._sender.expire_messages(subject, sequence)

    def review_ledger(self, subject: str) -> list[SubjectReview]:
        """Per outbound subject matching ``subject`` (wildcards allowed): the ledger's summary."""
        return self._sender.review(subject)

    # --- listening ---------------------------------------------------------------------------

    def listen(self, subject: str, *, now: float, explicit_confirm: bool = False) -> int:
        """Open a CM listener on ``subject`` (wildcards allowed); returns its id.

        Senders this name had agreements with (per the ledger) on matching
        subjects are asked at once to resume them.
        """
        return self._listener.listen(subject, explicit_confirm, now)

    def close_listener(
        self, listener_id: int, now: float, *, cancel_agreements: bool = False
    ) -> None:
        """Close a CM listener; see :meth:`ListenerHalf.close` for what happens to agreements."""
        self._listener.close(listener_id, cancel_agreements, now)

    def confirm(self, listener_id: int, sender: str, subject: str, sequence: int | None) -> bool:
        """Listener ``listener_id`` has finished with message ``sequence`` from ``sender``.

        The driver calls this when the consumer has taken the message (an
        ``async for`` over the listener moved past it, or its callback
        returned) unless the listener confirms explicitly, in which case
        ``listener.confirm(msg)`` calls it. Confirmation reaches the sender
        only for an unbroken run: confirming 57 before 55 and 56 sends
        nothing until those are confirmed too.
        """
        return self._listener.confirm(listener_id, sender, subject, sequence)

    def confirm_many(self, items: Iterable[tuple[int, str, str, int | None]]) -> int:
        """Several :meth:`confirm` calls, ``(listener_id, sender, subject, sequence)`` each.

        Same outcome as confirming one by one, but every source advances once
        for the batch: one ledger record and one confirmation per sender and
        subject. Returns how many deliveries were settled.
        """
        return self._listener.confirm_many(items)

    def review_sources(self) -> list[SourceReview]:
        """Listener-side state of every known (sender, subject)."""
        return self._listener.review()

    # --- inbound -------------------------------------------------------------------------------

    def receive_fields(self, fields: Mapping[str, Any], now: float) -> bool:
        """Parse and handle a record carried as a flat mapping; False if it was malformed."""
        try:
            record = parse_record(fields)
        except MalformedMessage:
            self.malformed += 1
            return False
        self.receive(record, now)
        return True

    def receive_plain(self, subject: str, payload: bytes) -> None:
        """An unlabeled message arrived on a CM listener's subject: deliver it as it is."""
        self._listener.deliver_plain(subject, payload)

    def receive_labeled(
        self,
        origin: str,
        address: str,
        subject: str,
        sequence: int,
        time_limit: float,
        payload: bytes,
        now: float,
    ) -> None:
        """``receive(DataRecord(origin, address, subject, sequence, time_limit, payload))``.

        A driver calls this once per labeled message received; in the usual
        case (a peer at its known address, the next message in sequence) it
        is handled without making the record.
        """
        if (
            origin == self._ctx.name
            or self._ctx.standby
            or self._ctx.peers.get(origin) != address
            or not self._listener.deliver_next(origin, subject, sequence, time_limit, payload, now)
        ):
            self.receive(DataRecord(origin, address, subject, sequence, time_limit, payload), now)

    def receive(self, record: Record, now: float) -> None:
        """Handle one record from the network (multicast or point-to-point)."""
        ctx = self._ctx
        if record.origin == ctx.name:
            self._from_own_name(record, now)
            return
        if ctx.standby:
            # Another instance holds the name: peers deal with it, not with us.
            if isinstance(record, DataRecord):
                self._listener.deliver_stray(record)
            return
        if isinstance(record, Hello):
            if not record.reply:
                self._sender.on_hello(record.origin, record.address, now)
            return
        if ctx.note_peer(record.origin, record.address):
            # A sender that moved is asked to resume our agreements at once. A
            # listener that moved is not followed here: its registration
            # request decides (with require_old) what becomes of its messages.
            self._listener.peer_moved(record.origin, record.address, now)
        handler = self._handlers.get(record.__class__)
        if handler is None:
            self.malformed += 1
        else:
            handler(record, now)

    def _from_own_name(self, record: Record, now: float) -> None:
        """A record of ours (delivered back to us), or of another instance of our name."""
        if record.address == self._ctx.address:
            if isinstance(record, DataRecord) and not record.retransmit:
                self._listener.deliver_own(record)
            return
        self._collision(record, now)

    # --- collisions: two live instances of one name ----------------------------------

    @property
    def standby(self) -> bool:
        """True while another, older live instance holds this name (see :meth:`_collision`)."""
        return self._ctx.standby

    def _collision(self, record: Record, now: float) -> None:
        """Another live instance uses our name: the older keeps it, the younger stands by.

        Both present REGISTRATION.COLLISION (once per intruder). Left alone,
        two instances answering for one name make every listener thrash
        between them (each record from the other address is a move) and
        confirm to one what the other sent. So the younger (later ``started``;
        the address breaks a tie) stands by: it transmits nothing but probes
        to the older one, acts on nothing addressed to the name, delivers
        labeled messages uncertified, and refuses to send (the driver raises).
        When the older one leaves (it says so on close, or stops answering
        ``register_attempts`` probes ``confirm_request_interval`` apart), the
        younger takes the name over as a restarted instance would.
        """
        ctx = self._ctx
        state = self._collision_state
        other = record.address
        if other not in state.seen:
            state.seen.add(other)
            ctx.advise(adv.collision(ctx.name))
        if not isinstance(record, Hello):
            return
        if record.leaving:
            state.younger.discard(other)
            if state.incumbent == other and record.to == ctx.address:
                self._take_over(now)
            return
        if (record.started, other) < (self._started, ctx.address):
            if record.reply and record.to == ctx.address:
                # A live older instance answered us: it keeps the name.
                if state.incumbent is None:
                    state.incumbent = other
                    ctx.standby = True
                if state.incumbent == other:
                    state.unanswered = 0
                    state.probe_at = now + ctx.timing.confirm_request_interval
            elif not record.reply and state.incumbent is None:
                # An older instance's announcement: alive, or a dead one's that
                # was kept for us (a relay agent)? Only an answer tells.
                probe = Hello(origin=ctx.name, address=ctx.address, started=self._started)
                ctx.send_to(other, probe, probe=True)
        else:
            state.younger.add(other)
            if not record.reply:
                reply = Hello(
                    origin=ctx.name,
                    address=ctx.address,
                    reply=True,
                    started=self._started,
                    to=other,
                )
                ctx.send_to(other, reply)

    def _probe(self, now: float) -> None:
        ctx = self._ctx
        state = self._collision_state
        if state.incumbent is None or state.probe_at is None or state.probe_at > now:
            return
        if state.unanswered >= ctx.timing.register_attempts:
            self._take_over(now)  # it stopped answering: it is gone
            return
        state.unanswered += 1
        state.probe_at = now + ctx.timing.confirm_request_interval
        probe = Hello(origin=ctx.name, address=ctx.address, started=self._started)
        ctx.send_to(state.incumbent, probe, probe=True)

    def _take_over(self, now: float) -> None:
        ctx = self._ctx
        state = self._collision_state
        state.incumbent = None
        state.probe_at = None
        ctx.standby = False
        self._announce()
        self._sender.invite_owed(now)
        self._listener.resume_all(now)

    # --- closing and the ledger file ------------------------------------------------------

    def close(self, now: float) -> None:
        """A clean close: exact sequence marks; a standing-by instance of the name takes over."""
        self._sender.close()
        ctx = self._ctx
        for address in sorted(self._collision_state.younger):
            bye = Hello(origin=ctx.name, address=ctx.address, reply=True, leaving=True, to=address)
            ctx.send_to(address, bye)

    def set_ledger_writable(self, writable: bool) -> None:
        """The driver's ledger file fits (True) or not (False: no new agreement is made)."""
        self._ctx.ledger_writable = bool(writable)

    def unrecorded(self, records: Iterable[LedgerRecord]) -> int:
        """Messages sent whose records never reached the ledger file (closed on a full disk).

        Each is presented as DELIVERY.FAILED (with the listeners still owed
        it); none of them was transmitted. Returns how many.
        """
        return self._sender.report_unrecorded(records)


@dataclass(slots=True)
class _Collision:
    """What a correspondent knows of other live instances of its name."""

    seen: set[str] = field(default_factory=set)
    """Addresses a COLLISION advisory was presented for."""
    younger: set[str] = field(default_factory=set)
    """Younger instances standing by for us (told when we leave)."""
    incumbent: str | None = None
    """The older instance we stand by for, if any."""
    probe_at: float | None = None
    unanswered: int = 0
