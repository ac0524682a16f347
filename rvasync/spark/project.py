"""Projecting message fields into typed columns, and what a read does with bad records.

Each captured message is decoded once; for every projected name the first
field of that name counts (as ``Message.field`` does, and as the sampling
that infers types does). A field of the column's type fills the cell; a
number of another numeric type fills it when the column's type holds the
value exactly (a U16 or I32 ``qty`` in an I64 column, an F32 in an F64
one), unless ``strictTypes`` is set. Anything else makes the row a **bad
record**: a message that cannot be decoded, a field of a type that does not
convert (a STRING in an I32 column), a value that does not fit (300 in a
U8 column), a DATETIME outside years 1..9999. A missing field is not bad:
its cell is null.

What happens to a bad record is the read's ``mode``, named as Spark's own
file readers name theirs:

- ``PERMISSIVE`` (the default): the row is kept, its bad cells null, and
  the column named by ``columnNameOfCorruptRecord`` (when the read asks for
  one) says why;
- ``DROPMALFORMED``: the row is left out;
- ``FAILFAST``: the read fails with :class:`BadRecord` naming the file, the
  row and the reason.

Every task that met bad records logs one warning with their count and the
first reason, so they are never silent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa

from rvasync._logging import stderr_logger
from rvasync.errors import RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.spark.capture import field_entries
from rvasync.spark.typemap import column_converter, converter

__all__ = ["BadRecord", "Projection", "Tally", "decode_errors"]


class BadRecord(RvError):
    """A bad record met by a read in mode FAILFAST."""


@dataclass
class Tally:
    """Bad records met by one task: how many, and the first one's description."""

    count: int = 0
    first: str | None = None
    dropped: int = 0

    def warn(self, what: str, mode: str) -> None:
        if self.count:
            stderr_logger().warning(
                "bad records in a capture read",
                read=what,
                bad_records=self.count,
                dropped=self.dropped,
                mode=mode,
                first=self.first,
            )


@dataclass
class Projection:
    """The projected fields of a read (name, field type of the column) and their Arrow
    types; ``strict``: a field of another type is bad even when its value converts."""

    fields: Sequence[tuple[str, FieldType]]
    types: Sequence[pa.DataType]
    strict: bool = False
    _converters: dict[tuple[FieldType, FieldType], Callable[[Any], Any] | None] = field(
        default_factory=dict, repr=False
    )

    def _convert(self, source: FieldType, column: FieldType) -> Callable[[Any], Any] | None:
        key = (source, column)
        if key not in self._converters:
            self._converters[key] = None if self.strict else converter(source, column)
        return self._converters[key]

    def __call__(self, data: pa.Array[Any]) -> tuple[list[pa.Array[Any]], dict[int, str]]:
        """The field columns of a batch's ``data`` column, and the batch's bad rows (row
        index -> why), with the bad cells null."""
        wanted: dict[str, list[tuple[int, FieldType, Any]]] = {}
        for index, (name, ftype) in enumerate(self.fields):
            wanted.setdefault(name, []).append((index, ftype, column_converter(ftype)))
        width = len(self.fields)
        columns: list[list[Any]] = [[] for _ in self.fields]
        bad: dict[int, str] = {}
        from_bytes = Message.from_bytes
        # Non-null binary (CAPTURE_SCHEMA); a null would fail from_bytes like garbage does.
        for number, raw in enumerate(cast("list[bytes]", data.to_pylist())):
            row: list[Any] = [None] * width
            try:
                entries = field_entries(from_bytes(raw))
            except (RvError, TypeError) as exc:
                entries = ()
                bad[number] = f"undecodable message: {exc}"
            found = 0
            for field_name, _, ftype, value in entries:
                targets = wanted.get(field_name) if field_name is not None else None
                if targets is None:
                    continue
                for index, column_type, convert in targets:
                    if (found >> index) & 1:
                        continue
                    found |= 1 << index
                    if ftype is column_type and convert is None:
                        row[index] = value
                        continue
                    if ftype is not column_type:
                        convert = self._convert(ftype, column_type)
                    name = str(field_name)
                    why = self._fill(row, index, value, convert, name, ftype, column_type)
                    if why is not None:
                        bad[number] = f"{bad[number]}; {why}" if number in bad else why
            for values, value in zip(columns, row, strict=True):
                values.append(value)
        arrays = [pa.array(v, type=t) for v, t in zip(columns, self.types, strict=True)]
        return arrays, bad

    @staticmethod
    def _fill(
        row: list[Any],
        index: int,
        value: Any,
        convert: Callable[[Any], Any] | None,
        name: str,
        ftype: FieldType,
        column_type: FieldType,
    ) -> str | None:
        if convert is None:
            return f"field {name!r} is {ftype.name}, its column is {column_type.name}"
        try:
            row[index] = convert(value)
        except (ValueError, OverflowError, TypeError) as exc:
            return (
                f"field {name!r} ({ftype.name}) does not fit its {column_type.name} column: {exc}"
            )
        return None


def decode_errors(data: pa.Array[Any]) -> dict[int, str]:
    """The rows of a ``data`` column that are not messages (for a corrupt-record column
    on a read that projects no field)."""
    bad: dict[int, str] = {}
    for number, raw in enumerate(cast("list[bytes]", data.to_pylist())):
        try:
            Message.from_bytes(raw)
        except (RvError, TypeError) as exc:
            bad[number] = f"undecodable message: {exc}"
    return bad
