"""Correlation ids: which subscription brought a message.

Several listeners may share one queue (different subjects, or the same subject
twice). Each listener has a correlation id, and every message delivered
through it answers ``msg.correlation_id`` with that id, so the consumer of the
shared queue can tell its subscriptions apart (the MQ publish/subscribe
"subscriber identity": queue plus correlation id).

A program may choose the id (``listen(..., correlation_id=...)``); otherwise
rvasync picks one, unique in this process, as an MQ broker does for a
subscriber registered without ``MQPS_CORREL_ID_AS_IDENTITY``. The id lives on
the listener, not on each message: the delivery hot path pays nothing for it.
"""

from __future__ import annotations

import itertools
import os

from rvasync.errors import InvalidArgument

__all__ = [
    "CorrelationId",
    "check_correlation_id",
    "check_publisher_correlation",
    "check_subscription",
    "new_correlation_id",
]

#: What a correlation id may be: a non-empty str, non-zero bytes or a non-zero int.
CorrelationId = str | bytes | int

# Chosen ids: random per process (so two processes never agree by accident) plus a counter.
_PREFIX = f"rv.{os.urandom(4).hex()}."
_COUNTER = itertools.count(1)


def new_correlation_id() -> str:
    """A fresh id no other listener of this process has (the one rvasync chooses)."""
    return f"{_PREFIX}{next(_COUNTER)}"


def check_correlation_id(value: object) -> CorrelationId:
    """``value`` if it can be a correlation id, else :class:`InvalidArgument` naming why.

    Like MQ's CorrelId, an id must not be "zero": an empty str, empty or
    all-zero bytes and the int 0 are refused, as is anything that is not a
    str, bytes or int (a bool included).
    """
    if isinstance(value, bool) or not isinstance(value, str | bytes | int):
        raise InvalidArgument(
            f"correlation_id must be a str, bytes or int, got {type(value).__name__}"
        )
    if isinstance(value, int):
        if value == 0:
            raise InvalidArgument("correlation_id must not be zero")
    elif isinstance(value, str):
        if not value:
            raise InvalidArgument("correlation_id must not be empty")
    elif not value.strip(b"\0"):
        raise InvalidArgument("correlation_id must not be empty or all zero bytes")
    return value


#: The range of an int correlation id that travels on the wire (a msgpack integer).
_WIRE_INT = (-(2**63), 2**64 - 1)


def check_publisher_correlation(value: object) -> CorrelationId:
    """``value`` if a publication may carry it as its publisher's correlation id.

    The rules of :func:`check_correlation_id`, and an int must fit the wire
    (-2**63 .. 2**64 - 1): the id travels with every message published with it.
    """
    checked = check_correlation_id(value)
    if isinstance(checked, int) and not _WIRE_INT[0] <= checked <= _WIRE_INT[1]:
        raise InvalidArgument(
            f"correlation_id {checked} does not fit the wire (an int within -2**63 .. 2**64 - 1)"
        )
    return checked


def check_subscription(value: object) -> str:
    """``value`` if it can name a subscription: a non-empty str of printable characters."""
    if not isinstance(value, str):
        raise InvalidArgument(f"subscription must be a str, got {type(value).__name__}")
    if not value or not value.isprintable():
        raise InvalidArgument(
            f"subscription must be a non-empty name of printable characters, got {value!r}"
        )
    return value
