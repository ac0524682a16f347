"""Unit tests of the remote-operations core: PDU codec, parameters, retention, verify queries."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rvasync.errors import InvalidArgument
from rvasync.protocol.rops import (
    BUSY,
    EndpointCore,
    Kind,
    Outcome,
    Pdu,
    PduError,
    Retention,
    RetryPolicy,
    Settled,
    VerifyStatus,
    decode_pdu,
    encode_pdu,
)
from rvasync.protocol.rops.performer import PState

POLICY = RetryPolicy(1.0, 2, 2.0, 10.0, 2)


def _pair(retention: Retention | None = None) -> tuple[EndpointCore, EndpointCore]:
    return EndpointCore("A", "a1", retention), EndpointCore("B", "b1", retention)


def test_pdu_round_trip() -> None:
    pdu = Pdu(Kind.ERROR, "B", "x.1", "op", 3, b"", "bad", True, "why")
    assert decode_pdu(encode_pdu(pdu)) == pdu
    assert len(msgpack.unpackb(encode_pdu(pdu))) == 11  # no acks: the 11-item form
    invoke = Pdu(Kind.INVOKE, "A", "x.3", "op", 3, b"arg", acks=("x.1", "x.2"))
    assert decode_pdu(encode_pdu(invoke)) == invoke
    reply = Pdu(Kind.VERIFY_REPLY, "B", "x.1", status=VerifyStatus.BUSY)
    assert decode_pdu(encode_pdu(reply)) == reply


def test_start_hands_over_the_invoke_that_invoke_sends() -> None:
    a, _ = _pair()
    first, out = a.invoker.invoke("B", "op", b"x", 3, POLICY, 0.0)
    second, pdu = a.invoker.start("B", "op", b"y", 3, POLICY, 0.0)
    [send] = out.sends
    assert send.dest == "B" and send.pdu == Pdu(Kind.INVOKE, "A", first, "op", 3, b"x")
    assert pdu == Pdu(Kind.INVOKE, "A", second, "op", 3, b"y") and second != first
    assert a.invoker.phase_of(second) is not None and a.next_deadline() == POLICY.timeout


@given(st.binary(max_size=200))
def test_garbage_is_refused_with_pdu_error(data: bytes) -> None:
    try:
        decode_pdu(data)
    except PduError:
        pass


@pytest.mark.parametrize(
    "items",
    [
        [1, 99, "B", "x", "", 2, b"", "", False, "", 0],  # unknown kind
        [1, 1, "", "x", "", 2, b"", "", False, "", 0],  # empty sender
        [1, 1, "B", "x", "", 4, b"", "", False, "", 0],  # bad handshake
        [1, 6, "B", "x", "", 2, b"", "", False, "", 0],  # verify reply without status
        [2, 1, "B", "x", "", 2, b"", "", False, "", 0],  # unknown version
        [1, 1, "B", "x", "", 2, "text", "", False, "", 0],  # body not bytes
        [1, 1, "B", "x", "", 2, b"", "", False, "", 0, "a.1"],  # acks not a list
        [1, 1, "B", "x", "", 2, b"", "", False, "", 0, ["a.1", 7]],  # an ack not an id
        [1, 1, "B", "x", "", 2, b"", "", False, "", 0, [""]],  # an empty ack id
        [1, 1, "B", "x", "", 2, b"", "", False, "", 0, [], 5],  # 13 items
    ],
)
def test_malformed_pdus_name_the_problem(items: list[object]) -> None:
    with pytest.raises(PduError):
        decode_pdu(msgpack.packb(items, use_bin_type=True))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": float("nan")},
        {"retries": -1},
        {"retries": True},
        {"backoff": 0.5},
        {"verify_attempts": 0},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_policy_waits_grow_and_are_capped() -> None:
    p = RetryPolicy(1.0, 10, 2.0, 5.0, 1)
    assert [p.wait(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert p.lifetime() == pytest.approx(1 + 2 + 4 + 5 * 8 + 5)


def _deliver(dest: EndpointCore, out: object, now: float) -> list:
    results = []
    for send in out.sends:  # type: ignore[attr-defined]
        results.append(dest.receive(decode_pdu(encode_pdu(send.pdu)), now))
    return results


def test_two_way_duplicate_gets_the_kept_result_and_records_expire() -> None:
    a, b = _pair(Retention(window=10.0))
    invoke_id, out = a.invoker.invoke("B", "op", b"arg", 2, POLICY, 0.0)
    [b_out] = _deliver(b, out, 0.1)
    [ex] = b_out.executes
    done = b.performer.complete(ex.invoke_id, Outcome.result(b"r"), 0.2)
    # The same invocation again (a retry): answered from the record, not executed.
    [dup] = _deliver(b, out, 0.3)
    assert not dup.executes and dup.sends[0].pdu.kind is Kind.RESULT
    [a_out] = _deliver(a, done, 0.4)
    assert a_out.completions[0].how is Settled.RESULT
    assert b.performer.state_of(invoke_id) is PState.DONE
    b.handle_timer(10.1)
    assert b.performer.state_of(invoke_id) is PState.DONE
    b.handle_timer(10.3)
    assert b.performer.state_of(invoke_id) is None
    assert b.performer.stats.expired == 1


def test_full_performer_refuses_transiently_instead_of_forgetting() -> None:
    a, b = _pair(Retention(max_records=1))
    _, first = a.invoker.invoke("B", "op", b"1", 2, POLICY, 0.0)
    _deliver(b, first, 0.0)
    _, second = a.invoker.invoke("B", "op", b"2", 2, POLICY, 0.0)
    [refusal] = _deliver(b, second, 0.0)
    assert not refusal.executes
    err = refusal.sends[0].pdu
    assert err.kind is Kind.ERROR and err.code == BUSY and err.transient


def test_three_way_result_unacknowledged_is_reported_after_asking_the_invoker() -> None:
    a, b = _pair(Retention(ack_timeout=1.0, result_retries=1, verify_attempts=1))
    invoke_id, out = a.invoker.invoke("B", "op", b"x", 3, POLICY, 0.0)
    _deliver(b, out, 0.0)
    b.performer.complete(invoke_id, Outcome.result(b"r"), 0.0)  # the result is lost
    resend = b.handle_timer(1.0)
    assert resend.sends[0].pdu.kind is Kind.RESULT  # lost again
    ask = b.handle_timer(2.0)
    assert ask.sends[0].pdu.kind is Kind.RVERIFY
    [answer] = _deliver(a, ask, 2.0)
    assert answer.sends[0].pdu.status is VerifyStatus.PENDING  # it still waits
    [again] = _deliver(b, answer, 2.0)
    [got] = _deliver(a, again, 2.0)  # now it arrives; the invoker acknowledges
    assert got.completions[0].how is Settled.RESULT
    assert not got.sends  # the acknowledgment is held back for a next invocation ...
    _deliver(b, a.invoker.flush_acks(), 2.0)  # ... or the driver's flush
    assert b.performer.state_of(invoke_id) is PState.ACKED


def test_invoker_that_gave_up_answers_unknown_and_reports_a_late_result() -> None:
    a, b = _pair(Retention(ack_timeout=1.0, result_retries=0, verify_attempts=1))
    policy = RetryPolicy(1.0, 0, 1.0, 1.0, 1)
    invoke_id, out = a.invoker.invoke("B", "op", b"x", 3, policy, 0.0)
    verify = a.handle_timer(1.0)
    assert verify.sends[0].pdu.kind is Kind.VERIFY  # lost
    gave_up = a.handle_timer(2.0)
    assert gave_up.completions[0].how is Settled.UNKNOWN
    _deliver(b, out, 2.5)  # the invocation finally arrives
    result = b.performer.complete(invoke_id, Outcome.result(b"r"), 2.5)
    [late] = _deliver(a, result, 2.6)
    assert late.reports and late.reports[0].kind.value == "RESULT.LATE"
    assert not late.sends  # never acknowledged: the application was told "unknown"
    ask = b.handle_timer(3.5)
    [answer] = _deliver(a, ask, 3.5)
    assert answer.sends[0].pdu.status is VerifyStatus.UNKNOWN
    [report] = _deliver(b, answer, 3.5)
    assert report.reports[0].kind.value == "RESULT.UNCONFIRMED"


def test_query_fences_an_unknown_id_and_answers_an_executed_one() -> None:
    a, b = _pair()
    out = a.invoker.query("B", "z.9", POLICY, 0.0)
    [reply] = _deliver(b, out, 0.0)
    [answered] = _deliver(a, reply, 0.0)
    assert answered.answers[0].status is VerifyStatus.NOT_EXECUTED
    assert b.performer.state_of("z.9") is PState.FENCED
    # A late invocation with that id is refused, never performed.
    late = Pdu(Kind.INVOKE, "A", "z.9", "op", 2, b"")
    refused = b.receive(late, 1.0)
    assert not refused.executes


def test_restore_marks_running_handlers_interrupted() -> None:
    a, b = _pair()
    invoke_id, out = a.invoker.invoke("B", "op", b"x", 2, POLICY, 0.0)
    _deliver(b, out, 0.0)
    snap = msgpack.unpackb(msgpack.packb(b.snapshot()), strict_map_key=False)
    b2 = EndpointCore("B", "b2")
    b2.restore(snap)
    assert b2.performer.state_of(invoke_id) is PState.INTERRUPTED
    [answer] = _deliver(b2, out, 1.0)
    assert answer.sends[0].pdu.code == "interrupted" and not answer.sends[0].pdu.transient
    with pytest.raises(ValueError):
        EndpointCore("C", "c1").restore(snap)


def test_the_core_is_sans_io() -> None:
    """No asyncio, sockets, clocks or drivers inside rvasync/protocol/rops/."""
    import ast
    from pathlib import Path

    import rvasync.protocol.rops as pkg

    forbidden = {"asyncio", "socket", "time", "threading", "selectors"}
    for path in Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in forbidden, f"{path.name} imports {name}"
                assert not name.startswith(("rvasync.ropsdriver", "rvasync.transport")), (
                    f"{path.name} imports the driver layer ({name})"
                )


def test_three_way_acknowledgments_ride_on_the_next_invocation() -> None:
    a, b = _pair()
    first, out = a.invoker.invoke("B", "op", b"1", 3, POLICY, 0.0)
    assert out.sends[0].pdu.acks == ()
    [started] = _deliver(b, out, 0.1)
    assert started.executes
    done = b.performer.complete(first, Outcome.result(b"r1"), 0.2)
    [got] = _deliver(a, done, 0.3)
    assert got.completions[0].how is Settled.RESULT and not got.sends
    assert a.invoker.acks_pending
    second, out2 = a.invoker.invoke("B", "op", b"2", 3, POLICY, 0.4)
    assert out2.sends[0].pdu.acks == (first,)  # piggybacked
    assert not a.invoker.acks_pending
    assert not a.invoker.flush_acks()  # nothing left to send alone
    _deliver(b, out2, 0.5)
    assert b.performer.state_of(first) is PState.ACKED
    assert b.performer.state_of(second) is PState.EXECUTING
    # The acknowledged record still expires (it was re-indexed when acknowledged).
    assert b.performer.next_deadline() is not None


def test_held_back_acknowledgments_leave_together_in_one_ack() -> None:
    a, b = _pair()
    ids = []
    for n in range(3):
        invoke_id, out = a.invoker.invoke("B", "op", b"%d" % n, 3, POLICY, 0.0)
        ids.append(invoke_id)
        _deliver(b, out, 0.1)
    for invoke_id in ids:
        _deliver(a, b.performer.complete(invoke_id, Outcome.result(b"r"), 0.2), 0.3)
    flush = a.invoker.flush_acks()
    [send] = flush.sends
    assert send.pdu.kind is Kind.ACK and (send.pdu.invoke_id, *send.pdu.acks) == tuple(ids)
    _deliver(b, flush, 0.4)
    assert all(b.performer.state_of(i) is PState.ACKED for i in ids)


def test_acknowledgment_from_another_endpoint_is_ignored() -> None:
    a, b = _pair()
    invoke_id, out = a.invoker.invoke("B", "op", b"1", 3, POLICY, 0.0)
    _deliver(b, out, 0.1)
    b.performer.complete(invoke_id, Outcome.result(b"r"), 0.2)
    b.receive(Pdu(Kind.ACK, "C", invoke_id, "", 3), 0.3)
    b.receive(Pdu(Kind.INVOKE, "C", "c.1", "op", 2, b"", acks=(invoke_id,)), 0.3)
    assert b.performer.state_of(invoke_id) is PState.DONE


def test_first_answer_goes_to_the_reply_address_later_copies_to_the_endpoint() -> None:
    a, b = _pair()
    invoke_id, out = a.invoker.invoke("B", "op", b"1", 3, POLICY, 0.0)
    pdu = decode_pdu(encode_pdu(out.sends[0].pdu))
    b.receive(pdu, 0.1, "_INBOX.x.1")
    [answer] = b.performer.complete(invoke_id, Outcome.result(b"r"), 0.2).sends
    assert (answer.dest, answer.via) == ("A", "_INBOX.x.1")
    [copy] = b.receive(pdu, 0.3, "_INBOX.x.2").sends  # a duplicate with its own reply address
    assert copy.pdu.kind is Kind.RESULT and copy.via == "_INBOX.x.2"
    [resent] = b.handle_timer(0.2 + 2.0 + 0.01).sends  # the ack timer's copy
    assert resent.pdu.kind is Kind.RESULT and (resent.dest, resent.via) == ("A", None)
