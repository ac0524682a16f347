"""Publishing DataFrame rows as messages, from inside a Spark task.

A Spark executor is its own process, possibly on another host, so it reaches
the bus the only way a separate process can: a network transport attached to
a standalone daemon (``option("daemon", "host:port")``). Each task opens
one transport, sends its partition's rows in order, and closes it, which
waits until the daemon has taken every message.

Spark runs a task again when an attempt fails (and a micro-batch again after
a driver restart), and the new attempt publishes the partition again. So
every message names its row, the same in every attempt: the write (an id
made when a batch write is planned, or the streaming query's id and the
micro-batch's), the partition and the row's position in it, in the field
``rvasync_row`` (option ``rowIdField``). Listeners deduplicate on it. With
certified publishing (``cm_name``) every attempt of a task is one and the
same correspondent, named from that identity, and numbers its messages
alike, so a listener's ledger discards what an earlier attempt already
delivered: each row arrives once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from rvasync.errors import DaemonUnavailable, InvalidArgument, RequestTimeout, TransportClosed
from rvasync.message import Message
from rvasync.spark.options import WriteOptions
from rvasync.spark.typemap import message_builder

if TYPE_CHECKING:
    from rvasync.cmdriver import CmTransport
    from rvasync.transport.network import Transport

__all__ = ["RowPublisher", "TaskIdentity", "network_transport"]

_CHUNK = 256


def network_transport() -> type[Transport]:
    """The ``rv.Transport`` class (imported late: executors import only what they use)."""
    try:
        from rvasync.transport.network import Transport
    except ImportError as exc:
        raise DaemonUnavailable(
            f"this rvasync installation has no network transport ({exc}); writing needs one"
        ) from None
    return Transport


@dataclass(frozen=True)
class TaskIdentity:
    """What a task publishes, named the same in all its attempts: ``write`` (the batch
    write, or the stream's query and micro-batch) and the partition."""

    write: str
    partition: int

    @classmethod
    def current(cls, write_id: str) -> TaskIdentity:
        """The running Spark task's identity (a micro-batch's from Spark's local
        properties, which a restarted query gives its re-run batches too)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:  # called outside Spark: one partition
            return cls(write_id, 0)
        batch = context.getLocalProperty("streaming.sql.batchId")
        query = context.getLocalProperty("sql.streaming.queryId")
        write = write_id if batch is None or not query else f"{query.replace('-', '')[:12]}.{batch}"
        return cls(write, context.partitionId())

    def row(self, position: int) -> str:
        return f"{self.write}.{self.partition}.{position}"

    def correspondent(self, cm_name: str) -> str:
        return f"{cm_name}.{self.write}.p{self.partition}"


class _Progress:
    """How many messages of the partition were handed to the transport so far."""

    sent: int = 0


class RowPublisher:
    """Turns rows of ``schema`` into messages as the write options say (picklable)."""

    def __init__(self, options: WriteOptions, schema: T.StructType) -> None:
        self.options = options
        names = schema.fieldNames()
        self._subject_index = names.index("subject") if "subject" in names else None
        self._reply_index = names.index("reply_subject") if "reply_subject" in names else None
        if options.subject is not None and self._subject_index is not None:
            raise InvalidArgument(
                "both option subject and a 'subject' column were given; drop the column "
                "or the option (the column gives each row its own subject)"
            )
        if options.subject is None and self._subject_index is None:
            raise InvalidArgument(
                "no subject: give option('subject', SUBJECT) or a 'subject' column"
            )
        for index, label in (
            (self._subject_index, "subject"),
            (self._reply_index, "reply_subject"),
        ):
            if index is not None and not isinstance(schema.fields[index].dataType, T.StringType):
                raise InvalidArgument(
                    f"column {label!r} must be a string, got "
                    f"{schema.fields[index].dataType.simpleString()}"
                )
        unknown = sorted(set(options.field_types) - set(names))
        if unknown:
            raise InvalidArgument(
                f"option fieldTypes names column(s) {', '.join(unknown)} that the DataFrame "
                f"does not have (columns: {', '.join(names)})"
            )
        if options.row_id_field and options.row_id_field in names:
            raise InvalidArgument(
                f"column {options.row_id_field!r} has the name of the field naming each row; "
                f"rename the column or choose another name with option rowIdField"
            )
        #: Made when the write is planned: every attempt of a task sees the same one.
        self.write_id = uuid.uuid4().hex[:12]
        skip = {self._subject_index, self._reply_index}
        self._field_indexes = [i for i in range(len(names)) if i not in skip]
        self._field_schema = T.StructType([schema.fields[i] for i in self._field_indexes])
        # Built here so a column that cannot become a field fails at job start.
        message_builder(self._field_schema, options.field_types, "writing with format('rvasync')")

    def messages(self, rows: Iterable[Any], task: TaskIdentity | None = None) -> Iterable[Message]:
        build = message_builder(
            self._field_schema, self.options.field_types, "writing with format('rvasync')"
        )
        indexes = self._field_indexes
        row_field = self.options.row_id_field if task is not None else ""
        for number, row in enumerate(rows):
            values = tuple(row)
            subject = (
                self.options.subject if self._subject_index is None else values[self._subject_index]
            )
            if subject is None:
                raise InvalidArgument(f"row {number} of the partition has a null subject")
            msg = build([values[i] for i in indexes], subject)
            if self._reply_index is not None:
                msg.reply_subject = values[self._reply_index]
            if row_field and task is not None:
                msg.add(row_field, task.row(number))
            yield msg

    def publish(self, rows: Iterable[Any], task: TaskIdentity | None = None) -> int:
        """Send every row through one transport; returns how many messages were sent.

        A daemon that cannot be reached, or a connection that drops before the
        daemon confirmed every message, fails the task with DaemonUnavailable
        naming the daemon and how far the partition got, so Spark retries the
        task (which sends the partition again: at-least-once).
        """
        progress = _Progress()
        if task is None:
            task = TaskIdentity.current(self.write_id)
        try:
            return asyncio.run(self._publish(rows, task, progress))
        except (DaemonUnavailable, TransportClosed, OSError) as exc:
            raise DaemonUnavailable(
                f"rvasync write to daemon {self.options.daemon} failed after {progress.sent} "
                f"of this partition's messages were handed to the transport: {exc}; the task "
                f"fails so that Spark retries it (the retry publishes the whole partition again)"
            ) from exc

    async def _publish(self, rows: Iterable[Any], task: TaskIdentity, progress: _Progress) -> int:
        opts = self.options
        transport_class = network_transport()
        transport = transport_class(
            opts.service, opts.network, opts.daemon, description="rvasync spark writer"
        )
        # One transport (one connection to the daemon) for the whole partition.
        async with transport:
            link = transport.link
            reconnects = getattr(link, "reconnects", 0)
            if opts.cm_name is None:
                count = await self._send_plain(transport, self.messages(rows, task), progress)
            else:
                count = await self._send_certified(transport, rows, task, progress)
            # The task succeeds only once the daemon has taken every message.
            ping = getattr(link, "ping", None)
            if ping is not None:
                await ping()
            if getattr(link, "reconnects", 0) != reconnects:
                # Messages buffered when the connection dropped never reached the daemon.
                raise DaemonUnavailable(
                    "the connection to the daemon dropped and was re-established during "
                    "the write, so messages in flight may not have reached it"
                )
        return count

    async def _send_plain(
        self, transport: Transport, messages: Iterable[Message], progress: _Progress
    ) -> int:
        count = 0
        chunk: list[Message] = []
        for msg in messages:
            chunk.append(msg)
            if len(chunk) >= _CHUNK:
                await transport.send_many(chunk)
                count += len(chunk)
                progress.sent = count
                chunk = []
        if chunk:
            await transport.send_many(chunk)
            count += len(chunk)
            progress.sent = count
        return count

    async def _send_certified(
        self, transport: Transport, rows: Iterable[Any], task: TaskIdentity, progress: _Progress
    ) -> int:
        """Labeled sends from the task's correspondent; returns once every registered
        listener has confirmed every message (or fails after cm_timeout).

        The name is the task's, the same in every attempt, and the rows are numbered
        alike (per subject, in partition order): a listener that confirmed sequence N
        from an earlier attempt discards a retry's 1..N, so each row arrives once. Two
        tasks never share a name, so never a sequence.
        """
        from rvasync.cmdriver import CmTransport

        opts = self.options
        assert opts.cm_name is not None
        count = 0
        async with CmTransport(transport, task.correspondent(opts.cm_name)) as cm:
            anticipated: set[str] = set()
            for msg in self.messages(rows, task):
                subject = msg.subject
                assert subject is not None  # messages() refuses a row without one
                if opts.cm_listeners and subject not in anticipated:
                    anticipated.add(subject)
                    for listener in opts.cm_listeners:
                        await cm.add_listener(listener, subject)
                await cm.send(msg)
                count += 1
                progress.sent = count
            await _confirmed(cm, opts.cm_timeout)
        return count


async def _confirmed(cm: CmTransport, timeout: float) -> None:
    """Wait until no sent message waits for a confirmation."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        waiting = [
            (review.subject, listener.name, listener.unconfirmed)
            for review in cm.review_ledger(">")
            for listener in review.listeners
            if listener.unconfirmed
        ]
        if not waiting:
            return
        if loop.time() >= deadline:
            detail = "; ".join(f"{subj}: {n} by {name}" for subj, name, n in waiting)
            raise RequestTimeout(
                f"certified messages not confirmed within cm_timeout={timeout:g} s ({detail})"
            )
        await asyncio.sleep(0.05)
