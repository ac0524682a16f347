"""One rvasync distributed queue member in a process of its own, for the queue failover scenario.

``python -m benchmarks.systems.rvasync_cmq_member --service S --queue Q --subject SUBJ
--name N [--worker-tasks C] [--scheduler-weight W] [--heartbeat H] [--activation A]``
joins ``Q`` with an ``rv.CmQueueTransport`` on ``rv.Transport(service=S,
network=None)`` (its own in-process daemon), listens for tasks on ``SUBJ``
(automatic confirmation) and speaks the line protocol of
:mod:`benchmarks.scenarios.failover`, JSON lines on stdout with ``t_ns`` from
``CLOCK_MONOTONIC`` taken where the event happens: ``ready``; ``action``
(``ACTIVATE`` / ``DEACTIVATE`` when its SCHEDULER.ACTIVE / INACTIVE advisory
arrives); ``task`` (``n``: the task's number, as its handler starts);
``exited``. End of input (or ``exit``) withdraws and ends the process.

rvasync is imported inside :func:`member`, so the benchmark's discovery never depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from benchmarks.systems.rvasync_ft_member import report


async def member(args: argparse.Namespace) -> None:
    """Join, report role changes and tasks as they happen, withdraw at end of input."""
    import rvasync as rv

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def on_role(msg: Any) -> None:
        active = str(msg.subject).split(".")[5] == "ACTIVE"
        report("action", args.name, action="ACTIVATE" if active else "DEACTIVATE")

    def on_task(msg: Any) -> None:
        report("task", args.name, n=int(msg["n"]))

    async with rv.Transport(service=args.service, network=None) as transport:
        transport.listen(f"_RV.INFO.RVCM.QUEUE.SCHEDULER.*.{args.queue}", callback=on_role)
        queue = rv.CmQueueTransport(
            transport,
            args.queue,
            worker_tasks=args.worker_tasks,
            scheduler_weight=args.scheduler_weight,
            scheduler_heartbeat=args.heartbeat,
            scheduler_activation=args.activation,
        )
        async with queue:
            queue.listen(args.subject, callback=on_task)
            report("ready", args.name, pid=os.getpid())
            while line := (await reader.readline()).decode().strip():
                if line == "exit":
                    break
    report("exited", args.name)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the member until told to exit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--name", default="member")
    parser.add_argument("--worker-tasks", type=int, default=1)
    parser.add_argument("--scheduler-weight", type=int, default=1)
    parser.add_argument("--heartbeat", type=float, default=0.3)
    parser.add_argument("--activation", type=float, default=1.0)
    args = parser.parse_args(argv)
    asyncio.run(member(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
