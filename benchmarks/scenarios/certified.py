"""Certified (persistent, acknowledged) delivery between processes, end to end.

Layout: ``listeners`` listener processes start first; each opens its durable
end (rvasync: a CM listener of a named correspondent; JetStream: a durable
consumer) and reports ready. Then the sender process opens its end and warms
up: it sends short warm-up messages until every listener has an agreement with
it and has confirmed everything sent so far, so the measured run starts with
the agreements in place (registration is not part of the figure).

On ``go`` the sender sends ``messages`` payloads of ``size`` bytes, each with
the system's certified send (it returns once the system has accepted the
message: in the ledger, on disk with a synchronous ledger, acknowledged by
the server ...), then waits until every listener has confirmed every message.
Listeners count the payloads they receive and confirm each (automatically
when the next is asked for, or with an explicit ack), and run until the runner
stops them.

Figures, from the sender's first send (``CLOCK_MONOTONIC``, comparable across
processes):

- ``confirmed_per_s``: messages per second until the sender knows every
  listener confirmed every message;
- ``delivered_per_s``: deliveries (messages x listeners) per second until the
  last listener received its last message;
- ``sent_per_s``: the sender's own rate of certified sends.

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

#: The polling of :meth:`Certified.confirmed_by` spends at most 1 / POLL_SHARE of the time.
POLL_SHARE = 10
MIN_POLL = 0.002


class Certified(Adapter):
    """Certified delivery: a sender whose messages listeners confirm, one by one."""

    # --- the sender's side --------------------------------------------------------------

    @abc.abstractmethod
    async def open_sender(self, subject: str) -> None:
        """Open the sending end for ``subject``."""

    @abc.abstractmethod
    def prepare(self, subject: str, data: bytes) -> Any:
        """Build, once, what :meth:`send` sends for ``data``."""

    @abc.abstractmethod
    async def send(self, handle: Any) -> None:
        """One certified send; returns once the system has accepted the message."""

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

    def sink(data: bytes) -> None:
        nonlocal count, t_last
        if len(data) == size:
            count += 1
            if count == expected:
                t_last = now_ns()

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
    return {"count": count, "t_last": t_last}


async def _wait_confirmed(client: Certified, listeners: int, timeout: float) -> None:
    """Poll until ``listeners`` listeners confirmed everything, spending at most a
    1/POLL_SHARE of the time on the checks."""
    async with asyncio.timeout(timeout):
        while True:
            t0 = time.perf_counter()
            done = await client.confirmed_by() >= listeners
            if done:
                return
            took = time.perf_counter() - t0
            await asyncio.sleep(max(MIN_POLL, (POLL_SHARE - 1) * took))


async def sender(ctx: WorkerContext) -> dict[str, Any]:
    """Warm up until every listener has an agreement, then send and wait for confirmations."""
    p = ctx.params
    client = ctx.adapter
    assert isinstance(client, Certified)
    listeners, count = int(p["listeners"]), int(p["messages"])
    try:
        await client.open_sender(SUBJECT)
        warm = client.prepare(SUBJECT, WARM_UP)
        try:
            async with asyncio.timeout(float(p["ready_timeout"]) - 10):
                while True:
                    await client.send(warm)
                    await client.flush()
                    await asyncio.sleep(WARM_UP_INTERVAL)
                    if await client.confirmed_by() >= listeners:
                        break
        except TimeoutError:
            raise TimeoutError(
                f"only {await client.confirmed_by()} of {listeners} listeners confirmed the "
                "warm-up messages"
            ) from None
        handle = client.prepare(SUBJECT, payload(int(p["size"])))
        await ctx.ready()
        await ctx.go()
        t_start = now_ns()
        send = client.send
        for i in range(count):
            await send(handle)
            if i % 1000 == 999:
                await asyncio.sleep(0)
        await client.flush()
        t_sent = now_ns()
        await _wait_confirmed(client, listeners, float(p["timeout"]) - 10)
        t_confirmed = now_ns()
    finally:
        await client.close()
    return {"sent": count, "t_start": t_start, "t_sent": t_sent, "t_confirmed": t_confirmed}


def layout(p: Params) -> Sequence[RoleGroup]:
    """Listeners first (passive: they run until the sender has its confirmations)."""
    return (RoleGroup("listener", int(p["listeners"]), passive=True), RoleGroup("sender", 1))


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    """Confirmed, delivered and sent per second, from the first send."""
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
    }


def _certified(listeners: int, messages: int, quick: int, order: int) -> Scenario:
    noun = "listener" if listeners == 1 else "listeners"
    return scenario(
        Scenario(
            name=f"certified-{listeners}{noun}",
            title=f"Certified delivery, 128 B, {listeners} {noun}",
            description=(
                f"One sender process, {listeners} listener process(es), each a durable end "
                "(rvasync: CmTransport over the network transport, in-process daemons; "
                "JetStream: file-stored stream, durable pull consumers acking each message). "
                "'confirmed': messages per second until the sender knows every listener "
                "confirmed every message; 'delivered': messages x listeners per second until "
                "the last receipt. Agreements are set up by a warm-up before timing. Targets: "
                "process ledger >= 100,000 msg/s, file ledger >= 50,000 msg/s."
            ),
            capability="certified",
            primary=Metric("confirmed_per_s", "confirmed", "msg/s", "higher"),
            extras=(
                Metric("delivered_per_s", "delivered", "msg/s", "higher"),
                Metric("sent_per_s", "send rate", "msg/s", "higher"),
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
            },
            quick={"messages": quick},
            timeout=180.0,
            quick_timeout=90.0,
            order=order,
        )
    )


_certified(1, 100_000, 10_000, 45)
_certified(5, 50_000, 5_000, 46)
