"""Relay agents: draining stored certified messages to a client that comes back.

Three processes on one loopback service: a relay agent (with a ledger file),
a listener behind it (a persistent correspondent with a ledger file) and a
sender (direct, ledger file). After a warm-up that sets up the certified
agreement, the listener disconnects from its agent; the sender sends
``messages`` certified payloads (a plain loop, a new message per send, no
explicit yield), which the agent stores for the absent listener; once the
agent holds them all, the listener reconnects.

Figures, from the listener's reconnect call (``CLOCK_MONOTONIC``, comparable
across processes):

- ``drained_per_s``: stored messages per second until the listener has
  received the last one;
- ``confirmed_per_s``: messages per second until the sender knows the
  listener confirmed all of them (confirmations travel back through the agent).

The roles signal each other with plain messages on a control subject
(repeated until the run ends, so none is missed).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.measure import now_ns, payload
from benchmarks.registry import Metric, Params, RoleGroup, Scenario, scenario
from benchmarks.worker import WorkerContext

SUBJECT = "BENCH.RELAY.DATA"
WARM_UP = b"warm-up"


class RelayDrain(Adapter):
    """A relay agent, a listener behind it, a sender, and a control channel between them."""

    @abc.abstractmethod
    async def open_agent(self) -> None: ...

    @abc.abstractmethod
    async def stored(self) -> int:
        """Agent: how many messages it holds for the listener."""

    @abc.abstractmethod
    async def open_listener(self, subject: str) -> None: ...

    @abc.abstractmethod
    async def consume(self, sink: Callable[[bytes], None]) -> None:
        """Listener: give each payload to ``sink`` (then it is confirmed), until cancelled."""

    @abc.abstractmethod
    async def disconnect(self) -> None:
        """Listener: disconnect from the agent; returns once the disconnect completed."""

    @abc.abstractmethod
    async def reconnect(self) -> None:
        """Listener: start reconnecting (returns at once)."""

    @abc.abstractmethod
    async def open_sender(self, subject: str) -> None: ...

    @abc.abstractmethod
    async def send_new(self, subject: str, data: bytes) -> None:
        """Sender: build a new message carrying ``data`` and send it certified."""

    @abc.abstractmethod
    async def confirmed(self) -> bool:
        """Sender: the listener confirmed every message sent so far."""

    @abc.abstractmethod
    async def announce(self, what: str) -> None:
        """Tell the other roles ``what`` happened (repeated until close)."""

    @abc.abstractmethod
    async def heard(self, what: str, timeout: float) -> None:
        """Wait until another role announced ``what``."""


async def agent(ctx: WorkerContext) -> dict[str, Any]:
    client = ctx.adapter
    assert isinstance(client, RelayDrain)
    count = int(ctx.params["messages"])
    timeout = float(ctx.params["timeout"]) - 10
    try:
        await client.open_agent()
        await ctx.ready()
        await ctx.go()
        async with asyncio.timeout(timeout):
            while await client.stored() < count:
                await asyncio.sleep(0.01)
        await client.announce("stored")
        await ctx.stopped()
    finally:
        await client.close()
    return {}


async def listener(ctx: WorkerContext) -> dict[str, Any]:
    client = ctx.adapter
    assert isinstance(client, RelayDrain)
    size, count = int(ctx.params["size"]), int(ctx.params["messages"])
    timeout = float(ctx.params["timeout"]) - 10
    got = 0
    t_last = 0
    done = asyncio.Event()

    def sink(data: bytes) -> None:
        nonlocal got, t_last
        if len(data) == size:
            got += 1
            if got == count:
                t_last = now_ns()
                done.set()

    try:
        await client.open_listener(SUBJECT)
        task = asyncio.ensure_future(client.consume(sink))
        try:
            await ctx.ready()
            await ctx.go()
            await client.disconnect()
            await client.announce("away")
            await client.heard("stored", timeout)
            t_start = now_ns()
            await client.reconnect()
            async with asyncio.timeout(timeout):
                await done.wait()
            await ctx.stopped()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await client.close()
    return {"count": got, "t_start": t_start, "t_last": t_last}


async def sender(ctx: WorkerContext) -> dict[str, Any]:
    client = ctx.adapter
    assert isinstance(client, RelayDrain)
    count = int(ctx.params["messages"])
    timeout = float(ctx.params["timeout"]) - 10
    try:
        await client.open_sender(SUBJECT)
        async with asyncio.timeout(float(ctx.params["ready_timeout"])):
            while True:
                await client.send_new(SUBJECT, WARM_UP)
                await asyncio.sleep(0.05)
                if await client.confirmed():
                    break
        data = payload(int(ctx.params["size"]))
        await ctx.ready()
        await ctx.go()
        await client.heard("away", timeout)
        # A plain program's loop: a new message per send, no explicit yield.
        send_new = client.send_new
        for _ in range(count):
            await send_new(SUBJECT, data)
        async with asyncio.timeout(timeout):
            while not await client.confirmed():
                await asyncio.sleep(0.01)
        t_confirmed = now_ns()
    finally:
        await client.close()
    return {"t_confirmed": t_confirmed}


def layout(p: Params) -> Sequence[RoleGroup]:
    return (
        RoleGroup("agent", 1, passive=True),
        RoleGroup("listener", 1, passive=True),
        RoleGroup("sender", 1),
    )


def combine(results: Mapping[str, Sequence[Mapping[str, Any]]], p: Params) -> dict[str, float]:
    (lis,) = results["listener"]
    (snd,) = results["sender"]
    count = int(p["messages"])
    if int(lis["count"]) != count:
        raise RuntimeError(f"the listener received {lis['count']} of {count} messages")
    t0 = int(lis["t_start"])
    return {
        "drained_per_s": count / ((int(lis["t_last"]) - t0) / 1e9),
        "confirmed_per_s": count / ((int(snd["t_confirmed"]) - t0) / 1e9),
    }


scenario(
    Scenario(
        name="relay-drain",
        title="Relay agent: drain stored certified messages to a returning client, 128 B",
        description=(
            "A listener behind a relay agent disconnects; a sender sends the messages, which "
            "the agent stores (ledger file); the listener reconnects. 'drained': messages per "
            "second from the reconnect call to the last one received; 'confirmed': until the "
            "sender has every confirmation (back through the agent). Three processes, ledger "
            "files everywhere. Target: drained >= 50,000 msg/s."
        ),
        capability="relay",
        primary=Metric("drained_per_s", "drained", "msg/s", "higher"),
        extras=(Metric("confirmed_per_s", "confirmed", "msg/s", "higher"),),
        chart=("drained_per_s", "confirmed_per_s"),
        roles={"agent": agent, "listener": listener, "sender": sender},
        layout=layout,
        combine=combine,
        params={"size": 128, "messages": 100_000, "ready_timeout": 60.0},
        quick={"messages": 5_000},
        timeout=240.0,
        quick_timeout=90.0,
        order=47,
    )
)
