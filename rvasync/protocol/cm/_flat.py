"""Dataclasses <-> flat mappings of simple values, with type checks.

Both the records peers exchange and the records a ledger stores are frozen
dataclasses whose fields are ``str``, ``int``, ``float``, ``bool`` or
``bytes``; this module turns one into a dict and back, reporting the first
wrong field as a sentence (the caller wraps it in its own error type).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["FlatError", "fast_init", "from_flat", "to_flat"]

_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "bytes": bytes}

D = TypeVar("D", bound="DataclassInstance")


class FlatError(Exception):
    """A mapping that does not fit the dataclass; the message says which field and why."""


_NAMES: dict[type, tuple[str, ...]] = {}


def to_flat(obj: Any) -> dict[str, Any]:
    """The dataclass instance's fields as a dict (in declaration order)."""
    cls = obj.__class__
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(obj))
    return {name: getattr(obj, name) for name in names}


def fast_init(cls: type[D]) -> type[D]:
    """Give a frozen, slotted dataclass a faster ``__init__`` (same signature, same result).

    A frozen dataclass's generated ``__init__`` assigns each field through
    ``object.__setattr__``, which costs about a microsecond for a handful of
    fields; the records, outputs and advisories of this package are made per
    message, so that adds up. This ``__init__`` stores through the slot
    descriptors instead. Instances stay frozen (assignment still raises
    ``FrozenInstanceError``), equal and hashable as before. Apply it above
    ``@dataclass``; classes with ``__post_init__`` are refused.
    """
    if not dataclasses.is_dataclass(cls) or getattr(cls, "__slots__", None) is None:
        raise TypeError(f"fast_init needs a slotted dataclass, not {cls!r}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init cannot run {cls.__name__}.__post_init__")
    namespace: dict[str, Any] = {}
    params: list[str] = []
    body: list[str] = []
    for index, f in enumerate(dataclasses.fields(cls)):
        namespace[f"_set{index}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default{index}"] = f.default
            params.append(f"{f.name}=_default{index}")
        elif f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"fast_init does not support default factories ({cls.__name__})")
        else:
            params.append(f.name)
        body.append(f"    _set{index}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"])
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]  # replacing it is the point
    return cls


def from_flat(cls: type[D], fields: Mapping[str, Any], *, what: str) -> D:
    """Build ``cls`` from ``fields``; ints are accepted for floats, buffers for bytes.

    Extra keys are ignored. A missing field without default, or a value of
    the wrong type, raises :class:`FlatError` naming ``what`` and the field.
    """
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
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
