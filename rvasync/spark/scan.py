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
from rvasync.spark.options import ROWS_PER_PARTITION, FieldSpec, ReadOptions
from rvasync.spark.pushdown import Predicate, mask, row_group_may_match
from rvasync.spark.typemap import METADATA_KEY, column_converter, field_to_spark

__all__ = ["BASE_SCHEMA", "FilePart", "ScanPart", "plan", "read_part", "read_schema"]

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
_BASE_FIELDS = {field.name: field for field in BASE_SCHEMA.fields}


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
    """The schema of a read: the capture columns kept (``option columns``; all by
    default), then one column per projected field.

    Checks the capture directory (it must exist and be readable) so a bad
    path fails when the DataFrame is defined.
    """
    capture.read_marker(options.path)
    fields = [_BASE_FIELDS[name] for name in options.columns]
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


@dataclass(frozen=True)
class Layout:
    """What a read schema asks for: each output column is a capture column (its name)
    or a projected message field (field name, type), in the schema's order."""

    columns: tuple[str | tuple[str, FieldType], ...]

    @property
    def capture_columns(self) -> list[str]:
        return [c for c in self.columns if isinstance(c, str)]

    @property
    def fields(self) -> list[tuple[str, FieldType]]:
        return [c for c in self.columns if not isinstance(c, str)]


def layout(schema: T.StructType) -> Layout:
    """How to fill each column of a read schema; a column that is neither a capture column
    (of its documented type) nor a projected field is an InvalidArgument."""
    result: list[str | tuple[str, FieldType]] = []
    for field in schema.fields:
        meta = field.metadata or {}
        if METADATA_KEY in meta and FIELD_KEY in meta:
            result.append((meta[FIELD_KEY], FieldType[meta[METADATA_KEY]]))
            continue
        base = _BASE_FIELDS.get(field.name)
        if base is None:
            raise InvalidArgument(
                f"column {field.name!r} is not a capture column; do not pass schema() to the "
                f"rvasync source, use option fields=name:TYPE for message fields and option "
                f"columns to choose capture columns"
            )
        if field.dataType != base.dataType:
            raise InvalidArgument(
                f"column {field.name!r} has type {field.dataType.simpleString()}, but the "
                f"capture column of that name is {base.dataType.simpleString()}; do not pass "
                f"schema() to the rvasync source, use option columns instead"
            )
        result.append(field.name)
    return Layout(tuple(result))


def projections(schema: T.StructType) -> list[tuple[str, FieldType]]:
    """The projected (field name, type) pairs of a read schema, from its column metadata
    (checking every column, as :func:`layout` does)."""
    return layout(schema).fields


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema Spark expects record batches of ``schema`` to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


# -- planning -------------------------------------------------------------------------


@dataclass
class FilePart(InputPartition):
    """Row groups ``groups`` of committed capture file ``path``, keeping only rows that
    match ``predicates`` (pushed-down filters; Spark checks them again)."""

    path: str
    groups: tuple[int, ...]
    predicates: tuple[Predicate, ...]

    def __init__(
        self, path: str, groups: tuple[int, ...], predicates: tuple[Predicate, ...] = ()
    ) -> None:
        self.path = path
        self.groups = groups
        self.predicates = predicates


@dataclass
class ScanPart(InputPartition):
    """One Spark task: runs of row groups (:class:`FilePart`) of one or more consecutive
    committed files, read in order."""

    pieces: tuple[FilePart, ...]

    def __init__(self, pieces: tuple[FilePart, ...]) -> None:
        self.pieces = pieces


