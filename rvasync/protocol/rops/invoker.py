"""The invoker's side of remote operations: ids, retries with backoff, verify, acknowledgment.

An invocation is sent, then sent again (same id) whenever no answer comes
within the policy's wait, up to its retry budget. Its ending is always one
of the :class:`~rvasync.protocol.rops.outputs.Settled` cases:

* a RESULT, or a permanent ERROR: the performer's answer. On the 3-way
  service the invoker acknowledges it (and again whenever the performer sends
  it again, since the acknowledgment may have been lost). The first
  acknowledgment of an answer is held back a little: it rides on the next
  INVOKE to the same performer (``Pdu.acks``), or leaves in an ACK of its own
  when the driver calls :meth:`InvokerCore.flush_acks` (once it has handed the
  answer to the application), whichever comes first. A caller invoking in a
  loop thus pays no message for its acknowledgments.
* after the retry budget, a VERIFY: the performer either answers with the
  outcome, or says it never performed the invocation (and fences the id so a
  late copy is refused: then "not executed" is a fact, not a guess), or says
  nothing within ``verify_attempts`` waits: "unknown".

A transient ERROR means the performer did not perform it; the invocation is
sent again at the end of the current wait. Invocation ids are
``<incarnation>.<n>``: the driver gives every start of an endpoint a fresh
random incarnation, so ids never repeat across restarts, with or without a
state file.

Settled invocations are remembered ``Retention.window`` seconds, to
acknowledge a result the performer sends again and to answer its RVERIFY;
one settled as UNKNOWN answers "unknown" and reports a result that still
arrives (nothing performed goes unreported).
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass
from typing import Any

from rvasync.protocol.rops.outputs import (
    Alarm,
    Completion,
    Outcome,
    Outputs,
    QueryAnswer,
    Report,
    ReportKind,
    Send,
    Settled,
)
from rvasync.protocol.rops.params import Retention, RetryPolicy
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
    V_UNKNOWN,
    Pdu,
    VerifyStatus,
    new_pdu,
)

# Enum members as module globals (the _X_ prefixes name their enum; Kind and
# VerifyStatus come from pdu.py as K_ and V_), read per message: see pdu.py.
_R_RESULT_LATE = ReportKind.RESULT_LATE


_S_ACKNOWLEDGED, _S_ERROR, _S_NOT_EXECUTED, _S_RESULT, _S_UNKNOWN = (
    Settled.ACKNOWLEDGED,
    Settled.ERROR,
    Settled.NOT_EXECUTED,
    Settled.RESULT,
    Settled.UNKNOWN,
)


__all__ = ["IPhase", "InvokerCore", "InvokerStats"]


class IPhase(enum.IntEnum):
    INVOKING = 1
    VERIFYING = 2
    SETTLED = 3


_I_INVOKING, _I_SETTLED, _I_VERIFYING = (IPhase.INVOKING, IPhase.SETTLED, IPhase.VERIFYING)


@dataclass(slots=True)
class _Invocation:
    peer: str
    operation: str
    handshake: int
    body: bytes
    policy: RetryPolicy
    phase: IPhase
    deadline: float
    attempts: int = 1
    verifies: int = 0
    last_error: Outcome | None = None
    how: Settled | None = None
    outcome: Outcome | None = None

    def to_list(self) -> list[Any]:
        return [
            self.peer,
            self.operation,
            self.handshake,
            self.body if self.phase is not _I_SETTLED else b"",
            self.policy.to_list(),
            int(self.phase),
            self.deadline,
            self.attempts,
            self.verifies,
            None if self.last_error is None else self.last_error.to_list(),
            None if self.how is None else self.how.value,
            None if self.outcome is None else self.outcome.to_list(),
        ]

    @classmethod
    def from_list(cls, items: list[Any]) -> _Invocation:
        (peer, op, hs, body, policy, phase, deadline, attempts, verifies, last, how, outcome) = (
            items
        )
        return cls(
            str(peer),
            str(op),
            int(hs),
            bytes(body),
            RetryPolicy.from_list(policy),
            IPhase(phase),
            float(deadline),
            int(attempts),
            int(verifies),
            None if last is None else Outcome.from_list(last),
            None if how is None else Settled(how),
            None if outcome is None else Outcome.from_list(outcome),
        )


@dataclass(slots=True)
class _Query:
    peer: str
    policy: RetryPolicy
    deadline: float
    attempts: int = 1


@dataclass(slots=True)
class InvokerStats:
    invoked: int = 0
    retried: int = 0
    verified: int = 0
    results: int = 0
    errors: int = 0
    not_executed: int = 0
    unknown: int = 0
    late_results: int = 0
    expired: int = 0


class InvokerCore:
    """Invoker role of endpoint ``name`` in its start number ``incarnation``."""

    def __init__(
        self, name: str, incarnation: str, retention: Retention, alarm: Alarm | None = None
    ) -> None:
        self.name = name
        self.alarm = Alarm() if alarm is None else alarm
        """Told of every due time indexed (see :class:`Alarm`)."""
        self.incarnation = incarnation
        self.retention = retention
        self._seq = 0
        self._invocations: dict[str, _Invocation] = {}
        # Timer index of the invocations: (deadline, id), stale entries skipped lazily.
        self._heap: list[tuple[float, str]] = []
        self._pushed: dict[str, float] = {}
        self._queries: dict[tuple[str, str], _Query] = {}
        # Acknowledgments not sent yet, per performer: see flush_acks.
        self._acks: dict[str, list[str]] = {}
        self.stats = InvokerStats()
        self.version = 0

    # --- application calls ---

    def invoke(
        self,
        peer: str,
        operation: str,
        body: bytes,
        handshake: int,
        policy: RetryPolicy,
        now: float,
    ) -> tuple[str, Outputs]:
        """Start an invocation; returns its id and the INVOKE to send."""
        invoke_id, pdu = self.start(peer, operation, body, handshake, policy, now)
        out = Outputs()
        out.sends.append(Send(peer, pdu))
        return invoke_id, out

    def start(
        self,
        peer: str,
        operation: str,
        body: bytes,
        handshake: int,
        policy: RetryPolicy,
        now: float,
    ) -> tuple[str, Pdu]:
        """:meth:`invoke` for a driver's per-call path: the INVOKE itself, to ``peer``.

        An invocation's start only ever sends its INVOKE, so no :class:`Outputs`
        (five lists) and :class:`Send` are made to hold it.
        """
        self._seq += 1
        invoke_id = f"{self.incarnation}.{self._seq}"
        deadline = now + policy.timeout  # policy.wait(1), written out
        self._invocations[invoke_id] = _Invocation(
            peer, operation, handshake, body, policy, _I_INVOKING, deadline
        )
        # self._index(invoke_id, deadline), written out (a new id is never indexed yet)
        self._pushed[invoke_id] = deadline
        heapq.heappush(self._heap, (deadline, invoke_id))
        alarm = self.alarm
        if deadline < alarm.earliest:
            alarm.earliest = deadline
        self.version += 1
        self.stats.invoked += 1
        acks = self._acks.pop(peer, None) if self._acks else None
        pdu = new_pdu(
            K_INVOKE,
            self.name,
            invoke_id,
            operation,
            handshake,
            body,
            "",
            False,
            "",
            None,
            () if acks is None else tuple(acks),
        )
        return invoke_id, pdu

    @property
    def acks_pending(self) -> bool:
        """True while some acknowledgment waits for :meth:`flush_acks` or a next INVOKE."""
        return bool(self._acks)

    def flush_acks(self) -> Outputs:
        """Send every acknowledgment held back: one ACK PDU per performer.

        The driver calls this soon after it delivered the answers that made
        them (a loop turn later), so that an acknowledgment waits for a next
        invocation only as long as that costs the caller nothing. Not calling
        it is safe, only slower: the performer sends an unacknowledged result
        again, and that copy is acknowledged at once.
        """
        out = Outputs()
        for peer, ids in self._acks.items():
            out.sends.append(Send(peer, Pdu(K_ACK, self.name, ids[0], "", 3, acks=tuple(ids[1:]))))
        self._acks.clear()
        return out

    def query(self, peer: str, invoke_id: str, policy: RetryPolicy, now: float) -> Outputs:
        """An application's verify: ask ``peer`` what it knows of ``invoke_id``.

        Caution, by design: a performer that never saw the id fences it, so
        the answer NOT_EXECUTED stays true.
        """
        out = Outputs()
        key = (peer, invoke_id)
        if key not in self._queries:
            q = self._queries[key] = _Query(peer, policy, now + policy.wait(1))
            self.alarm.note(q.deadline)
        out.sends.append(Send(peer, Pdu(K_VERIFY, self.name, invoke_id)))
        return out

    # --- inputs ---

    def receive(self, pdu: Pdu, now: float) -> Outputs:
        """A PDU addressed to the invoker role (RESULT, ERROR, VERIFY_REPLY, RVERIFY)."""
        kind = pdu.kind
        if kind is K_RESULT and not self._queries:
            invoke_id = pdu.invoke_id
            inv = self._invocations.get(invoke_id)
            if inv is not None and inv.phase is not _I_SETTLED and inv.peer == pdu.src:
                out = Outputs()
                out.completions.append(self._result(invoke_id, inv, pdu.body, now))
                return out
        out = Outputs()
        if kind is K_RVERIFY:
            out.sends.append(Send(pdu.src, self._rverify_answer(pdu)))
            return out
        if kind is K_RESULT:
            outcome: Outcome | None = Outcome(True, pdu.body)
        elif kind is K_ERROR:
            outcome = Outcome.error(pdu.code, transient=pdu.transient, detail=pdu.detail)
        elif kind is K_VERIFY_REPLY:
            outcome = None
        else:
            return out
        if self._queries:
            self._answer_query(pdu, outcome, out)
        inv = self._invocations.get(pdu.invoke_id)
        if inv is None or inv.peer != pdu.src:
            return out
        if outcome is None:
            self._on_status(pdu.invoke_id, inv, pdu.status, now, out)
        else:
            self._on_outcome(pdu.invoke_id, inv, outcome, now, out)
        if pdu.invoke_id in self._invocations:
            self._index(pdu.invoke_id, inv.deadline)
        return out

    def take_result(self, pdu: Pdu, now: float) -> Completion | None:
        """:meth:`receive` for a driver's per-call path: the RESULT of an invocation not settled.

        Settles it and returns its :class:`Completion`, the whole of receive's
        output for it, without an :class:`Outputs`. Returns None, having
        changed nothing, for any other PDU: the driver then calls :meth:`receive`.
        """
        if pdu.kind is not K_RESULT or self._queries:
            return None
        invoke_id = pdu.invoke_id
        inv = self._invocations.get(invoke_id)
        if inv is None or inv.phase is _I_SETTLED or inv.peer != pdu.src:
            return None
        return self._result(invoke_id, inv, pdu.body, now)

    def handle_timer(self, now: float) -> Outputs:
        out = Outputs()
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, invoke_id = heapq.heappop(heap)
            inv = self._invocations.get(invoke_id)
            if inv is None or inv.deadline != when:
                continue  # stale entry
            self._pushed.pop(invoke_id, None)
            self._deadline_passed(invoke_id, inv, now, out)
            self._touch(invoke_id)
        for key, q in list(self._queries.items()):
            if q.deadline > now:
                continue
            if q.attempts < q.policy.retries + q.policy.verify_attempts:
                q.attempts += 1
                q.deadline = now + q.policy.wait(q.attempts)
                out.sends.append(Send(q.peer, Pdu(K_VERIFY, self.name, key[1])))
            else:
                del self._queries[key]
                out.answers.append(QueryAnswer(key[1], key[0], None))
        return out

    def _deadline_passed(self, invoke_id: str, inv: _Invocation, now: float, out: Outputs) -> None:
        self.version += 1
        if inv.phase is _I_SETTLED:
            self.stats.expired += 1
            del self._invocations[invoke_id]
        elif inv.phase is _I_INVOKING:
            if inv.attempts <= inv.policy.retries:
                inv.attempts += 1
                self.stats.retried += 1
                inv.deadline = now + inv.policy.wait(inv.attempts)
                out.sends.append(Send(inv.peer, self._invoke_pdu(invoke_id, inv)))
            else:
                self._verify(invoke_id, inv, now, out)
        elif inv.verifies < inv.policy.verify_attempts:
            self._verify(invoke_id, inv, now, out)
        else:
            self.stats.unknown += 1
            self._settle(invoke_id, inv, _S_UNKNOWN, None, now, out)

    def next_deadline(self) -> float | None:
        best: float | None = None
        heap = self._heap
        while heap:
            when, invoke_id = heap[0]
            inv = self._invocations.get(invoke_id)
            if inv is not None and inv.deadline == when:
                best = when
                break
            heapq.heappop(heap)
        for q in self._queries.values():
            if best is None or q.deadline < best:
                best = q.deadline
        return best

    def _touch(self, invoke_id: str) -> None:
        inv = self._invocations.get(invoke_id)
        if inv is not None:
            self._index(invoke_id, inv.deadline)

    def _index(self, invoke_id: str, due: float) -> None:
        """Index ``due`` as the deadline of ``invoke_id`` (unless it already is)."""
        if self._pushed.get(invoke_id) != due:
            self._pushed[invoke_id] = due
            heapq.heappush(self._heap, (due, invoke_id))
            alarm = self.alarm
            if due < alarm.earliest:
                alarm.earliest = due

    # --- introspection and persistence ---

    def phase_of(self, invoke_id: str) -> IPhase | None:
        inv = self._invocations.get(invoke_id)
        return None if inv is None else inv.phase

    def settled(self, invoke_id: str) -> Completion | None:
        """The ending of a settled invocation still remembered, else None."""
        inv = self._invocations.get(invoke_id)
        if inv is None or inv.how is None:
            return None
        return Completion(invoke_id, inv.how, inv.outcome, inv.last_error)

    def unsettled(self) -> list[tuple[str, str, str, bytes]]:
        """``(invoke_id, peer, operation, argument)`` of every invocation not yet settled."""
        return [
            (invoke_id, inv.peer, inv.operation, inv.body)
            for invoke_id, inv in self._invocations.items()
            if inv.phase is not _I_SETTLED
        ]

    def snapshot(self) -> dict[str, Any]:
        return {
            "invocations": {i: inv.to_list() for i, inv in self._invocations.items()},
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load the invocations of an earlier start; unsettled ones carry on (ids keep theirs)."""
        self._invocations = {
            str(i): _Invocation.from_list(items) for i, items in data["invocations"].items()
        }
        self._heap = []
        self._pushed = {}
        for invoke_id in self._invocations:
            self._touch(invoke_id)

    # --- what each answer does ---

    def _on_outcome(
        self, invoke_id: str, inv: _Invocation, outcome: Outcome, now: float, out: Outputs
    ) -> None:
        if inv.phase is _I_SETTLED:
            if inv.how is _S_UNKNOWN and not (not outcome.ok and outcome.transient):
                # We gave up, yet it was performed: say so (and never acknowledge it).
                self.stats.late_results += 1
                out.reports.append(
                    Report(
                        _R_RESULT_LATE,
                        invoke_id,
                        inv.peer,
                        inv.operation,
                        "result" if outcome.ok else f"error {outcome.code}",
                    )
                )
            elif inv.handshake == 3 and inv.how in (_S_RESULT, _S_ERROR):
                out.sends.append(Send(inv.peer, self._ack_pdu(invoke_id, inv)))
            return
        if not outcome.ok and outcome.transient:
            if inv.last_error != outcome:
                self.version += 1
                inv.last_error = outcome
            return  # sent again when the current wait ends
        if outcome.ok:
            self.stats.results += 1
            self._settle(invoke_id, inv, _S_RESULT, outcome, now, out)
        else:
            self.stats.errors += 1
            self._settle(invoke_id, inv, _S_ERROR, outcome, now, out)
        if inv.handshake == 3:
            self._acks.setdefault(inv.peer, []).append(invoke_id)

    def _on_status(
        self,
        invoke_id: str,
        inv: _Invocation,
        status: VerifyStatus | None,
        now: float,
        out: Outputs,
    ) -> None:
        if inv.phase is _I_SETTLED:
            return
        if status is V_NOT_EXECUTED:
            if inv.phase is _I_VERIFYING:
                self.stats.not_executed += 1
                self._settle(invoke_id, inv, _S_NOT_EXECUTED, None, now, out)
            # While still invoking, a fence is someone else's verify: the next copy will tell.
        elif status is V_ACKNOWLEDGED:
            self._settle(invoke_id, inv, _S_ACKNOWLEDGED, None, now, out)
        elif status is V_EXECUTING:
            # Alive and working on it: wait a full round before asking again.
            self.version += 1
            inv.deadline = max(inv.deadline, now + inv.policy.wait(max(inv.attempts, 1)))

    def _result(self, invoke_id: str, inv: _Invocation, body: bytes, now: float) -> Completion:
        """The answer of most calls: the RESULT of an invocation not settled yet.

        What :meth:`receive`, :meth:`_on_outcome` and :meth:`_settle` do for
        it, written out in one call (this runs for every call that succeeds).
        """
        outcome = Outcome(True, body)
        self.stats.results += 1
        self.version += 1
        inv.phase = _I_SETTLED
        inv.how = _S_RESULT
        inv.outcome = outcome
        inv.body = b""
        due = inv.deadline = now + self.retention.window
        done = Completion(invoke_id, _S_RESULT, outcome, inv.last_error)
        if inv.handshake == 3:
            self._acks.setdefault(inv.peer, []).append(invoke_id)
        # self._index(invoke_id, due), written out
        if self._pushed.get(invoke_id) != due:
            self._pushed[invoke_id] = due
            heapq.heappush(self._heap, (due, invoke_id))
            alarm = self.alarm
            if due < alarm.earliest:
                alarm.earliest = due
        return done

    def _settle(
        self,
        invoke_id: str,
        inv: _Invocation,
        how: Settled,
        outcome: Outcome | None,
        now: float,
        out: Outputs,
    ) -> None:
        self.version += 1
        inv.phase = _I_SETTLED
        inv.how = how
        inv.outcome = outcome
        inv.body = b""
        inv.deadline = now + self.retention.window
        out.completions.append(Completion(invoke_id, how, outcome, inv.last_error))

    def _verify(self, invoke_id: str, inv: _Invocation, now: float, out: Outputs) -> None:
        inv.phase = _I_VERIFYING
        inv.verifies += 1
        self.stats.verified += 1
        inv.deadline = now + inv.policy.wait(inv.policy.retries + 1 + inv.verifies)
        out.sends.append(Send(inv.peer, Pdu(K_VERIFY, self.name, invoke_id, inv.operation)))

    def _answer_query(self, pdu: Pdu, outcome: Outcome | None, out: Outputs) -> None:
        q = self._queries.pop((pdu.src, pdu.invoke_id), None)
        if q is None:
            return
        if outcome is None and pdu.status in (V_EXECUTING, V_BUSY):
            self._queries[(pdu.src, pdu.invoke_id)] = q  # not an ending: keep asking
            return
        if outcome is not None and not outcome.ok and outcome.transient:
            self._queries[(pdu.src, pdu.invoke_id)] = q
            return
        out.answers.append(QueryAnswer(pdu.invoke_id, pdu.src, pdu.status, outcome))
        if outcome is not None and pdu.handshake == 3 and pdu.invoke_id not in self._invocations:
            # The application now holds the outcome: acknowledge it on the 3-way service.
            out.sends.append(Send(pdu.src, Pdu(K_ACK, self.name, pdu.invoke_id, pdu.operation, 3)))

    def _rverify_answer(self, pdu: Pdu) -> Pdu:
        inv = self._invocations.get(pdu.invoke_id)
        if inv is None or inv.peer != pdu.src:
            status = V_UNKNOWN
        elif inv.phase is not _I_SETTLED:
            status = V_PENDING
        elif inv.how in (_S_RESULT, _S_ERROR):
            status = V_KNOWN
        else:
            status = V_UNKNOWN
        return Pdu(K_RVERIFY_REPLY, self.name, pdu.invoke_id, pdu.operation, 3, status=status)

    def _invoke_pdu(self, invoke_id: str, inv: _Invocation) -> Pdu:
        return Pdu(K_INVOKE, self.name, invoke_id, inv.operation, inv.handshake, inv.body)

    def _ack_pdu(self, invoke_id: str, inv: _Invocation) -> Pdu:
        return Pdu(K_ACK, self.name, invoke_id, inv.operation, 3)
