"""One remote-operations endpoint: both roles behind one name, one state, one timer.

An endpoint may invoke, perform, or both; PDUs are routed by kind to the
invoker or the performer role. The driver keeps one state file per endpoint
and one timer: :meth:`EndpointCore.version` says when the state changed,
:meth:`snapshot` / :meth:`restore` move it to and from the file, and
:meth:`next_deadline` is the one moment to be woken.
"""

from __future__ import annotations

from typing import Any

from rvasync.protocol.rops.invoker import InvokerCore
from rvasync.protocol.rops.outputs import Alarm, Outputs
from rvasync.protocol.rops.params import Retention
from rvasync.protocol.rops.pdu import Kind, Pdu
from rvasync.protocol.rops.performer import PerformerCore

__all__ = ["STATE_VERSION", "EndpointCore"]

STATE_VERSION = 1

_TO_PERFORMER = frozenset({Kind.INVOKE, Kind.ACK, Kind.VERIFY, Kind.RVERIFY_REPLY})


class EndpointCore:
    """Endpoint ``name`` in its start ``incarnation`` (a value never used before by this name)."""

    def __init__(self, name: str, incarnation: str, retention: Retention | None = None) -> None:
        retention = retention or Retention()
        self.name = name
        self.alarm = Alarm()
        """Shared by both roles: see :class:`~rvasync.protocol.rops.outputs.Alarm`."""
        self.performer = PerformerCore(name, retention, self.alarm)
        self.invoker = InvokerCore(name, incarnation, retention, self.alarm)

    @property
    def version(self) -> int:
        """Grows at every change of the state a state file holds."""
        return self.performer.version + self.invoker.version

    def receive(self, pdu: Pdu, now: float, reply: str | None = None) -> Outputs:
        """``pdu`` arrived (with the reply address ``reply``, for an INVOKE that has one)."""
        if pdu.kind in _TO_PERFORMER:
            return self.performer.receive(pdu, now, reply)
        return self.invoker.receive(pdu, now)

    def handle_timer(self, now: float) -> Outputs:
        out = self.performer.handle_timer(now)
        out.extend(self.invoker.handle_timer(now))
        return out

    def next_deadline(self) -> float | None:
        a = self.performer.next_deadline()
        b = self.invoker.next_deadline()
        if a is None:
            return b
        if b is None:
            return a
        return min(a, b)

    def snapshot(self) -> dict[str, Any]:
        return {
            "state_version": STATE_VERSION,
            "name": self.name,
            "performer": self.performer.snapshot(),
            "invoker": self.invoker.snapshot(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load a :meth:`snapshot`; raises ValueError when it is not one of this endpoint's."""
        try:
            if data["state_version"] != STATE_VERSION:
                raise ValueError(f"unknown state version {data['state_version']!r}")
            if data["name"] != self.name:
                raise ValueError(
                    f"the state belongs to endpoint {data['name']!r}, not {self.name!r}"
                )
            self.performer.restore(data["performer"])
            self.invoker.restore(data["invoker"])
        except (KeyError, TypeError, AssertionError) as exc:
            raise ValueError(f"malformed state: {exc!r}") from None
