"""``rvasync cm send`` and ``rvasync cm listen``: the tibrvcmsend and tibrvcmlisten tools.

Same arguments as the Rendezvous programs (one dash or two: ``-service``,
``-network``, ``-daemon``, ``-ledger``, ``-cmname``, and for sending
``-interval`` and ``-rounds``) and the same output, so scripts and log
parsers written for them keep working; docs/cli.md lists what is added.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from rvasync.cli import _args
from rvasync.cli._args import rv_option
from rvasync.cli.listen import add_count_options, addressed, confirm, confirm_interests, consume
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.cmdriver import CmTransport
from rvasync.message import Message
from rvasync.queues import Queue
from rvasync.textform import printable, quoted

__all__ = ["cm_line", "register"]

#: The correspondent names tibrvcmsend and tibrvcmlisten use when given none.
DEFAULT_SENDER = "RVCMPUB"
DEFAULT_LISTENER = "RVCMSUB"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = _args.tool_group(
        sub,
        "cm",
        "certified delivery tools: 'cm send' (tibrvcmsend), 'cm listen' (tibrvcmlisten)",
        __doc__,
    )
    _register_send(tools)
    _register_listen(tools)


def _cm_options(p: argparse.ArgumentParser, default_name: str) -> None:
    add_transport_options(p)
    rv_option(p, "ledger", None, None, "file ledger (default: in memory)")
    rv_option(p, "cmname", _args.nonempty, default_name, "reusable correspondent name")


def _register_send(tools: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = tools.add_parser(
        "send",
        help="send a certified message (tibrvcmsend)",
        description="Send MESSAGE, in a DATA field, to SUBJECT as a certified message: "
        "-rounds times, one every -interval seconds (the first after one interval), as "
        "tibrvcmsend does. Then wait until every registered listener has confirmed "
        "everything, at most --linger seconds (tibrvcmsend never exits; with a -ledger "
        "file, what is still unconfirmed is delivered by the next run).",
    )
    p.add_argument("subject", type=_args.certified_subject, metavar="SUBJECT")
    p.add_argument("text", metavar="MESSAGE", help="the text sent in the DATA field")
    _cm_options(p, DEFAULT_SENDER)
    rv_option(p, "interval", _args.seconds(), 1.0, "seconds between rounds")
    rv_option(p, "rounds", _args.count, 10, "messages to send")
    p.add_argument(
        "--linger",
        type=_args.seconds(zero=True),
        default=5.0,
        metavar="S",
        help="after the last round, wait at most S seconds for confirmations (default 5)",
    )
    p.set_defaults(handler=run_send, command="cm send", command_parser=p)


def _register_listen(tools: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = tools.add_parser(
        "listen",
        help="listen for certified messages (tibrvcmlisten)",
        description="Listen to SUBJECTs as a certified listener that asks for old messages "
        "(request old), and print each message as tibrvcmlisten does: subject, reply "
        "subject (none if absent), the message's text form, and whether the sender is "
        "certified with the sequence number, or 'receipt uncertified'.",
    )
    p.add_argument("subjects", nargs="+", type=_args.listen_subject, metavar="SUBJECT")
    _cm_options(p, DEFAULT_LISTENER)
    add_count_options(p)
    p.set_defaults(handler=run_listen, command="cm listen", command_parser=p)


async def run_send(args: argparse.Namespace) -> int:
    msg = Message(args.subject, {"DATA": args.text})
    print(f"Publishing: subject={printable(args.subject)} {quoted(args.text)}", flush=True)
    loop = asyncio.get_running_loop()
    async with (
        open_transport(args, "rvasync cm send") as transport,
        CmTransport(transport, args.cmname, ledger=args.ledger) as cm,
    ):
        print(
            f"rvasync cm send: Sending {quoted(args.text)} to {quoted(args.subject)}",
            file=sys.stderr,
            flush=True,
        )
        for round_number in range(1, args.rounds + 1):
            await asyncio.sleep(args.interval)
            await cm.send(msg.copy())
            print(
                f"rvasync cm send: Success in sending message {round_number}",
                file=sys.stderr,
                flush=True,
            )
        deadline = loop.time() + args.linger
        while loop.time() < deadline and not _all_confirmed(cm, args.subject):
            await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
    return 0


def _all_confirmed(cm: CmTransport, subject: str) -> bool:
    """True once some listener registered and no registered listener is owed anything."""
    listeners = [lst for review in cm.review_ledger(subject) for lst in review.listeners]
    return bool(listeners) and all(lst.unconfirmed == 0 for lst in listeners)


def cm_line(msg: Message) -> str:
    """One tibrvcmlisten line."""
    label = msg.cm
    head = addressed(msg, reply_none=True)
    if label is not None and label.sequence is not None:
        return f"{head}, certified sender=TRUE, sequence={label.sequence}"
    return (
        f"{head}, certified sender={'TRUE' if label is not None else 'FALSE'}, receipt uncertified"
    )


async def run_listen(args: argparse.Namespace) -> int:
    async with (
        open_transport(args, "rvasync cm listen") as transport,
        CmTransport(transport, args.cmname, ledger=args.ledger, require_old=True) as cm,
    ):
        queue = Queue(name="rvasync cm listen")
        for subject in args.subjects:
            cm.listen(subject, queue=queue, explicit_confirm=True)
        await confirm_interests(transport)
        for subject in args.subjects:
            print(f"rvasync cm listen: Listening to subject {printable(subject)}", flush=True)
        return await consume(queue, args, cm_line, "rvasync cm listen", after=confirm)
