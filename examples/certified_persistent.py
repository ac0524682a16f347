"""Persistent correspondents: certified messages survive a restart of either side.

JOE_PER sends orders to SUE_PER on ORDERS.NEW; both are persistent
correspondents (a reusable name and a ledger file), each its own process,
meeting through their in-process daemons on a loopback service.

1. SUE_PER starts and listens. JOE_PER starts, anticipates SUE_PER with
   ``add_listener`` (so every order is stored for it, even the first), sends
   orders 1-3, waits until SUE_PER has confirmed them all, and exits.
2. SUE_PER stops. JOE_PER starts again: its ledger continues the sequence
   numbers, and it sends orders 4-6 while nobody is listening; they wait in
   its ledger.
3. SUE_PER starts again: it asks JOE_PER to resume their agreement and
   receives orders 4-6. JOE_PER sees them confirmed and exits.

Run: python examples/certified_persistent.py
(``... listen DIR SERVICE`` and ``... send DIR SERVICE FIRST LAST`` are the roles.)
"""

import asyncio
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.testing import free_port

SUBJECT = "ORDERS.NEW"


async def listen(directory: str, service: str) -> None:
    """SUE_PER: print every order; each is confirmed once the loop asks for the next."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    ledger = Path(directory, "sue_per.ledger")
    async with (
        rv.Transport(service) as transport,
        CmTransport(transport, "SUE_PER", ledger=ledger, require_old=True) as cm,
    ):
        orders = cm.listen(SUBJECT)
        print("ready", flush=True)

        async def consume() -> None:
            async for msg in orders:
                print(
                    f"  SUE_PER got order {msg['order']} (sequence {msg.cm.sequence})", flush=True
                )

        task = asyncio.create_task(consume())
        await stop.wait()
        task.cancel()


async def send(directory: str, service: str, first: int, last: int) -> None:
    """JOE_PER: send orders first..last, then stay until SUE_PER has confirmed them all."""
    ledger = Path(directory, "joe_per.ledger")
    async with (
        rv.Transport(service) as transport,
        CmTransport(transport, "JOE_PER", ledger=ledger) as cm,
    ):
        # What certified delivery tells the sender about its listeners (advisories).
        for pattern in ("_RV.WARN.RVCM.>", "_RV.INFO.RVCM.REGISTRATION.>"):
            transport.listen(pattern, callback=show_advisory)
        await cm.add_listener("SUE_PER", SUBJECT)  # False after the first run: already there
        for order in range(first, last + 1):
            sequence = await cm.send(rv.Message(SUBJECT, {"order": order}))
            print(f"JOE_PER sent order {order} as sequence {sequence}", flush=True)
        async with asyncio.timeout(30):
            while cm.review_ledger(SUBJECT)[0].total_messages:
                await asyncio.sleep(0.05)
        print("JOE_PER: every order is confirmed", flush=True)


def show_advisory(msg: rv.Message) -> None:
    condition = ".".join(msg.subject.split(".")[3:5])
    details = ", ".join(f"{f.name}={f.value}" for f in msg)
    print(f"JOE_PER advisory {condition}: {details}", flush=True)


async def start_listener(
    directory: str, service: str
) -> tuple[asyncio.subprocess.Process, asyncio.Task]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "listen", directory, service, stdout=subprocess.PIPE
    )
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"ready", line

    async def relay() -> None:  # show what SUE_PER prints as it happens
        async for line in proc.stdout:
            sys.stdout.write(line.decode())

    return proc, asyncio.create_task(relay())


async def stop_listener(sue: tuple[asyncio.subprocess.Process, asyncio.Task]) -> None:
    proc, relay = sue
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    await relay


async def run_sender(directory: str, service: str, first: int, last: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "send", directory, service, str(first), str(last)
    )
    assert await asyncio.wait_for(proc.wait(), 60) == 0


async def demo() -> None:
    service = str(free_port())
    with tempfile.TemporaryDirectory() as directory:
        print("1. both running")
        sue = await start_listener(directory, service)
        await run_sender(directory, service, 1, 3)
        await stop_listener(sue)

        print("2. SUE_PER is down; JOE_PER restarts and sends")
        sender = asyncio.create_task(run_sender(directory, service, 4, 6))
        await asyncio.sleep(2)  # JOE_PER holds orders 4-6 for SUE_PER meanwhile

        print("3. SUE_PER restarts and gets what it missed")
        sue = await start_listener(directory, service)
        await sender
        await stop_listener(sue)
    print("done: nothing lost across restarts")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "listen":
        asyncio.run(listen(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "send":
        asyncio.run(send(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    else:
        asyncio.run(demo())


if __name__ == "__main__":
    main()
