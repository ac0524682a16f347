"""The ``rvasync`` PySpark data source: read capture directories, publish rows as messages.

``spark.read.format("rvasync").load(DIR)``
    a batch DataFrame of every committed message (schema in docs/spark.md),
    plus typed columns for the fields named by ``option("fields", ...)``.
``spark.readStream.format("rvasync").load(DIR)``
    micro-batches of newly committed capture files. Offsets are file
    indexes; committed files never change, so a restarted query re-reads
    exactly what its checkpoint says and Structured Streaming's exactly-once
    processing holds.
``df.write.format("rvasync")`` / ``df.writeStream.format("rvasync")``
    every row becomes a message published through a standalone daemon.
    Publishing is at-least-once: Spark re-runs a failed task, which sends
    its rows again.

Options are checked when the DataFrame is defined (reads) or the job starts
(writes), and errors name the option or path at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
    WriterCommitMessage,
)

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument
from rvasync.spark import capture
from rvasync.spark.debug import debug_log
from rvasync.spark.offsets import Position, Stream, decode, encode
from rvasync.spark.options import ReadOptions, WriteOptions
from rvasync.spark.publish import RowPublisher
from rvasync.spark.pushdown import Predicate, exact_predicates
from rvasync.spark.scan import ReadRules, plan, projections, read_part, read_schema

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older PySpark
    # Checked for None before use.
    ReadAllAvailable = ReadMaxFiles = None  # type: ignore[assignment, misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]  # stand-in of the same name
        """Stand-in: older PySpark wraps sources for Trigger.AvailableNow itself."""


__all__ = ["RvasyncDataSource"]


class RvasyncDataSource(DataSource):
    """The ``rvasync`` format (register with ``rvasync.spark.register(spark)``)."""

    @classmethod
    def name(cls) -> str:
        return "rvasync"

    def schema(self) -> T.StructType:
        return read_schema(ReadOptions.parse(self.options))

    def _read_options(self, schema: T.StructType) -> ReadOptions:
        options = ReadOptions.parse(self.options)
        projections(schema)  # a schema() given by the user must be the source's own
        return options

    def reader(self, schema: T.StructType) -> DataSourceReader:
        options = self._read_options(schema)
        options.refuse_streaming_options()
        if options.pushdown:
            return FilteringCaptureReader(options, schema)
        return CaptureReader(options, schema)

    def streamReader(self, schema: T.StructType) -> DataSourceStreamReader:
        return CaptureStreamReader(self._read_options(schema), schema)

    def writer(self, schema: T.StructType, overwrite: bool) -> DataSourceWriter:
        return MessageWriter(_publisher(self.options, schema, overwrite))

    def streamWriter(self, schema: T.StructType, overwrite: bool) -> DataSourceStreamWriter:
        # overwrite is outputMode("complete"): each micro-batch is the whole
        # result table, and publishing all of it is what a listener wants.
        return MessageStreamWriter(_publisher(self.options, schema, False))


def _publisher(options: Any, schema: T.StructType, overwrite: bool) -> RowPublisher:
    if overwrite:
        raise InvalidArgument(
            "the rvasync sink cannot overwrite: published messages cannot be taken back; "
            "use mode('append')"
        )
    parsed = WriteOptions.parse(options)
    publisher = RowPublisher(parsed, schema)
    parsed.check_reachable()
    return publisher


def _planned(kind: str, options: ReadOptions, parts: list[Any], pushed: Any = ()) -> None:
    """The debug line a read's planning writes (PySpark's plan shows only the schema and
    the pushed filters of a Python source): RVASYNC_SPARK_DEBUG=1 in the environment of
    the driver's Python workers turns it on."""
    debug_log(
        "rvasync read planned",
        kind=kind,
        partitions=len(parts),
        pushed_filters=[f"{p.column} {p.op} {p.value!r}" for p in pushed],
        **options.summary(),
    )


# -- reading --------------------------------------------------------------------------


