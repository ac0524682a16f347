"""``rvasync dq listen``: the tibrvdqlisten tool, a worker of a distributed queue.

Same arguments as the Rendezvous program (one dash or two: ``-service``,
``-network``, ``-daemon``, ``-cmname``, and the worker and scheduler
parameters ``-workerWeight``, ``-workerTasks``, ``-schedulerWeight``,
``-heartbeat``, ``-activation``) and the same output.
"""

from __future__ import annotations

import argparse
import sys

from rvasync.cli import _args
from rvasync.cli._args import rv_option
from rvasync.cli.cm import DEFAULT_LISTENER
from rvasync.cli.listen import add_count_options, addressed, confirm, confirm_interests, consume
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.cmqdriver import CmQueueTransport
from rvasync.message import Message
from rvasync.queues import Queue
from rvasync.textform import printable

__all__ = ["dq_line", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = _args.tool_group(
        sub, "dq", "distributed queue tools: 'dq listen' (tibrvdqlisten)", __doc__
    )
    listen = tools.add_parser(
        "listen",
        help="take tasks as a worker of a distributed queue (tibrvdqlisten)",
        description="Join the distributed queue -cmname as a worker (and candidate "
        "scheduler), listen to SUBJECTs and print each task as tibrvdqlisten does: "
        "subject, reply subject (none if absent), the message's text form, "
        "'certified= TRUE' with the sequence number, or 'certified= FALSE'.",
    )
    listen.add_argument("subjects", nargs="+", type=_args.listen_subject, metavar="SUBJECT")
    add_transport_options(listen)
    rv_option(listen, "cmname", _args.nonempty, DEFAULT_LISTENER, "the distributed queue's name")
    rv_option(listen, "workerWeight", _args.count, 1, "this worker's weight")
    rv_option(listen, "workerTasks", _args.count, 1, "tasks this worker takes at once")
    rv_option(listen, "schedulerWeight", _args.count, 1, "this member's weight as a scheduler")
    rv_option(listen, "heartbeat", _args.seconds(), 1.0, "scheduler heartbeat, seconds")
    rv_option(listen, "activation", _args.seconds(), 3.5, "scheduler activation, seconds")
    add_count_options(listen)
    listen.set_defaults(handler=run_listen, command="dq listen", command_parser=listen)


def _advisory(msg: Message) -> None:
    """The queue's advisories (scheduler active, inactive, overflow), on stderr.

    tibrvdqlisten does not print them, but an operator starting workers wants
    to see which one schedules, and a script wants to wait for it before it
    sends: tasks sent while no member is the scheduler reach no worker.
    """
    print(
        f"#### RVCM ADVISORY: {printable(msg.subject or '')} \nAdvisory message is: {msg}",
        file=sys.stderr,
        flush=True,
    )


def dq_line(msg: Message) -> str:
    """One tibrvdqlisten line."""
    label = msg.cm
    head = addressed(msg, reply_none=True)
    if label is not None and label.sequence is not None:
        return f"{head}, certified= TRUE, sequence={label.sequence}"
    return f"{head}, certified= {'TRUE' if label is not None else 'FALSE'}"


async def run_listen(args: argparse.Namespace) -> int:
    async with (
        open_transport(args, "rvasync dq listen") as transport,
        CmQueueTransport(
            transport,
            args.cmname,
            worker_weight=args.workerWeight,
            worker_tasks=args.workerTasks,
            scheduler_weight=args.schedulerWeight,
            scheduler_heartbeat=args.heartbeat,
            scheduler_activation=args.activation,
        ) as member,
    ):
        transport.listen(f"_RV.*.RVCM.QUEUE.*.*.{args.cmname}", callback=_advisory)
        queue = Queue(name="rvasync dq listen")
        for subject in args.subjects:
            member.listen(subject, queue=queue, explicit_confirm=True)
        await confirm_interests(transport)
        for subject in args.subjects:
            print(f"rvasync dq listen: Listening to subject {printable(subject)}", flush=True)
        return await consume(queue, args, dq_line, "rvasync dq listen", after=confirm)
