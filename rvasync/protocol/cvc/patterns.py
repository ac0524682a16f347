"""Subject patterns as sets: does one pattern cover another?

A cache given overlapping patterns (``PRICES.>`` and ``PRICES.EUR``) keeps
only those no other covers, so each update reaches it through one listener.
Pure functions on already validated patterns.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["covers", "reduce_patterns"]


def covers(outer: str, inner: str) -> bool:
    """True if every subject ``inner`` matches also matches ``outer``."""
    outer_tokens = outer.split(".")
    inner_tokens = inner.split(".")
    for index, token in enumerate(outer_tokens):
        if token == ">":
            # ">" needs one element or more: inner must have one here (any kind).
            return index < len(inner_tokens)
        if index >= len(inner_tokens):
            return False
        other = inner_tokens[index]
        if other == ">":
            return False  # inner matches any depth here, outer one fixed element
        if token != "*" and token != other:
            return False  # a literal covers only itself ("*" in inner matches more)
    return len(outer_tokens) == len(inner_tokens)


def reduce_patterns(patterns: Iterable[str]) -> list[str]:
    """``patterns`` without duplicates and without those another one covers (order kept)."""
    unique = list(dict.fromkeys(patterns))
    kept: list[str] = []
    for index, pattern in enumerate(unique):
        others = unique[:index] + unique[index + 1 :]
        # Of two patterns covering each other (only equal ones do), unique has one.
        if not any(covers(other, pattern) for other in others):
            kept.append(pattern)
    return kept
