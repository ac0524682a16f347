"""The ``rvasync`` command: one program, a subcommand per tool.

Each subcommand lives in its own module with ``register(subparsers)``, which
adds its parser and sets ``handler`` to a function of the parsed arguments
returning the exit status (async handlers are run on a fresh event loop).

Bad input never ends in a traceback. Option values are checked at parse time
by the ``type=`` functions of :mod:`rvasync.cli._args` (one line, ``rvasync
CMD: error: argument --OPT: ...``, status 2: the parsers are
:class:`rvasync.cli._args.ArgumentParser`, which prints no usage block); whatever the
handler raises is turned into one line ``rvasync CMD: <reason>`` on stderr by
:func:`main`: an :class:`~rvasync.errors.RvError` (a bad argument, a daemon
that cannot be reached) or an ``OSError`` (a file that cannot be read or
written) with status 2; anything else, which is a bug, with status 1 and
``internal error`` in the line (``RVASYNC_TRACEBACK=1`` shows the traceback).
A closed output pipe (``rvasync listen ... | head``) ends quietly, status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import sys
from collections.abc import Sequence

from rvasync.errors import RvError

__all__ = ["build_parser", "main"]

_COMMAND_MODULES = (
    "info",
    "subject",
    "decode",
    "daemon",
    "send",
    "listen",
    "record",
    "router",
    "passwd",
    "cache",
    "relay",
    "cm",
    "dq",
    "ft",
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    from rvasync.cli._args import ArgumentParser

    parser = ArgumentParser(
        prog="rvasync", description="rvasync messaging tools (Rendezvous model on asyncio)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"rvasync.cli.{name}").register(sub)
    for command_parser in sub.choices.values():
        if command_parser.get_default("command_parser") is None:  # a tool group sets its own
            command_parser.set_defaults(command_parser=command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Reported by the subcommand's parser (its usage, "rvasync CMD: error: ..."),
        # not the top-level one, which knows nothing of the subcommand's options.
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        result = args.handler(args)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except RvError as exc:
        print(f"rvasync {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Whoever read our output went away (``rvasync listen ... | head``): nothing to
        # report. Point stdout at /dev/null so the interpreter's final flush is quiet too.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"rvasync {args.command}: {_os_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("RVASYNC_TRACEBACK"):
            raise
        reason = _one_line(f"{type(exc).__name__}: {exc}")
        print(
            f"rvasync {args.command}: internal error ({reason}); "
            "run again with RVASYNC_TRACEBACK=1 for the traceback",
            file=sys.stderr,
        )
        return 1


def _one_line(text: str) -> str:
    """``text`` as one line with nothing a terminal would act on (it may quote wire data)."""
    from rvasync.textform import printable

    return printable(" ".join(text.split()), backslash=False) or "(no details)"


def _os_error(exc: OSError) -> str:
    """``'/x/y': No such file or directory`` (no ``[Errno 2]``)."""
    reason = exc.strerror or str(exc)
    if isinstance(exc.filename, str | bytes):
        return _one_line(f"{os.fsdecode(exc.filename)!r}: {reason}")
    return _one_line(reason)


if __name__ == "__main__":
    sys.exit(main())
