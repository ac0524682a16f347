"""A fault tolerance member or monitor in a process of its own, for real-process tests.

Usage::

    python tests/ftpeer.py member  --service S --network N --group G [--weight W] [--daemon D]
                                   [--heartbeat H] [--activation A] [--name NAME]
    python tests/ftpeer.py monitor --service S --network N --group G --lost L [--name NAME]

It reports on stdout, one JSON object per line, with ``t`` from
``time.monotonic()`` (one clock for every process of the host, so a test can
compare times taken in different processes)::

    {"event": "ready", "name": ..., "pid": ..., "member": <member id>, "t": ...}
    {"event": "action", "name": ..., "action": "ACTIVATE", "t": ...}
    {"event": "count", "name": ..., "count": 1, "t": ...}
    {"event": "exited", "name": ..., "t": ...}

and reads commands on stdin: ``weight N`` sets the member's weight;
``close-transport`` closes the transport under the joined member; ``bulk S``
publishes on ``BULK.X`` in a plain loop of sends for S seconds (no explicit
yield: the library must keep the member heard) and reports
``{"event": "bulk-done", "sent": N, ...}``; ``exit``
(or end of input, so a dead test never leaves peers behind) withdraws
gracefully and ends the process with status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from rvasync.ftdriver import FtMember, FtMonitor
from rvasync.message import Message
from rvasync.protocol.ft import FtAction
from rvasync.transport.network import Transport


def report(event: str, name: str, **values: Any) -> None:
    line = json.dumps({"event": event, "name": name, "t": time.monotonic(), **values})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def commands() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def bulk(transport: Any, seconds: float) -> int:
    """Send new messages in a plain loop for ``seconds``: the program never yields itself
    (reading the clock every 1,000 sends does not give the loop a turn)."""
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(1000):
            await transport.send(Message("BULK.X", {"i": sent}))
            sent += 1
    return sent


async def run_member(args: argparse.Namespace, transport: Any) -> None:
    def on_action(member: FtMember, action: FtAction) -> None:
        report("action", args.name, action=action.name)

    member = FtMember(
        transport,
        args.group,
        weight=args.weight,
        heartbeat=args.heartbeat,
        activation=args.activation,
        callback=on_action,
    )
    reader = await commands()
    async with member:
        report("ready", args.name, pid=os.getpid(), member=member.member_id)
        while line := (await reader.readline()).decode().strip():
            if line == "exit":
                break
            verb, _, value = line.partition(" ")
            if verb == "weight":
                member.weight = int(value)
            elif verb == "close-transport":
                # Pull the transport from under the joined member: no goodbye
                # is possible, only the daemon can tell the others.
                await transport.close()
                report("transport-closed", args.name)
            elif verb == "bulk":
                report("bulk-done", args.name, sent=await bulk(transport, float(value)))
    report("exited", args.name)


async def run_monitor(args: argparse.Namespace, transport: Any) -> None:
    reader = await commands()
    async with FtMonitor(transport, args.group, lost_interval=args.lost) as monitor:
        report("ready", args.name, pid=os.getpid())

        async def counts() -> None:
            async for count in monitor:
                report("count", args.name, count=count)

        counting = asyncio.create_task(counts())
        while line := (await reader.readline()).decode().strip():
            if line == "exit":
                break
        counting.cancel()
    report("exited", args.name)


async def main(args: argparse.Namespace) -> None:
    transport = Transport(service=args.service, network=args.network, daemon=args.daemon)
    async with transport:
        if args.role == "member":
            await run_member(args, transport)
        else:
            await run_monitor(args, transport)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["member", "monitor"])
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", default=None)
    parser.add_argument("--daemon", default=None, help="standalone daemon (default: in-process)")
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", default="peer")
    parser.add_argument("--weight", type=int, default=50)
    parser.add_argument("--heartbeat", type=float, default=0.1)
    parser.add_argument("--activation", type=float, default=0.5)
    parser.add_argument("--lost", type=float, default=0.5)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
