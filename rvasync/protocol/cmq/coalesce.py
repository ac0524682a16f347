"""Merging the records a member emits in one loop turn into fewer records.

Under load the scheduler assigns and acknowledges, and a worker accepts and
completes, many tasks per turn of the event loop; each of those records would
otherwise be a message of its own (built, encoded, routed, decoded and fed to
the peer's core), which is most of a task's cost. The records that list tasks
for one destination (ASSIGN, ACCEPT, COMPLETE, ACK, REFUSE, RELEASE) mean the
same whether they come one by one or together, so the driver holds them until
the end of the turn and sends :func:`coalesce` of them: one record per (kind,
destination), tasks in order, each once, at most :data:`MAX_TASKS` tasks and
about :data:`MAX_BYTES` of assigned payload per record. An ACCEPT of a task
whose COMPLETE goes to the same destination in the same batch says nothing
more, and is left out. The acknowledgements for a worker that gets an ASSIGN
in the same batch ride on that ASSIGN (its ``done`` list, record version 3)
instead of leaving as an ACK record of their own: a busy scheduler sends each
worker one record per turn, not two. STATUS and BYE never wait.
"""

from __future__ import annotations

from collections.abc import Iterable

from rvasync.protocol.cmq.records import QueueRecord, RecordKind, TaskId

# RecordKind members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_ACCEPT, _ACK, _ASSIGN, _COMPLETE = (
    RecordKind.ACCEPT,
    RecordKind.ACK,
    RecordKind.ASSIGN,
    RecordKind.COMPLETE,
)


__all__ = ["MAX_BYTES", "MAX_TASKS", "MERGEABLE", "coalesce"]

MAX_TASKS = 128
"""Tasks one merged record lists at most."""

MAX_BYTES = 32 * 1024
"""Assigned payload bytes above which a merged ASSIGN is cut (a single task may exceed it)."""

MERGEABLE = frozenset(
    {
        RecordKind.ASSIGN,
        RecordKind.ACCEPT,
        RecordKind.COMPLETE,
        RecordKind.ACK,
        RecordKind.REFUSE,
        RecordKind.RELEASE,
    }
)
"""Record kinds that only list tasks for one destination, and may wait until the end of the turn."""

_Row = tuple[TaskId, bool, bytes]


def coalesce(records: Iterable[QueueRecord]) -> list[QueueRecord]:
    """One record per (kind, destination) for ``records`` (all of a kind in :data:`MERGEABLE`).

    Merged records keep the order in which their (kind, destination) first
    appeared; a task listed twice keeps its first listing.
    """
    # Per task: one dict look-up and one small tuple (this runs for every task
    # the scheduler assigns or acknowledges and every task a worker completes).
    groups: dict[tuple[RecordKind, str], dict[TaskId, tuple[bool, bytes]]] = {}
    first: dict[tuple[RecordKind, str], QueueRecord] = {}
    for rec in records:
        kind = rec.kind
        if kind not in MERGEABLE:
            raise ValueError(f"a {kind} record cannot be merged")
        key = (kind, rec.to)
        rows = groups.get(key)
        if rows is None:
            rows = groups[key] = {}
            first[key] = rec
        if kind is _ASSIGN:
            payloads = rec.payloads
            if payloads:
                for (tid, certified), payload in zip(rec.tasks, payloads, strict=False):
                    if tid not in rows:
                        rows[tid] = (certified, payload)
            elif rec.tasks:
                # A single-payload ASSIGN is about its first task (task_payloads).
                tid, certified = rec.tasks[0]
                if tid not in rows:
                    rows[tid] = (certified, rec.payload)
        else:
            for tid, certified in rec.tasks:
                if tid not in rows:
                    rows[tid] = (certified, b"")
    # Acknowledgements that ride on the first ASSIGN to the same worker.
    riding: dict[str, tuple[tuple[TaskId, bool], ...]] = {}
    for (kind, to), rows in groups.items():
        if kind is _ACK and (_ASSIGN, to) in groups and len(rows) <= MAX_TASKS:
            riding[to] = tuple([(tid, c) for tid, (c, _) in rows.items()])
    merged: list[QueueRecord] = []
    for key, rows in groups.items():
        kind, to = key
        model = first[key]
        if kind is _ACK and to in riding:
            continue
        if kind is _ACCEPT:
            completed = groups.get((_COMPLETE, to))
            if completed:
                rows = {tid: row for tid, row in rows.items() if tid not in completed}
                if not rows:
                    continue
        if kind is _ASSIGN:
            if len(rows) > MAX_TASKS or sum(len(p) for _, p in rows.values()) > MAX_BYTES:
                listed = [(tid, c, p) for tid, (c, p) in rows.items()]
                for chunk in _chunks(listed, True):
                    merged.append(_record(model, chunk, riding.pop(to, ())))
                continue
            tasks = tuple([(tid, c) for tid, (c, _) in rows.items()])
            if len(tasks) == 1:
                payload, payloads = next(iter(rows.values()))[1], ()
            else:
                payload, payloads = b"", tuple([p for _, p in rows.values()])
            merged.append(_merged(model, tasks, payload, payloads, riding.pop(to, ())))
            continue
        if len(rows) > MAX_TASKS:
            listed = [(tid, c, b"") for tid, (c, _) in rows.items()]
            for chunk in _chunks(listed, False):
                merged.append(_record(model, chunk))
            continue
        merged.append(_merged(model, tuple([(tid, c) for tid, (c, _) in rows.items()]), b"", ()))
    return merged


def _merged(
    model: QueueRecord,
    tasks: tuple[tuple[TaskId, bool], ...],
    payload: bytes,
    payloads: tuple[bytes, ...],
    done: tuple[tuple[TaskId, bool], ...] = (),
) -> QueueRecord:
    """``model`` listing ``tasks`` (with their payloads) and ``done`` instead of its own."""
    return QueueRecord(
        model.kind,
        model.queue,
        model.member,
        model.to,
        model.seq,
        model.weight,
        model.capacity,
        tasks,
        done or model.done,
        payload,
        payloads,
    )


def _chunks(rows: list[_Row], sized: bool) -> Iterable[list[_Row]]:
    chunk: list[_Row] = []
    size = 0
    for row in rows:
        if chunk and (len(chunk) >= MAX_TASKS or (sized and size + len(row[2]) > MAX_BYTES)):
            yield chunk
            chunk, size = [], 0
        chunk.append(row)
        size += len(row[2])
    if chunk:
        yield chunk


def _record(
    model: QueueRecord, rows: list[_Row], done: tuple[tuple[TaskId, bool], ...] = ()
) -> QueueRecord:
    tasks = tuple((tid, certified) for tid, certified, _ in rows)
    if model.kind is not _ASSIGN:
        return _merged(model, tasks, b"", ())
    if len(rows) == 1:
        return _merged(model, tasks, rows[0][2], (), done)
    return _merged(model, tasks, b"", tuple(payload for _, _, payload in rows), done)
