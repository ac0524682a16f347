"""Callbacks, a shared queue with a limit, queue-group priority, and the limit advisory.

Run: python examples/queues_and_callbacks.py
"""

import asyncio

import rvasync as rv


async def main() -> None:
    transport = rv.process_transport()

    # 1. A callback listener: rvasync dispatches it from its own queue.
    seen: list[str] = []
    done = asyncio.Event()

    async def on_tick(msg: rv.Message) -> None:
        seen.append(msg.subject)
        if len(seen) == 3:
            done.set()

    ticks = transport.listen("TICK.*", callback=on_tick)
    for name in ("A", "B", "C"):
        await transport.send(rv.Message(f"TICK.{name}", {"n": 1}))
    await asyncio.wait_for(done.wait(), timeout=5)
    print("callback saw", seen)
    await ticks.close()

    # 2. Two queues in a group: urgent messages are always taken first.
    urgent = rv.Queue(priority=10, name="urgent")
    normal = rv.Queue(priority=1, name="normal")
    group = rv.QueueGroup(urgent, normal)
    transport.listen("ALERT.>", queue=urgent)
    transport.listen("LOG.>", queue=normal)
    await transport.send(rv.Message("LOG.app", {"line": "started"}))
    await transport.send(rv.Message("ALERT.disk", {"free_pct": 3}))
    first = await group.get(timeout=5)
    second = await group.get(timeout=5)
    print("group order:", first.subject, "then", second.subject)

    # 3. A bounded queue discards, and the process transport says so.
    advisories = transport.listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED")
    small = rv.Queue(limit=2, policy=rv.LimitPolicy.DISCARD_FIRST, name="small")
    transport.listen("BURST", queue=small)
    for n in range(4):
        await transport.send(rv.Message("BURST", {"n": n}))
    kept = [small.poll()["n"], small.poll()["n"]]
    advisory = await advisories.get(timeout=5)
    print("kept", kept, "- advisory for queue", advisory["ADV_DESC"])


if __name__ == "__main__":
    asyncio.run(main())
