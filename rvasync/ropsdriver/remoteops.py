"""``rv.RemoteOps``: the asyncio driver of the remote-operations core, over any transport.

It owns what the core must not: the transport listener on the endpoint's
subject, one timer, the handler tasks, the futures of waiting invokers, and
the optional state file. Each input (a PDU, a handler's completion, the
timer, an application call) goes to :class:`~rvasync.protocol.rops.EndpointCore`
with the wall-clock time, and its outputs are carried out, after the state
that produced them is on disk when a state file is kept (the write-ahead
rule, see :mod:`rvasync.protocol.rops.outputs`).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.advmsg import make_advisory
from rvasync.errors import (
    DeliveryFailed,
    InvalidArgument,
    OperationError,
    RequestTimeout,
    RvError,
)
from rvasync.message import Message
from rvasync.protocol.rops import (
    Completion,
    EndpointCore,
    Execute,
    Outcome,
    Outputs,
    PduError,
    QueryAnswer,
    Retention,
    RetryPolicy,
    Send,
    Settled,
)
from rvasync.protocol.rops.pdu import K_INVOKE, K_RESULT, V_ACKNOWLEDGED, Pdu
from rvasync.ropsdriver.statefile import StateFile
from rvasync.ropsdriver.wire import (
    check_endpoint_name,
    endpoint_subject,
    pdu_from,
    pdu_message,
    pdu_message_at,
)
from rvasync.sendpace import SendPacer, pacer_for
from rvasync.transport.base import BaseTransport
from rvasync.transport.listener import Listener

# Enum members as module globals (the _X_ prefixes name their enum), read per
# call: see rvasync.protocol.rops.pdu, whose V_ACKNOWLEDGED is imported above.

_S_ACKNOWLEDGED, _S_ERROR, _S_NOT_EXECUTED, _S_RESULT = (
    Settled.ACKNOWLEDGED,
    Settled.ERROR,
    Settled.NOT_EXECUTED,
    Settled.RESULT,
)


__all__ = ["Handler", "PendingInvocation", "RemoteOps", "VerifyResult"]

Handler = Callable[[Message], "Message | Awaitable[Message | None] | None"]

UNKNOWN_OPERATION = "unknown_operation"
MALFORMED_ARGUMENTS = "malformed_arguments"
HANDLER_FAILED = "handler_failed"
BAD_RESULT = "bad_result"

# How many endpoints of this process are sending their outputs right now (one
# cell shared by all): a PDU delivered meanwhile waits a loop turn (_on_delivery).
_sending = [0]


@dataclass(frozen=True, slots=True)
class PendingInvocation:
    """An invocation of this endpoint not settled yet (``RemoteOps.pending_invocations``)."""

    invoke_id: str
    peer: str
    operation: str
    argument: Message


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """What a performer knows of an invocation (``RemoteOps.verify``).

    ``status``: ``"result"`` (performed; ``result`` holds it), ``"error"``
    (answered with a permanent error, ``error``), ``"not_executed"`` (never
    performed, and now never will be), ``"acknowledged"`` (performed, its
    result acknowledged earlier and no longer kept).
    """

    invoke_id: str
    status: str
    result: Message | None = None
    error: OperationError | None = None


def _check_operation(operation: object) -> str:
    if not isinstance(operation, str) or not operation:
        raise InvalidArgument(f"operation must be a non-empty str, got {operation!r}")
    if len(operation) > 255:
        raise InvalidArgument(f"operation name is {len(operation)} characters; at most 255")
    return operation


class RemoteOps:
    """An endpoint that invokes and performs remote operations exactly once.

    ``RemoteOps(transport, name, *, state=None, retention=None)``: ``name``
    addresses this endpoint (unique on the network; it is a subject); ``state``
    a file path for state that survives restarts (duplicate records, results
    awaiting acknowledgment, unsettled invocations); ``retention`` a
    :class:`~rvasync.protocol.rops.Retention` (how long duplicates are
    recognised; defaults: 600 s, 100 000 records).
    """

    def __init__(
        self,
        transport: BaseTransport,
        name: str,
        *,
        state: str | os.PathLike[str] | None = None,
        retention: Retention | None = None,
    ) -> None:
        if not isinstance(transport, BaseTransport):
            raise InvalidArgument(
                f"transport must be an rvasync transport, got {type(transport).__name__}"
            )
        self.name = check_endpoint_name(name)
        if state is not None:
            if isinstance(state, bytes) or not isinstance(state, str | os.PathLike):
                raise InvalidArgument(f"state must be a file path or None, got {state!r}")
            state = os.fspath(state)
            if not state:
                raise InvalidArgument("state path must not be empty")
        if retention is not None and not isinstance(retention, Retention):
            raise InvalidArgument("retention must be an rvasync Retention")
        self._transport = transport
        self._state_path: str | None = state
        self._retention = retention or Retention()
        self._core = EndpointCore(self.name, os.urandom(8).hex(), self._retention)
        self._alarm = self._core.alarm
        self._handlers: dict[str, Handler] = {}
        self._waiters: dict[str, list[asyncio.Future[Completion]]] = {}
        # Invocations of invoke() waiting for their request's answer, without a
        # future (see invoke): None, or their Completion once it came another way.
        self._direct: dict[str, Completion | None] = {}
        self._queries: dict[tuple[str, str], list[asyncio.Future[QueryAnswer]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._statefile: StateFile | None = None
        self._listener: Listener | None = None
        self._pacer: SendPacer  # the loop's send pacer, from open on (invocations need it)
        self._ticks: Iterator[bool]
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._open = False
        self._closed = False
        self._flush_soon = False
        self._deferred = 0
        self._peers_seen: set[object] = set()
        self._operations_seen: set[object] = set()
        self._last_policy: tuple[tuple[object, ...], RetryPolicy] | None = None
        self._last_args: tuple[object, ...] = ()
        self.malformed = 0
        """PDUs dropped because they could not be parsed."""

    # --- lifetime ---

    async def open(self) -> RemoteOps:
        if self._closed:
            raise RvError("this RemoteOps was closed; make a new one")
        if self._open:
            return self
        self._transport.check_open()
        if self._state_path is not None:
            self._statefile, data = await StateFile.open(self._state_path)
            if data is not None:
                try:
                    self._core.restore(data)
                except ValueError as exc:
                    await self._statefile.close()
                    raise InvalidArgument(f"state file {self._state_path!r}: {exc}") from None
            self._statefile.start(lambda: (self._core.version, self._core.snapshot()))
            await self._statefile.wait_durable(self._core.version)
        # Last, with no await after it: handlers registered right after open see every PDU.
        # Each PDU is taken as the transport delivers it (no queue and dispatcher task in
        # between: one event-loop turn less per invocation performed).
        self._listener = self._transport.listen(endpoint_subject(self.name))
        self._listener.intercept(self._on_delivery)
        self._pacer = pacer_for()
        self._ticks = self._pacer.ticks
        self._open = True
        self._rearm()
        return self

    async def close(self) -> None:
        """Stop serving; unsettled invocations stay in the state file (if any) for next time."""
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            await self._listener.close()
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._statefile is not None:
            await self._statefile.close()
        closed = RvError(f"RemoteOps {self.name!r} closed")
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(closed)
        for queries in self._queries.values():
            for qfut in queries:
                if not qfut.done():
                    qfut.set_exception(closed)

    async def __aenter__(self) -> RemoteOps:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- performer ---

    def perform(self, operation: str, handler: Handler) -> None:
        """Serve ``operation`` with ``handler`` (plain or async function of the argument message).

        The handler returns the result message (None for an empty one) or
        raises :class:`~rvasync.errors.OperationError`; a transient one means
        "not performed, retry later". Anything else it raises becomes the
        permanent error ``handler_failed``.
        """
        _check_operation(operation)
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, got {type(handler).__name__}")
        self._handlers[operation] = handler

    # --- invoker ---

    async def invoke(
        self,
        peer: str,
        operation: str,
        msg: Message,
        *,
        handshake: int = 3,
        timeout: float = 2.0,
        retries: int = 5,
        backoff: float = 1.5,
        max_wait: float = 30.0,
        verify_attempts: int = 3,
    ) -> Message:
        """Invoke ``operation`` at endpoint ``peer`` with argument ``msg``; its result message.

        ``timeout`` is the wait for the first attempt's answer; each retry
        (same invocation id) waits ``backoff`` times longer, at most
        ``max_wait``; after ``retries`` retries the performer is asked
        ``verify_attempts`` times what became of it. Raises
        :class:`~rvasync.errors.OperationError` (a permanent error: the
        non-delivery report) or :class:`~rvasync.errors.DeliveryFailed`
        (retries and verify exhausted; ``executed`` says what is known).
        """
        invoke_id, pdu, policy = self._begin(
            peer, operation, msg, handshake, timeout, retries, backoff, max_wait, verify_attempts
        )
        # No future unless the request's answer does not settle the invocation: until
        # then a completion that comes another way (an answer to a retry) waits here.
        direct = self._direct
        direct[invoke_id] = None
        try:
            # The retry timer runs while the first copy is out: self._check_timer(), written out.
            timer_at = self._timer_at
            if self._alarm.earliest < (math.inf if timer_at is None else timer_at):
                self._rearm()
            if self._statefile is not None:
                await self._statefile.wait_durable(self._core.version)
            if not self._closed:
                # The first copy goes as a request: the performer answers on its inbox,
                # and the answer comes back by the transport's reply path (straight to
                # this call, polled for rather than slept on). Retries (the core's timer)
                # and answers sent again travel between the endpoints' subjects.
                try:
                    reply = await self._transport.request_internal(
                        pdu_message(peer, pdu), policy.timeout
                    )
                except RequestTimeout:
                    pass  # the core's timer has sent (or sends) the next copy
                except RvError as exc:  # transport closed or its daemon link down: retries cover it
                    stderr_logger().warning(
                        "remote-operation PDU not sent", endpoint=self.name, error=repr(exc)
                    )
                else:
                    self._on_message(reply)
        finally:
            done = direct.pop(invoke_id, None)
        if done is not None:
            return _settled(done)
        if self._closed:
            raise RvError(f"RemoteOps {self.name!r} closed")
        return _settled(await self._waiter(invoke_id))

    async def start_invoke(
        self,
        peer: str,
        operation: str,
        msg: Message,
        *,
        handshake: int = 3,
        timeout: float = 2.0,
        retries: int = 5,
        backoff: float = 1.5,
        max_wait: float = 30.0,
        verify_attempts: int = 3,
    ) -> str:
        """:meth:`invoke` in two steps: start it and return its id; :meth:`outcome` waits.

        The id is on disk (with a state file) before the invocation leaves, so
        a program that records it can ask for the outcome after a crash.
        """
        invoke_id, pdu, _ = self._begin(
            peer, operation, msg, handshake, timeout, retries, backoff, max_wait, verify_attempts
        )
        out = Outputs()
        out.sends.append(Send(peer, pdu))
        await self._carry(out)
        # A loop of start_invoke gives the loop a turn now and then (rvasync.sendpace).
        if next(self._ticks) and (turn := self._pacer.look()) is not None:
            await turn
        return invoke_id

    def _begin(
        self,
        peer: str,
        operation: str,
        msg: Message,
        handshake: int,
        timeout: float,
        retries: int,
        backoff: float,
        max_wait: float,
        verify_attempts: int,
    ) -> tuple[str, Pdu, RetryPolicy]:
        """Check the arguments and start an invocation in the core: its id, INVOKE and policy."""
        # Names checked once (bounded memos): a caller in a loop repeats them.
        if peer.__class__ is not str or peer not in self._peers_seen:
            check_endpoint_name(peer, "peer")
            if len(self._peers_seen) < 1024:
                self._peers_seen.add(peer)
        if operation.__class__ is not str or operation not in self._operations_seen:
            _check_operation(operation)
            if len(self._operations_seen) < 1024:
                self._operations_seen.add(operation)
        if not isinstance(msg, Message):
            raise InvalidArgument(f"msg must be an rvasync Message, got {type(msg).__name__}")
        if handshake not in (2, 3) or isinstance(handshake, bool):
            raise InvalidArgument(f"handshake must be 2 or 3, got {handshake!r}")
        # The policy of the previous call when every argument is the same object (a
        # caller in a loop passes the same ones: the same values of the same types),
        # else when every argument is the same value of the same type; checking them
        # again would cost each call several function calls.
        last_args = self._last_args
        last = self._last_policy
        if (
            last is not None
            and timeout is last_args[0]
            and retries is last_args[1]
            and backoff is last_args[2]
            and max_wait is last_args[3]
            and verify_attempts is last_args[4]
        ):
            policy = last[1]
        else:
            key = (
                timeout,
                retries,
                backoff,
                max_wait,
                verify_attempts,
                timeout.__class__,
                retries.__class__,
                backoff.__class__,
                max_wait.__class__,
                verify_attempts.__class__,
            )
            if last is not None and last[0] == key:
                policy = last[1]
            else:
                policy = RetryPolicy(timeout, retries, backoff, max_wait, verify_attempts)
                self._last_policy = (key, policy)
            self._last_args = (timeout, retries, backoff, max_wait, verify_attempts)
        if not self._open or self._closed:
            self._check_usable()  # raises
        invoke_id, pdu = self._core.invoker.start(
            peer, operation, msg.to_bytes(), handshake, policy, time.time()
        )
        return invoke_id, pdu, policy

    async def outcome(self, invoke_id: str) -> Message:
        """The result of invocation ``invoke_id`` of this endpoint, once settled.

        Raises as :meth:`invoke` does. Works for invocations restored from the
        state file after a restart, and for settled ones still remembered.
        """
        if not isinstance(invoke_id, str):
            raise InvalidArgument(f"invoke_id must be a str, got {invoke_id!r}")
        self._check_usable()
        done = self._core.invoker.settled(invoke_id)
        if done is not None:
            return _settled(done)
        if self._core.invoker.phase_of(invoke_id) is None:
            raise InvalidArgument(f"this endpoint holds no invocation {invoke_id!r}")
        return _settled(await self._waiter(invoke_id))

    def pending_invocations(self) -> list[PendingInvocation]:
        """Each invocation not settled yet: after a restart, those the state file held.

        A program that crashed between starting an invocation and recording
        its id recognises it here by its argument, and waits for it with
        :meth:`outcome` instead of invoking again.
        """
        return [
            PendingInvocation(invoke_id, peer, operation, Message.from_bytes(body))
            for invoke_id, peer, operation, body in self._core.invoker.unsettled()
        ]

    async def verify(
        self, peer: str, invoke_id: str, *, timeout: float = 2.0, attempts: int = 3
    ) -> VerifyResult:
        """Ask ``peer`` what it knows of ``invoke_id``.

        A performer that never saw the id records that it never will perform
        it, so ``"not_executed"`` stays true. Raises ``DeliveryFailed`` when
        the peer does not answer.
        """
        check_endpoint_name(peer, "peer")
        if not isinstance(invoke_id, str) or not invoke_id:
            raise InvalidArgument(f"invoke_id must be a non-empty str, got {invoke_id!r}")
        policy = RetryPolicy(timeout, 0, 1.5, 30.0, attempts)
        self._check_usable()
        out = self._core.invoker.query(peer, invoke_id, policy, time.time())
        fut: asyncio.Future[QueryAnswer] = asyncio.get_running_loop().create_future()
        self._queries.setdefault((peer, invoke_id), []).append(fut)
        await self._carry(out)
        answer = await fut
        if answer.status is None and answer.outcome is None:
            raise DeliveryFailed(invoke_id, None, f"{peer!r} did not answer the verify")
        if answer.outcome is not None:
            if answer.outcome.ok:
                return VerifyResult(invoke_id, "result", Message.from_bytes(answer.outcome.body))
            return VerifyResult(invoke_id, "error", error=_error(invoke_id, answer.outcome))
        if answer.status is V_ACKNOWLEDGED:
            return VerifyResult(invoke_id, "acknowledged")
        return VerifyResult(invoke_id, "not_executed")

    @property
    def stats(self) -> dict[str, int]:
        """Counters of both roles (performed, duplicates, retries, verifies ...)."""
        p, i = self._core.performer.stats, self._core.invoker.stats
        out = {f"performer_{k}": getattr(p, k) for k in p.__dataclass_fields__}
        out.update({f"invoker_{k}": getattr(i, k) for k in i.__dataclass_fields__})
        out["malformed"] = self.malformed
        out["state_writes"] = 0 if self._statefile is None else self._statefile.writes
        return out

    # --- the pump ---

    def _check_usable(self) -> None:
        if not self._open or self._closed:
            raise RvError(f"RemoteOps {self.name!r} is not open")

    def _waiter(self, invoke_id: str) -> asyncio.Future[Completion]:
        fut: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(invoke_id, []).append(fut)
        return fut

    def _on_delivery(self, msg: Message) -> None:
        """A PDU as the transport delivers it: taken at once, or after the current send.

        Deliveries can happen inside a send (a transport hands a message to its
        own listeners directly): a PDU that arrives while an endpoint of this
        process carries out its outputs waits for the next loop turn, as do the
        ones after it (order kept), so no step runs inside another.
        """
        if _sending[0] or self._deferred:
            self._deferred += 1
            asyncio.get_running_loop().call_soon(self._on_deferred, msg)
            return
        try:
            self._on_message(msg)
        except Exception as exc:  # never into the transport's delivery path
            stderr_logger().error(
                "remote-operation PDU handling failed", endpoint=self.name, error=repr(exc)
            )

    def _on_deferred(self, msg: Message) -> None:
        self._deferred -= 1
        if self._closed:
            return
        try:
            self._on_message(msg)
        except Exception as exc:
            stderr_logger().error(
                "remote-operation PDU handling failed", endpoint=self.name, error=repr(exc)
            )

    def _on_message(self, msg: Message) -> None:
        try:
            pdu = pdu_from(msg)
        except PduError as exc:
            self.malformed += 1
            if self.malformed == 1 or self.malformed % 1000 == 0:
                stderr_logger().warning(
                    "dropped a malformed remote-operation PDU",
                    endpoint=self.name,
                    error=str(exc),
                    malformed=self.malformed,
                )
            return
        reply = msg.reply_subject
        if reply is not None and not reply.startswith("_INBOX."):
            # Answers go to an inbox or to the sender's endpoint, never to a subject a
            # PDU names (send_internal would publish anywhere, reserved subjects included).
            reply = None
        now = time.time()
        if self._statefile is None and not self._closed:
            # The per-call PDUs without an Outputs (nothing waits for a state file here):
            # a new invocation to perform, the result of one of ours.
            kind = pdu.kind
            if kind is K_INVOKE:
                ex = self._core.performer.accept(pdu, now, reply)
                if ex is not None:
                    self._execute(ex)
                    timer_at = self._timer_at  # self._check_timer(), written out
                    if self._alarm.earliest < (math.inf if timer_at is None else timer_at):
                        self._rearm()
                    return
            elif kind is K_RESULT:
                done = self._core.invoker.take_result(pdu, now)
                if done is not None:
                    if self._waiters:
                        self._settle(done)
                    else:  # self._settle(done) without waiters: for the invoke() waiting
                        direct = self._direct
                        if done.invoke_id in direct:
                            direct[done.invoke_id] = done
                    if not self._flush_soon and self._core.invoker.acks_pending:
                        self._flush_soon = True
                        asyncio.get_running_loop().call_soon(self._flush_acks)
                    timer_at = self._timer_at  # self._check_timer(), written out
                    if self._alarm.earliest < (math.inf if timer_at is None else timer_at):
                        self._rearm()
                    return
        self._step(self._core.receive(pdu, now, reply))

    def _step(self, out: Outputs) -> None:
        """Carry ``out`` out: at once, or once the state is durable."""
        if self._statefile is None or self._statefile.durable_version >= self._core.version:
            self._release(out)
        else:
            self._spawn(self._carry(out))
        self._check_timer()

    def _check_timer(self) -> None:
        """After a step: re-arm the timer when something now comes before it."""
        # self._rearm(), whose first test is written out: most steps index nothing
        # that comes before the armed timer.
        timer_at = self._timer_at
        if self._alarm.earliest < (math.inf if timer_at is None else timer_at):
            self._rearm()

    async def _carry(self, out: Outputs) -> None:
        if self._statefile is not None:
            await self._statefile.wait_durable(self._core.version)
        self._release(out)
        self._rearm()

    def _release(self, out: Outputs) -> None:
        if self._closed:
            return
        if out.sends:
            for send in out.sends:
                self._send(send)
        if out.executes:
            for ex in out.executes:
                self._execute(ex)
        if out.completions:
            for done in out.completions:
                self._settle(done)
            if not self._flush_soon and self._core.invoker.acks_pending:
                # After the callers waiting for these answers run: a caller that invokes
                # again at once carries the acknowledgments on its invocation instead.
                self._flush_soon = True
                asyncio.get_running_loop().call_soon(self._flush_acks)
        if out.answers:
            for answer in out.answers:
                for qfut in self._queries.pop((answer.peer, answer.invoke_id), []):
                    if not qfut.done():
                        qfut.set_result(answer)
        if not out.reports:
            return
        for report in out.reports:
            self._transport.present(
                make_advisory(
                    "WARN",
                    "RVOPS",
                    report.kind.value,
                    self.name,
                    fields=[
                        ("invoke_id", report.invoke_id),
                        ("peer", report.peer),
                        ("operation", report.operation),
                        ("ADV_DESC", report.detail),
                    ],
                )
            )

    def _send(self, send: Send) -> None:
        """Send one PDU; a PDU delivered meanwhile in this process waits (see _on_delivery)."""
        if send.via is None:
            msg = pdu_message(send.dest, send.pdu)
        else:
            msg = pdu_message_at(send.via, send.pdu)
        _sending[0] += 1
        try:
            self._transport.send_internal(msg)
        except RvError as exc:  # closed transport, daemon link down: retries cover it
            stderr_logger().warning(
                "remote-operation PDU not sent", endpoint=self.name, error=repr(exc)
            )
        finally:
            _sending[0] -= 1

    def _settle(self, done: Completion) -> None:
        """Hand a settled invocation to whoever waits for it."""
        invoke_id = done.invoke_id
        waiters = self._waiters.pop(invoke_id, None)
        if waiters is not None:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(done)
        if invoke_id in self._direct:
            self._direct[invoke_id] = done  # for the invoke() that waits on it

    def _flush_acks(self) -> None:
        self._flush_soon = False
        if not self._closed and self._core.invoker.acks_pending:
            self._step(self._core.invoker.flush_acks())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            stderr_logger().error(
                "remote-operations task failed", endpoint=self.name, error=repr(task.exception())
            )

    def _execute(self, ex: Execute) -> None:
        """Run the handler: at once when it is a plain function, in a task when it awaits."""
        handler = self._handlers.get(ex.operation)
        if handler is None:
            self._complete(
                ex,
                Outcome.error(
                    UNKNOWN_OPERATION,
                    detail=f"{self.name!r} performs no operation {ex.operation!r}",
                ),
            )
            return
        try:
            arg = Message.from_bytes(ex.body)
        except RvError as exc:
            self._complete(ex, Outcome.error(MALFORMED_ARGUMENTS, detail=str(exc)))
            return
        try:
            result = handler(arg)
        except Exception as exc:
            self._complete(ex, _failure(exc))
            return
        if result.__class__ is Message:
            try:
                outcome = Outcome(True, result.to_bytes())
            except RvError as exc:
                outcome = Outcome.error(BAD_RESULT, detail=str(exc))
            if self._closed:
                return
            if self._statefile is None:  # self._complete(ex, outcome), without an Outputs
                send = self._core.performer.answer(ex.invoke_id, outcome, time.time())
                if send is not None:
                    self._send(send)
                timer_at = self._timer_at  # self._check_timer(), written out
                if self._alarm.earliest < (math.inf if timer_at is None else timer_at):
                    self._rearm()
            else:
                self._step(self._core.performer.complete(ex.invoke_id, outcome, time.time()))
        elif inspect.isawaitable(result):
            self._spawn(self._finish(ex, result))
        else:
            self._complete(ex, _result(result))

    async def _finish(self, ex: Execute, pending: Awaitable[Message | None]) -> None:
        try:
            result = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._complete(ex, _failure(exc))
            return
        self._complete(ex, _result(result))

    def _complete(self, ex: Execute, outcome: Outcome) -> None:
        if not self._closed:
            self._step(self._core.performer.complete(ex.invoke_id, outcome, time.time()))

    def _rearm(self) -> None:
        if self._closed or not self._open:
            return
        alarm = self._alarm
        timer_at = self._timer_at
        if alarm.earliest >= (math.inf if timer_at is None else timer_at):
            return  # nothing indexed since the last look comes before the armed timer
        alarm.looked()
        deadline = self._core.next_deadline()
        if deadline is None:
            return
        if self._timer_at is not None and self._timer_at <= deadline:
            return  # the armed timer comes first; it re-arms when it fires
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        delay = max(0.0, deadline - time.time())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._alarm.note(-math.inf)  # the next _rearm looks through the whole index again
        now = time.time()
        deadline = self._core.next_deadline()
        if deadline is not None and deadline <= now:
            self._step(self._core.handle_timer(now))
        else:
            self._rearm()


def _failure(exc: Exception) -> Outcome:
    """The outcome of a handler that raised ``exc``."""
    if isinstance(exc, OperationError):
        return Outcome.error(exc.code, transient=exc.transient, detail=exc.detail)
    return Outcome.error(HANDLER_FAILED, detail=f"{type(exc).__name__}: {exc}")


def _result(result: object) -> Outcome:
    """The outcome of a handler that returned ``result``."""
    if result is None:
        result = Message()
    if not isinstance(result, Message):
        return Outcome.error(
            BAD_RESULT, detail=f"the handler returned {type(result).__name__}, not a Message"
        )
    try:
        return Outcome(True, result.to_bytes())
    except RvError as exc:
        return Outcome.error(BAD_RESULT, detail=str(exc))


def _error(invoke_id: str, outcome: Outcome) -> OperationError:
    return OperationError(
        outcome.code, transient=outcome.transient, detail=outcome.detail, invoke_id=invoke_id
    )


def _settled(done: Completion) -> Message:
    """The result of a settled invocation, or the exception that says how it ended."""
    how = done.how
    if how is _S_RESULT:
        assert done.outcome is not None
        return Message.from_bytes(done.outcome.body)
    last = None if done.last_error is None else _error(done.invoke_id, done.last_error)
    if how is _S_ERROR:
        assert done.outcome is not None
        raise _error(done.invoke_id, done.outcome)
    if how is _S_NOT_EXECUTED:
        raise DeliveryFailed(
            done.invoke_id,
            False,
            "no answer within the retries; the performer never performed it",
            last,
        )
    if how is _S_ACKNOWLEDGED:
        raise DeliveryFailed(
            done.invoke_id, True, "performed, but its acknowledged result was lost here", last
        )
    raise DeliveryFailed(
        done.invoke_id, None, "no answer within the retries and verify; outcome unknown", last
    )
