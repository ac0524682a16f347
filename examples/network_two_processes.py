"""Two processes talking through their in-process daemons on a loopback service.

The parent starts a child process (this same file with ``--child``). Each
opens ``rv.Transport(service)``: no daemon to run, each program carries its
own, and the two daemons meet on the service's UDP port over loopback.

- The child answers price requests on PRICE.REQUEST and counts TICK messages.
- The parent asks for two prices (request/reply across processes), publishes
  100 ticks, then asks the child how many it received, and tells it to stop.

Run: python examples/network_two_processes.py
"""

import asyncio
import subprocess
import sys

import rvasync as rv
from rvasync.testing import free_port

PRICES = {"ACME": 101.25, "GLOBEX": 47.5}


async def child(service: str) -> None:
    async with rv.Transport(service, description="pricing child") as t:
        requests = t.listen("PRICE.REQUEST")
        ticks = t.listen("TICK")
        control = t.listen("CONTROL.>")
        print("ready", flush=True)  # the parent waits for this line
        count = 0

        async def count_ticks() -> None:
            nonlocal count
            async for _ in ticks:
                count += 1

        async def answer() -> None:
            async for request in requests:
                symbol = request["symbol"]
                reply = rv.Message(fields={"symbol": symbol, "price": PRICES.get(symbol, 0.0)})
                await t.send_reply(reply, request)

        tasks = [asyncio.create_task(count_ticks()), asyncio.create_task(answer())]
        async for command in control:
            if command.subject == "CONTROL.COUNT":
                await t.send_reply(rv.Message(fields={"ticks": count}), command)
            elif command.subject == "CONTROL.STOP":
                break
        for task in tasks:
            task.cancel()


async def parent() -> None:
    service = str(free_port())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", service, stdout=subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip() == b"ready", line
        async with rv.Transport(service, description="parent") as t:
            for symbol in ("ACME", "GLOBEX"):
                reply = await t.send_request(
                    rv.Message("PRICE.REQUEST", {"symbol": symbol}), timeout=5
                )
                print(f"{reply['symbol']}: {reply['price']}")

            await t.send_many([rv.Message("TICK", {"n": n}) for n in range(100)])
            for _ in range(50):  # ticks travel asynchronously: ask until all are counted
                counted = await t.send_request(rv.Message("CONTROL.COUNT"), timeout=5)
                if counted["ticks"] == 100:
                    break
                await asyncio.sleep(0.02)
            print(f"the child received {counted['ticks']} ticks")
            await t.send(rv.Message("CONTROL.STOP"))
        await asyncio.wait_for(proc.wait(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"child exited with status {proc.returncode}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        asyncio.run(child(sys.argv[2]))
    else:
        asyncio.run(parent())
