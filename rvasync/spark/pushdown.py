"""Predicate pushdown for capture reads: Spark's filters on subject, sender and time.

With ``option("pushdown", "true")`` (and the session setting
``spark.sql.python.filterPushdown.enabled=true``, which PySpark requires)
the reader is told the query's filters on ``subject``, ``sender`` and
``received_at``. It uses them twice:

- planning skips row groups (and whole files) whose Parquet statistics
  show no row can match: time ranges prune well, because a capture is
  written in arrival order;
- reading drops non-matching rows with Arrow before they reach Spark.

The filters it takes it evaluates exactly as Spark does (strings compare
byte by byte, as Spark's default collation does; timestamps as instants to
the microsecond; a null never matches), so it keeps them and the query plan
lists them as ``PushedFilters``. A filter value it cannot compare exactly (a
timestamp without a time zone, an unexpected type) is not taken: Spark
evaluates that filter after the scan. Statistics (checked against the
marker with the footer) only ever prune row groups no row of which can
match.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["Predicate", "exact_predicates", "mask", "predicates_of", "row_group_may_match"]

_COLUMNS = ("subject", "sender", "received_at")
_OPS = {
    "EqualTo": "eq",
    "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge",
    "LessThan": "lt",
    "LessThanOrEqual": "le",
    "In": "in",
    "StringStartsWith": "prefix",
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Predicate:
    """``column op value`` on one of the documented columns (picklable, sent to executors)."""

    column: str
    op: str
    value: Any


def _usable(column: str, op: str, value: Any) -> Any:
    """The value as the capture stores it, or None when it cannot be compared exactly."""
    values = value if op == "in" else (value,)
    if op == "in" and not isinstance(value, (tuple, list)):
        return None
    converted: list[Any] = []
    for item in values:
        if column == "received_at":
            # Spark hands timestamps over as aware datetimes; a naive one has no
            # unambiguous instant, so it is not used.
            if not isinstance(item, dt.datetime) or item.tzinfo is None or op == "prefix":
                return None
            converted.append(item.astimezone(dt.UTC))
        else:
            if not isinstance(item, str):
                return None
            converted.append(item)
    return tuple(converted) if op == "in" else converted[0]


def _predicate(spark_filter: Any) -> Predicate | None:
    op = _OPS.get(type(spark_filter).__name__)
    attribute: tuple[str, ...] = tuple(getattr(spark_filter, "attribute", ()))
    if op is None or len(attribute) != 1 or attribute[0] not in _COLUMNS:
        return None
    column = attribute[0]
    value = _usable(column, op, getattr(spark_filter, "value", None))
    return None if value is None else Predicate(column, op, value)


def predicates_of(filters: Iterable[Any]) -> list[Predicate]:
    """The filters (pyspark.sql.datasource.Filter objects) this reader can use."""
    return [p for p in map(_predicate, filters) if p is not None]


def exact_predicates(filters: Iterable[Any]) -> tuple[list[Predicate], list[Any]]:
    """The filters this reader evaluates exactly as Spark does, as Predicates, and the
    others (the very Filter objects, for Spark to evaluate after the scan)."""
    taken: list[Predicate] = []
    rest: list[Any] = []
    for spark_filter in filters:
        predicate = _predicate(spark_filter)
        if predicate is None:
            rest.append(spark_filter)
        else:
            taken.append(predicate)
    return taken, rest


def _range_may_match(low: Any, high: Any, op: str, value: Any) -> bool:
    if op == "eq":
        return bool(low <= value <= high)
    if op == "in":
        return any(low <= v <= high for v in value)
    if op == "gt":
        return bool(high > value)
    if op == "ge":
        return bool(high >= value)
    if op == "lt":
        return bool(low < value)
    if op == "le":
        return bool(low <= value)
    return True  # prefix: decided row by row


def row_group_may_match(
    metadata: pq.FileMetaData, group: int, predicates: Sequence[Predicate]
) -> bool:
    """False only when the row group's statistics prove no row matches every predicate."""
    if not predicates:
        return True
    row_group = metadata.row_group(group)
    names = [row_group.column(i).path_in_schema for i in range(row_group.num_columns)]
    for predicate in predicates:
        if predicate.column not in names:
            continue
        stats = row_group.column(names.index(predicate.column)).statistics
        if stats is None or not stats.has_min_max:
            continue
        low, high = stats.min, stats.max
        if predicate.column == "received_at":
            if not isinstance(low, dt.datetime) or not isinstance(high, dt.datetime):
                continue
            if low.tzinfo is None:  # pyarrow gives UTC instants; make them comparable
                low, high = low.replace(tzinfo=dt.UTC), high.replace(tzinfo=dt.UTC)
        elif not isinstance(low, str) or not isinstance(high, str):
            continue
        try:
            if not _range_may_match(low, high, predicate.op, predicate.value):
                return False
        except TypeError:
            continue
    return True


def _scalar(predicate: Predicate, value: Any) -> pa.Scalar[Any]:
    if predicate.column == "received_at":
        return pa.scalar(value, type=_TIMESTAMP)
    return pa.scalar(value, type=pa.string())


def mask(table: pa.Table | pa.RecordBatch, predicates: Sequence[Predicate]) -> Any:
    """A boolean mask of the rows of a table or batch matching every predicate (None when
    there is none)."""
    result: Any = None
    for predicate in predicates:
        column = table.column(predicate.column)
        if predicate.op == "prefix":
            condition = pc.starts_with(column, pattern=predicate.value)
        elif predicate.op == "in":
            condition = pc.is_in(
                column, value_set=pa.array([_scalar(predicate, v) for v in predicate.value])
            )
        else:
            function = {
                "eq": pc.equal,
                "gt": pc.greater,
                "ge": pc.greater_equal,
                "lt": pc.less,
                "le": pc.less_equal,
            }[predicate.op]
            condition = function(column, _scalar(predicate, predicate.value))
        result = condition if result is None else pc.and_kleene(result, condition)
    return result
