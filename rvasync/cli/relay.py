"""``rvasync relay``: run a relay agent (certified delivery for intermittent clients).

The agent answers to NAME on the network: CM transports created with
``relay_agent=NAME`` find it there and send all their certified traffic
through it; it stores inbound messages for clients that are disconnected
(in the ledger file, so they survive a restart of the agent) and delivers
them when they reconnect. It prints one line once it serves
(``rvasync relay: NAME serving ...``) and runs until SIGINT/SIGTERM (SIGHUP logs
that there is nothing to reload; rvasync.cli.signals).
A damaged ledger, or another running agent of the same name, is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys

from rvasync.cli.send import add_transport_options, open_transport
from rvasync.cli.signals import handle_signals

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "relay",
        help="run a relay agent NAME for intermittently connected certified transports",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("name", type=_relay_name, metavar="NAME")
    p.add_argument(
        "--ledger",
        default=None,
        metavar="PATH",
        help="the agent's ledger file (default: none, everything stored is lost at exit)",
    )
    p.add_argument(
        "--sync-ledger", action="store_true", help="fsync every ledger write (power-cut safety)"
    )
    p.add_argument(
        "--reply-lifetime",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="how long replies to a client's request are relayed (default 3600)",
    )
    add_transport_options(p)
    p.set_defaults(handler=run)


def _relay_name(value: str) -> str:
    from rvasync.errors import RvError
    from rvasync.protocol.cm.names import check_correspondent_name

    try:
        return check_correspondent_name(value, what="relay agent name")
    except RvError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds < math.inf):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {value!r}")
    return seconds


async def run(args: argparse.Namespace) -> int:
    from rvasync.protocol.relay import RelayTiming
    from rvasync.relaydriver import RelayAgent

    timing = None
    if args.reply_lifetime is not None:
        timing = RelayTiming(reply_lifetime=args.reply_lifetime)
    stop = asyncio.Event()
    handle_signals(
        stop,
        command=f"rvasync relay {args.name}",
        nothing_to_reload="the agent's settings are read at start; restart it to change them",
    )
    async with open_transport(args, f"rvasync relay {args.name}") as transport:
        agent = RelayAgent(
            transport,
            args.name,
            ledger=args.ledger,
            sync_ledger=args.sync_ledger,
            timing=timing,
        )
        await agent.start()
        try:
            ledger = f" ledger {args.ledger}" if args.ledger else " (no ledger)"
            print(f"rvasync relay: {args.name} serving{ledger} (pid {os.getpid()})", flush=True)
            await stop.wait()
        finally:
            await agent.close()
    print(f"rvasync relay: {args.name} stopped", file=sys.stderr, flush=True)
    return 0