class CaptureReader(DataSourceReader):
    """Batch read of every committed file of the capture directories."""

    def __init__(self, options: ReadOptions, schema: T.StructType) -> None:
        self.options = options
        self.schema = schema
        self.rules = ReadRules(options.mode, options.strict_types)

    predicates: tuple[Predicate, ...] = ()

    def partitions(self) -> list[InputPartition]:
        files = [f for location in self.options.locations() for f in capture.snapshot(location)]
        parts = plan(
            files, rows_per_part=self.options.rows_per_partition, predicates=self.predicates
        )
        _planned("batch", self.options, parts, self.predicates)
        return parts or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_part(partition, self.schema, self.rules)


class FilteringCaptureReader(CaptureReader):
    """A batch read told the query's filters (``option("pushdown", "true")``).

    PySpark refuses a reader with ``pushFilters`` unless the session sets
    ``spark.sql.python.filterPushdown.enabled``, so pushdown is an option:
    without it, reads work in every session. The filters this reader
    evaluates exactly (pushdown.py) it keeps, so the plan shows them as
    ``PushedFilters``; the others go back to Spark.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        taken, rest = exact_predicates(filters)
        self.predicates = tuple(taken)
        return rest


class CaptureStreamReader(SupportsTriggerAvailableNow, DataSourceStreamReader):
    """Micro-batches of committed files; an offset names each capture's identity and how
    many of its files are read (rvasync.spark.offsets)."""

    def __init__(self, options: ReadOptions, schema: T.StructType) -> None:
        self.options = options
        self.schema = schema
        self.rules = ReadRules(options.mode, options.strict_types)
        self._available_now: dict[str, int] | None = None
        if options.max_files_per_trigger is not None and ReadMaxFiles is None:
            raise InvalidArgument("option maxFilesPerTrigger needs PySpark 4.2 or later")

    def _stream(self) -> Stream:
        return Stream(self.options.locations)

    def _decode(self, value: Any, what: str) -> list[Position]:
        return decode(value, what, [loc.url for loc in self.options.locations()])

    def initialOffset(self) -> dict[str, Any]:
        return encode(self._stream().initial(self.options.starting_offsets == "latest"))

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_files_per_trigger is not None:
            return ReadMaxFiles(self.options.max_files_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        begun = None if start is None else self._decode(start, "start")
        max_files = None
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        return encode(self._stream().latest(begun, max_files, self._available_now))

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {
            loc.url: marker.committed for loc, marker in self._stream().markers()
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        locations = {loc.url: loc for loc in self.options.locations()}
        files = self._stream().files(
            self._decode(start, "start"), self._decode(end, "end"), locations
        )
        if not files:
            return []
        parts = plan(files, rows_per_part=self.options.rows_per_partition)
        _planned("stream", self.options, parts)
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_part(partition, self.schema, self.rules)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: committed files stay until the user removes them."""


# -- writing ----------------------------------------------------------------------------


@dataclass
class Published(WriterCommitMessage):
    """How many messages one task published."""

    count: int


class MessageWriter(DataSourceWriter):
    """Batch write: each task publishes its partition's rows."""

    def __init__(self, publisher: RowPublisher) -> None:
        self.publisher = publisher

    def write(self, iterator: Iterator[Any]) -> Published:
        return Published(self.publisher.publish(iterator))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.count for m in messages if isinstance(m, Published))
        stderr_logger().warning(
            "rvasync write aborted; messages already published stay published", published=sent
        )


class MessageStreamWriter(DataSourceStreamWriter):
    """Streaming write: each micro-batch task publishes its rows (at-least-once)."""

    def __init__(self, publisher: RowPublisher) -> None:
        self.publisher = publisher

    def write(self, iterator: Iterator[Any]) -> Published:
        return Published(self.publisher.publish(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Messages were published as the tasks ran: nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.count for m in messages if isinstance(m, Published))
        stderr_logger().warning(
            "rvasync streaming write aborted; published messages stay published",
            batch=batchId,
            published=sent,
        )
