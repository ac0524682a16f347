"""``rvasync listen``: print messages on subjects as they arrive (the tibrvlisten role).

Each message is one line, as tibrvlisten prints it: local time, then UTC time
with nine fractional digits, the subject, the reply subject where the message
has one, and the message in its Rendezvous text form
(``2024-05-01 14:00:00 (2024-05-01 12:00:00.000005000Z): subject=A.B,
message={DATA="hi"}``). ``--json`` prints the JSON form of
:mod:`rvasync.jsonform` instead (every field's type and id). Anything taken
from the wire is escaped, so no message can put a control character on the
terminal. Once the daemon has the interests, a line goes to stderr
(``rvasync listen: listening to ...``), so a script can start senders then.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rvasync.cli import _args
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.jsonform import to_json
from rvasync.message import Message
from rvasync.queues import Queue
from rvasync.textform import printable

__all__ = [
    "add_count_options",
    "confirm",
    "confirm_interests",
    "consume",
    "format_message",
    "register",
]


def add_count_options(p: argparse.ArgumentParser) -> None:
    """``--count`` and ``--timeout``, shared by the listening tools."""
    p.add_argument("--count", type=_args.count, default=None, help="exit after this many messages")
    p.add_argument(
        "--timeout",
        type=_args.seconds(),
        default=None,
        metavar="S",
        help="stop after S seconds (exit 1 if --count was not reached)",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "listen",
        help="print messages on SUBJECTs (wildcards allowed) as they arrive",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("subjects", nargs="+", type=_args.listen_subject, metavar="SUBJECT")
    add_count_options(p)
    p.add_argument("--json", action="store_true", help="print each message as one JSON line")
    p.add_argument(
        "--retained",
        action="store_true",
        help="first print what the current value caches retain for the subjects, then live",
    )
    add_transport_options(p)
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with open_transport(args, "rvasync listen") as transport:
        queue = Queue(name="rvasync listen")
        for subject in args.subjects:
            transport.listen(subject, queue=queue, retained=args.retained)
        await confirm_interests(transport)
        print(
            f"rvasync listen: listening to {', '.join(args.subjects)}",
            file=sys.stderr,
            flush=True,
        )
        show: Callable[[Message], str] = to_json if args.json else format_message
        return await consume(queue, args, show, "rvasync listen")


async def consume(
    queue: Queue,
    args: argparse.Namespace,
    show: Callable[[Message], str],
    command: str,
    after: Callable[[Message], Awaitable[None]] | None = None,
) -> int:
    """Print ``show(msg)`` for each message of ``queue`` until ``--count`` or ``--timeout``.

    ``after(msg)``, if given, is awaited once the line is printed (the
    certified tools confirm the message then, as tibrvcmlisten's callback
    returning does). Returns the exit status: 1 when ``--timeout`` ended it
    before ``--count`` messages came (with a line on stderr saying so), else 0.
    """
    loop = asyncio.get_running_loop()
    deadline = None if args.timeout is None else loop.time() + args.timeout
    received = 0
    while args.count is None or received < args.count:
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            break
        try:
            msg = await queue.get(remaining)
        except TimeoutError:
            break
        print(show(msg), flush=True)
        if after is not None:
            await after(msg)
        received += 1
    if args.count is not None and received < args.count:
        print(
            f"{command}: stopped after {args.timeout:g} s with {received} of {args.count} messages",
            file=sys.stderr,
        )
        return 1
    return 0


async def confirm_interests(transport: Any) -> None:
    """Wait until a standalone daemon has processed the LISTENs (one round trip)."""
    from rvasync.transport.tcplink import TcpLink

    link = getattr(transport, "link", None)
    if isinstance(link, TcpLink):
        await link.ping()


async def confirm(msg: Message) -> None:
    """Confirm a certified message to its sender (the listeners of the cm and dq tools)."""
    await msg.listener.confirm(msg)


def timestamps(now_ns: int | None = None) -> str:
    """``2024-05-01 14:00:00 (2024-05-01 12:00:00.000005000Z)``: local, then UTC to the ns."""
    if now_ns is None:
        now_ns = time.time_ns()
    seconds, fraction = divmod(now_ns, 1_000_000_000)
    local = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    utc = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
    return f"{local} ({utc}.{fraction:09d}Z)"


def addressed(msg: Message, *, reply_none: bool = False) -> str:
    """``subject=S, reply=R, message={...}``, the subjects escaped for the terminal.

    ``reply=`` appears only when the message has a reply subject, as in
    tibrvlisten; with ``reply_none`` it is always there (``none`` when
    absent), as tibrvcmlisten and tibrvdqlisten print it.
    """
    parts = [f"subject={printable(msg.subject or '')}"]
    if msg.reply_subject:
        parts.append(f"reply={printable(msg.reply_subject)}")
    elif reply_none:
        parts.append("reply=none")
    parts.append(f"message={msg}")
    return ", ".join(parts)


def format_message(msg: Message, now_ns: int | None = None) -> str:
    """The tibrvlisten line for ``msg``: time stamps, subject, reply, text form."""
    return f"{timestamps(now_ns)}: {addressed(msg)}"
