"""The performer's side of remote operations: duplicate detection, result retention, verify.

Every invocation the performer accepts gets a record keyed by its id, made
*before* the handler runs (the driver persists it first, see
:mod:`~rvasync.protocol.rops.outputs`). The record is what makes a retried
invocation harmless:

* ``EXECUTING``: the handler runs; a copy is ignored (the answer will come).
* ``DONE``: the outcome is kept; a copy, or a verify, gets it again. On the
  3-way service the result waits for its acknowledgment: sent again every
  ``ack_timeout`` (``result_retries`` times), then the invoker is asked
  (``RVERIFY``); an invoker that does not hold it gets the record marked
  ``UNCONFIRMED`` and a report presented (the performer's non-delivery
  report).
* ``ACKED``: the 3-way acknowledgment came; the result bytes are dropped,
  the id is still remembered.
* ``FENCED``: a verify asked about an id never seen; it is recorded as "will
  never be performed", so a late copy of the invocation is refused. This is
  what lets an invoker that ran out of retries conclude "not executed".
* ``INTERRUPTED``: restored from a state file in which the handler had
  started but not finished: the effect is unknown, and every copy or verify
  is answered with the permanent ``interrupted`` error (never run again).

A transient error from the handler means "not performed, try later": the
record is removed so the retry runs the handler again. Records are forgotten
``Retention.window`` seconds after their last change; at most
``Retention.max_records`` are held, and an invocation that finds no room is
refused with a transient ``busy`` error instead of evicting anything early.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass
from typing import Any

from rvasync.protocol.rops.outputs import (
    BUSY,
    INTERRUPTED,
    Alarm,
    Execute,
    Outcome,
    Outputs,
    Report,
    ReportKind,
    Send,
)
from rvasync.protocol.rops.params import Retention
from rvasync.protocol.rops.pdu import (
    K_ACK,
    K_ERROR,
    K_INVOKE,
    K_RESULT,
    K_RVERIFY,
    K_RVERIFY_REPLY,
    K_VERIFY,
    K_VERIFY_REPLY,
    V_ACKNOWLEDGED,
    V_BUSY,
    V_EXECUTING,
    V_KNOWN,
    V_NOT_EXECUTED,
    V_PENDING,
    Pdu,
    VerifyStatus,
    new_pdu,
)

# Enum members as module globals (the _X_ prefixes name their enum; Kind and
# VerifyStatus come from pdu.py as K_ and V_), read per message: see pdu.py.
_R_RESULT_UNCONFIRMED = ReportKind.RESULT_UNCONFIRMED


__all__ = ["PState", "PerformerCore", "PerformerStats"]


class PState(enum.IntEnum):
    EXECUTING = 1
    DONE = 2
    ACKED = 3
    FENCED = 4
    INTERRUPTED = 5
    UNCONFIRMED = 6


_P_ACKED, _P_DONE, _P_EXECUTING, _P_FENCED, _P_INTERRUPTED, _P_UNCONFIRMED = (
    PState.ACKED,
    PState.DONE,
    PState.EXECUTING,
    PState.FENCED,
    PState.INTERRUPTED,
    PState.UNCONFIRMED,
)


@dataclass(slots=True)
class _Record:
    invoker: str
    operation: str
    handshake: int
    state: PState
    expires: float
    outcome: Outcome | None = None
    ack_deadline: float | None = None
    result_sends: int = 0
    rverify_sends: int = 0
    reply: str | None = None
    """Where the invocation's first answer goes (its reply address); not persisted."""

    def to_list(self) -> list[Any]:
        return [
            self.invoker,
            self.operation,
            self.handshake,
            int(self.state),
            self.expires,
            None if self.outcome is None else self.outcome.to_list(),
            self.ack_deadline,
            self.result_sends,
            self.rverify_sends,
        ]

    @classmethod
    def from_list(cls, items: list[Any]) -> _Record:
        invoker, operation, hs, state, expires, outcome, ack_deadline, sends, rsends = items
        return cls(
            str(invoker),
            str(operation),
            int(hs),
            PState(state),
            float(expires),
            None if outcome is None else Outcome.from_list(outcome),
            None if ack_deadline is None else float(ack_deadline),
            int(sends),
            int(rsends),
        )


@dataclass(slots=True)
class PerformerStats:
    """Counters a driver exposes (``RemoteOps.stats``)."""

    executed: int = 0
    duplicates: int = 0
    fenced: int = 0
    refused_busy: int = 0
    results_resent: int = 0
    acknowledged: int = 0
    unconfirmed: int = 0
    expired: int = 0


