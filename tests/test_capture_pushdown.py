"""Pushed-down capture filters never drop a row that matches (properties, no Spark needed).

Pushdown must only make reads cheaper: for random rows, row groups and
predicates, the Arrow mask keeps exactly the rows a plain Python filter
keeps, and row-group pruning never leaves out a group holding such a row.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rvasync.spark.pushdown import (  # noqa: E402
    Predicate,
    mask,
    predicates_of,
    row_group_may_match,
)

BASE = 1_700_000_000_000_000
SUBJECTS = ("A.X", "A.Y", "B.X", "B.Y", "C")
SENDERS = (None, "S1", "S2", "S3")


def _when(micros: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(micros / 1e6, dt.UTC)


rows_st = st.lists(
    st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(SENDERS), st.integers(0, 10_000_000)),
    min_size=1,
    max_size=60,
)


@st.composite
def predicate_st(draw):
    column = draw(st.sampled_from(("subject", "sender", "received_at")))
    if column == "received_at":
        op = draw(st.sampled_from(("eq", "gt", "ge", "lt", "le", "in")))
        value = draw(st.integers(0, 10_000_000))
        if op == "in":
            values = draw(st.lists(st.integers(0, 10_000_000), min_size=1, max_size=3))
            return Predicate(column, op, tuple(_when(BASE + v) for v in values))
        return Predicate(column, op, _when(BASE + value))
    pool = SUBJECTS if column == "subject" else SENDERS[1:]
    op = draw(st.sampled_from(("eq", "gt", "ge", "lt", "le", "in", "prefix")))
    if op == "in":
        return Predicate(column, op, tuple(draw(st.lists(st.sampled_from(pool), min_size=1))))
    if op == "prefix":
        return Predicate(column, op, draw(st.sampled_from(("A", "A.", "B.X", "S", "Z"))))
    return Predicate(column, op, draw(st.sampled_from(pool)))


def _value(row, column):
    subject, sender, micros = row
    return {"subject": subject, "sender": sender, "received_at": _when(BASE + micros)}[column]


def _matches(row, predicate: Predicate) -> bool:
    value = _value(row, predicate.column)
    if value is None:
        return False  # SQL: a comparison with null is not true
    target = predicate.value
    return {
        "eq": lambda: value == target,
        "gt": lambda: value > target,
        "ge": lambda: value >= target,
        "lt": lambda: value < target,
        "le": lambda: value <= target,
        "in": lambda: value in target,
        "prefix": lambda: value.startswith(target),
    }[predicate.op]()


def _table(rows):
    return pa.table(
        {
            "subject": pa.array([r[0] for r in rows], pa.string()),
            "sender": pa.array([r[1] for r in rows], pa.string()),
            "received_at": pa.array([BASE + r[2] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )


@settings(max_examples=150, deadline=None)
@given(rows_st, st.lists(predicate_st(), min_size=1, max_size=3))
def test_the_mask_keeps_exactly_the_matching_rows(rows, predicates):
    table = _table(rows)
    selected = table.filter(mask(table, predicates))
    expected = [i for i, row in enumerate(rows) if all(_matches(row, p) for p in predicates)]
    got_rows = list(zip(*(selected.column(c).to_pylist() for c in table.column_names), strict=True))
    want_rows = [
        (rows[i][0], rows[i][1], _when(BASE + rows[i][2]).replace(tzinfo=dt.UTC)) for i in expected
    ]
    assert [(s, n, t.astimezone(dt.UTC)) for s, n, t in got_rows] == want_rows


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows_st, st.lists(predicate_st(), min_size=1, max_size=3), st.integers(1, 20))
def test_pruning_never_drops_a_row_group_holding_a_match(tmp_path, rows, predicates, group_rows):
    path = tmp_path / "groups.parquet"
    pq.write_table(_table(rows), path, row_group_size=group_rows)
    metadata = pq.ParquetFile(path).metadata
    for group in range(metadata.num_row_groups):
        held = rows[group * group_rows : (group + 1) * group_rows]
        if any(all(_matches(row, p) for p in predicates) for row in held):
            assert row_group_may_match(metadata, group, predicates)


def test_filters_spark_gives_are_used_only_when_exact():
    def spark_filter(name, column, value):
        return type(name, (), {})() if column is None else _named(name, column, value)

    def _named(name, column, value):
        return type(name, (SimpleNamespace,), {})(attribute=(column,), value=value)

    aware = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    naive = dt.datetime(2026, 1, 1)
    used = predicates_of(
        [
            spark_filter("EqualTo", "subject", "A.X"),
            spark_filter("GreaterThan", "received_at", aware),
            spark_filter("GreaterThan", "received_at", naive),  # no instant: not used
            spark_filter("EqualTo", "id", 3),  # a field column: not used
            spark_filter("EqualTo", "subject", 7),  # not a string: not used
            spark_filter("StringEndsWith", "subject", "X"),  # not pushed
            spark_filter("In", "sender", ("S1", "S2")),
        ]
    )
    assert used == [
        Predicate("subject", "eq", "A.X"),
        Predicate("received_at", "gt", aware),
        Predicate("sender", "in", ("S1", "S2")),
    ]
