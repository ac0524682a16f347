"""Watch a fault tolerance group: print the number of active members at every change.

A monitor only listens: the members of EXAMPLE.TIME.PUB cannot tell it is
there. Its lost interval equals the group's activation interval.

Run the demonstration (two time publishers as separate processes, stopped one
after the other, while this process prints the active count):

    python examples/ft_monitor.py

Watch publishers started with ``examples/ft_time_publisher.py --service 7522``:

    python examples/ft_monitor.py --service 7522
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from pathlib import Path

import rvasync as rv

GROUP = "EXAMPLE.TIME.PUB"
LOST_INTERVAL = 1.0  # the publishers' activation interval


async def watch(service: str) -> None:
    """Print every change of the active count until SIGTERM or Ctrl-C."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with (
        rv.Transport(service=service) as transport,
        rv.FtMonitor(transport, GROUP, lost_interval=LOST_INTERVAL) as monitor,
    ):
        print(f"[monitor] watching {GROUP}", flush=True)

        async def report() -> None:
            async for count in monitor:
                print(f"[monitor] active publishers: {count}", flush=True)

        reporting = asyncio.create_task(report())
        await stop.wait()
        reporting.cancel()


async def until_count(monitor: rv.FtMonitor, value: int) -> None:
    async with asyncio.timeout(15):
        while monitor.active_count != value:
            await asyncio.sleep(0.05)


async def demonstration() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        service = str(sock.getsockname()[1])
    publisher = Path(__file__).resolve().parent / "ft_time_publisher.py"
    changes: list[int] = []
    async with (
        rv.Transport(service=service) as transport,
        rv.FtMonitor(
            transport,
            GROUP,
            lost_interval=LOST_INTERVAL,
            callback=lambda monitor, count: changes.append(count),
        ) as monitor,
    ):

        async def report() -> None:
            async for count in monitor:
                print(f"[monitor] active publishers: {count}", flush=True)

        reporting = asyncio.create_task(report())
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-u", str(publisher), "--service", service, "--name", name
            )
            for name in ("P1", "P2")
        ]
        try:
            await until_count(monitor, 1)
            await asyncio.sleep(LOST_INTERVAL)
            print("--> stopping P1 (if it was the active one, P2 takes over at once)", flush=True)
            processes[0].terminate()
            await processes[0].wait()
            await asyncio.sleep(0.5)
            await until_count(monitor, 1)
            print("--> stopping P2", flush=True)
            processes[1].terminate()
            await until_count(monitor, 0)
        finally:
            for process in processes:
                if process.returncode is None:
                    process.terminate()
                await process.wait()
            reporting.cancel()
    print(f"changes seen by the callback: {changes}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="fault tolerance monitor")
    parser.add_argument("--service", help="watch this service (else: the demo)")
    args = parser.parse_args()
    asyncio.run(demonstration() if args.service is None else watch(args.service))


if __name__ == "__main__":
    main()
