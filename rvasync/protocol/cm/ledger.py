"""The ledger: what a correspondent must remember, as records and as replayed state.

A ledger is an append-only list of small records. Replaying them in order
(:meth:`LedgerState.apply`) rebuilds exactly what the correspondent knew:

* as a **sender**, per subject: the last sequence number it may not reuse,
  every stored (unresolved) message, and every registered listener with the
  last sequence it confirmed; plus the names it disallowed;
* as a **listener**, per sender and subject: the last sequence it confirmed,
  and the sequences above it the application confirmed out of order.

The correspondent core changes its persistent state *only* by making a record
and applying it, so the live state and a replay of the records it produced
are equal by construction; a file ledger (see
:mod:`rvasync.protocol.cm.ledger_format`) just stores the same records.
:meth:`LedgerState.records` is compaction: the fewest records that replay to
the current state, which holds only unresolved messages and live agreements.

Sequence numbers start at 1; 0 means none. ``expiry`` is an absolute time on
the clock the core is fed (wall-clock seconds, so it survives restarts); 0
means the message never expires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rvasync.protocol.cm._flat import fast_init, to_flat

__all__ = [
    "LEDGER_RECORD_TYPES",
    "Allowed",
    "Disallowed",
    "LedgerRecord",
    "LedgerState",
    "ListenerConfirmed",
    "MessageRemoved",
    "MessagesRemoved",
    "Registration",
    "RegistrationRemoved",
    "RegistrationState",
    "SenderSubject",
    "Source",
    "SourceConfirmed",
    "SourceDone",
    "SourceRemoved",
    "SourceState",
    "StoredMessage",
    "SubjectMark",
    "is_inbox",
]


@fast_init
@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """Base of every ledger record."""

    KIND: ClassVar[str] = ""

    def to_fields(self) -> dict[str, Any]:
        """The record's fields as a flat dict (without its kind)."""
        return to_flat(self)


# --- sender side ---------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class SubjectMark(LedgerRecord):
    """After a restart, sequence numbers on ``subject`` continue after ``last_sent``.

    A sender reserves numbers in blocks ahead of handing them out, so a
    number it gave a message is covered by a record in the file before the
    message could have been lost with its own record (a crash, a full disk):
    after a restart no number is ever handed out twice. A clean close writes
    the exact last number; after a crash the numbers between the last
    recorded message and the reservation are skipped, and a listener asking
    for them is told they are unavailable. This record is the only one that
    can lower the mark (to the exact number, at close).
    """

    KIND: ClassVar[str] = "subject_mark"
    subject: str
    last_sent: int


@fast_init
@dataclass(frozen=True, slots=True)
class StoredMessage(LedgerRecord):
    """An outbound certified message kept until every registered listener confirms it."""

    KIND: ClassVar[str] = "message"
    subject: str
    sequence: int
    time_limit: float
    expiry: float
    payload: bytes


@fast_init
@dataclass(frozen=True, slots=True)
class MessageRemoved(LedgerRecord):
    """The message left the ledger: complete, failed (expired) or expired by the program."""

    KIND: ClassVar[str] = "message_removed"
    subject: str
    sequence: int


@fast_init
@dataclass(frozen=True, slots=True)
class MessagesRemoved(LedgerRecord):
    """Every stored message on ``subject`` from ``first`` to ``last`` left the ledger.

    One confirmation often completes a run of messages at once; a range
    record keeps the file at one record per run instead of one per message.
    """

    KIND: ClassVar[str] = "messages_removed"
    subject: str
    first: int
    last: int


@fast_init
@dataclass(frozen=True, slots=True)
class Registration(LedgerRecord):
    """A certified agreement with ``listener`` on ``subject`` (created or updated).

    ``anticipated`` marks one made by ``add_listener`` that the listener has
    not yet claimed. ``last_sent`` pins the subject's sequence exactly: from
    now on every message on it is stored, so its numbers are all recorded.
    ``address`` is where the listener instance was last heard ("" if never).
    """

    KIND: ClassVar[str] = "registration"
    subject: str
    listener: str
    address: str
    begin: int
    confirmed: int
    last_sent: int
    anticipated: bool


