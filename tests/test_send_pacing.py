"""A plain loop of sends lets the rest of its program run (rvasync.sendpace).

Every send path is driven in a tight ``for`` loop that never yields on its own
(``await send(...)`` and nothing else), once per transport kind: the process
transport, a network transport with its in-process daemon and with a
standalone daemon, certified transports (process ledger, ledger file, through
a relay agent), a certified sender of tasks to a distributed queue, a virtual
circuit terminal, and remote operations' ``start_invoke``. During the loop a
callback rescheduling itself with ``call_soon`` must run (the loop turns), a
``call_later`` timer must fire (the loop stops at once when it has: a bounded
delay, and a loop that never turns runs into its bound and fails), and no
turn may last longer than the pacer's budget of sends. Certified loops must
also see confirmations and advisories arrive while they send (the queue's
sender: its tasks processed and confirmed). Before the pacer, none of this
happened until the loop ended (0 callbacks in 20,000 sends).

The fault-tolerance consequence between processes is in
tests/test_ft_driver_processes.py (an active member publishing in a plain
loop is never joined by a second active member) and between hosts in
tests/lab/test_lab_certified_ft.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cm_driver_support import FAST, until

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.sendpace import CHECK_EVERY, TURN_SENDS, SendPacer, pacer_for

#: A loop that never lets the timer fire stops after this long (and the test fails).
LOOP_BOUND = 5.0
#: The timer the loop must let fire.
TIMER_DELAY = 0.02
#: The most sends a loop turn can take: the budget, plus the sends before the turn's
#: first look and up to the look that ends it.
MAX_TURN = TURN_SENDS + 2 * CHECK_EVERY
WAIT = 15.0


class Turns:
    """Counts the loop's turns during a run of sends, and the sends between two turns."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.sent = 0
        self.turns = 0
        self.longest = 0  # sends between two turns, at most
        self.timer_at: int | None = None  # sends done when the timer fired
        self._last = 0
        self._running = False

    def start(self) -> None:
        self._running = True
        self.loop.call_soon(self._tick)
        self.loop.call_later(TIMER_DELAY, self._fire)

    def stop(self) -> None:
        self._running = False
        self._tick()

    def _tick(self) -> None:
        self.longest = max(self.longest, self.sent - self._last)
        self._last = self.sent
        if self._running:
            self.turns += 1
            self.loop.call_soon(self._tick)

    def _fire(self) -> None:
        self.timer_at = self.sent


async def tight_loop(
    send: Callable[[int], Awaitable[Any]], until_done: Callable[[], bool] | None = None
) -> Turns:
    """Send in a plain loop until the timer fired and ``until_done()`` (or the bound).

    The loop reads the clock every 256 sends to keep its bound: reading it gives the
    event loop no turn.
    """
    turns = Turns()
    turns.start()
    deadline = time.monotonic() + LOOP_BOUND
    try:
        while time.monotonic() < deadline:
            for _ in range(256):
                await send(turns.sent)
                turns.sent += 1
            if turns.timer_at is not None and (until_done is None or until_done()):
                break
    finally:
        turns.stop()
    return turns


def check(turns: Turns) -> None:
    assert turns.timer_at is not None, (
        f"the timer did not fire during {turns.sent} sends ({turns.turns} loop turns)"
    )
    assert turns.turns >= 1
    assert turns.longest <= MAX_TURN, f"a loop turn lasted {turns.longest} sends"


def message(n: int) -> rv.Message:
    return rv.Message("BULK.X", {"i": n})


# -- the pacer itself ------------------------------------------------------------------


