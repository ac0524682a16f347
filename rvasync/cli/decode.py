"""``rvasync decode``: show a message in wire form (a file or stdin) as JSON."""

from __future__ import annotations

import argparse
import sys

from rvasync._wire import MAX_MESSAGE_SIZE
from rvasync.cli import _args
from rvasync.errors import InvalidArgument
from rvasync.jsonform import to_json
from rvasync.message import Message


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("decode", help="print a wire-format message file (or - for stdin) as JSON")
    p.add_argument("path", metavar="FILE", help="file holding one encoded message, or -")
    p.add_argument(
        "--indent", type=_args.indent, default=2, help="JSON indentation, 0..16 (default 2)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # One byte over the largest message is enough to refuse /dev/zero or a huge file.
    limit = MAX_MESSAGE_SIZE + 1
    if args.path == "-":
        data = sys.stdin.buffer.read(limit)
    else:
        try:
            with open(args.path, "rb") as fh:
                data = fh.read(limit)
        except OSError as exc:
            raise InvalidArgument(f"cannot read {args.path!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_MESSAGE_SIZE:
        where = "standard input" if args.path == "-" else repr(args.path)
        raise InvalidArgument(
            f"{where} holds more than one message can ({MAX_MESSAGE_SIZE // 1024**2} MiB)"
        )
    print(to_json(Message.from_bytes(data), indent=args.indent))
    return 0
