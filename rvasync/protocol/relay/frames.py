"""Frames a relay agent and its clients exchange, and their byte form.

Every frame is a small msgpack array whose first element names its kind.
The relay never looks inside the messages it carries: an item of a
:class:`Push` is either a client's outbound event (a message to emit,
``("m", bytes)``, or one whose reply subject is the inbox named beside it,
``("q", inbox, bytes)``, for reply name substitution; or a change of the
subjects the agent listens to on the client's behalf) or an inbound
message the agent stored for the client, ``(role, bytes)``.

Kinds (``C`` client, ``A`` agent):

* ``Locate`` (C, multicast on :func:`locate_subject`): where is agent NAME?
  The agent answers ``Here`` at the reply address. A starting agent sends
  one too (``client`` empty) to find another live agent of the same name.
* ``Here`` (A, point-to-point): my address and my instance id.
* ``Connect`` (C): open a session; carries the client's whole listening
  state (it is the master), the epoch of its outbound stream with the
  first item of it not yet acknowledged, and the last inbound item it
  received (``-1``: this process received none).
* ``Accept`` (A): the session is open; the last outbound item of that
  epoch the agent has, and the first inbound item it will push.
* ``Push`` (both): items numbered ``first``, ``first + 1``, ...
* ``Ack`` (both): every item up to ``seq`` arrived.
* ``Ping`` (C): keepalive; the agent answers with an ``Ack``.
* ``Bye`` (C) / ``Gone`` (A): the client disconnects; the agent confirms.
* ``Reset`` (A): the agent does not know this session (it restarted or
  dropped it): connect again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from rvasync.errors import MalformedMessage

__all__ = [
    "Accept",
    "Ack",
    "Bye",
    "Connect",
    "Frame",
    "Gone",
    "Here",
    "Locate",
    "Ping",
    "Push",
    "Reset",
    "decode_frame",
    "encode_frame",
    "locate_subject",
]

LOCATE_PREFIX = "_RVRELAY.LOCATE"


def locate_subject(agent: str) -> str:
    """The multicast subject on which the relay agent ``agent`` is located."""
    return f"{LOCATE_PREFIX}.{agent}"


@dataclass(frozen=True, slots=True)
class Locate:
    agent: str
    client: str
    reply: str
    instance: str = ""


@dataclass(frozen=True, slots=True)
class Here:
    agent: str
    address: str
    instance: str


@dataclass(frozen=True, slots=True)
class Connect:
    client: str
    session: int
    address: str
    epoch: int
    first: int
    received: int
    listens: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Accept:
    session: int
    received: int
    first: int


@dataclass(frozen=True, slots=True)
class Push:
    session: int
    first: int
    items: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class Ack:
    session: int
    seq: int


@dataclass(frozen=True, slots=True)
class Ping:
    session: int


@dataclass(frozen=True, slots=True)
class Bye:
    session: int


@dataclass(frozen=True, slots=True)
class Gone:
    session: int


@dataclass(frozen=True, slots=True)
class Reset:
    session: int


Frame = Locate | Here | Connect | Accept | Push | Ack | Ping | Bye | Gone | Reset

_TAGS: dict[type, str] = {
    Locate: "L",
    Here: "H",
    Connect: "C",
    Accept: "A",
    Push: "P",
    Ack: "K",
    Ping: "G",
    Bye: "B",
    Gone: "D",
    Reset: "R",
}
_KINDS = {tag: cls for cls, tag in _TAGS.items()}
# Field types per kind, checked on decode (a frame comes from the network).
_SHAPES: dict[str, tuple[type | tuple[type, ...], ...]] = {
    "L": (str, str, str, str),
    "H": (str, str, str),
    "C": (str, int, str, int, int, int, (list, tuple)),
    "A": (int, int, int),
    "P": (int, int, (list, tuple)),
    "K": (int, int),
    "G": (int,),
    "B": (int,),
    "D": (int,),
    "R": (int,),
}


def encode_frame(frame: Frame) -> bytes:
    """The bytes of ``frame``."""
    tag = _TAGS[type(frame)]
    values: list[Any] = [tag]
    for name in frame.__slots__:
        values.append(getattr(frame, name))
    return msgpack.packb(values, use_bin_type=True)


def decode_frame(data: bytes) -> Frame:
    """Parse bytes made by :func:`encode_frame`; anything else raises MalformedMessage."""
    try:
        values = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True)
    except Exception as exc:
        raise MalformedMessage(f"relay frame does not decode: {exc}") from None
    if not isinstance(values, tuple) or not values or not isinstance(values[0], str):
        raise MalformedMessage("relay frame is not a tagged array")
    tag, args = values[0], values[1:]
    cls = _KINDS.get(tag)
    shape = _SHAPES.get(tag)
    if cls is None or shape is None:
        raise MalformedMessage(f"unknown relay frame kind {tag!r}")
    if len(args) != len(shape):
        raise MalformedMessage(f"relay frame {tag!r} has {len(args)} values, not {len(shape)}")
    for value, kind in zip(args, shape, strict=True):
        if not isinstance(value, kind) or isinstance(value, bool):
            raise MalformedMessage(f"relay frame {tag!r}: bad value {value!r}")
    if tag == "C":
        listens = args[6]
        if not all(
            isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in listens
        ):
            raise MalformedMessage("relay frame 'C': listens must be (pattern, role) pairs")
    if tag == "P" and not all(isinstance(item, tuple) and item for item in args[2]):
        raise MalformedMessage("relay frame 'P': every item must be a non-empty array")
    return cls(*args)  # type: ignore[no-any-return]
