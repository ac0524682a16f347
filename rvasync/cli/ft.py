"""``rvasync ft monitor`` and ``rvasync ft time``: the tibrvftmon and tibrvfttime tools.

``ft time`` is a member of the fault-tolerant group TIBRVFT_TIME_EXAMPLE that,
while active, publishes the time on TIBRVFT_TIME; ``ft monitor`` reports the
group's active members. Same arguments as the Rendezvous programs (one dash
or two) and the same output; the group, intervals and publishing period have
options of their own for trying things faster (docs/cli.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from rvasync.cli import _args
from rvasync.cli._args import rv_option
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.ftdriver import FtMember, FtMonitor
from rvasync.message import Message
from rvasync.protocol.ft import FtAction
from rvasync.rvdatetime import DateTime
from rvasync.textform import printable
from rvasync.transport.network import Transport

__all__ = ["register"]

GROUP = "TIBRVFT_TIME_EXAMPLE"
SUBJECT = "TIBRVFT_TIME"
#: tibrvfttime's fault-tolerance parameters (tibrvftmon's lost interval matches the activation).
WEIGHT = 50
HEARTBEAT = 1.5
ACTIVATION = 4.8
PUBLISH_EVERY = 10.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = _args.tool_group(
        sub,
        "ft",
        "fault tolerance tools: 'ft monitor' (tibrvftmon), 'ft time' (tibrvfttime)",
        __doc__,
    )
    _register_monitor(tools)
    _register_time(tools)


def _group_option(p: argparse.ArgumentParser) -> None:
    rv_option(p, "group", _args.nonempty, GROUP, "the fault-tolerant group")


def _register_monitor(tools: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = tools.add_parser(
        "monitor",
        help="report the active members of a fault-tolerant group (tibrvftmon)",
        description="Monitor the group and print a line at every change of its number of "
        "active members, as tibrvftmon does.",
    )
    add_transport_options(p)
    _group_option(p)
    rv_option(
        p, "lost-interval", _args.seconds(), ACTIVATION, "how long a silent member is still counted"
    )
    p.set_defaults(handler=run_monitor, command="ft monitor", command_parser=p)


def _register_time(tools: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = tools.add_parser(
        "time",
        help="publish the time while active in a fault-tolerant group (tibrvfttime)",
        description="Join the group (weight 50 unless given) and, while active, publish "
        f"{{DATA=<the time>}} on {SUBJECT} every 10 seconds, as tibrvfttime does. The "
        "-ft-* options give the fault-tolerance traffic a transport of its own.",
    )
    p.add_argument("weight_arg", nargs="?", type=_args.weight, metavar="WEIGHT", default=None)
    add_transport_options(p)
    rv_option(p, "ft-service", None, None, "service for fault tolerance")
    rv_option(p, "ft-network", None, None, "network for fault tolerance")
    rv_option(p, "ft-daemon", _args.daemon_param, None, "daemon for fault tolerance")
    rv_option(p, "ft-weight", _args.weight, None, f"weight (default {WEIGHT})")
    _group_option(p)
    rv_option(p, "interval", _args.seconds(), PUBLISH_EVERY, "seconds between time messages")
    rv_option(p, "heartbeat", _args.seconds(), HEARTBEAT, "heartbeat interval, seconds")
    rv_option(p, "activation", _args.seconds(), ACTIVATION, "activation interval, seconds")
    p.set_defaults(handler=run_time, command="ft time", command_parser=p)


async def run_monitor(args: argparse.Namespace) -> int:
    async with open_transport(args, "rvasync ft monitor") as transport:
        monitor = FtMonitor(transport, args.group, lost_interval=args.lost_interval)
        async with monitor:
            print(
                "rvasync ft monitor: Waiting for group information...", file=sys.stderr, flush=True
            )
            previous = 0
            async for count in monitor:
                change = "one deactivated" if previous > count else "one activated"
                group = printable(args.group)
                print(f"Group [{group}]: has {count} active members (after {change}).", flush=True)
                previous = count
    return 0


def _ft_transport(args: argparse.Namespace, main: Any) -> Any:
    """The transport fault tolerance uses: its own when an -ft-* option is given, else ``main``."""
    if args.ft_service is None and args.ft_network is None and args.ft_daemon is None:
        return None
    return Transport(
        args.ft_service, args.ft_network, args.ft_daemon, description="rvasync ft time (ft)"
    )


async def run_time(args: argparse.Namespace) -> int:
    weight = args.weight_arg or args.ft_weight or WEIGHT
    print("rvasync ft time initializing...", flush=True)
    active = asyncio.Event()

    def on_action(member: FtMember, action: FtAction) -> None:
        shown = {FtAction.PREPARE_TO_ACTIVATE: "PREPARE TO ACTIVATE"}.get(action, action.name)
        print(f"####### {shown}: {printable(member.group)}", flush=True)
        if action is FtAction.ACTIVATE:
            active.set()
        elif action is FtAction.DEACTIVATE:
            active.clear()

    async with open_transport(args, "rvasync ft time") as transport:
        print(f"Active group member will publish time every {args.interval:g} seconds.", flush=True)
        print(f"Subject is {SUBJECT}", flush=True)
        print("Inactive will not publish time", flush=True)
        separate = _ft_transport(args, transport)
        ft_transport = transport if separate is None else await separate.open()
        try:
            advisories = ft_transport.listen(f"_RV.*.RVFT.*.{args.group}", callback=_advisory)
            async with FtMember(
                ft_transport,
                args.group,
                weight=weight,
                active_goal=1,
                heartbeat=args.heartbeat,
                activation=args.activation,
                callback=on_action,
            ):
                while True:
                    await asyncio.sleep(args.interval)
                    if active.is_set():
                        now = DateTime(DateTime.now().seconds)
                        await transport.send(Message(SUBJECT, {"DATA": now}))
            await advisories.close()  # pragma: no cover - the loop above ends by a signal
        finally:
            if separate is not None:
                await separate.close()


def _advisory(msg: Message) -> None:
    print(
        f"#### RVFT ADVISORY: {printable(msg.subject or '')} \nAdvisory message is: {msg}",
        file=sys.stderr,
        flush=True,
    )
