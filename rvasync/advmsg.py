"""The one way to build an advisory message: subject from its parts, fields in order.

Every advisory, whoever presents it (daemon, transports, certified delivery,
fault tolerance), is an ordinary message on

    ``_RV.<class>.<source>.<name>[.<tail>...]``

* ``class`` is ERROR, WARN or INFO;
* ``source`` is one element: SYSTEM (transports and daemon), RVCM (certified
  delivery), RVFT (fault tolerance);
* ``name`` names the situation and may span several elements
  (``DATALOSS.INBOUND.BCAST``, ``DELIVERY.CONFIRM``, ``PARAM_MISMATCH``);
* each ``tail`` part is the subject, correspondent name, group, transport id
  or host id the advisory is about (RVCM's ``.<subject>``/``.<name>``, RVFT's
  ``.<group>``, SYSTEM's ``UNREACHABLE.TRANSPORT.<id>``). Tails come from
  values already validated where they entered (subjects, names, groups), so
  they are joined as given and may have several elements.

Fields keep their order and may repeat a name (RVCM's DELIVERY.FAILED names
each listener); each is ``(name, value)`` (type inferred, as
:meth:`Message.add <rvasync.message.Message.add>` does) or
``(name, value, type)`` with a :class:`~rvasync.fieldtypes.FieldType` (or
None to infer); a mapping of name to value is accepted too.

This module is a leaf of the data layer (it imports only the message and
field type modules), so the sans-IO protocol cores can build advisories with
it. Presenting them, and logging unheard ones, is the business of
:mod:`rvasync.advisories` and the transports.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from rvasync.fieldtypes import FieldType
from rvasync.message import Field, Message

__all__ = [
    "ADVISORY_PREFIX",
    "RVCM",
    "RVFT",
    "SYSTEM",
    "AdvisoryClass",
    "AdvisoryFields",
    "advisory_message",
    "advisory_subject",
    "make_advisory",
    "parse_advisory_subject",
]

ADVISORY_PREFIX = "_RV."

# The sources of the specification's three appendices.
SYSTEM = "SYSTEM"
RVCM = "RVCM"
RVFT = "RVFT"


class AdvisoryClass(enum.StrEnum):
    """Severity of an advisory: the second element of its subject."""

    ERROR = "ERROR"
    WARN = "WARN"
    INFO = "INFO"


_CLASSES = frozenset(c.value for c in AdvisoryClass)

AdvisoryFields: TypeAlias = (
    Mapping[str, Any]
    | Iterable[tuple[str, Any] | tuple[str, Any, FieldType | int | None] | Field]
    | None
)


# Validated ``_RV.<class>.<source>.<name>`` heads: the parts are the callers'
# constants, so each is checked once (bounded, should a caller vary the name).
_HEADS: dict[tuple[str, str, str], str] = {}


def _head(adv_class: str, source: str, name: str) -> str:
    if adv_class not in _CLASSES:
        raise ValueError(f"advisory class must be ERROR, WARN or INFO, got {adv_class!r}")
    if not source or "." in source:
        raise ValueError(f"advisory source must be one element, got {source!r}")
    if not name or name[0] == "." or name[-1] == "." or ".." in name:
        raise ValueError(f"advisory name must be dot-separated elements, got {name!r}")
    # str() of an AdvisoryClass member is its value; a plain str passes through.
    head = f"{ADVISORY_PREFIX}{adv_class}.{source}.{name}"
    if len(_HEADS) < 1024:
        _HEADS[adv_class, source, name] = head
    return head


def advisory_subject(adv_class: AdvisoryClass | str, source: str, name: str, *tail: str) -> str:
    """``_RV.<class>.<source>.<name>[.<tail>...]``.

    Raises ValueError for a class other than ERROR/WARN/INFO, a source that is
    not one element, or a name with an empty element.
    """
    try:
        head = _HEADS[adv_class, source, name]
    except KeyError:
        head = _head(adv_class, source, name)
    if not tail:
        return head
    if len(tail) == 1:
        return head + "." + tail[0]
    return ".".join((head, *tail))


def parse_advisory_subject(subject: str) -> tuple[AdvisoryClass, str, str] | None:
    """Split an advisory subject into (class, source, name and tail); None if it is not one."""
    if not subject.startswith(ADVISORY_PREFIX):
        return None
    parts = subject.split(".", 3)
    if len(parts) != 4 or not parts[3]:
        return None
    try:
        cls = AdvisoryClass(parts[1])
    except ValueError:
        return None
    return cls, parts[2], parts[3]


def advisory_message(subject: str, fields: AdvisoryFields = None) -> Message:
    """The advisory message on ``subject`` (made by :func:`advisory_subject`), ``fields`` in order.

    For value objects that keep their subject (a protocol core's advisories,
    whose subject a driver looks at before building the message).
    """
    msg = Message(subject)
    if fields is None:
        return msg
    add = msg.add
    if isinstance(fields, Mapping):
        for field_name, value in fields.items():
            add(field_name, value)
        return msg
    for item in fields:
        if isinstance(item, Field):
            add(item.name, item.value, item.type, item.id)
        else:
            add(*item)
    return msg


def make_advisory(
    adv_class: AdvisoryClass | str,
    source: str,
    name: str,
    *tail: str,
    fields: AdvisoryFields = None,
) -> Message:
    """The advisory message: subject from :func:`advisory_subject`, then ``fields`` in order."""
    return advisory_message(advisory_subject(adv_class, source, name, *tail), fields)
