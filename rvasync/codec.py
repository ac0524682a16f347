"""Message wire codec: ``encode(msg) -> bytes``, ``decode(data) -> Message`` and ``check(data)``.

Two implementations share one interface and produce identical bytes: the
compiled ``rvasync_native.codec`` (used when built) and the pure-Python
``rvasync.fallback.codec`` (``RVASYNC_PURE=1`` forces it). Most code calls
``Message.to_bytes`` / ``Message.from_bytes``, which land here.

The codec is built on :mod:`rvasync.message` (both twins make Messages), so
the message module does not import it: importing this module hands the
selected ``encode``/``decode`` to ``rvasync.message`` (``import rvasync``
imports this module first).
"""

from __future__ import annotations

from rvasync import message as _message
from rvasync._accel import load
from rvasync._wire import HEADER, MAX_MESSAGE_SIZE, MAX_NESTING_DEPTH, WIRE_VERSION

__all__ = [
    "HEADER",
    "MAX_MESSAGE_SIZE",
    "MAX_NESTING_DEPTH",
    "WIRE_VERSION",
    "check",
    "check_subject",
    "decode",
    "encode",
    "implementation",
]

#: The module doing the work (``rvasync_native.codec`` or ``rvasync.fallback.codec``).
implementation = load("codec")

encode = implementation.encode
decode = implementation.decode
#: ``check(data)``: raise what ``decode(data)`` would (MalformedMessage ...), else None,
#: without building the Message (the daemon's check of what a client publishes).
check = implementation.check
#: ``check_subject(data)``: ``check(data)``, then the message's subject (None: it has none).
check_subject = implementation.check_subject

_message._use_codec(encode, decode)
