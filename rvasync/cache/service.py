"""``rv.CurrentValueCache``: keep the last message of every subject, answer who asks.

The asyncio driver of the cache (Rendezvous' rvcache role). It listens to its
patterns on a transport and stores each update in a
:class:`~rvasync.protocol.cvc.RetainedStore` (and its store file, if it has
one) as the update is delivered, without a queue in between; it answers
``_RVCACHE.REQUEST`` with the retained messages matching the requested
pattern, in parts to the requester's inbox; and it announces itself on
``_RVCACHE.HELLO`` so that each answer can name the other caches the
requester should wait for (docs/retained.md). The decisions are the core's;
this module owns the listeners, the timer and the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.advisories import build_advisory
from rvasync.cache.deletion import is_retained_deletion
from rvasync.cache.storefile import StoreFile
from rvasync.errors import InvalidArgument, RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.cvc import Outcome, Refusals, RetainedStore, reduce_patterns, split_parts
from rvasync.protocol.cvc import names as cvc
from rvasync.protocol.cvc.storefile import Op
from rvasync.subjects import check_listen_subject
from rvasync.transport.listener import Listener

# Enum members as module globals (the prefixes name their enum), read per
# update: on Python 3.11 reading a member through its class costs about 0.2 us
# (EnumType defines __getattr__, which puts every look-up on the class on a slow
# path); a global costs about 15 ns.
_OP_DELETE, _OP_PUT = (Op.DELETE, Op.PUT)


_O_DELETED, _O_REPLACED, _O_STORED = (Outcome.DELETED, Outcome.REPLACED, Outcome.STORED)


__all__ = ["CurrentValueCache"]

#: Minimum seconds between two limit advisories (refusals in between are counted).
ADVISORY_INTERVAL = 1.0
#: A peer cache silent for this many of its announced intervals is forgotten.
PEER_EXPIRY_FACTOR = 3.0


def _check_patterns(patterns: object) -> list[str]:
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, Iterable):
        raise InvalidArgument(f"patterns must be subject patterns, got {type(patterns).__name__}")
    checked = list(patterns)
    if not checked:
        raise InvalidArgument("a cache needs at least one subject pattern")
    for pattern in checked:
        if not isinstance(pattern, str):
            raise InvalidArgument(f"a pattern must be a str, got {type(pattern).__name__}")
        check_listen_subject(pattern)
        if pattern.startswith("_RVCACHE."):
            raise InvalidArgument(f"{pattern!r}: the cache protocol's subjects are not retained")
    return reduce_patterns(checked)


def _check_interval(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 3600:
        raise InvalidArgument(f"hello_interval must be seconds in (0, 3600), got {value!r}")
    return float(value)


class CurrentValueCache:
    """Retains the last message of each subject matching ``patterns`` and answers requests.

    ``store``: a file path for a crash-safe store (restored at start), or
    None to keep values in memory only. ``max_subjects`` / ``max_bytes``:
    limits; an update over a limit is not retained and counted in a WARN
    advisory ``_RV.WARN.RVCACHE.LIMIT_EXCEEDED`` (at most one a second).
    Use as ``async with CurrentValueCache(t, ["PRICES.>"]) as cache:`` or
    ``await cache.start()`` / ``await cache.close()``.
    """

    def __init__(
        self,
        transport: Any,
        patterns: Iterable[str] | str,
        *,
        store: str | os.PathLike[str] | None = None,
        max_subjects: int | None = None,
        max_bytes: int | None = None,
        hello_interval: float = 1.0,
        name: str | None = None,
    ) -> None:
        self._patterns = _check_patterns(patterns)
        try:
            self._store = RetainedStore(max_subjects=max_subjects, max_bytes=max_bytes)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if store is not None and not isinstance(store, str | os.PathLike):
            raise InvalidArgument(f"store must be a file path or None, got {type(store).__name__}")
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgument("name must be a non-empty str or None")
        self._transport = transport
        self._file = None if store is None else StoreFile(store)
        self._hello_interval = _check_interval(hello_interval)
        self.id = name or f"{os.uname().nodename}.{os.getpid()}.{os.urandom(4).hex()}"
        self._peers: dict[str, float] = {}  # cache id -> when it is forgotten (loop time)
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._advisory_at = 0.0
        self._advisory_pending = False
        self._started = False
        self._closed = False
        self._last: Message | None = None
        #: Refusals reported so far (every advisory's counts added up).
        self.refused = Refusals()

    # -- public ------------------------------------------------------------------------

    @property
    def patterns(self) -> list[str]:
        """The patterns the cache listens to (overlapping ones reduced)."""
        return list(self._patterns)

    @property
    def store_path(self) -> str | None:
        return None if self._file is None else self._file.path

    def __len__(self) -> int:
        """How many subjects are retained."""
        return len(self._store)

    @property
    def retained_bytes(self) -> int:
        return self._store.size

    @property
    def peers(self) -> list[str]:
        """The other caches heard on the network (their ids)."""
        return sorted(self._peers)

    def retained(self, subject: str) -> Message | None:
        """The message retained for ``subject`` (a decoded copy), or None."""
        entry = self._store.get(subject)
        return None if entry is None else Message.from_bytes(entry.wire)

    async def start(self) -> CurrentValueCache:
        """Restore the store file (if any), start listening and announcing."""
        if self._started:
            return self
        self._transport.check_open()
        if self._file is not None:
            self._restore(self._file.open())
        self._started = True
        try:
            for pattern in self._patterns:
                listener = self._transport.listen(pattern)
                listener.intercept(self._ingest)
                self._listeners.append(listener)
            self._listeners.append(
                self._transport.listen(cvc.REQUEST_SUBJECT, callback=self._on_request)
            )
            self._listeners.append(
                self._transport.listen(cvc.HELLO_SUBJECT, callback=self._on_hello)
            )
            await self._confirm_interests()
            self._tasks.append(
                asyncio.get_running_loop().create_task(
                    self._announce(), name=f"rvasync-cache-hello:{self.id}"
                )
            )
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        """Stop listening; the store file is synced and closed (values stay in it)."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for listener in self._listeners:
            listener.close_now()
        self._listeners.clear()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._file is not None:
            self._file.close()

    async def __aenter__(self) -> CurrentValueCache:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<CurrentValueCache {self.id} patterns={self._patterns} subjects={len(self)}>"

    # -- ingest ----------------------------------------------------------------------------

    def _restore(self, records: list[Any]) -> None:
        store = self._store
        for record in records:
            if record.op is _OP_PUT:
                store.put(record.subject, record.wire, record.stamp)
            else:
                store.delete(record.subject)
        store.take_refusals()  # limits lowered since: the excess was simply not restored
        if self._file is not None and self._file.torn:
            stderr_logger().warning(
                "cache store file had a torn last record (dropped)",
                path=self._file.path,
                bytes=self._file.torn,
            )

    def _ingest(self, msg: Message) -> None:
        """One update, as the transport delivers it (no queue in between)."""
        last = self._last
        subject = msg.subject
        if last is not None and last.subject == subject and msg.shares_fields(last):
            return  # the same message again, through an overlapping pattern
        self._last = msg
        if subject is None or subject.startswith("_RVCACHE."):
            return
        store_file = self._file
        if is_retained_deletion(msg):
            if self._store.delete(subject) is _O_DELETED and store_file is not None:
                store_file.append(_OP_DELETE, subject, time.time())
            return
        wire = msg.to_bytes()
        stamp = time.time()
        outcome = self._store.put(subject, wire, stamp)
        if outcome is _O_STORED or outcome is _O_REPLACED:
            if store_file is not None:
                store_file.append(_OP_PUT, subject, stamp, wire)
                if store_file.wants_compaction(self._store.size):
                    store_file.compact(self._store)
        else:
            self._refused()

    def _refused(self) -> None:
        if self._advisory_pending:
            return
        self._advisory_pending = True
        loop = asyncio.get_running_loop()
        loop.call_at(max(loop.time(), self._advisory_at), self._report_refusals)

    def _report_refusals(self) -> None:
        self._advisory_pending = False
        refusals = self._store.take_refusals()
        if not refusals.total or self._closed:
            return
        self.refused.over_subjects += refusals.over_subjects
        self.refused.over_bytes += refusals.over_bytes
        self._advisory_at = asyncio.get_running_loop().time() + ADVISORY_INTERVAL
        store = self._store
        self._transport.present(
            build_advisory(
                "WARN",
                "LIMIT_EXCEEDED",
                [
                    ("cache", self.id),
                    ("refused", refusals.total, FieldType.U64),
                    ("over_subjects", refusals.over_subjects, FieldType.U64),
                    ("over_bytes", refusals.over_bytes, FieldType.U64),
                    ("max_subjects", store.max_subjects or 0, FieldType.U64),
                    ("max_bytes", store.max_bytes or 0, FieldType.U64),
                ],
                source="RVCACHE",
            )
        )

    # -- requests and hellos -------------------------------------------------------------

    async def _on_request(self, request: Message) -> None:
        inbox = request.reply_subject
        pattern = request.field_values().get(cvc.REQUEST_PATTERN)
        if inbox is None:
            return
        try:
            if not isinstance(pattern, str):
                raise InvalidArgument("the request has no pattern")
            check_listen_subject(pattern)
        except RvError as exc:
            stderr_logger().warning("ignored a bad retained request", reason=str(exc))
            return
        entries = self._store.select(pattern)
        parts = split_parts((entry.subject, entry.stamp, entry.wire) for entry in entries)
        peers = self.peers
        for number, blob in enumerate(parts):
            part = Message(inbox)
            part.add(cvc.ANSWER_CACHE, self.id)
            part.add(cvc.ANSWER_PEERS, peers, FieldType.STRINGARRAY)
            part.add(cvc.ANSWER_PART, number, FieldType.I64)
            part.add(cvc.ANSWER_LAST, number == len(parts) - 1)
            part.add(cvc.ANSWER_ENTRIES, blob, FieldType.OPAQUE)
            try:
                pending = self._transport.send_internal(part)
                if pending is not None:
                    await pending
            except RvError as exc:
                stderr_logger().warning("could not answer a retained request", reason=str(exc))
                return

    def _on_hello(self, hello: Message) -> None:
        values = hello.field_values()
        cache = values.get(cvc.HELLO_CACHE)
        interval = values.get(cvc.HELLO_INTERVAL)
        if not isinstance(cache, str) or cache == self.id:
            return
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
            return
        now = asyncio.get_running_loop().time()
        if cache not in self._peers:
            self._send_hello()  # a newcomer learns of this cache at once
        self._peers[cache] = now + PEER_EXPIRY_FACTOR * float(interval)

    def _send_hello(self) -> None:
        hello = Message(cvc.HELLO_SUBJECT)
        hello.add(cvc.HELLO_CACHE, self.id)
        hello.add(cvc.HELLO_INTERVAL, self._hello_interval, FieldType.F64)
        try:
            self._transport.send_internal(hello)
        except RvError as exc:
            stderr_logger().warning("could not announce the cache", reason=str(exc))

    async def _announce(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._send_hello()
            await asyncio.sleep(self._hello_interval)
            now = loop.time()
            for cache, until in list(self._peers.items()):
                if until < now:
                    del self._peers[cache]

    async def _confirm_interests(self) -> None:
        """Wait until a standalone daemon has the listeners (one round trip), if there is one."""
        link = getattr(self._transport, "link", None)
        ping = getattr(link, "ping", None)
        if ping is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ping(), 10.0)