def _due(rec: _Record) -> float | None:
    """When the timer next has work for ``rec``: its acknowledgment wait, else its expiry."""
    if rec.ack_deadline is not None:
        return rec.ack_deadline
    if rec.state is _P_EXECUTING:
        return None  # never expires while its handler runs
    return rec.expires


class PerformerCore:
    """Performer role of endpoint ``name``; see the module docstring."""

    def __init__(self, name: str, retention: Retention, alarm: Alarm | None = None) -> None:
        self.name = name
        self.alarm = Alarm() if alarm is None else alarm
        """Told of every due time indexed (see :class:`Alarm`)."""
        self.retention = retention
        self._records: dict[str, _Record] = {}
        # Timer index: (due, id) entries, stale ones skipped lazily; _pushed avoids repeats.
        self._heap: list[tuple[float, str]] = []
        self._pushed: dict[str, float] = {}
        self.stats = PerformerStats()
        self.version = 0
        """Bumped at every change a state file must hold."""

    # --- inputs ---

    def receive(self, pdu: Pdu, now: float, reply: str | None = None) -> Outputs:
        """A PDU addressed to the performer role (INVOKE, ACK, VERIFY, RVERIFY_REPLY).

        ``reply``: the address an INVOKE came with, if any (a request inbox of
        the driver's); its answer goes there (``Send.via``). Acknowledgments an
        INVOKE or ACK carries (``Pdu.acks``) are taken first.
        """
        ex = self.accept(pdu, now, reply)
        out = Outputs()
        if ex is not None:
            out.executes.append(ex)
            return out
        kind = pdu.kind
        if pdu.acks:
            for acked in pdu.acks:
                self._on_ack(acked, pdu.src, now)
        if kind is K_INVOKE:
            self._on_invoke(pdu, now, out, reply)  # a copy, or no room: accept took the rest
        elif kind is K_ACK:
            self._on_ack(pdu.invoke_id, pdu.src, now)
        elif kind is K_VERIFY:
            self._on_verify(pdu, now, out)
            self._touch(pdu.invoke_id)
        elif kind is K_RVERIFY_REPLY:
            self._on_rverify_reply(pdu, now, out)
            self._touch(pdu.invoke_id)
        # INVOKE: a new record has no due time while its handler runs, a copy changes none.
        return out

    def accept(self, pdu: Pdu, now: float, reply: str | None = None) -> Execute | None:
        """:meth:`receive` for a driver's per-call path: a new INVOKE with room for its record.

        Records it (before its handler runs, as receive does), takes the
        acknowledgments it carries and returns the :class:`Execute` that is the
        whole of receive's output for it, without an :class:`Outputs`. Returns
        None, having changed nothing, for any other PDU (a copy, no room,
        another kind): the driver then calls :meth:`receive`.
        """
        if pdu.kind is not K_INVOKE:
            return None
        invoke_id = pdu.invoke_id
        records = self._records
        if invoke_id in records or len(records) >= self.retention.max_records:
            return None
        src = pdu.src
        if pdu.acks:  # acknowledgments neither add nor remove records: the test above stands
            for acked in pdu.acks:
                self._on_ack(acked, src, now)
        self.version += 1
        operation = pdu.operation
        records[invoke_id] = _Record(
            src,
            operation,
            pdu.handshake,
            _P_EXECUTING,
            now + self.retention.window,
            None,
            None,
            0,
            0,
            reply,  # positional: a dataclass's keyword arguments cost more
        )
        return Execute(invoke_id, src, operation, pdu.body)

    def complete(self, invoke_id: str, outcome: Outcome, now: float) -> Outputs:
        """The handler of ``invoke_id`` finished with ``outcome``."""
        out = Outputs()
        send = self.answer(invoke_id, outcome, now)
        if send is not None:
            out.sends.append(send)
        return out

    def answer(self, invoke_id: str, outcome: Outcome, now: float) -> Send | None:
        """:meth:`complete` for a driver's per-call path: the one :class:`Send` it outputs.

        A completion only ever answers its invoker (or nothing, for an
        invocation no longer executing), so no :class:`Outputs` is made to hold it.
        """
        rec = self._records.get(invoke_id)
        if rec is None or rec.state is not _P_EXECUTING:
            return None
        self.version += 1
        if not outcome.ok and outcome.transient:
            # Not performed: forget it so that the retry runs the handler again.
            del self._records[invoke_id]
            self._pushed.pop(invoke_id, None)
            return Send(rec.invoker, self._answer(invoke_id, rec, outcome), rec.reply)
        self.stats.executed += 1
        rec.state = _P_DONE
        rec.outcome = outcome
        due = rec.expires = now + self.retention.window
        if rec.handshake == 3:
            due = rec.ack_deadline = now + self.retention.ack_timeout
            rec.result_sends = 1
        # self._touch(invoke_id), written out (this runs for every invocation performed)
        if self._pushed.get(invoke_id) != due:
            self._pushed[invoke_id] = due
            heapq.heappush(self._heap, (due, invoke_id))
            alarm = self.alarm
            if due < alarm.earliest:
                alarm.earliest = due
        if outcome.ok:  # self._answer(...), written out
            answer = new_pdu(
                K_RESULT,
                self.name,
                invoke_id,
                rec.operation,
                rec.handshake,
                outcome.body,
                "",
                False,
                "",
                None,
                (),
            )
        else:
            answer = self._error_pdu(invoke_id, rec.operation, rec.handshake, outcome)
        reply = rec.reply
        rec.reply = None  # later copies of the answer go to the invoker's endpoint
        return Send(rec.invoker, answer, reply)

    def handle_timer(self, now: float) -> Outputs:
        """Resend unacknowledged results, ask invokers, forget expired records."""
        out = Outputs()
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, invoke_id = heapq.heappop(heap)
            rec = self._records.get(invoke_id)
            if rec is None or _due(rec) != when:
                continue  # stale: the record changed or went since this entry was made
            self._pushed.pop(invoke_id, None)
            if rec.ack_deadline is not None:
                self._ack_timer(invoke_id, rec, now, out)
                self._touch(invoke_id)
            else:
                self.version += 1
                self.stats.expired += 1
                del self._records[invoke_id]
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` next has work (None: nothing pending)."""
        heap = self._heap
        while heap:
            when, invoke_id = heap[0]
            rec = self._records.get(invoke_id)
            if rec is not None and _due(rec) == when:
                return when
            heapq.heappop(heap)
        return None

    def _touch(self, invoke_id: str) -> None:
        """Index the record's next due time, if it has one and it is not indexed yet."""
        rec = self._records.get(invoke_id)
        if rec is None:
            return
        # _due(rec), written out (this runs for every result)
        due = rec.ack_deadline
        if due is None and rec.state is not _P_EXECUTING:
            due = rec.expires
        if due is not None and self._pushed.get(invoke_id) != due:
            self._pushed[invoke_id] = due
            heapq.heappush(self._heap, (due, invoke_id))
            alarm = self.alarm
            if due < alarm.earliest:
                alarm.earliest = due

    # --- introspection and persistence ---

    def state_of(self, invoke_id: str) -> PState | None:
        rec = self._records.get(invoke_id)
        return None if rec is None else rec.state

    def __len__(self) -> int:
        return len(self._records)

    def snapshot(self) -> dict[str, list[Any]]:
        return {invoke_id: rec.to_list() for invoke_id, rec in self._records.items()}

    def restore(self, data: dict[str, list[Any]]) -> None:
        """Load records from a state file; a handler that was running has an unknown effect."""
        self._records = {}
        self._heap = []
        self._pushed = {}
        for invoke_id, items in data.items():
            rec = _Record.from_list(items)
            if rec.state is _P_EXECUTING:
                rec.state = _P_INTERRUPTED
                rec.outcome = Outcome.error(
                    INTERRUPTED,
                    detail="the performer restarted while performing this invocation; "
                    "whether it took effect is unknown, and it will not be performed again",
                )
                self.version += 1
            self._records[str(invoke_id)] = rec
            self._touch(str(invoke_id))

    # --- the handlers of each PDU ---

    def _on_invoke(self, pdu: Pdu, now: float, out: Outputs, reply: str | None) -> None:
        """A copy of a known invocation, or a new one finding no room (receive records the rest)."""
        rec = self._records.get(pdu.invoke_id)
        if rec is None:
            self.stats.refused_busy += 1
            busy = Outcome.error(
                BUSY, transient=True, detail="the performer holds as many records as it may"
            )
            out.sends.append(
                Send(pdu.src, self._error_pdu(pdu.invoke_id, pdu.operation, 2, busy), reply)
            )
            return
        self.stats.duplicates += 1
        self._answer_known(pdu.invoke_id, rec, out, reply)

    def _on_verify(self, pdu: Pdu, now: float, out: Outputs) -> None:
        rec = self._records.get(pdu.invoke_id)
        if rec is not None:
            self._answer_known(pdu.invoke_id, rec, out)
            return
        if len(self._records) >= self.retention.max_records:
            self.stats.refused_busy += 1
            out.sends.append(Send(pdu.src, self._status(pdu.invoke_id, V_BUSY)))
            return
        self.version += 1
        self.stats.fenced += 1
        self._records[pdu.invoke_id] = _Record(
            pdu.src, pdu.operation, 2, _P_FENCED, now + self.retention.window
        )
        out.sends.append(Send(pdu.src, self._status(pdu.invoke_id, V_NOT_EXECUTED)))

    def _answer_known(
        self, invoke_id: str, rec: _Record, out: Outputs, reply: str | None = None
    ) -> None:
        """Answer a copy (or a verify) of a known invocation, at ``reply`` when it has one."""
        state = rec.state
        if state is _P_EXECUTING:
            answer = self._status(invoke_id, V_EXECUTING)
        elif state is _P_FENCED:
            answer = self._status(invoke_id, V_NOT_EXECUTED)
        elif state is _P_ACKED:
            answer = self._status(invoke_id, V_ACKNOWLEDGED)
        else:  # DONE, UNCONFIRMED, INTERRUPTED: the outcome, again
            assert rec.outcome is not None
            self.stats.results_resent += 1
            answer = self._answer(invoke_id, rec, rec.outcome)
        out.sends.append(Send(rec.invoker, answer, reply))

    def _on_ack(self, invoke_id: str, src: str, now: float) -> None:
        rec = self._records.get(invoke_id)
        if rec is None or rec.invoker != src:
            return
        if rec.state not in (_P_DONE, _P_UNCONFIRMED, _P_INTERRUPTED):
            return
        self._acknowledged(rec, now)
        self._touch(invoke_id)

    def _acknowledged(self, rec: _Record, now: float) -> None:
        self.version += 1
        self.stats.acknowledged += 1
        rec.state = _P_ACKED
        rec.outcome = None
        rec.ack_deadline = None
        rec.expires = now + self.retention.window

    def _on_rverify_reply(self, pdu: Pdu, now: float, out: Outputs) -> None:
        rec = self._records.get(pdu.invoke_id)
        if rec is None or rec.state is not _P_DONE or rec.ack_deadline is None:
            return
        status = pdu.status
        if status is V_KNOWN:
            self._acknowledged(rec, now)
        elif status is V_PENDING:
            # The invoker still waits: our results were lost, its question got through. Again.
            assert rec.outcome is not None
            self.stats.results_resent += 1
            rec.ack_deadline = now + self.retention.ack_timeout
            out.sends.append(Send(rec.invoker, self._answer(pdu.invoke_id, rec, rec.outcome)))
        else:
            self._unconfirmed(pdu.invoke_id, rec, now, out, "the invoker does not hold the result")

    def _ack_timer(self, invoke_id: str, rec: _Record, now: float, out: Outputs) -> None:
        assert rec.outcome is not None
        self.version += 1
        if rec.result_sends <= self.retention.result_retries:
            rec.result_sends += 1
            self.stats.results_resent += 1
            rec.ack_deadline = now + self.retention.ack_timeout
            out.sends.append(Send(rec.invoker, self._answer(invoke_id, rec, rec.outcome)))
        elif rec.rverify_sends < self.retention.verify_attempts:
            rec.rverify_sends += 1
            rec.ack_deadline = now + self.retention.ack_timeout
            out.sends.append(
                Send(rec.invoker, Pdu(K_RVERIFY, self.name, invoke_id, rec.operation, 3))
            )
        else:
            self._unconfirmed(invoke_id, rec, now, out, "the invoker never acknowledged the result")

    def _unconfirmed(
        self, invoke_id: str, rec: _Record, now: float, out: Outputs, why: str
    ) -> None:
        self.version += 1
        self.stats.unconfirmed += 1
        rec.state = _P_UNCONFIRMED
        rec.ack_deadline = None
        rec.expires = now + self.retention.window
        out.reports.append(
            Report(_R_RESULT_UNCONFIRMED, invoke_id, rec.invoker, rec.operation, why)
        )

    # --- PDU makers ---

    def _answer(self, invoke_id: str, rec: _Record, outcome: Outcome) -> Pdu:
        if outcome.ok:
            return Pdu(K_RESULT, self.name, invoke_id, rec.operation, rec.handshake, outcome.body)
        return self._error_pdu(invoke_id, rec.operation, rec.handshake, outcome)

    def _error_pdu(self, invoke_id: str, operation: str, handshake: int, outcome: Outcome) -> Pdu:
        return Pdu(
            K_ERROR,
            self.name,
            invoke_id,
            operation,
            handshake,
            code=outcome.code,
            transient=outcome.transient,
            detail=outcome.detail,
        )

    def _status(self, invoke_id: str, status: VerifyStatus) -> Pdu:
        return Pdu(K_VERIFY_REPLY, self.name, invoke_id, status=status)
