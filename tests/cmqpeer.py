"""A distributed queue member in a process of its own, for real-process tests.

Usage::

    python tests/cmqpeer.py --service S --network N --queue Q --name NAME
        [--worker-weight W] [--worker-tasks C] [--scheduler-weight SW]
        [--heartbeat H] [--activation A] [--work SECONDS] [--complete-time T] [--quiet]

It listens for tasks on ``JOBS.>`` (auto-confirmed when the callback returns)
and reports on stdout, one JSON object per line, ``t`` from time.monotonic()::

    {"event": "ready", "name": ..., "pid": ...}
    {"event": "role", "name": ..., "scheduler": true|false}
    {"event": "start", "name": ..., "n": <task field n>}
    {"event": "done", "name": ..., "n": ...}
    {"event": "net", "name": ..., "datagrams_sent": ..., ...}   (on SIGUSR1)

It stops when its stdin closes (a dead test never leaves members behind).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any

import rvasync as rv
from rvasync.daemon.engine import running_in_process_daemon


def net_counters() -> dict[str, int]:
    """Datagrams and bytes this process's in-process daemon sent and received so far."""
    totals = dict.fromkeys(
        ("datagrams_sent", "bytes_sent", "datagrams_received", "bytes_received", "own",
         "retransmitted", "naks_sent", "lost_inbound"), 0
    )  # fmt: skip
    daemon = running_in_process_daemon()
    for endpoint in daemon.services.values() if daemon is not None else ():
        stats = endpoint.core.stats
        totals["datagrams_sent"] += stats.datagrams_sent
        totals["bytes_sent"] += stats.bytes_sent
        totals["datagrams_received"] += stats.datagrams_received
        totals["bytes_received"] += stats.bytes_received
        totals["own"] += endpoint.counters.own_datagrams
        totals["retransmitted"] += stats.datagrams_retransmitted
        totals["naks_sent"] += stats.naks_sent
        totals["lost_inbound"] += stats.datagrams_lost_inbound
    return totals


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
            if args.quiet:
                return  # counting CPU and datagrams per task: no report per task
            report("start", args.name, n=msg["n"])
            if args.work:
                await asyncio.sleep(args.work)
            report("done", args.name, n=msg["n"])

        def on_role(msg: rv.Message) -> None:
            report("role", args.name, scheduler=msg.subject.split(".")[5] == "ACTIVE")

        transport.listen("_RV.INFO.RVCM.QUEUE.SCHEDULER.>", callback=on_role)
        # SIGUSR1: report the network counters now (tests/cmq_bench.py counts datagrams).
        loop.add_signal_handler(signal.SIGUSR1, lambda: report("net", args.name, **net_counters()))
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
    parser.add_argument("--quiet", action="store_true", help="no start/done events")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    profile_to = os.environ.get("CMQPEER_PROFILE_" + arguments.name.upper())
    if profile_to:
        # tests/cmq_bench.py's profiling aid: CMQPEER_PROFILE_<NAME>=file.prof
        import cProfile

        # CPU time, not wall time: a sendto that wakes a peer which then takes the
        # core is not this process's cost.
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(asyncio.run, main(arguments))
        profiler.dump_stats(profile_to)
    else:
        asyncio.run(main(arguments))
