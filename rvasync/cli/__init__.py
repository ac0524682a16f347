"""The ``rvasync`` command: one program, a subcommand per tool.

Each subcommand lives in its own module with ``register(subparsers)``, which
adds its parser and sets ``handler`` to a function of the parsed arguments
returning the exit status (async handlers are run on a fresh event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections.abc import Sequence

from rvasync.errors import RvError

__all__ = ["build_parser", "main"]

_COMMAND_MODULES = ("info", "subject", "decode", "daemon", "send", "listen", "record")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="rvasync", description="rvasync messaging tools (Rendezvous model on asyncio)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"rvasync.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except RvError as exc:
        print(f"rvasync {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
