"""Spark UDFs that decode the wire-bytes column, for raw captures read any way.

A capture read with Spark's own Parquet reader (no rvasync data source), or
any table that kept the ``data`` column, can still be opened up inside Spark:

- :func:`decode_fields_udf` gives the ``fields`` JSON string of each message;
- :func:`field_udf` gives one field as a typed column (same type mapping as
  ``option("fields", ...)``).

Bytes that are not a valid message give null rather than failing the job
(find them with ``isNull``). The executors need rvasync installed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from rvasync.errors import RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.spark.capture import fields_json
from rvasync.spark.typemap import field_to_spark, parse_field_type, projector

__all__ = ["decode_fields", "decode_fields_udf", "field_udf"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def decode_fields(data: bytes | bytearray | None) -> str | None:
    """The ``fields`` JSON of one wire message (None for null or malformed bytes)."""
    if data is None:
        return None
    try:
        return fields_json(Message.from_bytes(bytes(data)))
    except RvError:
        return None


# arrow_udf reads these hints at run time, where pa.Array is not subscriptable.
def _decode_array(data: pa.Array) -> pa.Array:  # type: ignore[type-arg]
    return pa.array([decode_fields(value) for value in data.to_pylist()], type=pa.string())


def decode_fields_udf(*, vectorized: bool = False) -> Any:
    """A UDF from the binary ``data`` column to the ``fields`` JSON string.

    ``vectorized=True`` returns an Arrow UDF (PySpark 4.1+, no pandas needed)
    or, on older PySpark, a pandas UDF (needs pandas); it moves rows in
    batches, which is faster on large tables.
    """
    from pyspark.sql import functions as F

    if not vectorized:
        return F.udf(decode_fields, "string", useArrow=False)
    arrow_udf = getattr(F, "arrow_udf", None)
    if arrow_udf is not None:
        return arrow_udf(_decode_array, "string")
    import pandas as pd

    def decode_series(data: pd.Series) -> pd.Series:
        return data.map(decode_fields)

    # PySpark's stub lacks the type-hinted form pandas_udf(f, returnType).
    return F.pandas_udf(decode_series, "string")  # type: ignore[call-overload]


def field_udf(name: str, type: str) -> Any:
    """A UDF from the ``data`` column to field ``name`` as a typed column.

    ``type`` is a field type name (``"F64"``, ``"U16"`` ...); the column's
    Spark type follows docs/spark.md. Messages without the field, or with it
    under another type, give null.
    """
    from pyspark.sql import functions as F

    ftype = parse_field_type(type, f"field_udf({name!r}, {type!r})")
    dtype = field_to_spark(ftype, f"field_udf({name!r}, {type!r})")
    project = projector(ftype)

    def extract(data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            msg = Message.from_bytes(bytes(data))
        except RvError:
            return None
        value = project(msg, name)
        if value is not None and ftype is FieldType.DATETIME:
            return _EPOCH + dt.timedelta(microseconds=value)
        return value

    return F.udf(extract, dtype, useArrow=False)
