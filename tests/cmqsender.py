"""A certified task sender for a distributed queue, in a process of its own (lab tests).

Usage::

    python tests/cmqsender.py --service S --network N --queue Q --count C [--pace SECONDS]

It pre-registers queue ``Q`` as a certified listener of ``JOBS.RUN`` (so no
task is dropped before a scheduler registers), sends ``C`` tasks ``{"n": i}``
``--pace`` seconds apart (fewer if file ``--enough`` appears first: it sends
nothing new once it exists), and reports on stdout, one JSON object per line::

    {"event": "ready"}
    {"event": "sent", "count": N}              (N tasks sent, numbered 0 to N - 1)
    {"event": "unconfirmed", "count": ...}     (every 0.5 s until 0)
    {"event": "confirmed"}                     (every task confirmed by the queue)

It stops when its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rvasync as rv

SUBJECT = "JOBS.RUN"


def report(event: str, **values: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **values}) + "\n")
    sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with rv.Transport(args.service, network=args.network) as transport:
        sender = rv.CmTransport(transport, "LAB.TASK.SENDER")
        await sender.open()
        await sender.add_listener(args.queue, SUBJECT)
        report("ready")
        sent = 0
        while sent < args.count and not (args.enough and Path(args.enough).exists()):
            await sender.send(rv.Message(SUBJECT, {"n": sent}))
            sent += 1
            await asyncio.sleep(args.pace)
        report("sent", count=sent)

        async def watch() -> None:
            while True:
                reviews = sender.review_ledger(SUBJECT)
                left = reviews[0].total_messages if reviews else 0
                if not left:
                    report("confirmed")
                    return
                report("unconfirmed", count=left)
                await asyncio.sleep(0.5)

        watching = asyncio.create_task(watch())
        await reader.read()  # until stdin closes
        watching.cancel()
        await sender.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", default=None)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--pace", type=float, default=0.01)
    parser.add_argument("--enough", help="send nothing new once this file exists")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
