"""Scanning capture files for Spark: the schema, partition planning, and reading batches.

Everything here runs inside Spark's Python workers (the planner on the
driver, readers on executors) and speaks Arrow, so rows reach Spark as
record batches without a per-row Python conversion, except for projected
field columns, which need each message decoded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import InputPartition

from rvasync.errors import InvalidArgument, RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.spark import capture
from rvasync.spark.options import FieldSpec, ReadOptions
from rvasync.spark.pushdown import Predicate, mask, row_group_may_match
from rvasync.spark.typemap import METADATA_KEY, field_to_spark, projector

__all__ = ["BASE_SCHEMA", "FilePart", "plan", "read_part", "read_schema"]

FIELD_KEY = "rvasync.field"
BATCH_ROWS = 8192

#: The documented columns every read has (then any projected field columns).
BASE_SCHEMA = T.StructType(
    [
        T.StructField("subject", T.StringType()),
        T.StructField("reply_subject", T.StringType()),
        T.StructField("sender", T.StringType()),
        T.StructField("sequence", T.LongType()),
        T.StructField("received_at", T.TimestampType()),
        T.StructField("data", T.BinaryType()),
        T.StructField("fields", T.StringType()),
    ]
)
_BASE_NAMES = set(BASE_SCHEMA.fieldNames())


# -- schema ---------------------------------------------------------------------------


def _sample_types(directory: str, names: set[str], limit: int) -> dict[str, set[FieldType]]:
    """The field types seen for ``names`` in the first ``limit`` committed messages."""
    seen: dict[str, set[FieldType]] = {name: set() for name in names}
    remaining = limit
    for path in capture.committed_files(directory):
        parquet = capture.open_committed(path)
        for group in range(parquet.num_row_groups):
            try:
                column = parquet.read_row_group(group, columns=["data"]).column(0)
                rows = column.to_pylist()[:remaining]
            except capture.UNREADABLE as exc:
                raise capture.CaptureError(
                    f"committed capture file {str(path)!r} is unreadable: {exc}"
                ) from None
            # ``data`` is non-null binary (CAPTURE_SCHEMA); a foreign file's null fails
            # in from_bytes and is skipped like any undecodable row.
            for data in cast("list[bytes]", rows):
                try:
                    msg = Message.from_bytes(data)
                except RvError:
                    continue  # as a read does: an undecodable row has no fields
                for field in msg:
                    if field.name in seen:
                        seen[field.name].add(field.type)
            remaining -= min(remaining, len(column))
            if remaining == 0:
                return seen
    return seen


def _resolve(specs: Sequence[FieldSpec], directory: str, sample_rows: int) -> list[FieldSpec]:
    untyped = {spec.name for spec in specs if spec.type is None}
    seen = _sample_types(directory, untyped, sample_rows) if untyped else {}
    resolved = []
    for spec in specs:
        if spec.type is not None:
            resolved.append(spec)
            continue
        types = seen[spec.name]
        if not types:
            raise InvalidArgument(
                f"option fields: field {spec.name!r} does not occur in the first {sample_rows} "
                f"committed messages of {directory!r}, so its type is unknown; give it as "
                f"{spec.name}:TYPE (for example {spec.name}:F64)"
            )
        if len(types) > 1:
            listed = " and ".join(sorted(t.name for t in types))
            raise InvalidArgument(
                f"option fields: field {spec.name!r} has types {listed} in {directory!r}; "
                f"a column has one type: give it as {spec.name}:TYPE"
            )
        resolved.append(FieldSpec(spec.name, types.pop(), spec.column))
    return resolved


def read_schema(options: ReadOptions) -> T.StructType:
    """The schema of a read: the base columns, then one column per projected field.

    Checks the capture directory (it must exist and be readable) so a bad
    path fails when the DataFrame is defined.
    """
    capture.read_marker(options.path)
    fields = list(BASE_SCHEMA.fields)
    for spec in _resolve(options.fields, options.path, options.sample_rows):
        assert spec.type is not None
        if spec.column in _BASE_NAMES:
            raise InvalidArgument(
                f"option fields: column {spec.column!r} would hide the capture column of that "
                f"name; rename it ({spec.name}:{spec.type.name} as {spec.name}_field)"
            )
        dtype = field_to_spark(spec.type, f"option fields, field {spec.name!r}")
        metadata = {METADATA_KEY: spec.type.name, FIELD_KEY: spec.name}
        fields.append(T.StructField(spec.column, dtype, True, metadata))
    return T.StructType(fields)


def projections(schema: T.StructType) -> list[tuple[str, FieldType]]:
    """The projected (field name, type) pairs of a read schema, from its column metadata."""
    names = [f.name for f in schema.fields[: len(BASE_SCHEMA.fields)]]
    if names != BASE_SCHEMA.fieldNames():
        raise InvalidArgument(
            f"the rvasync source's columns start with {', '.join(BASE_SCHEMA.fieldNames())}; "
            f"got {', '.join(names)} (do not pass schema(); use option fields for field columns)"
        )
    result = []
    for field in schema.fields[len(BASE_SCHEMA.fields) :]:
        meta = field.metadata or {}
        if METADATA_KEY not in meta or FIELD_KEY not in meta:
            raise InvalidArgument(
                f"column {field.name!r} is not a capture column; do not pass schema() to the "
                f"rvasync source, use option fields=name:TYPE instead"
            )
        result.append((meta[FIELD_KEY], FieldType[meta[METADATA_KEY]]))
    return result


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema Spark expects record batches of ``schema`` to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


# -- planning -------------------------------------------------------------------------


@dataclass
class FilePart(InputPartition):
    """Row groups ``groups`` of committed capture file ``path`` (one Spark task), keeping
    only rows that match ``predicates`` (pushed-down filters; Spark checks them again)."""

    path: str
    groups: tuple[int, ...]
    predicates: tuple[Predicate, ...]

    def __init__(
        self, path: str, groups: tuple[int, ...], predicates: tuple[Predicate, ...] = ()
    ) -> None:
        self.path = path
        self.groups = groups
        self.predicates = predicates


def plan(
    files: Sequence[os.PathLike[str] | str],
    *,
    rows_per_part: int = 262144,
    predicates: Sequence[Predicate] = (),
) -> list[Any]:
    """Partitions over committed files: whole row groups, about ``rows_per_part`` rows each
    (a partition never spans files, so many small files give many small partitions).

    Row groups whose statistics rule out ``predicates`` are left out. Opening
    every footer here also means a damaged committed file fails the job at
    its start, naming the file, rather than half-way through.
    """
    pushed = tuple(predicates)
    parts: list[Any] = []
    for path in files:
        parquet = capture.open_committed(path)
        group: list[int] = []
        rows = 0
        try:
            counts = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
        except capture.UNREADABLE as exc:
            raise capture.CaptureError(
                f"committed capture file {os.fspath(path)!r} is unreadable: {exc}"
            ) from None
        for index, count in enumerate(counts):
            if not row_group_may_match(parquet.metadata, index, pushed):
                continue
            group.append(index)
            rows += count
            if rows >= rows_per_part:
                parts.append(FilePart(os.fspath(path), tuple(group), pushed))
                group, rows = [], 0
        if group:
            parts.append(FilePart(os.fspath(path), tuple(group), pushed))
    return parts


# -- reading --------------------------------------------------------------------------


def _project(
    batch: pa.RecordBatch, fields: list[tuple[str, FieldType]], target: pa.Schema
) -> list[pa.Array[Any]]:
    getters = [projector(ftype) for _, ftype in fields]
    columns: list[list[Any]] = [[] for _ in fields]
    data_column = batch.column(capture.CAPTURE_COLUMNS.index("data"))
    # Non-null binary (CAPTURE_SCHEMA); a null would fail from_bytes like garbage does.
    for data in cast("list[bytes]", data_column.to_pylist()):
        try:
            msg = Message.from_bytes(data)
        except RvError:
            for values in columns:
                values.append(None)
            continue
        for (name, _), getter, values in zip(fields, getters, columns, strict=True):
            values.append(getter(msg, name))
    offset = len(BASE_SCHEMA.fields)
    return [
        pa.array(values, type=target.field(offset + i).type) for i, values in enumerate(columns)
    ]


def read_part(part: Any, schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """Record batches of one partition, shaped exactly as Spark expects ``schema``."""
    if not isinstance(part, FilePart):
        return
    target = arrow_schema(schema)
    fields = projections(schema)
    parquet = capture.open_committed(part.path)
    try:
        table = parquet.read_row_groups(list(part.groups), columns=list(capture.CAPTURE_COLUMNS))
    except capture.UNREADABLE as exc:
        raise capture.CaptureError(
            f"committed capture file {part.path!r} is unreadable: {exc}"
        ) from None
    selected = mask(table, part.predicates)
    if selected is not None:
        table = table.filter(selected)
    try:
        table = table.cast(pa.schema([target.field(i) for i in range(len(BASE_SCHEMA.fields))]))
    except (ValueError, TypeError, NotImplementedError, pa.ArrowException) as exc:
        # Columns of the right names but other types: not a file the recorder wrote.
        raise capture.CaptureError(
            f"committed capture file {part.path!r} is not an rvasync capture: {exc}"
        ) from None
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        columns = list(batch.columns)
        if fields:
            columns.extend(_project(batch, fields, target))
        yield pa.RecordBatch.from_arrays(columns, schema=target)
