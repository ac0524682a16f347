"""``rvasync router --config FILE``: run a routing daemon joining networks multicast cannot span.

It validates the file first (a bad one ends with one line naming the line and
key, status 2), then prints one line once its networks are attached and its
neighbor port is open (``rvasync router NAME ready; neighbors on HOST:PORT``),
so scripts and tests can wait for it, and runs until SIGINT or SIGTERM (SIGHUP
logs that there is nothing to reload; rvasync.cli.signals). Like
``rvasync daemon`` it runs on uvloop when that is installed (``--loop``): a
router's work per message is largely the event loop's socket handling.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from rvasync.cli import _args
from rvasync.cli.signals import handle_signals

if TYPE_CHECKING:
    from rvasync.rvrd import RouterConfig


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "router",
        help="run a routing daemon that joins networks multicast cannot span",
        description="Run a routing daemon (rvrd): attaches to local networks and links to "
        "neighbor routers over TCP, forwarding only subjects listened to on the far side. "
        "The TOML configuration is described in docs/routing.md.",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="TOML configuration file")
    p.add_argument(
        "--check", action="store_true", help="only validate the configuration, then exit"
    )
    p.add_argument(
        "--loop",
        choices=_args.LOOP_CHOICES,
        default="auto",
        help="event loop: uvloop when installed (auto), or force one",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rvasync.rvrd import load_config

    config = load_config(args.config)
    if args.check:
        print(f"{args.config}: router {config.name} configuration is valid", flush=True)
        return 0
    with asyncio.Runner(loop_factory=_args.loop_factory(args.loop)) as runner:
        return runner.run(serve(config))


async def serve(config: RouterConfig) -> int:
    from rvasync.rvrd import Router

    stop = asyncio.Event()
    handle_signals(
        stop,
        command=f"rvasync router {config.name}",
        nothing_to_reload="the configuration is read at start; restart the router to change it",
    )
    router = Router(config)
    await router.start()
    listen = config.listen
    where = "none" if listen is None else f"{listen[0]}:{router.port}"
    print(
        f"rvasync router {config.name} ready; neighbors on {where} (pid {os.getpid()})",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await router.close()
    print(f"rvasync router {config.name} stopped", file=sys.stderr, flush=True)
    return 0
