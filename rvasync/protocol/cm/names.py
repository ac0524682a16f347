"""Correspondent names, certified subjects and the internal ``_RVCM`` subjects.

A correspondent name identifies one CM transport to every other. A name the
program chooses is *reusable*: with a file ledger it makes the transport a
persistent correspondent that a later process can continue. A name the library
generates is *transient*: unique forever, so nothing can ever continue it.
Both follow subject syntax; reusable names may not start with ``_`` (that
space belongs to the system, and generated names live there so they can never
clash with a reusable one).
"""

from __future__ import annotations

import math
import uuid

from rvasync.errors import InvalidArgument, InvalidSubject, NotPermitted
from rvasync.subjects import check_send_subject, has_wildcards, validate_name, validate_subject

__all__ = [
    "ANY_INSTANCE",
    "CONTROL_PREFIX",
    "P2P_PREFIX",
    "TRANSIENT_PREFIX",
    "any_instance_address",
    "check_cm_send_subject",
    "check_correspondent_name",
    "check_listen_pattern",
    "check_sequence",
    "check_time_limit",
    "hello_subject",
    "instance_address",
    "instance_route",
    "is_any_instance_address",
    "is_transient_name",
    "new_transient_name",
    "point_to_point_subject",
]

TRANSIENT_PREFIX = "_RVCM_T"
"""First element of every generated (transient, non-reusable) correspondent name."""

CONTROL_PREFIX = "_RVCM"
"""First element of the internal subjects certified delivery itself uses."""


def new_transient_name() -> str:
    """A fresh non-reusable correspondent name, unique across hosts and time (a UUID)."""
    return f"{TRANSIENT_PREFIX}.{uuid.uuid4().hex}"


def is_transient_name(name: str) -> bool:
    """True for a name made by :func:`new_transient_name` (the prefix and 32 hex digits)."""
    return (
        len(name) == _TRANSIENT_LENGTH
        and name.startswith(_TRANSIENT_START)
        and all(c in _HEX for c in name[len(_TRANSIENT_START) :])
    )


_TRANSIENT_START = TRANSIENT_PREFIX + "."
_TRANSIENT_LENGTH = len(_TRANSIENT_START) + 32
_HEX = frozenset("0123456789abcdef")


def check_correspondent_name(
    name: object, *, what: str = "correspondent name", allow_transient: bool = False
) -> str:
    """Validate a reusable correspondent name and return it.

    Subject syntax, no wildcards, no reserved ``_`` first element, not empty.
    With ``allow_transient``, a generated name is accepted too: a sender may
    remove or disallow a transient listener, but a program cannot choose a
    name in the generated space for itself.
    Raises :class:`~rvasync.errors.InvalidSubject` naming the broken rule.
    """
    if not isinstance(name, str):
        raise InvalidSubject(f"{what} must be a str, not {type(name).__name__}")
    if allow_transient and is_transient_name(name):
        validate_subject(name)
        return name
    validate_name(name, what=what)
    return name


def check_cm_send_subject(subject: object) -> str:
    """Validate the destination of a certified send and return it.

    Certified delivery sequences messages per concrete subject, so a wildcard
    destination has no sequence to join: that is :class:`NotPermitted`, as is
    any reserved subject other than inboxes; bad syntax is
    :class:`InvalidSubject`.
    """
    if not isinstance(subject, str):
        raise InvalidSubject(f"subject must be a str, not {type(subject).__name__}")
    check_send_subject(subject)
    if has_wildcards(subject):
        raise NotPermitted(
            f"cannot send a certified message to {subject!r}: certified delivery needs a "
            "concrete subject, and this one contains a wildcard"
        )
    return subject


def check_listen_pattern(subject: object) -> str:
    """Validate the subject (wildcards allowed) of a CM listener and return it."""
    if not isinstance(subject, str):
        raise InvalidSubject(f"subject must be a str, not {type(subject).__name__}")
    validate_subject(subject, wildcards=True)
    return subject


def check_time_limit(time_limit: object) -> float:
    """Validate a message time limit in seconds (0 means no limit) and return it as float."""
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)):
        raise InvalidArgument(
            f"time_limit must be a number of seconds, not {type(time_limit).__name__}"
        )
    value = float(time_limit)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise InvalidArgument(
            f"time_limit must be a finite number of seconds >= 0 (0 = no limit), got {time_limit!r}"
        )
    return value


def check_sequence(sequence: object, *, what: str = "sequence") -> int:
    """Validate a certified sequence number (an int >= 1) and return it."""
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise InvalidArgument(f"{what} must be an int, not {type(sequence).__name__}")
    if sequence < 1:
        raise InvalidArgument(f"{what} must be >= 1 (sequences start at 1), got {sequence}")
    return sequence


def hello_subject(name: str) -> str:
    """Where a reusable-named correspondent announces itself, to detect name collisions.

    Every instance of ``name`` listens here; an announcement from another
    address means two live transports claim one name.
    """
    return f"{CONTROL_PREFIX}.HELLO.{name}"


P2P_PREFIX = f"{CONTROL_PREFIX}.P2P"
"""First two elements of every point-to-point address of the rvasync driver."""

ANY_INSTANCE = "ANY"
"""Instance element of :func:`any_instance_address` (instance ids are hex, never this)."""


def instance_address(name: str, instance: str) -> str:
    """The point-to-point address of one instance of correspondent ``name``.

    ``_RVCM.P2P.<instance>.<name>``: unique per instance (``instance`` is one
    element, a random hex id), yet routed by name: every instance of ``name``
    listens on :func:`instance_route`, so an address remembered in a ledger
    still reaches whichever instance of the name is alive after a restart.
    """
    return f"{P2P_PREFIX}.{instance}.{name}"


def instance_route(name: str) -> str:
    """The wildcard subject on which every instance of ``name`` receives its records."""
    return f"{P2P_PREFIX}.*.{name}"


def any_instance_address(name: str) -> str:
    """An address reaching the live instance of ``name`` when its own address is not known.

    The driver gives it for a labeled message from a correspondent it has not
    heard a record from yet (labels carry the name, not the address). It is
    provisional: :meth:`Context.note_peer` never takes it as the peer's
    address, so the real one, learned from the peer's first record, is not
    mistaken for a move.
    """
    return f"{P2P_PREFIX}.{ANY_INSTANCE}.{name}"


def is_any_instance_address(address: str) -> bool:
    """True for an address made by :func:`any_instance_address`."""
    return address.startswith(_ANY_PREFIX)


_ANY_PREFIX = f"{P2P_PREFIX}.{ANY_INSTANCE}."


def point_to_point_subject(instance: str) -> str:
    """A suggested control subject for one correspondent instance.

    The core treats addresses as opaque strings; a driver may use an inbox
    instead. ``instance`` must be one subject element or more (a UUID hex is
    typical).
    """
    validate_subject(instance)
    return f"{CONTROL_PREFIX}.P2P.{instance}"
