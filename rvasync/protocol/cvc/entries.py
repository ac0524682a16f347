"""The retained messages of one answer part, packed into one OPAQUE field.

An answer for 10,000 subjects travels as a handful of messages, not 10,000:
each part's ``entries`` field is the concatenation of records
``<u32 wire length><u16 subject length><f64 stamp><subject utf-8><wire form>``
(little endian), where ``stamp`` is when the answering cache stored the
message (its clock; the requester keeps the newest stamp when several caches
hold a subject). The subject travels beside the wire form so that the
requester merges without decoding a message it may discard.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from rvasync.errors import MalformedMessage

__all__ = ["MAX_PART_BYTES", "split_parts", "unpack_entries"]

_HEAD = struct.Struct("<IHd")

#: An answer part holds about this many bytes of entries (far below the 64 MiB
#: message limit, so parts flow through the daemon without monopolising it).
MAX_PART_BYTES = 1 << 20


def split_parts(
    entries: Iterable[tuple[str, float, bytes]], max_bytes: int = MAX_PART_BYTES
) -> list[bytes]:
    """``(subject, stamp, wire)`` entries packed into parts of about ``max_bytes`` at most.

    Always at least one part (an empty one when there is nothing), so every
    answer has a last part. A single entry larger than ``max_bytes`` gets a
    part of its own.
    """
    head = _HEAD.pack
    head_size = _HEAD.size
    parts: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for subject, stamp, wire in entries:
        name = subject.encode()
        grow = head_size + len(name) + len(wire)
        if current and size + grow > max_bytes:
            parts.append(b"".join(current))
            current, size = [], 0
        current.append(head(len(wire), len(name), stamp))
        current.append(name)
        current.append(wire)
        size += grow
    parts.append(b"".join(current))
    return parts


def unpack_entries(data: bytes) -> list[tuple[str, float, bytes]]:
    """The ``(subject, stamp, wire)`` entries of one field; MalformedMessage if damaged."""
    out: list[tuple[str, float, bytes]] = []
    append = out.append
    offset, end = 0, len(data)
    unpack = _HEAD.unpack_from
    head_size = _HEAD.size
    try:
        while offset < end:
            if end - offset < head_size:
                raise MalformedMessage(f"retained entries truncated at byte {offset} of {end}")
            wire_len, name_len, stamp = unpack(data, offset)
            start = offset + head_size
            middle = start + name_len
            offset = middle + wire_len
            if offset > end:
                raise MalformedMessage(
                    f"retained entry of {wire_len + name_len} bytes at byte {start} "
                    f"overruns its {end}-byte field"
                )
            append((data[start:middle].decode(), stamp, data[middle:offset]))
    except UnicodeDecodeError:
        raise MalformedMessage(f"a retained subject before byte {offset} is not UTF-8") from None
    return out
