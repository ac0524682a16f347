"""The relay agent's ledger: what it holds for its clients, and its file format.

A relay agent must survive its own restart without losing what it stores
for absent clients, so it keeps a ledger of its own (separate from any CM
transport's). Its records, each a tuple:

* ``("l", client, pattern, role)`` / ``("u", client, pattern, role)``: the
  agent listens (no longer listens) on ``pattern`` for ``client``;
* ``("s", client, seq, role, data)``: inbound message number ``seq`` stored
  for ``client``;
* ``("a", client, seq)``: ``client`` received every stored item up to ``seq``;
* ``("n", client, next_seq)``: numbering for ``client`` continues at
  ``next_seq`` (written by compaction, when every item is gone);
* ``("r", client, surrogate, inbox, expires)``: replies to ``surrogate`` go
  to ``client``'s ``inbox`` until ``expires`` (reply name substitution,
  :mod:`.replies`); written again when a use renews it;
* ``("x", client, surrogate)``: that surrogate ended.

File: the 8-byte magic, then records framed as ``length (4 bytes, big
endian) | CRC-32 (4) | msgpack of the record``, the first of which is
``("agent", name)``. A crash can cut the last record short; that torn tail
is dropped on replay (and the driver truncates it). Anything else that does
not parse, in particular bad bytes followed by more data, raises
:class:`~rvasync.protocol.cm.ledger_format.LedgerCorrupt`.
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rvasync.errors import InvalidArgument
from rvasync.protocol.cm.ledger_format import LedgerCorrupt

__all__ = [
    "MAGIC",
    "AgentLedger",
    "ClientLedger",
    "RelayReplay",
    "decode_relay_ledger",
    "encode_relay_record",
    "new_relay_ledger",
]

MAGIC = b"RVRELAY1"
_HEAD = struct.Struct(">II")


@dataclass
class ClientLedger:
    """What the agent holds for one client."""

    listens: set[tuple[str, str]] = field(default_factory=set)
    items: OrderedDict[int, tuple[str, bytes]] = field(default_factory=OrderedDict)
    """Stored items by number, oldest first (an OrderedDict: dropping the oldest is O(1))."""
    next_seq: int = 1
    replies: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Live surrogate inboxes: surrogate -> (the client's own inbox, expiry time)."""


@dataclass
class AgentLedger:
    """The agent's persistent state: a replay of every record applied in order."""

    name: str
    clients: dict[str, ClientLedger] = field(default_factory=dict)

    def apply(self, record: tuple[Any, ...]) -> None:
        kind, client = record[0], record[1]
        state = self.clients.get(client)
        if state is None:
            state = self.clients[client] = ClientLedger()
        if kind == "l":
            state.listens.add((record[2], record[3]))
        elif kind == "u":
            state.listens.discard((record[2], record[3]))
        elif kind == "s":
            seq = record[2]
            state.items[seq] = (record[3], record[4])
            state.next_seq = max(state.next_seq, seq + 1)
        elif kind == "a":
            upto = record[2]
            items = state.items  # in increasing seq order (stored in that order)
            while items:
                seq, value = items.popitem(last=False)
                if seq > upto:
                    items[seq] = value
                    items.move_to_end(seq, last=False)
                    break
            state.next_seq = max(state.next_seq, upto + 1)
        elif kind == "n":
            state.next_seq = max(state.next_seq, record[2])
        elif kind == "r":
            state.replies[record[2]] = (record[3], record[4])
        elif kind == "x":
            state.replies.pop(record[2], None)
        else:
            raise InvalidArgument(f"unknown relay ledger record {kind!r}")

    def snapshot(self) -> list[tuple[Any, ...]]:
        """Records that rebuild this state (what a compacted file holds)."""
        out: list[tuple[Any, ...]] = []
        for client, state in self.clients.items():
            out.append(("n", client, state.next_seq))
            for pattern, role in sorted(state.listens):
                out.append(("l", client, pattern, role))
            for seq in sorted(state.items):
                role, data = state.items[seq]
                out.append(("s", client, seq, role, data))
            for surrogate, (inbox, expires) in state.replies.items():
                out.append(("r", client, surrogate, inbox, expires))
        return out


_SHAPES: dict[str, tuple[type, ...]] = {
    "l": (str, str, str),
    "u": (str, str, str),
    "s": (str, int, str, bytes),
    "a": (str, int),
    "n": (str, int),
    "r": (str, str, str, float),
    "x": (str, str),
}


def encode_relay_record(record: tuple[Any, ...]) -> bytes:
    body: bytes = msgpack.packb(record, use_bin_type=True)
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def new_relay_ledger(name: str) -> bytes:
    """The bytes of a new ledger file for relay agent ``name``."""
    return MAGIC + encode_relay_record(("agent", name))


@dataclass
class RelayReplay:
    """A decoded ledger: the state, and where the intact records end (``valid_length``)."""

    state: AgentLedger
    valid_length: int
    torn: bool
    records: int


def decode_relay_ledger(data: bytes, path: str, name: str) -> RelayReplay:
    """Replay a ledger file's bytes; LedgerCorrupt if damaged, InvalidArgument if not ``name``'s."""
    if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
        if MAGIC.startswith(data[: len(MAGIC)]) and len(data) < len(MAGIC):
            raise LedgerCorrupt(path, 0, "file shorter than the relay ledger header")
        raise LedgerCorrupt(path, 0, "not a relay agent ledger (bad magic)")
    offset = len(MAGIC)
    state: AgentLedger | None = None
    records = 0
    end = len(data)
    while offset < end:
        if end - offset < _HEAD.size:
            return _done(state, path, name, offset, True, records)
        length, crc = _HEAD.unpack_from(data, offset)
        body_start = offset + _HEAD.size
        if body_start + length > end:
            return _done(state, path, name, offset, True, records)
        body = data[body_start : body_start + length]
        if zlib.crc32(body) != crc:
            if body_start + length == end:
                return _done(state, path, name, offset, True, records)  # torn last write
            raise LedgerCorrupt(path, offset, "record checksum mismatch")
        try:
            record = msgpack.unpackb(body, raw=False, use_list=False)
        except Exception as exc:
            raise LedgerCorrupt(path, offset, f"record does not decode: {exc}") from None
        if state is None:
            if not (isinstance(record, tuple) and len(record) == 2 and record[0] == "agent"):
                raise LedgerCorrupt(path, offset, "first record does not name the agent")
            if record[1] != name:
                raise InvalidArgument(
                    f"ledger file {path!r} belongs to relay agent {record[1]!r}, not {name!r}"
                )
            state = AgentLedger(name)
        else:
            _check(record, path, offset)
            state.apply(record)
        records += 1
        offset = body_start + length
    return _done(state, path, name, offset, False, records)


def _check(record: object, path: str, offset: int) -> None:
    if not isinstance(record, tuple) or not record or not isinstance(record[0], str):
        raise LedgerCorrupt(path, offset, "record is not a tagged array")
    shape = _SHAPES.get(record[0])
    if shape is None or len(record) != len(shape) + 1:
        raise LedgerCorrupt(path, offset, f"unknown record {record[0]!r}")
    for value, kind in zip(record[1:], shape, strict=True):
        if not isinstance(value, kind) or isinstance(value, bool):
            raise LedgerCorrupt(path, offset, f"record {record[0]!r} holds a bad value")


def _done(
    state: AgentLedger | None, path: str, name: str, offset: int, torn: bool, records: int
) -> RelayReplay:
    if state is None:
        raise LedgerCorrupt(path, offset, "the header record is missing or cut short")
    return RelayReplay(state, offset, torn, records)
