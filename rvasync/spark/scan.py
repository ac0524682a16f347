"""Scanning capture files for Spark: the schema, partition planning, and reading batches.

Everything here runs inside Spark's Python workers (the planner on the
driver, readers on executors) and speaks Arrow, so rows reach Spark as
record batches without a per-row Python conversion, except for projected
field columns, which need each message decoded (:mod:`rvasync.spark.project`).
Files are opened through :mod:`rvasync.spark.capture`, which checks each one
against its marker entry.
"""

from __future__ import annotations

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
from rvasync.spark.capture import CommittedFile
from rvasync.spark.options import ROWS_PER_PARTITION, FieldSpec, ReadOptions
from rvasync.spark.project import BadRecord, Projection, Tally, decode_errors
from rvasync.spark.pushdown import Predicate, mask, row_group_may_match
from rvasync.spark.storage import Location
from rvasync.spark.typemap import METADATA_KEY, common_type, field_to_spark

__all__ = ["BASE_SCHEMA", "FilePart", "ScanPart", "plan", "read_part", "read_schema"]

FIELD_KEY = "rvasync.field"
#: Column metadata marking the corrupt-record column (option columnNameOfCorruptRecord).
CORRUPT_KEY = "rvasync.corrupt"
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


def _sample_types(
    locations: Sequence[Location], names: set[str], limit: int
) -> dict[str, set[FieldType]]:
    """The field types seen for ``names`` in the first ``limit`` committed messages (the
    first field of a name in each message, as reads take it)."""
    seen: dict[str, set[FieldType]] = {name: set() for name in names}
    remaining = limit
    for location in locations:
        for ref in capture.snapshot(location):
            with ref.open() as opened:
                for batch in opened.batches(range(opened.metadata.num_row_groups), ["data"]):
                    rows = batch.column(0).to_pylist()[:remaining]
                    _note_types(cast("list[bytes]", rows), seen)
                    remaining -= len(rows)
                    if remaining == 0:
                        return seen
    return seen


def _note_types(rows: list[bytes], seen: dict[str, set[FieldType]]) -> None:
    for data in rows:
        try:
            msg = Message.from_bytes(data)
        except (RvError, TypeError):
            continue  # a bad record to the read; no type to learn from it
        noted: set[str] = set()
        for field in msg:
            if field.name in seen and field.name not in noted:
                noted.add(field.name)
                seen[field.name].add(field.type)


def _resolve(specs: Sequence[FieldSpec], options: ReadOptions) -> list[FieldSpec]:
    untyped = {spec.name for spec in specs if spec.type is None}
    limit = options.sample_rows
    seen = _sample_types(options.locations(), untyped, limit) if untyped else {}
    resolved = []
    for spec in specs:
        if spec.type is not None:
            resolved.append(spec)
            continue
        types = seen[spec.name]
        if not types:
            raise InvalidArgument(
                f"option fields: field {spec.name!r} does not occur in the first {limit} "
                f"committed messages of {options.path!r}, so its type is unknown; give it as "
                f"{spec.name}:TYPE (for example {spec.name}:F64)"
            )
        common = common_type(types)
        if common is None:
            listed = " and ".join(sorted(t.name for t in types))
            raise InvalidArgument(
                f"option fields: field {spec.name!r} has types {listed} in {options.path!r}; "
                f"a column has one type: give it as {spec.name}:TYPE"
            )
        resolved.append(FieldSpec(spec.name, common, spec.column))
    return resolved


def read_schema(options: ReadOptions) -> T.StructType:
    """The schema of a read: the capture columns kept (``option columns``; all by
    default), then one column per projected field, then the corrupt-record column
    when one is asked for.

    Checks the capture directories (they must exist and be readable) so a bad
    path fails when the DataFrame is defined.
    """
    for location in options.locations():
        capture.read_marker(location)
    fields = [_BASE_FIELDS[name] for name in options.columns]
    for spec in _resolve(options.fields, options):
        assert spec.type is not None
        if spec.column in _BASE_NAMES:
            raise InvalidArgument(
                f"option fields: column {spec.column!r} would hide the capture column of that "
                f"name; rename it ({spec.name}:{spec.type.name} as {spec.name}_field)"
            )
        dtype = field_to_spark(spec.type, f"option fields, field {spec.name!r}")
        metadata = {METADATA_KEY: spec.type.name, FIELD_KEY: spec.name}
        fields.append(T.StructField(spec.column, dtype, True, metadata))
    if options.corrupt_column is not None:
        corrupt = T.StructField(options.corrupt_column, T.StringType(), True, {CORRUPT_KEY: True})
        fields.append(corrupt)
    return T.StructType(fields)


