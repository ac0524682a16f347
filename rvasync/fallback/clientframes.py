"""The client protocol's message frames (pure-Python twin of rvasync_native.clientframes).

PUBLISH and DELIVER frames carry a msgpack array of ``bin`` items, one per
message, and they are nearly every frame a busy connection sees. The two
functions here are the hot path for them, kept apart from the frame logic in
:mod:`rvasync.protocol.clientproto.frames` so that a compiled twin can replace
them. Both twins return the same value for every input.

* :func:`take_message_frames` reads, from ``offset`` on, the run of complete
  and well-formed message frames at the head of a receive buffer and returns
  them as frame objects (of the two classes it is given, which name their
  ``frame_type``) with the offset after the run. It stops, without raising, at
  the first frame that is incomplete, of another type, has a length outside
  ``1..max_frame`` or a body that is not a plain array of bins: the caller's
  general decoder takes that frame and names any problem.
* :func:`pack_messages` returns a whole message frame (header and body) in one
  buffer, byte for byte what msgpack's packer makes of the list.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

__all__ = ["pack_messages", "take_message_frames"]

_HEADER = struct.Struct(">IB")
_HEADER_SIZE = _HEADER.size
_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def _split(body: Any, max_count: int, max_bin: int) -> list[bytes] | None:
    try:
        data = msgpack.unpackb(
            body,
            raw=False,
            use_list=True,
            max_bin_len=max_bin,
            max_str_len=1 << 20,
            max_array_len=max_count,
            max_map_len=1024,
            max_ext_len=0,
        )
    except Exception:  # any refusal: the general decoder says what is wrong
        return None
    if type(data) is not list:
        return None
    for wire in data:
        if type(wire) is not bytes:
            return None
    return data


def take_message_frames(
    buffer: bytearray | bytes,
    offset: int,
    max_frame: int,
    max_bin: int,
    publish: Any,
    deliver: Any,
) -> tuple[list[Any], int]:
    """``([frame, ...], offset after them)`` for the message frames at ``offset``."""
    taken: list[Any] = []
    total = len(buffer)
    publish_type, deliver_type = int(publish.frame_type), int(deliver.frame_type)
    with memoryview(buffer) as view:
        while total - offset >= _HEADER_SIZE:
            length, frame_type = _HEADER.unpack_from(buffer, offset)
            if (
                frame_type != publish_type and frame_type != deliver_type
            ) or not 0 < length <= max_frame:
                break
            end = offset + 4 + length
            if end > total:
                break
            wires = _split(view[offset + _HEADER_SIZE : end], max_frame, max_bin)
            if wires is None:
                break
            taken.append(deliver(wires) if frame_type == deliver_type else publish(wires))
            offset = end
    return taken, offset


def pack_messages(frame_type: int, messages: list[bytes]) -> bytes:
    """One frame of ``frame_type`` carrying ``messages`` (a list of bytes), header included."""
    for wire in messages:
        if type(wire) is not bytes:
            raise TypeError(f"messages must be bytes, got {type(wire).__name__}")
    body = _pack(messages)
    return _HEADER.pack(len(body) + 1, frame_type) + body
