"""Merging the records a member emits in one loop turn into fewer records.

Under load the scheduler assigns and acknowledges, and a worker accepts and
completes, many tasks per turn of the event loop; each of those records
would otherwise be a message of its own (built, encoded, routed, decoded and
fed to the peer's core), which is most of a task's cost. The records that
list tasks for one destination (ASSIGN, ACCEPT, COMPLETE, ACK) mean the same
whether they come one by one or together, so the driver holds them until the
end of the turn and sends :func:`coalesce` of them: one record per (kind,
destination), tasks in order, each once, at most :data:`MAX_TASKS` tasks and
about :data:`MAX_BYTES` of assigned payload per record. An ACCEPT of a task
whose COMPLETE goes to the same destination in the same batch says nothing
more, and is left out. STATUS and BYE never wait.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rvasync.protocol.cmq.records import QueueRecord, RecordKind, TaskId

# RecordKind members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_ACCEPT, _ASSIGN, _COMPLETE = (RecordKind.ACCEPT, RecordKind.ASSIGN, RecordKind.COMPLETE)


__all__ = ["MAX_BYTES", "MAX_TASKS", "MERGEABLE", "coalesce"]

MAX_TASKS = 128
"""Tasks one merged record lists at most."""

MAX_BYTES = 32 * 1024
"""Assigned payload bytes above which a merged ASSIGN is cut (a single task may exceed it)."""

MERGEABLE = frozenset({RecordKind.ASSIGN, RecordKind.ACCEPT, RecordKind.COMPLETE, RecordKind.ACK})
"""Record kinds that only list tasks for one destination, and may wait until the end of the turn."""

_Row = tuple[TaskId, bool, bytes]


def coalesce(records: Iterable[QueueRecord]) -> list[QueueRecord]:
    """One record per (kind, destination) for ``records`` (all of a kind in :data:`MERGEABLE`).

    Merged records keep the order in which their (kind, destination) first
    appeared; a task listed twice keeps its first listing.
    """
    groups: dict[tuple[RecordKind, str], dict[TaskId, _Row]] = {}
    first: dict[tuple[RecordKind, str], QueueRecord] = {}
    for rec in records:
        if rec.kind not in MERGEABLE:
            raise ValueError(f"a {rec.kind} record cannot be merged")
        key = (rec.kind, rec.to)
        rows = groups.get(key)
        if rows is None:
            rows = groups[key] = {}
            first[key] = rec
        if rec.kind is _ASSIGN:
            for (tid, certified), payload in zip(rec.tasks, rec.task_payloads(), strict=False):
                rows.setdefault(tid, (tid, certified, payload))
        else:
            for tid, certified in rec.tasks:
                rows.setdefault(tid, (tid, certified, b""))
    merged: list[QueueRecord] = []
    for key, rows in groups.items():
        kind, to = key
        listed = list(rows.values())
        if kind is _ACCEPT:
            completed = groups.get((_COMPLETE, to), {})
            listed = [row for row in listed if row[0] not in completed]
        for chunk in _chunks(listed, kind is _ASSIGN):
            merged.append(_record(first[key], chunk))
    return merged


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


def _record(model: QueueRecord, rows: list[_Row]) -> QueueRecord:
    tasks = tuple((tid, certified) for tid, certified, _ in rows)
    if model.kind is not _ASSIGN:
        return dataclasses.replace(model, tasks=tasks, payload=b"", payloads=())
    if len(rows) == 1:
        return dataclasses.replace(model, tasks=tasks, payload=rows[0][2], payloads=())
    return dataclasses.replace(
        model, tasks=tasks, payload=b"", payloads=tuple(payload for _, _, payload in rows)
    )
