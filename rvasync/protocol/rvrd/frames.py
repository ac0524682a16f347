"""The frames of the TCP link between two routers, with named fields; their framing on the wire.

Every frame is a msgpack array whose first element names its kind; frames are
written back to back (msgpack delimits them itself), so a streaming unpacker
on the reading side splits the byte stream into frames with no length prefix.
Each kind is a NamedTuple here: code reads ``frame.subject``, never
``frame[5]``, and msgpack packs a NamedTuple as the array it is.

* ``HELLO`` (the first frame each way) and ``PING`` (keeps an idle link
  known to be alive) belong to the link itself (rvasync.rvrd.links);
* ``DATA`` (one message), ``BATCH`` (consecutive messages of one subject
  imported by one router), ``ACK`` (how many messages of this link have
  arrived), ``LSA`` (a link-state record), ``LOSS`` (a report of messages
  lost, on its way to the network that missed them) and ``RESUME`` (after a
  link comes back: how many messages of the previous link arrived) are the
  core's (rvasync.protocol.rvrd.core).

A message travels in ``DATA`` / ``BATCH`` as opaque bytes (rvasync's wire
codec). ``importer`` names the router that brought it into the domain in
one incarnation (``<router>.<incarnation>``, see RouterCore), so a restarted
router's numbering never meets its predecessor's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack

__all__ = [
    "ACK",
    "BATCH",
    "DATA",
    "HELLO",
    "LOSS",
    "LSA",
    "MAX_BATCH",
    "MAX_FRAME",
    "PING",
    "RESUME",
    "VERSION",
    "AckFrame",
    "BatchFrame",
    "DataFrame",
    "HelloFrame",
    "LinkFrame",
    "LossFrame",
    "LsaFrame",
    "PingFrame",
    "ResumeFrame",
    "encode",
]

#: Version 4: incarnations (HELLO), LOSS and RESUME frames.
VERSION = 4
#: Largest frame: a 64 MiB message plus the routing fields around it.
MAX_FRAME = 64 * 1024 * 1024 + 64 * 1024
#: Largest number of messages in one BATCH frame.
MAX_BATCH = 256

HELLO = "HELLO"
PING = "PING"
DATA = "DATA"
BATCH = "BATCH"
ACK = "ACK"
LSA = "LSA"
LOSS = "LOSS"
RESUME = "RESUME"


class HelloFrame(NamedTuple):
    """The first frame each way: who this router is, in which incarnation."""

    kind: str
    version: int
    router: str
    incarnation: int


class PingFrame(NamedTuple):
    kind: str


class DataFrame(NamedTuple):
    """One message: entered the domain at network ``origin``, imported by ``importer``
    with its sequence number ``seq``, ``hops`` routers ago."""

    kind: str
    origin: str
    importer: str
    seq: int
    hops: int
    subject: str
    payload: Any


class BatchFrame(NamedTuple):
    """Consecutive messages of one subject: ``payloads[i]`` has sequence number ``seq + i``."""

    kind: str
    origin: str
    importer: str
    seq: int
    hops: int
    subject: str
    payloads: list[Any]


class AckFrame(NamedTuple):
    """``received`` messages (and loss reports) of this link have arrived and are handled."""

    kind: str
    received: int


class LsaFrame(NamedTuple):
    """A link-state record, in its wire form (topology.LinkState.to_wire)."""

    kind: str
    record: list[Any]


class LossFrame(NamedTuple):
    """A loss report on its way to ``target``, the network whose listeners missed the
    messages (losses.LossReport names the fields). ``via`` is the router it is for
    when it crosses a LAN (every router there hears it), empty on a neighbor link."""

    kind: str
    via: str
    hops: int
    reporter: str
    ident: int
    target: str
    lost: int
    exact: bool
    reason: str
    origin: str | None
    subject: str | None
    since: float | None
    until: float | None


class ResumeFrame(NamedTuple):
    """Sent first when a link comes back: of the previous link with the neighbor in its
    incarnation ``incarnation``, ``received`` messages arrived here (0, 0: none known)."""

    kind: str
    incarnation: int
    received: int


LinkFrame = DataFrame | BatchFrame | AckFrame | LsaFrame | LossFrame | ResumeFrame


def encode(frame: Any) -> bytes:
    """One frame's bytes on the link."""
    data: bytes = msgpack.packb(frame, use_bin_type=True)
    return data