#: A column of a read: a capture column (its name), a projected field (name, type), or
#: the corrupt-record column (None).
Column = str | tuple[str, FieldType] | None


@dataclass(frozen=True)
class Layout:
    """What a read schema asks for, column by column in the schema's order."""

    columns: tuple[Column, ...]

    @property
    def capture_columns(self) -> list[str]:
        return [c for c in self.columns if isinstance(c, str)]

    @property
    def fields(self) -> list[tuple[str, FieldType]]:
        return [c for c in self.columns if isinstance(c, tuple)]

    @property
    def corrupt(self) -> bool:
        return None in self.columns


def layout(schema: T.StructType) -> Layout:
    """How to fill each column of a read schema; a column that is neither a capture column
    (of its documented type) nor a projected field is an InvalidArgument."""
    result: list[Column] = []
    for field in schema.fields:
        meta = field.metadata or {}
        if meta.get(CORRUPT_KEY) and isinstance(field.dataType, T.StringType):
            result.append(None)
            continue
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
    """Row groups ``groups`` of a committed capture file, keeping only rows that match
    ``predicates`` (pushed-down filters)."""

    file: CommittedFile
    groups: tuple[int, ...]
    predicates: tuple[Predicate, ...]

    def __init__(
        self, file: CommittedFile, groups: tuple[int, ...], predicates: tuple[Predicate, ...] = ()
    ) -> None:
        self.file = file
        self.groups = groups
        self.predicates = predicates

    @property
    def path(self) -> str:
        return self.file.url


@dataclass
class ScanPart(InputPartition):
    """One Spark task: runs of row groups (:class:`FilePart`) of one or more consecutive
    committed files, read in order."""

    pieces: tuple[FilePart, ...]

    def __init__(self, pieces: tuple[FilePart, ...]) -> None:
        self.pieces = pieces


