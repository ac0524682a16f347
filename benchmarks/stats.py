"""Small statistics without numpy (workers import this; numpy is not a dependency).

Percentiles use linear interpolation between closest ranks (numpy's default
"linear" method), so p50 of an even-sized sample is the mean of the two middle values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float, *, presorted: bool = False) -> float:
    """The ``q``-th percentile (0..100) of ``values``.

    Raises ValueError for an empty sample or ``q`` outside 0..100.
    """
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100")
    ordered = values if presorted else sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    fraction = rank - low
    return float(ordered[low] + (ordered[high] - ordered[low]) * fraction)


def percentiles(values: Sequence[float], qs: Iterable[float]) -> dict[float, float]:
    """Several percentiles of one sample, sorting it once."""
    ordered = sorted(values)
    return {q: percentile(ordered, q, presorted=True) for q in qs}


def median(values: Sequence[float]) -> float:
    """The median (p50) of ``values``."""
    return percentile(values, 50.0)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max over repetitions, and how many there were."""
    return {
        "median": median(values),
        "min": float(min(values)),
        "max": float(max(values)),
        "n": float(len(values)),
    }


def summarize_reps(reps: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per metric key, the summary over the repetitions that reported it."""
    keys: list[str] = []
    for rep in reps:
        keys.extend(k for k in rep if k not in keys)
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        values = [float(rep[key]) for rep in reps if _is_number(rep.get(key))]
        if values:
            out[key] = summarize(values)
    return out


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the division is
    meaningless (zero or non-finite)."""
    if numerator is None or denominator is None:
        return None
    if denominator == 0 or not math.isfinite(numerator) or not math.isfinite(denominator):
        return None
    return numerator / denominator


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
