"""A fault-tolerant time publisher: three copies run, one publishes, another takes over.

Each copy is a member of the fault tolerance group EXAMPLE.TIME.PUB with an
active goal of one. Only the active copy publishes the time on EXAMPLE.TIME;
the others wait. When the active copy dies, the next one in line activates
after the activation interval; when it exits cleanly, the next one takes over
at once.

Run the demonstration (three publishers and a monitor as separate processes
on a free loopback service; the active publisher is killed with SIGKILL, then
its successor is stopped cleanly):

    python examples/ft_time_publisher.py

Run one publisher yourself (start two or three, in several terminals, then
stop or kill them and watch the others take over):

    python examples/ft_time_publisher.py --service 7522 --name A
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from pathlib import Path

import rvasync as rv

GROUP = "EXAMPLE.TIME.PUB"
SUBJECT = "EXAMPLE.TIME"
HEARTBEAT = 0.3  # seconds; a little under a third of the activation interval
ACTIVATION = 1.0  # the longest interruption of service accepted after a crash
PUBLISH_EVERY = 0.25


async def publisher(service: str, name: str, weight: int) -> None:
    """One copy: publishes the time while active, until SIGTERM or Ctrl-C."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    active = asyncio.Event()

    def on_action(member: rv.FtMember, action: rv.FtAction) -> None:
        print(f"[{name}] {action.name}", flush=True)
        if action is rv.FtAction.ACTIVATE:
            active.set()
        elif action is rv.FtAction.DEACTIVATE:
            active.clear()

    async with (
        rv.Transport(service=service) as transport,
        rv.FtMember(
            transport,
            GROUP,
            weight=weight,
            heartbeat=HEARTBEAT,
            activation=ACTIVATION,
            callback=on_action,
        ),
    ):
        print(f"[{name}] joined {GROUP} (pid {os.getpid()}), waiting in reserve", flush=True)
        while not stop.is_set():
            if active.is_set():
                msg = rv.Message(
                    SUBJECT, {"time": rv.DateTime.now(), "publisher": name, "pid": os.getpid()}
                )
                await transport.send(msg)
            try:
                await asyncio.wait_for(stop.wait(), PUBLISH_EVERY)
            except TimeoutError:
                pass
    print(f"[{name}] left the group", flush=True)


# -- the demonstration ---------------------------------------------------------


def free_service() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-u", *args)


async def next_publisher(times: rv.Listener, not_from: set[str]) -> tuple[str, int]:
    """Wait for a time message from a publisher other than ``not_from``."""
    async with asyncio.timeout(15):
        while True:
            msg = await times.get()
            if msg["publisher"] not in not_from:
                return msg["publisher"], msg["pid"]


async def demonstration() -> None:
    service = free_service()
    here = Path(__file__).resolve().parent
    print(f"demo on loopback service {service}: three publishers and a monitor", flush=True)
    monitor = await spawn(str(here / "ft_monitor.py"), "--service", service)
    publishers = {
        name: await spawn(__file__, "--service", service, "--name", name) for name in "ABC"
    }
    try:
        async with (
            rv.Transport(service=service) as transport,
            transport.listen(SUBJECT) as times,
        ):
            first, pid = await next_publisher(times, set())
            print(f"--> {first} publishes; killing it with SIGKILL", flush=True)
            killed_at = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            second, _ = await next_publisher(times, {first})
            took = time.monotonic() - killed_at
            print(f"--> {second} took over {took:.2f} s after the kill", flush=True)
            print(f"--> stopping {second} cleanly", flush=True)
            stopped_at = time.monotonic()
            publishers[second].terminate()
            third, _ = await next_publisher(times, {first, second})
            took = time.monotonic() - stopped_at
            print(f"--> {third} took over {took:.2f} s after the clean exit", flush=True)
    finally:
        for process in [*publishers.values(), monitor]:
            if process.returncode is None:
                process.terminate()
        for process in [*publishers.values(), monitor]:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
    print("demo finished", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="fault-tolerant time publisher")
    parser.add_argument("--service", help="run one publisher on this service (else: the demo)")
    parser.add_argument("--name", default=f"pid{os.getpid()}")
    parser.add_argument("--weight", type=int, default=50)
    args = parser.parse_args()
    if args.service is None:
        asyncio.run(demonstration())
    else:
        asyncio.run(publisher(args.service, args.name, args.weight))


if __name__ == "__main__":
    main()