@fast_init
@dataclass(frozen=True, slots=True)
class ListenerConfirmed(LedgerRecord):
    """``listener`` confirmed every message on ``subject`` up to ``sequence``."""

    KIND: ClassVar[str] = "listener_confirmed"
    subject: str
    listener: str
    sequence: int


@fast_init
@dataclass(frozen=True, slots=True)
class RegistrationRemoved(LedgerRecord):
    """The agreement with ``listener`` on ``subject`` ended (closed, removed, disallowed)."""

    KIND: ClassVar[str] = "registration_removed"
    subject: str
    listener: str


@fast_init
@dataclass(frozen=True, slots=True)
class Disallowed(LedgerRecord):
    """Registration requests from ``listener`` are refused."""

    KIND: ClassVar[str] = "disallowed"
    listener: str


@fast_init
@dataclass(frozen=True, slots=True)
class Allowed(LedgerRecord):
    """A previous disallow of ``listener`` no longer applies."""

    KIND: ClassVar[str] = "allowed"
    listener: str


# --- listener side -------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class Source(LedgerRecord):
    """``sender`` is a known source of certified messages on ``subject`` (created or updated)."""

    KIND: ClassVar[str] = "source"
    sender: str
    subject: str
    address: str
    confirmed: int


@fast_init
@dataclass(frozen=True, slots=True)
class SourceConfirmed(LedgerRecord):
    """This listener confirmed every message from ``sender`` on ``subject`` up to ``sequence``."""

    KIND: ClassVar[str] = "source_confirmed"
    sender: str
    subject: str
    sequence: int


@fast_init
@dataclass(frozen=True, slots=True)
class SourceDone(LedgerRecord):
    """This listener confirmed message ``sequence`` from ``sender`` on ``subject`` out of order.

    Confirmations reach the sender only as an unbroken run, so one above a
    gap (6 to 20 confirmed while 5 is still being worked on) is recorded on
    its own: after a restart the sender sends 5 to 20 again, and only 5 is
    delivered.
    """

    KIND: ClassVar[str] = "source_done"
    sender: str
    subject: str
    sequence: int


@fast_init
@dataclass(frozen=True, slots=True)
class SourceRemoved(LedgerRecord):
    """``sender`` is no longer a certified source on ``subject`` for this listener."""

    KIND: ClassVar[str] = "source_removed"
    sender: str
    subject: str


LEDGER_RECORD_TYPES: dict[str, type[LedgerRecord]] = {
    cls.KIND: cls
    for cls in (
        SubjectMark,
        StoredMessage,
        MessageRemoved,
        MessagesRemoved,
        Registration,
        ListenerConfirmed,
        RegistrationRemoved,
        Disallowed,
        Allowed,
        Source,
        SourceConfirmed,
        SourceDone,
        SourceRemoved,
    )
}
"""Every ledger record class by its kind string (the tag stored in the file)."""


# --- replayed state ------------------------------------------------------------


@dataclass(slots=True)
class RegistrationState:
    """A registered listener, as the sender's ledger knows it."""

    address: str
    begin: int
    confirmed: int
    anticipated: bool


@dataclass(slots=True)
class SenderSubject:
    """One outbound subject: sequence bound, stored messages (by sequence), listeners.

    ``stored_bytes`` is the sum of the stored payloads' sizes, kept as messages
    come and go, so a ledger review does not add up every stored message (a
    program that polls ``review_ledger`` while thousands wait would otherwise
    spend its time there).
    """

    last_sent: int = 0
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    registrations: dict[str, RegistrationState] = field(default_factory=dict)
    stored_bytes: int = 0


@dataclass(slots=True)
class SourceState:
    """One inbound (sender, subject), as the listener's ledger knows it.

    ``done``: sequences above ``confirmed`` the application confirmed out of order.
    """

    address: str
    confirmed: int
    done: set[int] = field(default_factory=set)