async def test_a_program_that_yields_itself_never_sees_the_pacer_yield() -> None:
    pacer = SendPacer(asyncio.get_running_loop())
    ticks = pacer.ticks
    for n in range(10 * TURN_SENDS):
        if next(ticks) and (turn := pacer.look()) is not None:
            await turn
        if n % (TURN_SENDS // 2) == 0:
            await asyncio.sleep(0)
    assert pacer.yields == 0


async def test_a_run_of_sends_longer_than_the_budget_yields_once_per_budget() -> None:
    pacer = SendPacer(asyncio.get_running_loop())
    turns = Turns()
    turns.start()
    ticks = pacer.ticks
    for _ in range(20 * TURN_SENDS):
        if next(ticks) and (turn := pacer.look()) is not None:
            await turn
        turns.sent += 1
    turns.stop()
    assert pacer.yields >= 19
    assert turns.longest <= MAX_TURN


async def test_one_pacer_serves_a_loop() -> None:
    assert pacer_for() is pacer_for(asyncio.get_running_loop())


async def test_a_batch_counts_as_its_messages() -> None:
    pacer = SendPacer(asyncio.get_running_loop())
    assert pacer.look(10) is None  # marks the turn
    turn = pacer.look(TURN_SENDS)
    assert turn is not None and pacer.yields == 1
    await turn


# -- plain transports ------------------------------------------------------------------


async def test_process_transport(rv_process_transport: rv.ProcessTransport) -> None:
    got = []
    rv_process_transport.listen("BULK.>", callback=lambda msg: got.append(msg))
    turns = await tight_loop(lambda n: rv_process_transport.send(message(n)), lambda: bool(got))
    check(turns)
    assert got, "the listener's callbacks never ran during the loop"


@pytest.mark.parametrize("where", ["in-process", "standalone"])
async def test_network_transport(
    rv_service: tuple[str, str], where: str, request: pytest.FixtureRequest
) -> None:
    daemon = None if where == "in-process" else request.getfixturevalue("rv_daemon")
    service, network = rv_service
    async with (
        rv.Transport(service, network, daemon=daemon) as sender,
        rv.Transport(service, network, daemon=daemon) as receiver,
    ):
        got = []
        receiver.listen("BULK.>", callback=lambda msg: got.append(msg))
        turns = await tight_loop(lambda n: sender.send(message(n)), lambda: bool(got))
        check(turns)
        assert got, "nothing reached the other transport's listener during the loop"


async def test_send_many_and_send_reply_are_paced(rv_transport: rv.Transport) -> None:
    batch = [message(n) for n in range(100)]
    turns = await tight_loop(lambda n: rv_transport.send_many(batch))
    check(turns)
    request = rv.Message("BULK.ASK", reply_subject="BULK.ANSWER")
    turns = await tight_loop(lambda n: rv_transport.send_reply(message(n), request))
    check(turns)


# -- certified -------------------------------------------------------------------------


@pytest.mark.parametrize("ledger", ["process", "file"])
async def test_certified_transport_sees_confirmations_while_it_sends(
    rv_transport: rv.Transport, tmp_path: Path, ledger: str
) -> None:
    def ledger_of(name: str) -> Path | None:
        return None if ledger == "process" else tmp_path / f"{name}.ledger"

    async with (
        CmTransport(rv_transport, "SND", ledger=ledger_of("SND"), timing=FAST) as snd,
        CmTransport(rv_transport, "LIS", ledger=ledger_of("LIS"), timing=FAST) as lis,
    ):
        lis.listen("BULK.>", callback=lambda msg: None)
        await snd.send(message(-1))
        await until(
            lambda: any(r.last_confirmed for r in snd.review_ledger("BULK.X")[0].listeners),
            WAIT,
            "the agreement",
        )
        first = snd.review_ledger("BULK.X")[0].listeners[0].last_confirmed

        def confirmed_more() -> bool:
            return snd.review_ledger("BULK.X")[0].listeners[0].last_confirmed > first

        turns = await tight_loop(lambda n: snd.send(message(n)), confirmed_more)
        check(turns)
        assert confirmed_more(), "no confirmation was processed during the loop"


async def test_certified_cold_start_registers_and_advises_during_the_loop(
    rv_transport: rv.Transport,
) -> None:
    """The sender anticipates the listener and streams at once: the registration (and
    its REGISTRATION.REQUEST advisory) happens while the loop runs."""
    async with (
        CmTransport(rv_transport, "SND", timing=FAST) as snd,
        CmTransport(rv_transport, "LIS", require_old=True, timing=FAST) as lis,
    ):
        lis.listen("BULK.>", callback=lambda msg: None)
        await snd.add_listener("LIS", "BULK.X")
        advised = []
        rv_transport.listen("_RV.INFO.RVCM.REGISTRATION.REQUEST.>", callback=advised.append)

        def registered() -> bool:
            return bool(advised) and not snd.review_ledger("BULK.X")[0].listeners[0].anticipated

        turns = await tight_loop(lambda n: snd.send(message(n)), registered)
        check(turns)
        assert registered(), "the listener's registration waited for the loop to end"


async def test_certified_transport_through_a_relay_agent(
    rv_process_transport: rv.ProcessTransport, tmp_path: Path
) -> None:
    t = rv_process_transport
    async with rv.RelayAgent(t, "RA", ledger=tmp_path / "ra.ledger"):
        snd = CmTransport(t, "SND", relay_agent="RA", timing=FAST)
        try:
            await until(lambda: snd.relay_state == "connected", WAIT, "the relay link")
            turns = await tight_loop(lambda n: snd.send(message(n)))
            check(turns)
        finally:
            await snd.close()


async def test_distributed_queue_sender_sees_tasks_done_and_confirmed_while_it_sends(
    rv_process_transport: rv.ProcessTransport,
) -> None:
    """A sender of tasks to a distributed queue is a certified transport: during its loop
    the scheduler assigns tasks, a worker processes them and their confirmations come
    back to the sender."""
    t = rv_process_transport
    timing = {"scheduler_heartbeat": 0.25, "scheduler_activation": 1.5}
    scheduler = rv.CmQueueTransport(t, "WORK.Q", scheduler_weight=5, worker_tasks=0, **timing)
    worker = rv.CmQueueTransport(t, "WORK.Q", **timing)
    done: list[int] = []
    for member in (scheduler, worker):  # the scheduler takes tasks for what members listen to
        member.listen("JOBS.>", callback=lambda msg: done.append(msg["i"]))
    sender = CmTransport(t, "SENDER", timing=FAST)
    try:
        await until(lambda: scheduler.is_scheduler, WAIT, "the scheduler")
        await sender.add_listener("WORK.Q", "JOBS.RUN")
        await sender.send(rv.Message("JOBS.RUN", {"i": -1}))
        await until(lambda: bool(done), WAIT, "the first task")
        first = len(done)
        reviews = sender.review_ledger("JOBS.RUN")
        confirmed = reviews[0].listeners[0].last_confirmed if reviews else 0

        def done_and_confirmed_more() -> bool:
            reviews = sender.review_ledger("JOBS.RUN")
            return len(done) > first and (
                not reviews or reviews[0].listeners[0].last_confirmed > confirmed
            )

        turns = await tight_loop(
            lambda n: sender.send(rv.Message("JOBS.RUN", {"i": n})), done_and_confirmed_more
        )
        check(turns)
        assert done_and_confirmed_more(), "no task was processed and confirmed during the loop"
    finally:
        await sender.close()
        for member in (worker, scheduler):
            await member.close()


# -- virtual circuits and remote operations --------------------------------------------


async def test_virtual_circuit_terminal(rv_transport: rv.Transport) -> None:
    accept = rv.VcTransport.accept(rv_transport)
    connect = rv.VcTransport.connect(rv_transport, accept.connect_subject)
    try:
        await connect.wait_connected(WAIT)
        got = []
        accept.listen("BULK.>", callback=lambda msg: got.append(msg))
        turns = await tight_loop(lambda n: connect.send(message(n)), lambda: bool(got))
        check(turns)
        assert got, "the partner terminal received nothing during the loop"
    finally:
        for terminal in (connect, accept):
            await terminal.close()


async def test_remote_operations_start_invoke(rv_process_transport: rv.ProcessTransport) -> None:
    performed = []

    def handler(msg: rv.Message) -> rv.Message:
        performed.append(msg["i"])
        return rv.Message(fields={"ok": True})

    async with (
        rv.RemoteOps(rv_process_transport, "CLIENT") as invoker,
        rv.RemoteOps(rv_process_transport, "ORDERS") as performer,
    ):
        performer.perform("place", handler)
        turns = await tight_loop(
            lambda n: invoker.start_invoke("ORDERS", "place", message(n), handshake=2),
            lambda: bool(performed),
        )
        check(turns)
        assert performed, "the performer ran no operation during the loop"
