"""Certified (persistent, acknowledged) delivery between processes, end to end.

Layout: ``listeners`` listener processes start first; each opens its durable
end (rvasync: a CM listener of a named correspondent; JetStream: a durable
consumer) and reports ready. Then the sender process opens its end.

Two ways to start, two families of scenarios:

- *warm* (``certified-<n>listener(s)``): the sender sends short warm-up
  messages until every listener has an agreement with it and has confirmed
  everything sent so far, so the measured run starts with the agreements in
  place (registration is not part of the figure);
- *cold* (``certified-<n>listener(s)-cold``): the sender anticipates every
  listener (rvasync: ``add_listener`` with the listener's name, the listener
  running with ``require_old``; JetStream: nothing to do, its consumers exist)
  and streams at once: the agreements are made while the data flows, as for
  a sender that starts (or restarts) under load.

On ``go`` the sender sends ``messages`` payloads of ``size`` bytes the way a
program does: a plain ``for`` loop that builds a new message for every send
and awaits the system's certified send (it returns once the system has
accepted the message: in the ledger, on disk with a synchronous ledger,
acknowledged by the server ...), with no explicit yield to the event loop;
then it waits until every listener has confirmed every message. Rows of
their own (never the headline) show the same loop re-sending one prebuilt
message, or with ``await asyncio.sleep(0)`` every :data:`YIELD_EVERY` sends
(the adapter's :meth:`Certified.yield_every`). Listeners count the payloads
they receive and confirm each (automatically when the next is asked for, or
with an explicit ack), and run until the runner stops them.

Figures, from the sender's first send (``CLOCK_MONOTONIC``, comparable across
processes):

- ``confirmed_per_s``: messages per second until the sender knows every
  listener confirmed every message;
- ``delivered_per_s``: deliveries (messages x listeners) per second until the
  last listener received its last message;
- ``sent_per_s``: the sender's own rate of certified sends;
- ``sender_cpu_us``, ``listener_cpu_us``: CPU time (user and system) per
  message of the sender, from its first send to its last confirmation, and of
  the busiest listener, from its first data message to its last (the figures
  that the load of other processes on a shared machine changes least).

While waiting for the confirmations the sender polls the adapter's check, and
waits nine times as long as the check took before the next one, so polling
costs at most a tenth of the sender's time whatever a check costs.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.measure import now_ns, payload
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

SUBJECT = "BENCH.CM.DATA"

#: What warm-up messages carry: shorter than any data payload (at least 16 B).
WARM_UP = b"warm-up"

#: Seconds between warm-up messages.
WARM_UP_INTERVAL = 0.05

#: The explicit-yield rows: ``await asyncio.sleep(0)`` after every this many sends.
YIELD_EVERY = 1000

#: The polling of :meth:`Certified.confirmed_by` spends at most 1 / POLL_SHARE of the time.
POLL_SHARE = 10
MIN_POLL = 0.002


class Certified(Adapter):
    """Certified delivery: a sender whose messages listeners confirm, one by one."""

    # --- the sender's side --------------------------------------------------------------

    @abc.abstractmethod
    async def open_sender(self, subject: str) -> None:
        """Open the sending end for ``subject``."""

    async def anticipate(self, listeners: int) -> None:
        """Cold start: expect the ``listeners`` listeners before the first send (rvasync's
        ``add_listener``); nothing for systems whose consumers exist on their own."""

    @abc.abstractmethod
    async def send_new(self, subject: str, data: bytes) -> None:
        """Build a new message carrying ``data`` and send it certified; returns once the
        system has accepted it. (A prebuilt-message row re-sends one message instead.)"""

    def yield_every(self) -> int:
        """Sends between explicit ``asyncio.sleep(0)`` calls of this row's loop; 0 (a
        plain program's loop, the headline rows) for none."""
        return 0

    async def flush(self) -> None:
        """Wait until every send so far is accepted (for systems that pipeline sends)."""

    @abc.abstractmethod
    async def confirmed_by(self) -> int:
        """How many listeners have confirmed every message sent so far."""

    # --- a listener's side --------------------------------------------------------------

    @abc.abstractmethod
    async def open_listener(self, subject: str) -> None:
        """Open this listener's durable end on ``subject``; on return it is in effect."""

    @abc.abstractmethod
    async def consume(self, sink: Callable[[bytes], None]) -> None:
        """Give each received payload to ``sink``, then confirm it; until cancelled."""


