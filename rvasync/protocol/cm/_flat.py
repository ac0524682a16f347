"""Dataclasses <-> flat mappings of simple values, with type checks.

Both the records peers exchange and the records a ledger stores are frozen
dataclasses whose fields are ``str``, ``int``, ``float``, ``bool`` or
``bytes``; this module turns one into a dict and back, reporting the first
wrong field as a sentence (the caller wraps it in its own error type).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["FlatError", "from_flat", "to_flat"]

_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "bytes": bytes}

T = TypeVar("T")


class FlatError(Exception):
    """A mapping that does not fit the dataclass; the message says which field and why."""


def to_flat(obj: Any) -> dict[str, Any]:
    """The dataclass instance's fields as a dict (in declaration order)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def from_flat(cls: type[T], fields: Mapping[str, Any], *, what: str) -> T:
    """Build ``cls`` from ``fields``; ints are accepted for floats, buffers for bytes.

    Extra keys are ignored. A missing field without default, or a value of
    the wrong type, raises :class:`FlatError` naming ``what`` and the field.
    """
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in fields:
            if f.default is not dataclasses.MISSING:
                continue
            raise FlatError(f"{what} lacks field {f.name!r}")
        value = fields[f.name]
        expected = _TYPES[str(f.type)]
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif expected is bytes and isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        if type(value) is not expected:
            raise FlatError(
                f"{what} field {f.name!r} must be {expected.__name__}, not {type(value).__name__}"
            )
        values[f.name] = value
    return cls(**values)
