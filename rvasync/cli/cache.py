"""``rvasync cache``: a current value cache on the network (the rvcache role).

Retains the last message of every subject matching the PATTERNs and answers
requests for them (``t.request_retained``, ``t.listen(..., retained=True)``).
With ``--store PATH`` the values survive a restart, even a ``kill -9``: a
restarted cache answers at once. A damaged store file stops it with an error
naming the damage. Once listening, a line goes to stderr
(``rvasync cache: retaining ...``). SIGINT / SIGTERM stop it cleanly; SIGHUP
logs that there is nothing to reload (rvasync.cli.signals).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from rvasync.cli import _args
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.cli.signals import handle_signals


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cache",
        help="retain the last message of each subject matching PATTERNs and answer requests",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("patterns", nargs="+", type=_args.listen_subject, metavar="PATTERN")
    p.add_argument("--store", default=None, metavar="PATH", help="crash-safe store file")
    p.add_argument(
        "--max-subjects", type=_args.count, default=None, help="retain at most N subjects"
    )
    p.add_argument(
        "--max-bytes", type=_args.byte_count, default=None, help="retain at most N bytes"
    )
    p.add_argument(
        "--hello-interval",
        type=_args.seconds(),
        default=1.0,
        metavar="S",
        help="seconds between the cache's announcements to other caches (default 1)",
    )
    p.add_argument("--name", type=_args.nonempty, default=None, help="the cache's id")
    add_transport_options(p)
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    from rvasync.cache import CurrentValueCache

    stop = asyncio.Event()
    handle_signals(
        stop,
        command="rvasync cache",
        nothing_to_reload="the patterns and limits are read at start; restart to change them",
    )
    async with open_transport(args, "rvasync cache") as transport:
        cache = CurrentValueCache(
            transport,
            args.patterns,
            store=args.store,
            max_subjects=args.max_subjects,
            max_bytes=args.max_bytes,
            hello_interval=args.hello_interval,
            name=args.name,
        )
        async with cache:
            where = f" from {args.store}" if args.store else ""
            print(
                f"rvasync cache: retaining {', '.join(cache.patterns)} "
                f"({len(cache)} subjects restored{where}; id {cache.id})",
                file=sys.stderr,
                flush=True,
            )
            await stop.wait()
    print("rvasync cache: stopped", file=sys.stderr, flush=True)
    return 0
