"""One rvasync fault-tolerance member in a process of its own, for the failover scenarios.

``python -m benchmarks.systems.rvasync_ft_member --service S --group G
[--weight W] [--heartbeat H] [--activation A] [--name N]`` joins ``G`` with an
``rv.FtMember`` on ``rv.Transport(service=S, network=None)`` (its own in-process
daemon) and speaks the line protocol of :mod:`benchmarks.scenarios.failover`:
JSON lines on stdout (``ready``, ``action``, ``exited``), each with ``t_ns``
from ``CLOCK_MONOTONIC`` taken where the event happens (for ``action``: inside
the member's callback); ``exit`` on stdin, or end of input, withdraws gracefully
and ends the process with status 0.

rvasync is imported inside :func:`main`, so the benchmark's discovery (which
imports every module here) never depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any


def report(event: str, name: str, **values: Any) -> None:
    """One protocol line, timestamped on the host-wide monotonic clock."""
    line = {"event": event, "name": name, "t_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC)}
    sys.stdout.write(json.dumps({**line, **values}) + "\n")
    sys.stdout.flush()


async def member(args: argparse.Namespace) -> None:
    """Join, report actions as they happen, withdraw on ``exit`` or end of input."""
    import rvasync as rv

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def on_action(_: Any, action: Any) -> None:
        report("action", args.name, action=action.name)

    async with (
        rv.Transport(service=args.service, network=None) as transport,
        rv.FtMember(
            transport,
            args.group,
            weight=args.weight,
            heartbeat=args.heartbeat,
            activation=args.activation,
            callback=on_action,
        ),
    ):
        report("ready", args.name, pid=os.getpid())
        while line := (await reader.readline()).decode().strip():
            if line == "exit":
                break
    report("exited", args.name)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the member until told to exit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", default="member")
    parser.add_argument("--weight", type=int, default=50)
    parser.add_argument("--heartbeat", type=float, default=0.3)
    parser.add_argument("--activation", type=float, default=1.0)
    args = parser.parse_args(argv)
    asyncio.run(member(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
