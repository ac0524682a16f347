"""Merged queue records (coalesce), multi-task ASSIGN encoding, and point-to-point routes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rvasync.cmqdriver.routes import MAX_ROUTES, PeerRoutes
from rvasync.errors import MalformedMessage
from rvasync.protocol.cmq import GROUP, SCHEDULER, QueueMemberCore, QueueRecord, RecordKind, TaskId
from rvasync.protocol.cmq.coalesce import MAX_BYTES, MAX_TASKS, coalesce
from rvasync.protocol.cmq.records import _grouped

Q = "JOBS"


def tid(n: int) -> TaskId:
    return TaskId("SENDER", "JOBS.RUN", n)


def assign(to: str, n: int, payload: bytes = b"p") -> QueueRecord:
    return QueueRecord(RecordKind.ASSIGN, Q, "sched", to, tasks=((tid(n), True),), payload=payload)


def reply(kind: RecordKind, n: int, to: str = SCHEDULER) -> QueueRecord:
    return QueueRecord(kind, Q, "w1", to, tasks=((tid(n), True),))


def test_one_record_per_kind_and_destination_in_first_seen_order() -> None:
    merged = coalesce(
        [
            assign("w1", 1, b"a"),
            assign("w2", 2, b"b"),
            assign("w1", 3, b"c"),
            QueueRecord(RecordKind.ACK, Q, "sched", "w3", tasks=((tid(9), True),)),
        ]
    )
    assert [(r.kind, r.to) for r in merged] == [
        (RecordKind.ASSIGN, "w1"),
        (RecordKind.ASSIGN, "w2"),
        (RecordKind.ACK, "w3"),
    ]
    w1 = merged[0]
    assert [t.seq for t, _ in w1.tasks] == [1, 3]
    assert w1.task_payloads() == (b"a", b"c")
    assert merged[1].payload == b"b" and merged[1].payloads == ()  # one task: the plain form


def test_acknowledgements_ride_on_an_assign_to_the_same_worker() -> None:
    ack = QueueRecord(RecordKind.ACK, Q, "sched", "w1", tasks=((tid(9), True), (tid(8), False)))
    merged = coalesce([ack, assign("w2", 2), assign("w1", 1)])
    assert [(r.kind, r.to) for r in merged] == [
        (RecordKind.ASSIGN, "w2"),
        (RecordKind.ASSIGN, "w1"),
    ]
    assert merged[0].done == ()
    assert merged[1].done == ((tid(9), True), (tid(8), False))
    assert QueueRecord.from_fields(merged[1].to_fields()) == merged[1]
    # Too many to ride along: they leave as an ACK of their own.
    acks = [
        QueueRecord(RecordKind.ACK, Q, "sched", "w1", tasks=((tid(n), True),))
        for n in range(MAX_TASKS + 1)
    ]
    merged = coalesce([*acks, assign("w1", 1)])
    assert [r.kind for r in merged] == [RecordKind.ACK, RecordKind.ACK, RecordKind.ASSIGN]
    assert merged[2].done == ()


def test_a_worker_takes_acknowledgements_riding_on_an_assign() -> None:
    core = QueueMemberCore(Q, member_id="w1", worker_tasks=4)
    core.join(0.0)

    def reported_done() -> list[TaskId]:
        status = [r for r in core.set_worker_tasks(4, 1.0).records if r.kind is RecordKind.STATUS]
        return [t for t, _ in status[-1].done]

    core.receive(assign("w1", 1), 0.0)
    core.complete(tid(1), 0.1)
    assert reported_done() == [tid(1)]
    merged = coalesce(
        [QueueRecord(RecordKind.ACK, Q, "sched", "w1", tasks=((tid(1), True),)), assign("w1", 2)]
    )
    assert [r.kind for r in merged] == [RecordKind.ASSIGN]
    out = core.receive(QueueRecord.from_fields(merged[0].to_fields()), 0.2)
    assert [t.id for t in out.deliveries] == [tid(2)]
    assert reported_done() == []


def test_accept_superseded_by_completion_in_the_same_batch_is_left_out() -> None:
    merged = coalesce(
        [
            reply(RecordKind.ACCEPT, 1),
            reply(RecordKind.ACCEPT, 2),
            reply(RecordKind.COMPLETE, 1),
            reply(RecordKind.COMPLETE, 1),
        ]
    )
    kinds = {r.kind: [t.seq for t, _ in r.tasks] for r in merged}
    assert kinds == {RecordKind.ACCEPT: [2], RecordKind.COMPLETE: [1]}


def test_all_accepts_superseded_leaves_no_empty_record() -> None:
    merged = coalesce([reply(RecordKind.ACCEPT, 1), reply(RecordKind.COMPLETE, 1)])
    assert [r.kind for r in merged] == [RecordKind.COMPLETE]


def test_limits_cut_merged_records() -> None:
    many = coalesce([reply(RecordKind.COMPLETE, n) for n in range(MAX_TASKS + 5)])
    assert [len(r.tasks) for r in many] == [MAX_TASKS, 5]
    big = b"x" * (MAX_BYTES // 2 + 1)
    cut = coalesce([assign("w1", n, big) for n in range(3)])
    assert [len(r.tasks) for r in cut] == [1, 1, 1]


def test_status_and_bye_are_refused() -> None:
    with pytest.raises(ValueError, match="STATUS"):
        coalesce([QueueRecord(RecordKind.STATUS, Q, "w1", GROUP)])


@given(st.lists(st.tuples(st.integers(1, 50), st.binary(max_size=40)), min_size=2, max_size=60))
def test_merged_assign_round_trips_and_every_task_keeps_its_payload(
    rows: list[tuple[int, bytes]],
) -> None:
    merged = coalesce([assign("w1", n, p) for n, p in rows])
    expected: dict[int, bytes] = {}
    for n, p in rows:
        expected.setdefault(n, p)
    got: dict[int, bytes] = {}
    for rec in merged:
        back = QueueRecord.from_fields(rec.to_fields())
        assert back == rec
        for (t, _), payload in zip(back.tasks, back.task_payloads(), strict=True):
            got[t.seq] = payload
    assert got == expected


def test_garbled_payload_frames_are_malformed() -> None:
    rec = coalesce([assign("w1", 1, b"abc"), assign("w1", 2, b"de")])[0]
    fields = rec.to_fields()
    fields["ps"] = bytes(fields["ps"])[:-1]  # type: ignore[arg-type]  # bytes field
    with pytest.raises(MalformedMessage, match="truncated"):
        QueueRecord.from_fields(fields)
    fields = coalesce([assign("w1", 1, b"abc"), assign("w1", 2, b"de")])[0].to_fields()
    fields["ps"] = b"\x00\x00\x00\x01z"
    with pytest.raises(MalformedMessage, match="1 payloads for 2 tasks"):
        QueueRecord.from_fields(fields)


def test_worker_core_accepts_every_task_of_a_merged_assign() -> None:
    core = QueueMemberCore(Q, member_id="w1", worker_tasks=5)
    core.join(0.0)
    rec = coalesce([assign("w1", 1, b"a"), assign("w1", 2, b"b")])[0]
    out = core.receive(rec, 0.1)
    assert [(t.id.seq, t.payload) for t in out.deliveries] == [(1, b"a"), (2, b"b")]
    assert [r.kind for r in coalesce(out.records)] == [RecordKind.ACCEPT]


def test_routes_learn_inboxes_and_the_scheduler() -> None:
    routes = PeerRoutes()
    assert routes.inbox_of("w1") is None and routes.inbox_of(SCHEDULER) is None
    routes.heard(QueueRecord(RecordKind.STATUS, Q, "w1", GROUP), "_INBOX.A.1")
    routes.heard(assign("me", 1), "_INBOX.S.1")
    routes.heard(QueueRecord(RecordKind.STATUS, Q, "x", GROUP), "NOT.AN.INBOX")
    assert routes.inbox_of("w1") == "_INBOX.A.1"
    assert routes.inbox_of("x") is None
    assert routes.scheduler == "sched" and routes.inbox_of(SCHEDULER) == "_INBOX.S.1"
    assert routes.inbox_of(GROUP) is None
    routes.heard(QueueRecord(RecordKind.BYE, Q, "sched", GROUP), None)
    assert routes.inbox_of(SCHEDULER) is None and routes.scheduler is None
    routes.forget("w1")
    assert routes.inbox_of("w1") is None


def test_routes_are_bounded() -> None:
    routes = PeerRoutes()
    for n in range(MAX_ROUTES + 10):
        routes.heard(QueueRecord(RecordKind.STATUS, Q, f"m{n}", GROUP), f"_INBOX.A.{n}")
    assert len(routes) == MAX_ROUTES
    assert routes.inbox_of("m0") is None and routes.inbox_of(f"m{MAX_ROUTES + 9}") is not None


_task_rows = st.lists(
    st.tuples(
        st.builds(
            TaskId,
            st.sampled_from(["A", "B.C", "plain:m1", 'q"\\\u00e9\u2603']),
            st.sampled_from(["JOBS.RUN", "JOBS.X", "J\u00fc.\n"]),
            st.integers(0, 2**63),
        ),
        st.booleans(),
    ),
    max_size=40,
)


@given(kind=st.sampled_from(list(RecordKind)), tasks=_task_rows, done=_task_rows)
def test_grouped_task_lists_round_trip_in_order(
    kind: RecordKind,
    tasks: list[tuple[TaskId, bool]],
    done: list[tuple[TaskId, bool]],
) -> None:
    """Tasks travel grouped by sender, subject and certification (record version 2): any
    list, interleaved or repeated, comes back the same, in the same order."""
    rec = QueueRecord(kind, Q, "m", "w1", seq=1, tasks=tuple(tasks), done=tuple(done))
    fields = rec.to_fields()
    assert QueueRecord.from_fields(fields) == rec
    # The body is written by hand: the text json.dumps would give.
    assert fields["b"] == json.dumps(
        [1, 0, 0, _grouped(rec.tasks), _grouped(rec.done)], separators=(",", ":")
    )


def test_grouping_sends_the_names_once_per_run() -> None:
    rec = QueueRecord(
        RecordKind.ACK, Q, "sched", "w1", tasks=tuple((tid(n), True) for n in range(1, 101))
    )
    body = str(rec.to_fields()["b"])
    assert body.count("SENDER") == 1 and body.count("JOBS.RUN") == 1