async def listener(ctx: WorkerContext) -> dict[str, Any]:
    """Count the data payloads received until the runner says stop."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, Certified)
    size, expected = int(p["size"]), int(p["messages"])
    count = 0
    t_last = 0
    cpu_first = cpu_last = 0.0

    def sink(data: bytes) -> None:
        nonlocal count, t_last, cpu_first, cpu_last
        if len(data) == size:
            count += 1
            if count == 1:
                cpu_first = time.process_time()
            if count == expected:
                t_last = now_ns()
                cpu_last = time.process_time()

    async def until_stopped() -> None:
        await ctx.ready()
        await ctx.go()
        await ctx.stopped()

    try:
        await client.open_listener(SUBJECT)
        # Consuming starts before ready: the sender's warm-up needs confirmations.
        task = asyncio.ensure_future(client.consume(sink))
        control = asyncio.ensure_future(until_stopped())
        try:
            await asyncio.wait({task, control}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # consuming ended early: raise why
                raise RuntimeError("the listener's consume loop ended before stop")
            control.result()
        finally:
            for pending in (task, control):
                pending.cancel()
            await asyncio.gather(task, control, return_exceptions=True)
    finally:
        await client.close()
    return {"count": count, "t_last": t_last, "cpu_s": cpu_last - cpu_first}


async def _wait_confirmed(client: Certified, listeners: int, timeout: float) -> None:
    """Poll until ``listeners`` listeners confirmed everything, spending at most a
    1/POLL_SHARE of the time on the checks."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                t0 = time.perf_counter()
                done = await client.confirmed_by() >= listeners
                if done:
                    return
                took = time.perf_counter() - t0
                await asyncio.sleep(max(MIN_POLL, (POLL_SHARE - 1) * took))
    except TimeoutError:
        raise TimeoutError(
            f"only {await client.confirmed_by()} of {listeners} listeners confirmed every "
            f"message within {timeout:g} s"
        ) from None


async def _warm_up(client: Certified, listeners: int, timeout: float) -> None:
    """Send warm-up messages until every listener has confirmed one."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                await client.send_new(SUBJECT, WARM_UP)
                await client.flush()
                await asyncio.sleep(WARM_UP_INTERVAL)
                if await client.confirmed_by() >= listeners:
                    return
    except TimeoutError:
        raise TimeoutError(
            f"only {await client.confirmed_by()} of {listeners} listeners confirmed the "
            "warm-up messages"
        ) from None


async def _stream(client: Certified, data: bytes, count: int) -> None:
    """The timed loop: a plain program's, or with an explicit yield every N sends."""
    send_new = client.send_new
    every = client.yield_every()
    if not every:
        for _ in range(count):
            await send_new(SUBJECT, data)
        return
    for i in range(count):
        await send_new(SUBJECT, data)
        if i % every == every - 1:
            await asyncio.sleep(0)