def plan(
    files: Sequence[CommittedFile],
    *,
    rows_per_part: int = ROWS_PER_PARTITION,
    predicates: Sequence[Predicate] = (),
) -> list[Any]:
    """Partitions over committed files: runs of whole row groups in capture order, as
    many as ``rows_per_part`` asks for (the row count over it, rounded up) and as even
    as whole row groups allow; a partition may span files (and captures).

    Every Spark task costs a fixed amount on the JVM and in the Python worker
    (tens of milliseconds of CPU), so partitions are sized by rows, not by
    files. Row groups whose statistics rule out ``predicates`` are left out.
    Planning opens every file's footer and checks it against the marker, so a
    missing file, or one whose footer is damaged, fails the job at its start;
    damage inside a file's column chunks is found by the task that reads them.
    """
    pushed = tuple(predicates)
    groups: list[tuple[CommittedFile, int, int]] = []  # (file, row group, rows) in order
    for ref in files:
        with ref.open() as opened:
            metadata = opened.metadata
            for index, count in enumerate(opened.row_group_rows):
                if row_group_may_match(metadata, index, pushed):
                    groups.append((ref, index, count))
    total = sum(count for _, _, count in groups)
    count_parts = max(1, -(-total // rows_per_part))
    parts: list[Any] = []
    current: list[tuple[CommittedFile, int]] = []
    seen = 0
    for ref, index, count in groups:
        current.append((ref, index))
        seen += count
        # Cut where the running row count reaches the next of count_parts even shares.
        if seen and seen * count_parts >= total * (len(parts) + 1):
            parts.append(_scan_part(current, pushed))
            current = []
    if current:
        parts.append(_scan_part(current, pushed))
    return parts


def _scan_part(groups: list[tuple[CommittedFile, int]], pushed: tuple[Predicate, ...]) -> ScanPart:
    pieces: list[FilePart] = []
    for ref, index in groups:
        if pieces and pieces[-1].file == ref:
            pieces[-1].groups += (index,)
        else:
            pieces.append(FilePart(ref, (index,), pushed))
    return ScanPart(tuple(pieces))


# -- reading --------------------------------------------------------------------------


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
    with part.file.open() as opened:
        for batch in opened.batches(part.groups, columns, BATCH_ROWS):
            selected = mask(batch, part.predicates)
            yield batch if selected is None else batch.filter(selected)


@dataclass(frozen=True)
class ReadRules:
    """What a read does with bad records (option mode) and field types (strictTypes)."""

    mode: str = "PERMISSIVE"
    strict: bool = False


class _Reader:
    """Turns a piece's batches into batches of the read schema, applying the rules."""

    def __init__(self, schema: T.StructType, rules: ReadRules) -> None:
        self.target = arrow_schema(schema)
        self.layout = layout(schema)
        self.rules = rules
        fields = self.layout.fields
        types = [
            self.target.field(i).type
            for i, c in enumerate(self.layout.columns)
            if isinstance(c, tuple)
        ]
        self.project = Projection(fields, types, rules.strict) if fields else None
        self.tally = Tally()

    def columns(self, piece: FilePart) -> list[str]:
        wanted = set(self.layout.capture_columns) | {p.column for p in piece.predicates}
        if self.project is not None or self.layout.corrupt:
            wanted.add("data")
        return [name for name in capture.CAPTURE_COLUMNS if name in wanted]

    def convert(self, batch: pa.RecordBatch, piece: FilePart, first_row: int) -> pa.RecordBatch:
        projected: list[pa.Array[Any]] = []
        bad: dict[int, str] = {}
        if self.project is not None:
            projected, bad = self.project(batch.column(batch.schema.get_field_index("data")))
        elif self.layout.corrupt:
            bad = decode_errors(batch.column(batch.schema.get_field_index("data")))
        if bad:
            self._met(bad, piece, first_row)
        fields = iter(projected)
        arrays = []
        for i, column in enumerate(self.layout.columns):
            if isinstance(column, str):
                raw = batch.column(batch.schema.get_field_index(column))
                arrays.append(_conform(raw, self.target.field(i).type, piece.path))
            elif column is None:
                arrays.append(pa.array([bad.get(r) for r in range(batch.num_rows)], pa.string()))
            else:
                arrays.append(next(fields))
        result = pa.RecordBatch.from_arrays(arrays, schema=self.target)
        if bad and self.rules.mode == "DROPMALFORMED":
            keep = pa.array([r not in bad for r in range(batch.num_rows)])
            self.tally.dropped += len(bad)
            result = result.filter(keep)
        return result

    def _met(self, bad: dict[int, str], piece: FilePart, first_row: int) -> None:
        row, why = next(iter(bad.items()))
        where = f"{piece.path}, row {first_row + row} of the read's row groups {piece.groups}"
        if self.rules.mode == "FAILFAST":
            raise BadRecord(
                f"bad record in {where}: {why} (mode FAILFAST; PERMISSIVE keeps the row with "
                f"nulls, DROPMALFORMED leaves it out)"
            )
        if self.tally.first is None:
            self.tally.first = f"{where}: {why}"
        self.tally.count += len(bad)


def read_part(
    part: Any, schema: T.StructType, rules: ReadRules = ReadRules()
) -> Iterator[pa.RecordBatch]:
    """Record batches of one partition (a :class:`ScanPart`, or a single
    :class:`FilePart`), shaped exactly as Spark expects ``schema``.

    Only the Parquet columns the schema needs are decoded: the capture
    columns it keeps, ``data`` when fields are projected (or bad records
    looked for), and the columns pushed-down predicates test.
    """
    if isinstance(part, ScanPart):
        pieces = part.pieces
    elif isinstance(part, FilePart):
        pieces = (part,)
    else:
        return
    reader = _Reader(schema, rules)
    for piece in pieces:
        row = 0
        for batch in _read_batches(piece, reader.columns(piece)):
            if not batch.num_rows:
                continue
            converted = reader.convert(batch, piece, row)
            row += batch.num_rows
            if converted.num_rows:
                yield converted
    reader.tally.warn(pieces[0].path if pieces else "", rules.mode)
