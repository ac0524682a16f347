"""rv.RemoteOps over real transports: process, in-process daemon, standalone daemon.

Results and errors reach the invoker; retries are recognised as duplicates;
bad input, unknown operations, malformed arguments and failing handlers give
clear errors while the performer keeps serving; the state file survives a
restart and refuses damage.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import rvasync as rv
from rvasync.protocol.rops import Kind, Pdu
from rvasync.ropsdriver.statefile import MAGIC
from rvasync.ropsdriver.wire import pdu_from, pdu_message

FAST = {"timeout": 0.2, "retries": 3, "backoff": 1.5, "max_wait": 1.0, "verify_attempts": 2}


async def _pair(transport: rv.ProcessTransport | rv.Transport, **kw: object):
    inv = await rv.RemoteOps(transport, "CLIENT", **kw).open()  # type: ignore[arg-type]
    perf = await rv.RemoteOps(transport, "ORDERS").open()
    return inv, perf


def _order_handler(executed: list[int]):
    async def place(msg: rv.Message) -> rv.Message:
        executed.append(msg["n"])
        return rv.Message(fields={"order": msg["n"] * 10})

    return place


@pytest.mark.parametrize("handshake", [2, 3])
async def test_invoke_over_the_process_transport(handshake: int) -> None:
    t = rv.process_transport()
    inv, perf = await _pair(t)
    try:
        executed: list[int] = []
        perf.perform("place", _order_handler(executed))
        for n in range(5):
            result = await inv.invoke(
                "ORDERS", "place", rv.Message(fields={"n": n}), handshake=handshake, timeout=10.0
            )
            assert result["order"] == n * 10
        # Every first attempt got its answer: no retry.
        assert inv.stats["invoker_retried"] == 0
        assert executed == list(range(5))
        await asyncio.sleep(0.05)  # the last acknowledgment
        if handshake == 3:
            assert perf.stats["performer_acknowledged"] == 5
        else:
            assert perf.stats["performer_acknowledged"] == 0
    finally:
        await inv.close()
        await perf.close()


async def test_a_slow_performer_sees_retries_as_duplicates() -> None:
    t = rv.process_transport()
    inv, perf = await _pair(t)
    try:
        executed: list[int] = []

        async def slow(msg: rv.Message) -> rv.Message:
            executed.append(msg["n"])
            await asyncio.sleep(0.7)  # several of the invoker's waits
            return rv.Message(fields={"ok": True})

        perf.perform("slow", slow)
        result = await inv.invoke("ORDERS", "slow", rv.Message(fields={"n": 1}), **FAST)
        assert result["ok"] is True
        assert executed == [1]
        assert perf.stats["performer_duplicates"] >= 1
        assert inv.stats["invoker_retried"] >= 1
    finally:
        await inv.close()
        await perf.close()


async def test_a_performer_that_starts_late_still_performs_once() -> None:
    t = rv.process_transport()
    inv = await rv.RemoteOps(t, "CLIENT").open()
    executed: list[int] = []
    try:
        task = asyncio.ensure_future(
            inv.invoke("LATE", "place", rv.Message(fields={"n": 7}), **FAST)
        )
        await asyncio.sleep(0.5)
        async with rv.RemoteOps(t, "LATE") as perf:
            perf.perform("place", _order_handler(executed))
            result = await asyncio.wait_for(task, 10)
        assert result["order"] == 70 and executed == [7]
    finally:
        await inv.close()


async def test_errors_reach_the_invoker_and_the_performer_keeps_serving() -> None:
    t = rv.process_transport()
    inv, perf = await _pair(t)
    try:
        attempts: list[int] = []

        def refuse(msg: rv.Message) -> rv.Message:
            raise rv.OperationError("out_of_stock", detail="no more widgets")

        def crash(msg: rv.Message) -> rv.Message:
            raise ZeroDivisionError("boom")

        def later(msg: rv.Message) -> rv.Message:
            attempts.append(1)
            if len(attempts) < 3:
                raise rv.OperationError("warming_up", transient=True)
            return rv.Message(fields={"ok": 1})

        def wrong(msg: rv.Message) -> object:
            return 42

        perf.perform("refuse", refuse)
        perf.perform("crash", crash)
        perf.perform("later", later)
        perf.perform("wrong", wrong)  # type: ignore[arg-type]
        arg = rv.Message(fields={"x": 1})
        with pytest.raises(rv.OperationError) as err:
            await inv.invoke("ORDERS", "refuse", arg, **FAST)
        assert err.value.code == "out_of_stock" and not err.value.transient
        assert err.value.invoke_id and "no more widgets" in str(err.value)
        with pytest.raises(rv.OperationError) as err:
            await inv.invoke("ORDERS", "crash", arg, **FAST)
        assert err.value.code == "handler_failed" and "ZeroDivisionError" in err.value.detail
        with pytest.raises(rv.OperationError) as err:
            await inv.invoke("ORDERS", "nope", arg, **FAST)
        assert err.value.code == "unknown_operation" and "nope" in err.value.detail
        with pytest.raises(rv.OperationError) as err:
            await inv.invoke("ORDERS", "wrong", arg, **FAST)
        assert err.value.code == "bad_result"
        # A transient error is retried (same invocation) until the handler succeeds.
        assert (await inv.invoke("ORDERS", "later", arg, **FAST))["ok"] == 1
        assert len(attempts) == 3
        # Malformed arguments and a garbage PDU: an error result, a counted drop.
        t.send_internal(rv.Message("_RVOPS.ORDERS", {"rops": b"\x93garbage"}))
        t.send_internal(
            pdu_message("ORDERS", Pdu(Kind.INVOKE, "CLIENT", "raw.1", "later", 2, b"not a message"))
        )
        answer = await inv.verify("ORDERS", "raw.1")
        assert answer.status == "error" and answer.error is not None
        assert answer.error.code == "malformed_arguments"
        assert perf.stats["malformed"] == 1
        # Still serving.
        assert (await inv.invoke("ORDERS", "later", arg, **FAST))["ok"] == 1
    finally:
        await inv.close()
        await perf.close()


async def test_nobody_answers_delivery_failed_with_unknown_outcome() -> None:
    t = rv.process_transport()
    async with rv.RemoteOps(t, "CLIENT") as inv:
        with pytest.raises(rv.DeliveryFailed) as err:
            await inv.invoke("NOBODY", "place", rv.Message(fields={"n": 1}), **FAST)
        assert err.value.executed is None and err.value.invoke_id


async def test_verify_answers_and_fences() -> None:
    t = rv.process_transport()
    inv, perf = await _pair(t)
    try:
        executed: list[int] = []
        perf.perform("place", _order_handler(executed))
        invoke_id = await inv.start_invoke(
            "ORDERS", "place", rv.Message(fields={"n": 3}), handshake=2
        )
        assert (await inv.outcome(invoke_id))["order"] == 30
        seen = await inv.verify("ORDERS", invoke_id)
        assert seen.status == "result" and seen.result is not None and seen.result["order"] == 30
        never = await inv.verify("ORDERS", "someone-else.1")
        assert never.status == "not_executed"
        with pytest.raises(rv.DeliveryFailed):
            await inv.verify("NOBODY", invoke_id, timeout=0.1, attempts=2)
    finally:
        await inv.close()
        await perf.close()


async def test_bad_arguments_are_refused_clearly(tmp_path: Path) -> None:
    t = rv.process_transport()
    with pytest.raises(rv.InvalidArgument):
        rv.RemoteOps("not a transport", "X")  # type: ignore[arg-type]
    with pytest.raises(rv.InvalidSubject):
        rv.RemoteOps(t, "BAD..NAME")
    with pytest.raises(rv.InvalidSubject):
        rv.RemoteOps(t, "WILD.*")
    with pytest.raises(rv.InvalidArgument):
        rv.RemoteOps(t, "X", state=b"bytes")  # type: ignore[arg-type]
    async with rv.RemoteOps(t, "CLIENT") as inv:
        msg = rv.Message(fields={"n": 1})
        with pytest.raises(rv.InvalidSubject):
            await inv.invoke("A.>", "op", msg)
        with pytest.raises(rv.InvalidArgument):
            await inv.invoke("A", "", msg)
        with pytest.raises(rv.InvalidArgument):
            await inv.invoke("A", "op", {"n": 1})  # type: ignore[arg-type]
        with pytest.raises(rv.InvalidArgument):
            await inv.invoke("A", "op", msg, handshake=4)
        with pytest.raises(rv.InvalidArgument):
            await inv.invoke("A", "op", msg, timeout=0)
        with pytest.raises(rv.InvalidArgument):
            await inv.invoke("A", "op", msg, retries=-1)
        with pytest.raises(rv.InvalidArgument):
            inv.perform("op", "not callable")  # type: ignore[arg-type]
        with pytest.raises(rv.InvalidArgument):
            await inv.outcome("unknown.1")
    with pytest.raises(rv.OperationError) as err:
        raise rv.OperationError("x", transient=True)
    assert err.value.transient
    with pytest.raises(rv.InvalidArgument):
        rv.OperationError("")


async def test_state_file_survives_restart_and_refuses_damage(tmp_path: Path) -> None:
    t = rv.process_transport()
    state = tmp_path / "orders.state"
    executed: list[int] = []
    async with rv.RemoteOps(t, "CLIENT") as inv:
        async with rv.RemoteOps(t, "ORDERS", state=state) as perf:
            perf.perform("place", _order_handler(executed))
            invoke_id = await inv.start_invoke(
                "ORDERS", "place", rv.Message(fields={"n": 4}), handshake=2
            )
            assert (await inv.outcome(invoke_id))["order"] == 40
            with pytest.raises(rv.NotPermitted):
                await rv.RemoteOps(t, "ORDERS2", state=state).open()
        assert state.read_bytes().startswith(MAGIC)
        async with rv.RemoteOps(t, "ORDERS", state=state) as perf:
            perf.perform("place", _order_handler(executed))
            # The restarted performer still holds the result: a copy is not performed again.
            t.send_internal(
                pdu_message(
                    "ORDERS",
                    Pdu(
                        Kind.INVOKE,
                        "CLIENT",
                        invoke_id,
                        "place",
                        2,
                        rv.Message(fields={"n": 4}).to_bytes(),
                    ),
                )
            )
            seen = await inv.verify("ORDERS", invoke_id)
            assert seen.status == "result" and seen.result is not None
            assert seen.result["order"] == 40
        assert executed == [4]
        with pytest.raises(rv.InvalidArgument):
            await rv.RemoteOps(t, "OTHER", state=state).open()  # another endpoint's state
    damaged = bytearray(state.read_bytes())
    damaged[-1] ^= 0xFF
    state.write_bytes(bytes(damaged))
    with pytest.raises(rv.LedgerCorrupt):
        await rv.RemoteOps(t, "ORDERS", state=state).open()
    with pytest.raises(rv.InvalidArgument):
        await rv.RemoteOps(t, "ORDERS", state=tmp_path).open()


async def test_over_the_in_process_daemon(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(service, network) as t1,
        rv.Transport(service, network) as t2,
        rv.RemoteOps(t1, "CLIENT") as inv,
        rv.RemoteOps(t2, "ORDERS") as perf,
    ):
        executed: list[int] = []
        perf.perform("place", _order_handler(executed))
        for hs in (2, 3):
            result = await inv.invoke(
                "ORDERS", "place", rv.Message(fields={"n": hs}), handshake=hs, timeout=10.0
            )
            assert result["order"] == hs * 10
        assert executed == [2, 3]
        assert inv.stats["invoker_retried"] == 0


async def test_over_a_standalone_daemon(rv_daemon: str, rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(service, network, daemon=rv_daemon) as t1,
        rv.Transport(service, network, daemon=rv_daemon) as t2,
        rv.RemoteOps(t1, "CLIENT") as inv,
        rv.RemoteOps(t2, "ORDERS") as perf,
    ):
        executed: list[int] = []
        perf.perform("place", _order_handler(executed))
        result = await inv.invoke("ORDERS", "place", rv.Message(fields={"n": 9}), **FAST)
        assert result["order"] == 90 and executed == [9]


async def test_a_result_nobody_takes_is_reported_by_the_performer() -> None:
    """3-way: the invoker goes away before the result; the performer presents UNCONFIRMED."""
    t = rv.process_transport()
    retention = rv.Retention(ack_timeout=0.2, result_retries=1, verify_attempts=1)
    async with rv.RemoteOps(t, "ORDERS", retention=retention) as perf:
        started = asyncio.Event()

        async def slow(msg: rv.Message) -> rv.Message:
            started.set()
            await asyncio.sleep(0.3)
            return rv.Message(fields={"done": 1})

        perf.perform("slow", slow)
        reports = t.listen("_RV.WARN.RVOPS.RESULT.UNCONFIRMED.>")
        inv = await rv.RemoteOps(t, "GONE").open()
        invoke_id = await inv.start_invoke("ORDERS", "slow", rv.Message(), handshake=3)
        await asyncio.wait_for(started.wait(), 10)
        await inv.close()  # the invoker disappears before the result
        report = await reports.get(10)
        assert report.subject == "_RV.WARN.RVOPS.RESULT.UNCONFIRMED.ORDERS"
        assert report["invoke_id"] == invoke_id and report["peer"] == "GONE"
        assert report["operation"] == "slow"
        assert perf.stats["performer_unconfirmed"] == 1
        await reports.close()


async def _echo_internal(t: rv.ProcessTransport | rv.Transport, subject: str) -> rv.Listener:
    """A listener on a reserved subject that answers every request (as a performer does)."""

    async def answer(msg: rv.Message) -> None:
        assert msg.reply_subject is not None
        t.send_internal(rv.Message(msg.reply_subject, {"echo": msg["n"]}))

    return t.listen(subject, callback=answer)


async def test_request_internal_on_reserved_subjects(rv_service: tuple[str, str]) -> None:
    # The driver API the first copy of an invocation takes: a request on a reserved
    # subject, answered on its inbox; a timeout when nobody answers.
    service, network = rv_service
    async with rv.Transport(service, network) as t1, rv.Transport(service, network) as t2:
        for requester, replier in ((rv.process_transport(), None), (t1, t2)):
            answering = replier if replier is not None else requester
            listener = await _echo_internal(answering, "_RVOPS.ECHO")
            await asyncio.sleep(0.1)  # the interest reaches the other transport's daemon
            msg = rv.Message("_RVOPS.ECHO", {"n": 7})
            reply = await requester.request_internal(msg, 10.0)
            assert reply["echo"] == 7
            assert msg.reply_subject is not None  # handed over: it carries the inbox now
            with pytest.raises(rv.RequestTimeout):
                await requester.request_internal(rv.Message("_RVOPS.NOBODY", {"n": 1}), 0.1)
            with pytest.raises(rv.InvalidArgument):
                await requester.request_internal(rv.Message("_RVOPS.ECHO", {"n": 1}), -1)
            await listener.close()


async def test_an_answer_never_goes_to_a_reply_subject_that_is_not_an_inbox() -> None:
    # A crafted INVOKE whose reply subject names an ordinary subject: the answer goes to
    # the sender's endpoint instead, so a PDU cannot make a performer publish anywhere.
    t = rv.process_transport()
    perf = await rv.RemoteOps(t, "ORDERS").open()
    watched = t.listen("some.subject")
    endpoint = t.listen("_RVOPS.CLIENT")
    try:
        perf.perform("place", lambda msg: rv.Message(fields={"ok": 1}))
        invoke = pdu_message("ORDERS", Pdu(Kind.INVOKE, "CLIENT", "c.1", "place", 2, b""))
        invoke.reply_subject = "some.subject"
        t.send_internal(invoke)
        answer = await endpoint.get(10)
        assert answer.get("rops") is not None
        with pytest.raises(TimeoutError):
            await watched.get(0.2)
    finally:
        await watched.close()
        await endpoint.close()
        await perf.close()


async def test_an_answer_that_comes_another_way_while_the_request_waits_settles_the_call() -> None:
    # invoke() waits for its request's answer without a future of its own: a RESULT
    # that reaches the endpoint's subject meanwhile (as an answer to a copy would) is
    # kept for it, and the call returns it once the request gives up.
    t = rv.process_transport()
    inv = await rv.RemoteOps(t, "CLIENT").open()
    performer = t.listen("_RVOPS.ORDERS")
    try:
        call = asyncio.ensure_future(
            inv.invoke(
                "ORDERS",
                "place",
                rv.Message(fields={"n": 1}),
                handshake=2,
                timeout=0.3,
                retries=0,
                verify_attempts=1,
            )
        )
        request = await performer.get(10)
        invoke = pdu_from(request)
        assert invoke.kind is Kind.INVOKE and request.reply_subject is not None
        result = rv.Message(fields={"order": 10}).to_bytes()
        answer = Pdu(Kind.RESULT, "ORDERS", invoke.invoke_id, "place", 2, result)
        t.send_internal(pdu_message("CLIENT", answer))  # the endpoint's subject, not the inbox
        assert (await asyncio.wait_for(call, 10))["order"] == 10
        assert inv.stats["invoker_results"] == 1
    finally:
        await performer.close()
        await inv.close()
