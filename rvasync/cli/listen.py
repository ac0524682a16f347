"""``rvasync listen``: print messages on subjects as they arrive (the tibrvlisten role).

Each message is one line: local time, UTC time, subject, reply subject if any,
and the fields (``name=value``, typed values marked where the text alone would
not say). ``--json`` prints the JSON form of :mod:`rvasync.jsonform` instead.
Once the daemon has the interests, a line goes to stderr
(``rvasync listen: listening to ...``), so a script can start senders then.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from typing import Any

from rvasync.cli import _args
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.fieldtypes import FieldType
from rvasync.jsonform import to_json
from rvasync.message import Message
from rvasync.queues import Queue

__all__ = ["format_message", "register"]

_PLAIN_TYPES = {FieldType.STRING, FieldType.I64, FieldType.F64, FieldType.MSG}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "listen",
        help="print messages on SUBJECTs (wildcards allowed) as they arrive",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("subjects", nargs="+", type=_args.listen_subject, metavar="SUBJECT")
    p.add_argument("--count", type=_args.count, default=None, help="exit after this many messages")
    p.add_argument(
        "--timeout",
        type=_args.seconds(),
        default=None,
        metavar="S",
        help="stop after S seconds (exit 1 if --count was not reached)",
    )
    p.add_argument("--json", action="store_true", help="print each message as one JSON line")
    p.add_argument(
        "--retained",
        action="store_true",
        help="first print what the current value caches retain for the subjects, then live",
    )
    add_transport_options(p)
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    deadline = None if args.timeout is None else loop.time() + args.timeout
    received = 0
    async with open_transport(args, "rvasync listen") as transport:
        queue = Queue(name="rvasync listen")
        for subject in args.subjects:
            transport.listen(subject, queue=queue, retained=args.retained)
        await _confirm_interests(transport)
        print(
            f"rvasync listen: listening to {', '.join(args.subjects)}",
            file=sys.stderr,
            flush=True,
        )
        while args.count is None or received < args.count:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            try:
                msg = await queue.get(remaining)
            except TimeoutError:
                break
            print(to_json(msg) if args.json else format_message(msg), flush=True)
            received += 1
    if args.count is not None and received < args.count:
        print(
            f"rvasync listen: stopped after {args.timeout:g} s with {received} of "
            f"{args.count} messages",
            file=sys.stderr,
        )
        return 1
    return 0


async def _confirm_interests(transport: Any) -> None:
    """Wait until a standalone daemon has processed the LISTENs (one round trip)."""
    from rvasync.transport.tcplink import TcpLink

    link = getattr(transport, "_link", None)
    if isinstance(link, TcpLink):
        await link.ping()


def format_message(msg: Message, now: dt.datetime | None = None) -> str:
    """One tibrvlisten-style line for ``msg``."""
    moment = now or dt.datetime.now(dt.UTC)
    local = moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    utc = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    parts = [f"subject={msg.subject}"]
    if msg.reply_subject:
        parts.append(f"reply={msg.reply_subject}")
    parts.append(f"message={_fields(msg)}")
    return f"{local} ({utc}): " + ", ".join(parts)


def _fields(msg: Message) -> str:
    items = []
    for field in msg:
        label = field.name if field.name is not None else f"#{field.id}"
        typed = "" if field.type in _PLAIN_TYPES else f":{field.type.name}"
        items.append(f"{label}{typed}={_value(field.type, field.value)}")
    return "{" + " ".join(items) + "}"


def _value(ftype: FieldType, value: Any) -> str:
    if ftype is FieldType.MSG:
        return _fields(value)
    if ftype is FieldType.MSGARRAY:
        return "[" + " ".join(_fields(m) for m in value) + "]"
    if ftype is FieldType.STRING:
        return json.dumps(value, ensure_ascii=False)
    if ftype is FieldType.STRINGARRAY:
        return json.dumps(list(value), ensure_ascii=False)
    if ftype in (FieldType.OPAQUE, FieldType.XML):
        return value.hex() if len(value) <= 64 else f"<{len(value)} bytes>"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