@dataclass(slots=True)
class LedgerState:
    """Everything a ledger holds, for correspondent ``name``.

    ``apply`` is deliberately tolerant: a record about something already gone
    (a confirmation for a removed registration, say) changes nothing, so a
    ledger written by a correspondent that crashed between two related
    records still replays.
    """

    name: str
    subjects: dict[str, SenderSubject] = field(default_factory=dict)
    disallowed: set[str] = field(default_factory=set)
    sources: dict[tuple[str, str], SourceState] = field(default_factory=dict)

    def apply(self, record: LedgerRecord) -> None:
        """Fold one record into the state."""
        handler = _APPLY.get(type(record))
        if handler is None:
            raise TypeError(f"not a ledger record: {record!r}")
        handler(self, record)

    def apply_all(self, records: list[LedgerRecord]) -> None:
        """Fold records in order."""
        for record in records:
            self.apply(record)

    def records(self) -> list[LedgerRecord]:
        """The fewest records that replay to this state (what compaction writes).

        Per subject: its stored messages, then its registrations, then the
        sequence mark last (a replay takes the latest value, so the mark
        wins over the sequences the messages carry). Then the disallowed
        names and the sources.
        """
        return list(self.iter_records())

    def iter_records(self) -> Iterator[LedgerRecord]:
        """:meth:`records`, one at a time (compaction of a large ledger streams them)."""
        for subject, entry in self.subjects.items():
            yield from entry.messages.values()
            for listener, reg in entry.registrations.items():
                yield (
                    Registration(
                        subject=subject,
                        listener=listener,
                        address=reg.address,
                        begin=reg.begin,
                        confirmed=reg.confirmed,
                        last_sent=entry.last_sent,
                        anticipated=reg.anticipated,
                    )
                )
            yield SubjectMark(subject=subject, last_sent=entry.last_sent)
        for listener in sorted(self.disallowed):
            yield Disallowed(listener=listener)
        for (sender, subject), source in self.sources.items():
            yield Source(
                sender=sender,
                subject=subject,
                address=source.address,
                confirmed=source.confirmed,
            )
            for sequence in sorted(source.done):
                yield SourceDone(sender=sender, subject=subject, sequence=sequence)

    def copy(self) -> LedgerState:
        """An independent deep copy (records are immutable, containers are copied)."""
        return LedgerState(
            name=self.name,
            subjects={
                subject: SenderSubject(
                    last_sent=entry.last_sent,
                    messages=dict(entry.messages),
                    stored_bytes=entry.stored_bytes,
                    registrations={
                        name: RegistrationState(r.address, r.begin, r.confirmed, r.anticipated)
                        for name, r in entry.registrations.items()
                    },
                )
                for subject, entry in self.subjects.items()
            },
            disallowed=set(self.disallowed),
            sources={
                key: SourceState(s.address, s.confirmed, set(s.done))
                for key, s in self.sources.items()
            },
        )

    def subject(self, subject: str) -> SenderSubject:
        """The entry for an outbound subject, created empty if new."""
        entry = self.subjects.get(subject)
        if entry is None:
            entry = self.subjects[subject] = SenderSubject()
        return entry


def _subject_mark(state: LedgerState, r: SubjectMark) -> None:
    entry = state.subject(r.subject)
    entry.last_sent = r.last_sent
    # Earlier releases marked every inbox replied to; those entries go on replay.
    _forget_spent_inbox(state, r.subject, entry)


def _stored_message(state: LedgerState, r: StoredMessage) -> None:
    entry = state.subject(r.subject)
    messages = entry.messages
    old = messages.get(r.sequence)
    if old is not None:
        entry.stored_bytes -= len(old.payload)
    messages[r.sequence] = r
    entry.stored_bytes += len(r.payload)
    if r.sequence > entry.last_sent:
        entry.last_sent = r.sequence


