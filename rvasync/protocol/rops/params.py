"""Retry policies and retention limits, validated where they enter.

``RetryPolicy`` is how hard an invoker tries: it waits ``timeout`` seconds for
the answer to its first attempt, then retries the same invocation (same id,
so the performer can recognise the copy) up to ``retries`` times, each wait
``backoff`` times the previous one and at most ``max_wait``. When that budget
is spent it asks the performer what became of the invocation (``verify``)
up to ``verify_attempts`` times, with the same waits. The longest an
invocation can take is therefore bounded and computable
(:meth:`RetryPolicy.lifetime`); a performer's duplicate retention must be
longer than that for duplicate detection to hold.

``Retention`` is how long each side remembers: a performer remembers every
invocation it performed (or fenced) ``window`` seconds after its last change,
and holds at most ``max_records`` of them. It never forgets a record early to
make room: an invocation that finds no room is refused with a *transient*
``busy`` error, so memory stays bounded without weakening duplicate detection.
A 3-way result waits ``ack_timeout`` seconds for its acknowledgment, is sent
again up to ``result_retries`` times, then the performer asks the invoker
(``verify_attempts`` times) before reporting it unconfirmed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rvasync.errors import InvalidArgument

__all__ = ["Retention", "RetryPolicy"]


def _positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgument(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def _count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise InvalidArgument(f"{name} must be >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an invoker retries; see the module docstring."""

    timeout: float = 2.0
    retries: int = 5
    backoff: float = 1.5
    max_wait: float = 30.0
    verify_attempts: int = 3

    def __post_init__(self) -> None:
        _positive("timeout", self.timeout)
        _count("retries", self.retries)
        b = _positive("backoff", self.backoff)
        if b < 1.0:
            raise InvalidArgument(f"backoff must be >= 1, got {self.backoff!r}")
        _positive("max_wait", self.max_wait)
        _count("verify_attempts", self.verify_attempts, minimum=1)

    def wait(self, attempt: int) -> float:
        """Seconds to wait for an answer to attempt number ``attempt`` (1 = the first)."""
        return min(self.timeout * self.backoff ** (attempt - 1), max(self.max_wait, self.timeout))

    def lifetime(self) -> float:
        """The longest an invocation can last before its outcome is settled."""
        total = sum(self.wait(n) for n in range(1, self.retries + 2))
        return total + self.verify_attempts * self.wait(self.retries + 2)

    def to_list(self) -> list[float | int]:
        return [self.timeout, self.retries, self.backoff, self.max_wait, self.verify_attempts]

    @classmethod
    def from_list(cls, items: list[float | int]) -> RetryPolicy:
        timeout, retries, backoff, max_wait, verify_attempts = items
        return cls(
            float(timeout), int(retries), float(backoff), float(max_wait), int(verify_attempts)
        )


@dataclass(frozen=True, slots=True)
class Retention:
    """How long and how much each side remembers; see the module docstring."""

    window: float = 600.0
    max_records: int = 100_000
    ack_timeout: float = 2.0
    result_retries: int = 3
    verify_attempts: int = 3

    def __post_init__(self) -> None:
        _positive("retention window", self.window)
        _count("max_records", self.max_records, minimum=1)
        _positive("ack_timeout", self.ack_timeout)
        _count("result_retries", self.result_retries)
        _count("verify_attempts", self.verify_attempts, minimum=1)
