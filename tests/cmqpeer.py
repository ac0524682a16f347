"""A distributed queue member in a process of its own, for real-process tests.

Usage::

    python tests/cmqpeer.py --service S --network N --queue Q --name NAME
        [--worker-weight W] [--worker-tasks C] [--scheduler-weight SW]
        [--heartbeat H] [--activation A] [--work SECONDS] [--complete-time T]

It listens for tasks on ``JOBS.>`` (auto-confirmed when the callback returns)
and reports on stdout, one JSON object per line, ``t`` from time.monotonic()::

    {"event": "ready", "name": ..., "pid": ...}
    {"event": "role", "name": ..., "scheduler": true|false}
    {"event": "start", "name": ..., "n": <task field n>}
    {"event": "done", "name": ..., "n": ...}

It stops when its stdin closes (a dead test never leaves members behind).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from typing import Any

import rvasync as rv


def report(event: str, name: str, **values: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "name": name, "t": time.monotonic(), **values}))
    sys.stdout.write("\n")
    sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with rv.Transport(args.service, network=args.network) as transport:
        queue = rv.CmQueueTransport(
            transport,
            args.queue,
            worker_weight=args.worker_weight,
            worker_tasks=args.worker_tasks,
            scheduler_weight=args.scheduler_weight,
            scheduler_heartbeat=args.heartbeat,
            scheduler_activation=args.activation,
            complete_time=args.complete_time,
        )

        async def work(msg: rv.Message) -> None:
            report("start", args.name, n=msg["n"])
            if args.work:
                await asyncio.sleep(args.work)
            report("done", args.name, n=msg["n"])

        def on_role(msg: rv.Message) -> None:
            report("role", args.name, scheduler=msg.subject.split(".")[5] == "ACTIVE")

        transport.listen("_RV.INFO.RVCM.QUEUE.SCHEDULER.>", callback=on_role)
        queue.listen("JOBS.>", callback=work)
        report("ready", args.name, pid=os.getpid())

        async def stats() -> None:
            while True:
                await asyncio.sleep(1.0)
                report("stats", args.name, held=queue.held, **dataclasses.asdict(queue.stats))

        ticker = asyncio.create_task(stats())
        await reader.read()  # until stdin closes
        ticker.cancel()
        await queue.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", default=None)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--name", default="member")
    parser.add_argument("--worker-weight", type=int, default=1)
    parser.add_argument("--worker-tasks", type=int, default=1)
    parser.add_argument("--scheduler-weight", type=int, default=1)
    parser.add_argument("--heartbeat", type=float, default=0.3)
    parser.add_argument("--activation", type=float, default=1.5)
    parser.add_argument("--complete-time", type=float, default=0.0)
    parser.add_argument("--work", type=float, default=0.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
