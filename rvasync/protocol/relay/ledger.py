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

File (version 2, ``RVRELAY2``): the 8-byte magic, then the package's
checksummed frames (:mod:`rvasync.framing`, the length protected by its own
CRC), each the msgpack of one record, the first of which is
``("agent", name)``. A crash can cut the last record short; that torn tail
is dropped on replay (and the driver truncates it). A complete frame that
fails its checksum, the last one included, and anything else that does not
parse raise :class:`~rvasync.errors.LedgerCorrupt`.

Version 1 files (``RVRELAY1``: ``length (4 bytes, big endian) | CRC-32 (4) |
msgpack``, the length unprotected) are still read, under the same rule as
far as their framing allows: a frame that runs past the end is taken for a
torn tail only when no intact frame starts after it (a damaged length could
otherwise hide the records behind it). The driver rewrites a version 1 file
as version 2 when it opens it.
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rvasync.errors import InvalidArgument, LedgerCorrupt
from rvasync.framing import CRC_LENGTH, FrameScan

__all__ = [
    "MAGIC",
    "AgentLedger",
    "ClientLedger",
    "RelayReplay",
    "decode_relay_ledger",
    "encode_relay_record",
    "new_relay_ledger",
]

MAGIC = b"RVRELAY2"
"""The first eight bytes of a relay agent ledger written now (version 2)."""
MAGIC_V1 = b"RVRELAY1"
"""Version 1 files: read, and rewritten as version 2 by the driver."""
_HEAD_V1 = struct.Struct(">II")


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
    """One record as a frame, ready to append with a single write."""
    body: bytes = msgpack.packb(record, use_bin_type=True)
    return CRC_LENGTH.encode(body)


def new_relay_ledger(name: str) -> bytes:
    """The bytes of a new ledger file for relay agent ``name``."""
    return MAGIC + encode_relay_record(("agent", name))


@dataclass
class RelayReplay:
    """A decoded ledger: the state, and where the intact records end (``valid_length``).

    ``valid_length`` 0: the file is new (its header was never completed).
    ``version`` is the file's format version (1: the driver rewrites it as 2).
    """

    state: AgentLedger
    valid_length: int
    torn: bool
    records: int
    version: int = 2


def decode_relay_ledger(data: bytes, path: str, name: str) -> RelayReplay:
    """Replay a ledger file's bytes; LedgerCorrupt if damaged, InvalidArgument if not ``name``'s."""
    magic = bytes(data[: len(MAGIC)])
    if magic not in (MAGIC, MAGIC_V1):
        if len(data) < len(MAGIC) and (MAGIC.startswith(magic) or MAGIC_V1.startswith(magic)):
            raise LedgerCorrupt(path, 0, "file shorter than the relay ledger header")
        raise LedgerCorrupt(path, 0, "not a relay agent ledger (bad magic)")
    if magic == MAGIC:
        frames = FrameScan(data, len(MAGIC), path=path, layout=CRC_LENGTH)
        state, records = _replay(frames, path, name)
        if state is None and frames.torn:
            # A crash while the file was being created: it is a new ledger.
            return RelayReplay(AgentLedger(name), 0, True, 0, 2)
        return _done(state, path, frames.end, frames.torn > 0, records, 2)
    v1 = _FramesV1(data, path)
    state, records = _replay(v1, path, name)
    return _done(state, path, v1.end, v1.end < len(data), records, 1)


def _replay(
    frames: Iterable[tuple[int, bytes | memoryview]], path: str, name: str
) -> tuple[AgentLedger | None, int]:
    state: AgentLedger | None = None
    records = 0
    for offset, body in frames:
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
    return state, records


class _FramesV1:
    """The frames of a version 1 file (big-endian length, unprotected, then the body CRC)."""

    def __init__(self, data: bytes, path: str) -> None:
        self._data = data
        self._path = path
        self.end = len(MAGIC_V1)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        data, size = self._data, len(self._data)
        offset = self.end
        while offset + _HEAD_V1.size <= size:
            length, crc = _HEAD_V1.unpack_from(data, offset)
            body_start = offset + _HEAD_V1.size
            if body_start + length > size:
                following = _intact_v1_after(data, offset)
                if following is not None:
                    raise LedgerCorrupt(
                        self._path,
                        offset,
                        f"record length runs past the end, and an intact record follows at "
                        f"offset {following}",
                    )
                break  # cut short: a torn tail
            body = data[body_start : body_start + length]
            if zlib.crc32(body) != crc:
                raise LedgerCorrupt(self._path, offset, "record checksum mismatch")
            yield offset, body
            offset = body_start + length
            self.end = offset


def _intact_v1_after(data: bytes, offset: int) -> int | None:
    """Offset of the first intact version 1 frame after ``offset``, if any."""
    size = len(data)
    for candidate in range(offset + 1, size - _HEAD_V1.size + 1):
        length, crc = _HEAD_V1.unpack_from(data, candidate)
        start = candidate + _HEAD_V1.size
        if start + length <= size and zlib.crc32(data[start : start + length]) == crc:
            return candidate
    return None


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
    state: AgentLedger | None, path: str, offset: int, torn: bool, records: int, version: int
) -> RelayReplay:
    if state is None:
        raise LedgerCorrupt(path, offset, "the header record is missing or cut short")
    return RelayReplay(state, offset, torn, records, version)