def plan(
    files: Sequence[os.PathLike[str] | str],
    *,
    rows_per_part: int = ROWS_PER_PARTITION,
    predicates: Sequence[Predicate] = (),
) -> list[Any]:
    """Partitions over committed files: runs of whole row groups in capture order, as
    many as ``rows_per_part`` asks for (the row count over it, rounded up) and as even
    as whole row groups allow; a partition may span files.

    Every Spark task costs a fixed amount on the JVM and in the Python worker
    (tens of milliseconds of CPU), so partitions are sized by rows, not by
    files. Row groups whose statistics rule out ``predicates`` are left out.
    Opening every footer here also means a damaged committed file fails the
    job at its start, naming the file, rather than half-way through.
    """
    pushed = tuple(predicates)
    groups: list[tuple[str, int, int]] = []  # (path, row group, rows) to read, in order
    for path in files:
        parquet = capture.open_committed(path)
        try:
            counts = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
        except capture.UNREADABLE as exc:
            raise capture.CaptureError(
                f"committed capture file {os.fspath(path)!r} is unreadable: {exc}"
            ) from None
        for index, count in enumerate(counts):
            if row_group_may_match(parquet.metadata, index, pushed):
                groups.append((os.fspath(path), index, count))
    total = sum(count for _, _, count in groups)
    count_parts = max(1, -(-total // rows_per_part))
    parts: list[Any] = []
    current: list[tuple[str, int]] = []
    seen = 0
    for path, index, count in groups:
        current.append((path, index))
        seen += count
        # Cut where the running row count reaches the next of count_parts even shares.
        if seen and seen * count_parts >= total * (len(parts) + 1):
            parts.append(_scan_part(current, pushed))
            current = []
    if current:
        parts.append(_scan_part(current, pushed))
    return parts


def _scan_part(groups: list[tuple[str, int]], pushed: tuple[Predicate, ...]) -> ScanPart:
    pieces: list[FilePart] = []
    for path, index in groups:
        if pieces and pieces[-1].path == path:
            pieces[-1].groups += (index,)
        else:
            pieces.append(FilePart(path, (index,), pushed))
    return ScanPart(tuple(pieces))


# -- reading --------------------------------------------------------------------------


def _project(
    batch: pa.RecordBatch, fields: list[tuple[str, FieldType]], types: list[pa.DataType]
) -> list[pa.Array[Any]]:
    """The projected field columns of a batch: each message decoded once, and its
    fields looked through once for every projected name (the first field of a
    name counts, as in Message.field; another type than the column's gives null)."""
    wanted: dict[str, list[tuple[int, FieldType, Any]]] = {}
    for index, (name, ftype) in enumerate(fields):
        wanted.setdefault(name, []).append((index, ftype, column_converter(ftype)))
    width = len(fields)
    columns: list[list[Any]] = [[] for _ in fields]
    data_column = batch.column(batch.schema.get_field_index("data"))
    from_bytes = Message.from_bytes
    entries_of = capture.field_entries
    # Non-null binary (CAPTURE_SCHEMA); a null would fail from_bytes like garbage does.
    for data in cast("list[bytes]", data_column.to_pylist()):
        row: list[Any] = [None] * width
        try:
            entries = entries_of(from_bytes(data))
        except RvError:
            entries = ()
        found = 0
        for field_name, _, ftype, value in entries:
            targets = wanted.get(field_name) if field_name is not None else None
            if targets is None:
                continue
            for index, column_type, convert in targets:
                if not (found >> index) & 1:
                    found |= 1 << index
                    if ftype is column_type:
                        row[index] = value if convert is None else convert(value)
        for values, value in zip(columns, row, strict=True):
            values.append(value)
    return [pa.array(values, type=dtype) for values, dtype in zip(columns, types, strict=True)]


def _conform(array: pa.Array[Any], dtype: pa.DataType, path: str) -> pa.Array[Any]:
    """A capture column as the Arrow type Spark expects (the recorder writes exactly
    that type, so this is a no-op for its files)."""
    if array.type == dtype:
        return array
    try:
        return array.cast(dtype)
    except (ValueError, TypeError, NotImplementedError, pa.ArrowException) as exc:
        # Columns of the right names but other types: not a file the recorder wrote.
        raise capture.CaptureError(
            f"committed capture file {path!r} is not an rvasync capture: {exc}"
        ) from None


def _read_batches(part: FilePart, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The partition's row groups, ``columns`` only, a batch at a time (so Spark takes
    the first batch while later ones are still being decoded), filtered by its predicates."""
    parquet = capture.open_committed(part.path)
    try:
        batches = parquet.iter_batches(
            batch_size=BATCH_ROWS, row_groups=list(part.groups), columns=columns
        )
        for batch in batches:
            selected = mask(batch, part.predicates)
            yield batch if selected is None else batch.filter(selected)
    except capture.UNREADABLE as exc:
        raise capture.CaptureError(
            f"committed capture file {part.path!r} is unreadable: {exc}"
        ) from None


def read_part(part: Any, schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """Record batches of one partition (a :class:`ScanPart`, or a single
    :class:`FilePart`), shaped exactly as Spark expects ``schema``.

    Only the Parquet columns the schema needs are decoded: the capture
    columns it keeps, ``data`` when fields are projected, and the columns
    pushed-down predicates test.
    """
    if isinstance(part, ScanPart):
        pieces = part.pieces
    elif isinstance(part, FilePart):
        pieces = (part,)
    else:
        return
    target = arrow_schema(schema)
    plan_ = layout(schema)
    fields = plan_.fields
    field_types = [
        target.field(i).type for i, c in enumerate(plan_.columns) if not isinstance(c, str)
    ]
    for piece in pieces:
        wanted = set(plan_.capture_columns) | {p.column for p in piece.predicates}
        if fields:
            wanted.add("data")
        columns = [name for name in capture.CAPTURE_COLUMNS if name in wanted]
        for batch in _read_batches(piece, columns):
            if not batch.num_rows:
                continue
            projected = iter(_project(batch, fields, field_types) if fields else ())
            arrays = [
                _conform(
                    batch.column(batch.schema.get_field_index(c)), target.field(i).type, piece.path
                )
                if isinstance(c, str)
                else next(projected)
                for i, c in enumerate(plan_.columns)
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=target)
