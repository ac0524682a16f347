"""The daemon's per-message receive path (pure-Python twin of ``rvasync_native.daemonpath``).

A receiving daemon hands every message of every datagram to the client
sessions interested in its subject. Per message that is: read the subject's
encoded bytes from the wire form (without decoding the message), look the
route up in a cache keyed by those bytes, decode the message once if anyone
wants it, and hand it over. This module is that loop; the routing policy
(what a cache miss means, how several sessions share a message) stays in
:mod:`rvasync.daemon.routing`, passed in as callables.

The key is the subject's encoded bytes where the layout of ``rvasync._wire``
puts them: a non-empty fixstr (up to 31 bytes) or a str8 (up to 255 bytes).
Longer subjects, and anything else, take the slow path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rvasync._wire import FIXSTR, FIXSTR_MAX, MESSAGE_ARRAY, STR8, SUBJECT_TAG_OFFSET

__all__ = ["deliver_multicast", "subject_key"]

_TAG = SUBJECT_TAG_OFFSET
_ARRAY_AT = SUBJECT_TAG_OFFSET - 1
_FIX_START = SUBJECT_TAG_OFFSET + 1
_STR8_LEN = SUBJECT_TAG_OFFSET + 1
_STR8_START = SUBJECT_TAG_OFFSET + 2


def subject_key(data: bytes) -> bytes | None:
    """The encoded subject bytes of wire message ``data``, or None (not a short subject)."""
    if len(data) > _FIX_START and data[_ARRAY_AT] == MESSAGE_ARRAY:
        tag = data[_TAG]
        if FIXSTR < tag <= FIXSTR_MAX:
            return data[_FIX_START : _FIX_START + tag - FIXSTR]
        if tag == STR8:
            return data[_STR8_START : _STR8_START + data[_STR8_LEN]]
    return None


def deliver_multicast(
    payloads: list[bytes],
    inbound: dict[bytes, tuple[Any, Any, tuple[Any, ...]]],
    decode: Callable[[bytes], Any],
    slow: Callable[[bytes], tuple[Any, Any, tuple[Any, ...]] | None],
    shared: Callable[[Any, bytes, tuple[Any, ...]], None],
    contain: Callable[[BaseException, Any], None],
    malformed_error: type[BaseException],
) -> tuple[int, int, int]:
    """Deliver each received message in ``payloads``; return (deliveries, unwanted, malformed).

    ``inbound`` maps subject bytes (see :func:`subject_key`) to a route
    ``(owned, raw, sessions)``; on a miss ``slow(data)`` computes (and caches) the
    route, or returns None to drop the message (it counts why). A message with
    the same subject bytes as the one just before it takes the same route
    (routes are a snapshot for a run of one subject). A route with
    no sessions counts the message as unwanted, undecoded. ``raw(data)`` takes
    the wire bytes of a message that one session alone receives and wants them
    undecoded (a router passing messages on: it reads what it needs itself).
    Otherwise ``decode`` failing with ``malformed_error`` counts it as malformed;
    then ``owned(msg)`` takes a message that one session alone receives, or
    ``shared(msg, data, sessions)`` delivers it. An exception from any of the
    three goes to ``contain(exc, msg)`` (``contain(exc, data)`` for ``raw``) and
    delivery goes on with the next message.
    """
    deliveries = unwanted = malformed = 0
    prev_key = prev_entry = None
    for data in payloads:
        entry = None
        key = None
        if len(data) > _FIX_START and data[_ARRAY_AT] == MESSAGE_ARRAY:
            tag = data[_TAG]
            if FIXSTR < tag <= FIXSTR_MAX:
                key = data[_FIX_START : _FIX_START + tag - FIXSTR]
            elif tag == STR8:
                key = data[_STR8_START : _STR8_START + data[_STR8_LEN]]
            if key:
                # A burst usually repeats one subject: reuse the previous route for it.
                entry = prev_entry if key == prev_key else inbound.get(key)
        if entry is None:
            entry = slow(data)
            if entry is None:
                prev_key = prev_entry = None
                continue
        if key:
            prev_key, prev_entry = key, entry
        owned, raw, sessions = entry
        if not sessions:
            unwanted += 1
            continue
        if raw is not None:
            deliveries += 1
            try:
                raw(data)
            except Exception as exc:
                contain(exc, data)
            continue
        try:
            msg = decode(data)
        except malformed_error:
            malformed += 1
            continue
        deliveries += len(sessions)
        try:
            if owned is not None:
                owned(msg)
            else:
                shared(msg, data, sessions)
        except Exception as exc:
            contain(exc, msg)
    return deliveries, unwanted, malformed
