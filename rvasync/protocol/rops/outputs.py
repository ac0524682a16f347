"""What the remote-operation cores hand their driver after each input.

The records below are made on every call, so they are plain (not frozen)
dataclasses, a frozen one's constructor costing several times as much; treat
them as immutable all the same.

A driver carries an :class:`Outputs` out in this order, and only once the
state that produced it is durable (when the endpoint keeps a state file):
send ``sends``, start ``executes`` (run the handlers), settle ``completions``
(wake the invokers waiting), present ``reports``. Holding the outputs until the
state is written is the write-ahead rule everything else rests on: a handler
never starts before its invocation is recorded, so a performer restarted
after a crash recognises the copy that follows, and an invocation never
leaves before it is recorded, so an invoker restarted after a crash can
still verify it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from rvasync.protocol.rops.pdu import Pdu, VerifyStatus

__all__ = [
    "Alarm",
    "Completion",
    "Execute",
    "Outcome",
    "Outputs",
    "QueryAnswer",
    "Report",
    "ReportKind",
    "Send",
    "Settled",
]

INTERRUPTED = "interrupted"
"""Error code of an invocation whose performer crashed while performing it."""
BUSY = "busy"
"""Transient error code of an invocation a full performer could not record."""


@dataclass(slots=True)
class Outcome:
    """How an invocation ended at the performer: a result, or an error."""

    ok: bool
    body: bytes = b""
    code: str = ""
    transient: bool = False
    detail: str = ""

    @classmethod
    def result(cls, body: bytes) -> Outcome:
        return cls(True, body)

    @classmethod
    def error(cls, code: str, *, transient: bool = False, detail: str = "") -> Outcome:
        return cls(False, b"", code, transient, detail)

    def to_list(self) -> list[object]:
        return [self.ok, self.body, self.code, self.transient, self.detail]

    @classmethod
    def from_list(cls, items: list[object]) -> Outcome:
        ok, body, code, transient, detail = items
        assert isinstance(body, bytes) and isinstance(code, str) and isinstance(detail, str)
        return cls(bool(ok), body, code, bool(transient), detail)


@dataclass(slots=True)
class Send:
    """Send ``pdu`` to the endpoint named ``dest``.

    ``via``: when set, the reply address the PDU being answered came with (the
    driver's request inbox); the driver sends there instead of to ``dest``'s
    endpoint subject, so the answer reaches the caller waiting on it directly.
    The core treats it as opaque and never keeps it across restarts.
    """

    dest: str
    pdu: Pdu
    via: str | None = None


@dataclass(slots=True)
class Execute:
    """Run the handler of ``operation`` on ``body``, then call ``PerformerCore.complete``."""

    invoke_id: str
    invoker: str
    operation: str
    body: bytes


class Settled(enum.Enum):
    """How an invocation ended for its invoker."""

    RESULT = "result"
    """The performer performed it; ``outcome`` holds the result."""
    ERROR = "error"
    """The performer answered a permanent error (the non-delivery report)."""
    NOT_EXECUTED = "not_executed"
    """No answer within the budget, and the performer confirmed it never ran it
    (and never will: the verify fenced the id)."""
    UNKNOWN = "unknown"
    """No answer within the budget, verify included: it may or may not have run."""
    ACKNOWLEDGED = "acknowledged"
    """The performer performed it and had its result acknowledged earlier (this
    invoker lost the result it acknowledged, with its state)."""


@dataclass(slots=True)
class Completion:
    """Invocation ``invoke_id`` is settled: ``how``, with the performer's ``outcome`` if any.

    ``last_error`` is the last transient error seen for a NOT_EXECUTED or
    UNKNOWN ending (why the retries did not succeed), if one came.
    """

    invoke_id: str
    how: Settled
    outcome: Outcome | None = None
    last_error: Outcome | None = None


class ReportKind(enum.Enum):
    """Conditions a driver presents as advisories (nothing is lost silently)."""

    RESULT_UNCONFIRMED = "RESULT.UNCONFIRMED"
    """Performer: a 3-way result was never acknowledged, and the invoker did not
    say it holds it (it gave up on the invocation, or never answered)."""
    RESULT_LATE = "RESULT.LATE"
    """Invoker: a result arrived for an invocation already settled as UNKNOWN."""


@dataclass(frozen=True, slots=True)
class Report:
    kind: ReportKind
    invoke_id: str
    peer: str
    operation: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    """An application's verify of ``invoke_id`` at ``peer`` is answered.

    ``status`` is the performer's answer (None when it never answered within
    the budget); ``outcome`` is the result or error when it had performed it.
    """

    invoke_id: str
    peer: str
    status: VerifyStatus | None
    outcome: Outcome | None = None


class Outputs:
    """Everything one input produced; see the module docstring for the order.

    A plain class with a hand-written constructor: one is made for every
    input, and a dataclass's ``default_factory`` fields cost a call each.
    """

    __slots__ = ("answers", "completions", "executes", "reports", "sends")

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.executes: list[Execute] = []
        self.completions: list[Completion] = []
        self.reports: list[Report] = []
        self.answers: list[QueryAnswer] = []

    def __repr__(self) -> str:
        return (
            f"Outputs(sends={self.sends!r}, executes={self.executes!r}, "
            f"completions={self.completions!r}, reports={self.reports!r}, "
            f"answers={self.answers!r})"
        )

    def extend(self, other: Outputs) -> None:
        self.sends.extend(other.sends)
        self.executes.extend(other.executes)
        self.completions.extend(other.completions)
        self.reports.extend(other.reports)
        self.answers.extend(other.answers)

    def __bool__(self) -> bool:
        return bool(self.sends or self.executes or self.completions or self.reports or self.answers)


class Alarm:
    """The earliest moment the roles of one endpoint indexed since the driver last looked.

    Each role writes here whenever it indexes a new due time (a retry, an
    acknowledgment wait, an expiry). A driver with a timer armed for ``at``
    compares: when ``earliest`` is not before ``at``, nothing new comes first
    and the timer stands, without asking :meth:`EndpointCore.next_deadline`
    (which runs through both roles' indexes). After it asked, it calls
    :meth:`looked`. Due times that went away are never a problem: a timer
    that fires early finds nothing due and is armed again.
    """

    __slots__ = ("earliest",)

    def __init__(self) -> None:
        self.earliest = -math.inf
        """-inf until the driver first looks: everything is new to it."""

    def note(self, due: float) -> None:
        if due < self.earliest:
            self.earliest = due

    def looked(self) -> None:
        self.earliest = math.inf
