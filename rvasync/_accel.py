"""Choose between the compiled hot paths (``rvasync_native``) and their pure-Python twins.

Each hot path NAME exists twice with one interface, the way msgpack-python keeps
``_cmsgpack`` beside ``fallback``: ``rvasync_native.NAME`` (Cython, built by
``pip install``) and ``rvasync.fallback.NAME`` (pure Python). The native one is
used whenever it imports, unless the environment sets ``RVASYNC_PURE=1``.
Tests use :func:`implementations` to run the same properties against both.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = [
    "HOT_PATHS",
    "implementations",
    "load",
    "native_enabled",
    "native_import_error",
    "pure_forced",
]

# Every hot path that has a native module and a pure twin.
HOT_PATHS: tuple[str, ...] = (
    "codec",
    "subjects",
    "queuecore",
    "rmframe",
    "daemonpath",
    "clientframes",
    "msgbuild",
    "ropspdu",
)

_loaded: dict[str, ModuleType] = {}
_native_used: dict[str, bool] = {}
# Why a compiled module did not import, per hot path: kept so that ``rvasync info`` can
# say it (a wheel built for another Python, a missing shared library ...), instead of a
# silent fall back to the slower twin.
_import_errors: dict[str, str] = {}


def pure_forced() -> bool:
    """True when ``RVASYNC_PURE`` asks for the pure-Python twins."""
    return os.environ.get("RVASYNC_PURE", "").strip().lower() not in ("", "0", "false", "no")


def native_module(name: str) -> ModuleType | None:
    """The compiled module for hot path ``name``, or None if it does not import (the
    reason is kept for :func:`native_import_error`)."""
    try:
        module = importlib.import_module(f"rvasync_native.{name}")
    except ImportError as exc:
        _import_errors[name] = _describe(exc, name)
        return None
    _import_errors.pop(name, None)
    return module


def _describe(exc: ImportError, name: str) -> str:
    missing = getattr(exc, "name", None)
    if isinstance(exc, ModuleNotFoundError) and missing in (
        "rvasync_native",
        f"rvasync_native.{name}",
    ):
        return "not built (install with pip, or run: python setup.py build_ext --inplace)"
    return f"{type(exc).__name__}: {exc}"


def native_import_error(name: str) -> str | None:
    """Why hot path ``name``'s compiled module did not import, or None if it did (or was
    not tried yet)."""
    return _import_errors.get(name)


def pure_module(name: str) -> ModuleType:
    """The pure-Python twin of hot path ``name``."""
    return importlib.import_module(f"rvasync.fallback.{name}")


def load(name: str) -> ModuleType:
    """The implementation of hot path ``name`` this process uses (cached)."""
    module = _loaded.get(name)
    if module is None:
        native = None if pure_forced() else native_module(name)
        module = native if native is not None else pure_module(name)
        _loaded[name] = module
        _native_used[name] = native is not None
    return module


def implementations(name: str) -> list[ModuleType]:
    """Every implementation of ``name`` available here: pure first, then native if built."""
    found = [pure_module(name)]
    native = native_module(name)
    if native is not None:
        found.append(native)
    return found


def native_enabled() -> bool:
    """True when every hot path in this process runs its compiled (Cython) module."""
    for name in HOT_PATHS:
        load(name)
    return all(_native_used[name] for name in HOT_PATHS)
