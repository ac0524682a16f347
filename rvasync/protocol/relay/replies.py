"""Reply name substitution: the relay agent's table of surrogate inboxes.

A request a client sends through its agent names an inbox of the client's
transport as its reply subject. A reply sent there while the client is
disconnected would be lost, so the agent puts an inbox of its own (a
*surrogate*) in its place before sending the request on, and keeps
``surrogate -> (client, original inbox)``. A reply that arrives on the
surrogate is stored for the client like any inbound message, under
:data:`REPLY_ROLE`, with the original inbox back as its subject.

Surrogates are ``<agent address>.<agent instance>.<n>``: under the agent's
own inbox (so replies reach this agent process, and one listener on the
address's subtree takes them all) and unique across the agent's restarts.
A surrogate restored from the ledger is still live only if it lies under
the current address (replies to it can still reach the agent); a real
agent process gets a new inbox, so its predecessor's surrogates are dead.
One surrogate serves every message a client sends with the same inbox (a
retransmission, a second request); each use renews its lifetime.

Also here: what the agent tells a client about a reply it will never
relay (:data:`LOST_ROLE`), as one stored item.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import msgpack

from rvasync.errors import MalformedMessage

__all__ = [
    "LOST_ROLE",
    "REPLY_ROLE",
    "Surrogate",
    "SurrogateTable",
    "decode_lost",
    "encode_lost",
]

REPLY_ROLE = "_relay.reply"
"""Role of a stored item that is a reply for the client (its subject restored)."""

LOST_ROLE = "_relay.lost"
"""Role of a stored item telling the client that replies to one of its inboxes are lost."""


@dataclass(slots=True)
class Surrogate:
    subject: str
    client: str
    inbox: str
    expires: float


class SurrogateTable:
    """Live surrogates of one agent process, oldest expiry first.

    Every use renews a surrogate by the same lifetime, so the order of last
    use is the order of expiry: an OrderedDict moved to the end on renewal
    finds the next expiry in O(1).
    """

    def __init__(self, address: str, instance: str) -> None:
        self._reach = address + "."
        self._prefix = f"{address}.{instance}."
        self._by_subject: OrderedDict[str, Surrogate] = OrderedDict()
        self._by_inbox: dict[tuple[str, str], Surrogate] = {}
        self._count = 0

    def __len__(self) -> int:
        return len(self._by_subject)

    def owns(self, subject: str) -> bool:
        """``subject`` lies under this agent's address: replies to it can reach the agent."""
        return subject.startswith(self._reach)

    def lookup(self, subject: str) -> Surrogate | None:
        return self._by_subject.get(subject)

    def for_client(self, client: str) -> int:
        return sum(1 for s in self._by_subject.values() if s.client == client)

    def use(self, client: str, inbox: str, expires: float) -> Surrogate:
        """The surrogate for ``client``'s ``inbox`` (made now if none), renewed to ``expires``."""
        key = (client, inbox)
        entry = self._by_inbox.get(key)
        if entry is None:
            self._count += 1
            entry = Surrogate(f"{self._prefix}{self._count}", client, inbox, expires)
            self._by_inbox[key] = entry
            self._by_subject[entry.subject] = entry
        else:
            entry.expires = max(entry.expires, expires)
            self._by_subject.move_to_end(entry.subject)
        return entry

    def restore(self, entry: Surrogate) -> None:
        """Put back a surrogate a ledger replay found (call in order of ``expires``)."""
        self._by_subject[entry.subject] = entry
        self._by_inbox[(entry.client, entry.inbox)] = entry
        tail = entry.subject[len(self._prefix) :]
        if entry.subject.startswith(self._prefix) and tail.isdigit():
            self._count = max(self._count, int(tail))

    def next_expiry(self) -> float | None:
        for entry in self._by_subject.values():
            return entry.expires
        return None

    def expire(self, now: float) -> list[Surrogate]:
        """Remove and return every surrogate whose lifetime ended by ``now``."""
        out: list[Surrogate] = []
        table = self._by_subject
        while table:
            subject, entry = next(iter(table.items()))
            if entry.expires > now:
                break
            del table[subject]
            self._by_inbox.pop((entry.client, entry.inbox), None)
            out.append(entry)
        return out


def encode_lost(inbox: str, reason: str) -> bytes:
    data: bytes = msgpack.packb((inbox, reason), use_bin_type=True)
    return data


def decode_lost(data: bytes) -> tuple[str, str]:
    """``(inbox, reason)`` of a :data:`LOST_ROLE` item; MalformedMessage if it is not one."""
    try:
        value = msgpack.unpackb(data, raw=False, use_list=False)
    except Exception as exc:
        raise MalformedMessage(f"relay reply notice does not decode: {exc}") from None
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(v, str) for v in value)
    ):
        raise MalformedMessage("relay reply notice is not (inbox, reason)")
    return value[0], value[1]
