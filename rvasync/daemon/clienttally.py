"""What the clients of a daemon's TCP port have exchanged, for the daemon's whole life.

The status page shows each connected client's counters, but clients come and
go: a sum over the connected ones falls when one leaves, and a client's
connection id and address (its ephemeral port) are new at every reconnect.
A monitor wants counters that only grow and series that keep their name. So
the server keeps, besides the live connections' counters:

* the total of every client that has left (:attr:`ClientTallies.departed`);
* the same per client **identity**, ``(description, user)``: what a program
  names itself and who it logs in as, the same across its reconnects. At most
  :data:`MAX_IDENTITIES` identities are kept; clients beyond them (a host of
  distinct descriptions is no monitoring need, and would grow memory without
  bound) are tallied under :data:`OVERFLOW`.

A live client's identity row is then the departed part plus its connections'
counters now, which only grows while the daemon runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Protocol

__all__ = ["MAX_IDENTITIES", "OVERFLOW", "ClientTallies", "Identity", "Tally"]

#: A client's stable identity: (description, user); "" for one not given.
Identity = tuple[str, str]
#: Identities kept at most; later ones are tallied together under OVERFLOW.
MAX_IDENTITIES = 1000
OVERFLOW: Identity = ("(other clients)", "")


class Counted(Protocol):
    """A live client connection's counters (``ClientConnection``)."""

    identity: Identity
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int


@dataclass(slots=True)
class Tally:
    """Messages and bytes published by (``_in``) and delivered to (``_out``) clients."""

    messages_in: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    bytes_out: int = 0
    #: Connections counted (departed and live).
    connections: int = 0

    def add(self, conn: Counted) -> None:
        self.messages_in += conn.messages_in
        self.bytes_in += conn.bytes_in
        self.messages_out += conn.messages_out
        self.bytes_out += conn.bytes_out
        self.connections += 1

    def plus(self, conns: Iterable[Counted]) -> Tally:
        """This tally with ``conns`` (live connections) added, as a new one."""
        total = Tally(**{f.name: getattr(self, f.name) for f in fields(self)})
        for conn in conns:
            total.add(conn)
        return total


class ClientTallies:
    """The departed clients' totals, overall and per identity (see the module docstring)."""

    def __init__(self, max_identities: int = MAX_IDENTITIES) -> None:
        self.max_identities = max_identities
        #: Every client that has left, together.
        self.departed = Tally()
        self._by_identity: dict[Identity, Tally] = {}

    def identity(self, description: str | None, user: str | None) -> Identity:
        """The identity a client attaching now is tallied under (OVERFLOW once full)."""
        key = (description or "", user or "")
        if key in self._by_identity or len(self._by_identity) < self.max_identities:
            self._by_identity.setdefault(key, Tally())
            return key
        return OVERFLOW

    def retire(self, conn: Counted) -> None:
        """``conn`` has gone: its counters join the departed totals."""
        self.departed.add(conn)
        self._by_identity.setdefault(conn.identity, Tally()).add(conn)

    def identities(self, live: Iterable[Counted]) -> dict[Identity, tuple[int, Tally]]:
        """Per identity: (live connections, departed plus live counters), every identity
        seen in the daemon's life."""
        by: dict[Identity, list[Counted]] = {}
        for conn in live:
            by.setdefault(conn.identity, []).append(conn)
        keys = list(self._by_identity) + [k for k in by if k not in self._by_identity]
        return {
            key: (len(by.get(key, ())), self._by_identity.get(key, Tally()).plus(by.get(key, ())))
            for key in keys
        }