def is_inbox(subject: str) -> bool:
    """An inbox subject: unique to one transport's life, never reused after it."""
    return subject.startswith("_INBOX.")


def _forget_spent_inbox(state: LedgerState, subject: str, entry: SenderSubject) -> None:
    """An inbox's entry goes once it holds nothing: the inbox will never be used again."""
    if not entry.messages and not entry.registrations and is_inbox(subject):
        del state.subjects[subject]


def _message_removed(state: LedgerState, r: MessageRemoved) -> None:
    entry = state.subjects.get(r.subject)
    if entry is not None:
        old = entry.messages.pop(r.sequence, None)
        if old is not None:
            entry.stored_bytes -= len(old.payload)
        _forget_spent_inbox(state, r.subject, entry)


def _messages_removed(state: LedgerState, r: MessagesRemoved) -> None:
    entry = state.subjects.get(r.subject)
    if entry is None:
        return
    messages = entry.messages
    removed = 0
    if r.last - r.first < len(messages):
        for seq in range(r.first, r.last + 1):
            old = messages.pop(seq, None)
            if old is not None:
                removed += len(old.payload)
    else:
        for seq in [s for s in messages if r.first <= s <= r.last]:
            removed += len(messages.pop(seq).payload)
    entry.stored_bytes -= removed
    _forget_spent_inbox(state, r.subject, entry)


def _registration(state: LedgerState, r: Registration) -> None:
    entry = state.subject(r.subject)
    if r.last_sent > entry.last_sent:
        entry.last_sent = r.last_sent
    entry.registrations[r.listener] = RegistrationState(
        address=r.address, begin=r.begin, confirmed=r.confirmed, anticipated=r.anticipated
    )


def _listener_confirmed(state: LedgerState, r: ListenerConfirmed) -> None:
    entry = state.subjects.get(r.subject)
    reg = entry.registrations.get(r.listener) if entry is not None else None
    if reg is not None and r.sequence > reg.confirmed:
        reg.confirmed = r.sequence


def _registration_removed(state: LedgerState, r: RegistrationRemoved) -> None:
    entry = state.subjects.get(r.subject)
    if entry is not None:
        entry.registrations.pop(r.listener, None)
        _forget_spent_inbox(state, r.subject, entry)


def _disallowed(state: LedgerState, r: Disallowed) -> None:
    state.disallowed.add(r.listener)


def _allowed(state: LedgerState, r: Allowed) -> None:
    state.disallowed.discard(r.listener)


def _source(state: LedgerState, r: Source) -> None:
    key = (r.sender, r.subject)
    old = state.sources.get(key)
    done = {seq for seq in old.done if seq > r.confirmed} if old is not None else set()
    state.sources[key] = SourceState(address=r.address, confirmed=r.confirmed, done=done)


def _source_confirmed(state: LedgerState, r: SourceConfirmed) -> None:
    source = state.sources.get((r.sender, r.subject))
    if source is not None and r.sequence > source.confirmed:
        source.confirmed = r.sequence
        if source.done:
            source.done = {seq for seq in source.done if seq > r.sequence}


def _source_done(state: LedgerState, r: SourceDone) -> None:
    source = state.sources.get((r.sender, r.subject))
    if source is not None and r.sequence > source.confirmed:
        source.done.add(r.sequence)


def _source_removed(state: LedgerState, r: SourceRemoved) -> None:
    state.sources.pop((r.sender, r.subject), None)


_APPLY: dict[type, Any] = {
    SubjectMark: _subject_mark,
    StoredMessage: _stored_message,
    MessageRemoved: _message_removed,
    MessagesRemoved: _messages_removed,
    Registration: _registration,
    ListenerConfirmed: _listener_confirmed,
    RegistrationRemoved: _registration_removed,
    Disallowed: _disallowed,
    Allowed: _allowed,
    Source: _source,
    SourceConfirmed: _source_confirmed,
    SourceDone: _source_done,
    SourceRemoved: _source_removed,
}
