"""DateTime: the 40-bit-seconds wire datetime."""

from __future__ import annotations

import datetime as dt
import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync.rvdatetime import DateTime

MIN_S = -(2**39)
MAX_S = 2**39 - 1


def test_range_edges() -> None:
    assert DateTime(MIN_S).seconds == MIN_S
    assert DateTime(MAX_S, 999_999).microseconds == 999_999
    for seconds in (MIN_S - 1, MAX_S + 1):
        with pytest.raises(rv.InvalidArgument, match="40-bit"):
            DateTime(seconds)
    for micros in (-1, 1_000_000):
        with pytest.raises(rv.InvalidArgument, match="microseconds"):
            DateTime(0, micros)


@pytest.mark.parametrize("bad", [1.5, "1", None, True])
def test_types(bad: object) -> None:
    with pytest.raises(rv.ConversionError):
        DateTime(bad)  # type: ignore[arg-type]
    with pytest.raises(rv.ConversionError):
        DateTime(0, bad)  # type: ignore[arg-type]


def test_from_datetime_naive_is_utc() -> None:
    naive = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    aware = naive.replace(tzinfo=dt.UTC)
    assert DateTime.from_datetime(naive) == DateTime.from_datetime(aware)
    stamp = DateTime.from_datetime(aware)
    assert stamp.seconds == int(aware.timestamp()) and stamp.microseconds == 123456
    assert stamp.to_datetime() == aware
    assert stamp.to_datetime().tzinfo is dt.UTC


def test_from_datetime_converts_offsets() -> None:
    paris = dt.timezone(dt.timedelta(hours=2))
    local = dt.datetime(2024, 1, 1, 2, 0, tzinfo=paris)
    assert DateTime.from_datetime(local) == DateTime.from_datetime(dt.datetime(2024, 1, 1))
    with pytest.raises(rv.ConversionError):
        DateTime.from_datetime(dt.date(2024, 1, 1))  # type: ignore[arg-type]


def test_before_the_epoch() -> None:
    stamp = DateTime.from_datetime(dt.datetime(1969, 12, 31, 23, 59, 59, 500000))
    assert (stamp.seconds, stamp.microseconds) == (-1, 500000)
    assert DateTime.from_datetime(dt.datetime(1, 1, 1)).seconds == -62135596800
    assert DateTime.from_datetime(dt.datetime(9999, 12, 31, 23, 59, 59, 999999)).to_datetime() == (
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    )


def test_to_datetime_outside_python_range() -> None:
    for stamp in (DateTime(MAX_S), DateTime(MIN_S), DateTime(253402300800)):
        with pytest.raises(rv.ConversionError, match="outside the range"):
            stamp.to_datetime()
    assert str(DateTime(MAX_S)) == repr(DateTime(MAX_S))


@given(st.datetimes(timezones=st.just(dt.UTC)))
@settings(max_examples=100)
def test_datetime_round_trip(value: dt.datetime) -> None:
    assert DateTime.from_datetime(value).to_datetime() == value


def test_now_and_timestamps() -> None:
    before = time.time()
    stamp = DateTime.now()
    after = time.time()
    assert before - 1 <= stamp.timestamp() <= after + 1
    assert DateTime.from_timestamp(1.5) == DateTime(1, 500000)
    assert DateTime.from_timestamp(-0.25) == DateTime(-1, 750000)
    with pytest.raises(rv.ConversionError):
        DateTime.from_timestamp(float("nan"))


def test_ordering_hash_repr_pickle() -> None:
    a, b, c = DateTime(-1, 999999), DateTime(0), DateTime(0, 1)
    assert a < b < c and c > b >= b and a <= a
    assert sorted([c, a, b]) == [a, b, c]
    assert len({DateTime(5, 1), DateTime(5, 1), DateTime(5)}) == 2
    assert repr(DateTime(5, 1)) == "DateTime(5, 1)" and repr(DateTime(5)) == "DateTime(5)"
    assert str(DateTime(0)) == "1970-01-01T00:00:00+00:00"
    assert pickle.loads(pickle.dumps(c)) == c
    assert DateTime(0) != 0
    with pytest.raises(TypeError):
        _ = DateTime(0) < 1  # type: ignore[operator]


def test_wire_layout() -> None:
    stamp = DateTime(-2, 7)
    wire = stamp._wire()
    assert wire == (-2 << 24) | 7
    assert DateTime._from_wire(wire) == stamp
    for edge in (DateTime(MIN_S), DateTime(MAX_S, 999_999)):
        assert -(2**63) <= edge._wire() < 2**63
        assert DateTime._from_wire(edge._wire()) == edge