async def sender(ctx: WorkerContext) -> dict[str, Any]:
    """Warm up (or anticipate the listeners), then send and wait for confirmations."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, Certified)
    listeners, count = int(p["listeners"]), int(p["messages"])
    try:
        await client.open_sender(SUBJECT)
        if p.get("cold"):
            await client.anticipate(listeners)
        else:
            await _warm_up(client, listeners, float(p["ready_timeout"]) - 10)
        data = payload(int(p["size"]))
        await ctx.ready()
        await ctx.go()
        t_start = now_ns()
        cpu_start = time.process_time()
        await _stream(client, data, count)
        await client.flush()
        t_sent = now_ns()
        await _wait_confirmed(client, listeners, float(p["timeout"]) - 10)
        t_confirmed = now_ns()
        cpu_s = time.process_time() - cpu_start
    finally:
        await client.close()
    return {
        "sent": count,
        "t_start": t_start,
        "t_sent": t_sent,
        "t_confirmed": t_confirmed,
        "cpu_s": cpu_s,
    }


def layout(p: Params) -> Sequence[RoleGroup]:
    """Listeners first (passive: they run until the sender has its confirmations)."""
    return (RoleGroup("listener", int(p["listeners"]), passive=True), RoleGroup("sender", 1))


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Confirmed, delivered and sent per second, from the first send; CPU per message."""
    (s,) = results["sender"]
    got = [int(r["count"]) for r in results["listener"]]
    sent = int(s["sent"])
    if any(n != sent for n in got):
        raise RuntimeError(f"listeners received {got} data messages, {sent} were sent")
    t0 = int(s["t_start"])
    t_delivered = max(int(r["t_last"]) for r in results["listener"])
    return {
        "confirmed_per_s": sent / ((int(s["t_confirmed"]) - t0) / 1e9),
        "delivered_per_s": sum(got) / ((t_delivered - t0) / 1e9),
        "sent_per_s": sent / ((int(s["t_sent"]) - t0) / 1e9),
        # CPU time is what the other processes of a shared machine change least.
        "sender_cpu_us": float(s.get("cpu_s", 0.0)) / sent * 1e6,
        "listener_cpu_us": max(float(r.get("cpu_s", 0.0)) for r in results["listener"])
        / sent
        * 1e6,
    }


def _certified(listeners: int, messages: int, quick: int, order: int, cold: bool) -> Scenario:
    noun = "listener" if listeners == 1 else "listeners"
    start = (
        "Cold start: the sender anticipates every listener (rvasync: add_listener; the "
        "listeners run with require_old) and streams at once, so the agreements are made "
        "while the data flows."
        if cold
        else "Agreements are set up by a warm-up before timing."
    )
    return scenario(
        Scenario(
            name=f"certified-{listeners}{noun}" + ("-cold" if cold else ""),
            title=f"Certified delivery, 128 B, {listeners} {noun}"
            + (", cold start" if cold else ""),
            description=(
                f"One sender process, {listeners} listener process(es), each a durable end "
                "(rvasync: CmTransport over the network transport, in-process daemons; "
                "JetStream: stream, durable pull consumers acking each message). The sender "
                "is a plain program's loop: a new message per send, no explicit yield (rows "
                "saying 'prebuilt' or 'sleep(0)' are that loop changed, beside it). "
                "'confirmed': messages per second until the sender knows every listener "
                "confirmed every message; 'delivered': messages x listeners per second until "
                f"the last receipt. {start} Targets: file ledger >= 2x JetStream publish_async "
                "(file store), process ledger >= 3x JetStream's memory store."
            ),
            capability="certified",
            primary=Metric("confirmed_per_s", "confirmed", "msg/s", "higher"),
            extras=(
                Metric("delivered_per_s", "delivered", "msg/s", "higher"),
                Metric("sent_per_s", "send rate", "msg/s", "higher"),
                Metric("sender_cpu_us", "sender CPU", "µs/msg", "lower"),
                Metric("listener_cpu_us", "listener CPU", "µs/msg", "lower"),
            ),
            chart=("confirmed_per_s", "delivered_per_s"),
            roles={"listener": listener, "sender": sender},
            layout=layout,
            combine=combine,
            params={
                "size": 128,
                "listeners": listeners,
                "messages": messages,
                "ready_timeout": 90.0,
                "cold": cold,
            },
            quick={"messages": quick},
            timeout=180.0,
            quick_timeout=90.0,
            order=order,
        )
    )


_certified(1, 100_000, 10_000, 45, cold=False)
_certified(1, 100_000, 10_000, 45, cold=True)
_certified(5, 50_000, 5_000, 46, cold=False)
_certified(5, 50_000, 5_000, 46, cold=True)
