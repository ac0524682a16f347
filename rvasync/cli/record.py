"""``rvasync record``: capture messages on subjects into a directory Spark can read.

Every message on the SUBJECTs (wildcards allowed) is written to rolling
Parquet files in DIR with a committed-offset marker (see docs/spark.md). A
file is committed when it reaches --roll-size or has been open
--roll-interval seconds; readers only ever see committed files. Runs until
Ctrl-C or SIGTERM (or --count/--duration), then commits what it holds. With
--certified NAME --ledger FILE the recorder is a persistent certified
listener that confirms each message only once it is committed, so nothing
is lost across restarts. Needs pyarrow (pip install 'rvasync[spark]').
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
from typing import Any

from rvasync.cli import _args
from rvasync.cli.send import add_transport_options, open_transport
from rvasync.errors import InvalidArgument, InvalidSubject, NotPermitted

__all__ = ["parse_size", "register"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_size(text: str) -> int:
    """``"64MiB"``, ``"500k"``, ``"1000000"`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (examples: 64MiB, 500k, 1000000)")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be at least 1 byte")
    return size


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "record",
        help="capture messages on SUBJECTs into Parquet files in DIR (for Spark)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("subjects", nargs="+", type=_args.listen_subject, metavar="SUBJECT")
    p.add_argument(
        "--to",
        required=True,
        type=_args.nonempty,
        metavar="DIR",
        dest="directory",
        help="capture directory (created if missing)",
    )
    p.add_argument(
        "--roll-size",
        type=parse_size,
        default=64 * 1024**2,
        metavar="SIZE",
        help="commit the current file at this size (default 64MiB)",
    )
    p.add_argument(
        "--roll-interval",
        type=_args.seconds(),
        default=10.0,
        metavar="S",
        help="commit the current file after S seconds (default 10)",
    )
    p.add_argument(
        "--count",
        type=_args.count,
        default=None,
        help="stop once this many messages were received",
    )
    p.add_argument(
        "--duration", type=_args.seconds(), default=None, metavar="S", help="stop after S seconds"
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show counts and rates on stderr (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--certified",
        type=_args.nonempty,
        metavar="NAME",
        default=None,
        help="record as persistent certified listener NAME (needs --ledger)",
    )
    p.add_argument(
        "--ledger",
        type=_args.nonempty,
        metavar="FILE",
        default=None,
        help="ledger file of the certified listener",
    )
    p.add_argument(
        "--upload",
        type=_args.nonempty,
        metavar="URL",
        default=None,
        help="also copy every committed file, then the marker, to URL (s3://bucket/prefix, "
        "any fsspec URL, or a path), where the cluster reads the capture",
    )
    p.add_argument(
        "--storage-options",
        type=_args.nonempty,
        metavar="JSON",
        default=None,
        help='file system options for --upload, as a JSON object (e.g. \'{"endpoint_override": '
        '"http://127.0.0.1:9000"}\')',
    )
    add_transport_options(p)
    p.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    if args.storage_options is not None and args.upload is None:
        raise InvalidArgument("--storage-options applies to --upload URL")
    if (args.certified is None) != (args.ledger is None):
        raise InvalidArgument(
            "--certified NAME and --ledger FILE go together: a certified recorder keeps its "
            "agreements in the ledger so it can resume after a restart"
        )


def _recorder_class() -> Any:
    try:
        from rvasync.spark.recorder import Recorder
    except ImportError as exc:
        raise InvalidArgument(
            f"rvasync record needs pyarrow ({exc}); install it with: pip install 'rvasync[spark]'"
        ) from None
    return Recorder


@contextlib.asynccontextmanager
async def _certified(transport: Any, args: argparse.Namespace) -> Any:
    if args.certified is None:
        yield transport
        return
    try:
        from rvasync.cmdriver import CmTransport
    except ImportError as exc:
        raise InvalidArgument(f"--certified needs certified delivery support ({exc})") from None
    # require_old: after a crash, senders redeliver what this name had not confirmed.
    try:
        cm = CmTransport(transport, args.certified, ledger=args.ledger, require_old=True)
    except InvalidSubject as exc:
        raise InvalidArgument(f"--certified {args.certified!r}: {exc}") from None
    try:
        await cm.open()
    except OSError as exc:
        with contextlib.suppress(Exception):
            await cm.close()
        reason = exc.strerror or str(exc)
        raise InvalidArgument(f"--ledger {args.ledger!r}: {reason}") from None
    except (InvalidArgument, NotPermitted) as exc:  # the ledger path refused by the driver
        with contextlib.suppress(Exception):
            await cm.close()
        raise type(exc)(f"--ledger: {exc}") from None
    async with cm:
        yield cm


async def run(args: argparse.Namespace) -> int:
    _check(args)
    recorder_class = _recorder_class()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with (
            open_transport(args, "rvasync record") as transport,
            _certified(transport, args) as source,
        ):
            recorder = recorder_class(
                source,
                args.subjects,
                args.directory,
                roll_bytes=args.roll_size,
                roll_interval=args.roll_interval,
                progress=args.progress,
                upload=args.upload,
                storage_options=args.storage_options,
            )
            async with recorder:
                await _confirm_interests(transport)
                print(
                    f"rvasync record: recording {', '.join(args.subjects)} into {args.directory}",
                    file=sys.stderr,
                    flush=True,
                )
                await _until_done(recorder, stop, args)
        stats = recorder.stats
        print(
            f"rvasync record: {stats.received:,} messages received, {stats.committed_rows:,} "
            f"rows in {stats.committed_files:,} committed files in {args.directory}",
            file=sys.stderr,
        )
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0


async def _until_done(recorder: Any, stop: asyncio.Event, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    deadline = None if args.duration is None else loop.time() + args.duration
    failed = asyncio.ensure_future(recorder.wait())
    try:
        while not stop.is_set():
            if args.count is not None and recorder.stats.received >= args.count:
                return
            if deadline is not None and loop.time() >= deadline:
                return
            if failed.done():
                failed.result()  # raises the recorder's error
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05 if args.count else 0.5)
    finally:
        if not failed.done():
            failed.cancel()


async def _confirm_interests(transport: Any) -> None:
    from rvasync.cli.listen import confirm_interests

    await confirm_interests(transport)
