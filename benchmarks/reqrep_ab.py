"""In-run A/B of request/reply latency: the working tree's Python code against a revision's.

Two benchmark runs on a shared VM differ by more than most single changes
move the median, so comparing runs cannot tell whether a change helped. This
runs one requester and one replier process (in-process daemons on a free
service port, 128 B requests, uvloop) and alternates blocks of round trips
between two versions of the code, swapped in place in both processes:

- *new*: the functions and methods of some modules as in the working tree;
- *base*: the same modules as at git revision REV (read with ``git show``).

The replier switches version when a request says so; block order alternates
(base-new, new-base, ...). Host drift then hits both versions alike, and the
figure to read is the median over blocks of (new - base), with how many
blocks new won. An A/A run (REV = HEAD, no change) shows the noise: about
±1 µs here.

Limits: only pure-Python modules are swapped (the compiled ``rvasync_native``
modules are the working tree's in both versions); objects are created once,
by whichever version runs first, so both versions must get along with the
attributes they set; see :class:`Versions` for what is swapped. So REV must
have the same module layout: a revision before the daemon's split into
service / routing / udpdriver (8c77feb and older) cannot be compared this way
(run each tree in processes of its own instead). Usage::

    python -m benchmarks.reqrep_ab REV [--blocks 16] [--block 500] [--reply-poll 0]
        [--modules rvasync.daemon.service,rvasync.transport.network,...]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from benchmarks.procs import free_port

MODULES = (
    "rvasync.daemon.service",
    "rvasync.daemon.routing",
    "rvasync.daemon.udpdriver",
    "rvasync.transport.network",
    "rvasync.protocol.reliable",
    "rvasync.busypoll",
    "rvasync.queues",
)
SUBJECT = "bench.ab"


class Versions:
    """Switches functions and methods between the working tree's code and a base copy's.

    A function's code object is swapped in place (``__code__``, defaults), so
    every reference to it, bound methods and partials made before the switch
    included, runs the selected version. Base code runs with the working
    tree's module globals; a global only the base module has is added to the
    working tree's module. A function whose closure differs between the two
    versions, or that only one of them has, keeps the working tree's code
    (base code does not call a function only the working tree has).
    """

    def __init__(self, base_dir: str, modules: list[str]) -> None:
        self._pairs: list[tuple[types.FunctionType, types.FunctionType]] = []
        self._new: dict[types.FunctionType, tuple[Any, Any, Any]] = {}
        for name in modules:
            new = importlib.import_module(name)
            path = Path(base_dir, *name.split(".")).with_suffix(".py")
            spec = importlib.util.spec_from_file_location("base_" + name.replace(".", "_"), path)
            old = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(old)  # type: ignore[union-attr]
            for attr, value in vars(old).items():
                if attr not in vars(new):
                    setattr(new, attr, value)
            for attr, obj in list(vars(new).items()):
                theirs = vars(old).get(attr)
                if isinstance(obj, types.FunctionType):
                    self._pair(obj, theirs)
                elif isinstance(obj, type) and isinstance(theirs, type):
                    for key, value in vars(theirs).items():
                        only_base = key not in vars(obj)
                        if only_base and isinstance(_function(value), types.FunctionType):
                            setattr(obj, key, value)  # a method only the base code calls
                    for key, mine in list(vars(obj).items()):
                        self._pair(_function(mine), _function(vars(theirs).get(key)))

    def _pair(self, mine: Any, theirs: Any) -> None:
        if not isinstance(mine, types.FunctionType) or not isinstance(theirs, types.FunctionType):
            return
        if mine.__code__.co_freevars != theirs.__code__.co_freevars:
            return
        self._pairs.append((mine, theirs))
        self._new[mine] = (mine.__code__, mine.__defaults__, mine.__kwdefaults__)

    def use(self, version: str) -> None:
        for mine, theirs in self._pairs:
            code, defaults, kwdefaults = (
                self._new[mine]
                if version == "new"
                else (theirs.__code__, theirs.__defaults__, theirs.__kwdefaults__)
            )
            mine.__code__ = code
            mine.__defaults__ = defaults
            mine.__kwdefaults__ = kwdefaults


def _function(obj: Any) -> Any:
    """The function behind a method, static method, class method or property getter."""
    if isinstance(obj, staticmethod | classmethod):
        return obj.__func__
    if isinstance(obj, property):
        return obj.fget
    return obj


async def _replier(port: int, base_dir: str, modules: list[str], ready: Any, stop: Any) -> None:
    import rvasync as rv

    versions = Versions(base_dir, modules)
    async with rv.Transport(service=str(port)) as t:
        listener = t.listen(SUBJECT)
        current = None

        async def echo() -> None:
            nonlocal current
            async for request in listener:
                version = request["version"]
                if version != current:
                    versions.use(version)
                    current = version
                await t.send_reply(rv.Message(fields={"data": request["data"]}), request)

        server = asyncio.create_task(echo())
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.cancel()


async def _requester(
    port: int,
    base_dir: str,
    modules: list[str],
    blocks: int,
    block: int,
    reply_poll: float | None,
    out: Any,
) -> None:
    import rvasync as rv

    versions = Versions(base_dir, modules)
    options = {} if reply_poll is None else {"reply_poll": reply_poll}
    async with rv.Transport(service=str(port), **options) as t:
        msgs = {v: rv.Message(SUBJECT, {"data": b"x" * 128, "version": v}) for v in ("base", "new")}
        for version in ("base", "new") * 3:  # warm-up, both versions
            versions.use(version)
            for _ in range(300):
                await t.send_request(msgs[version], 5)
        clock = time.perf_counter_ns
        samples: dict[str, list[int]] = {"base": [], "new": []}
        diffs = []
        for n in range(blocks):
            medians = {}
            for version in ("base", "new") if n % 2 == 0 else ("new", "base"):
                versions.use(version)
                msg = msgs[version]
                await t.send_request(msg, 5)  # the replier switches on this one
                times = []
                for _ in range(block):
                    start = clock()
                    await t.send_request(msg, 5)
                    times.append(clock() - start)
                samples[version].extend(times)
                medians[version] = statistics.median(times) / 1000
            diffs.append(medians["new"] - medians["base"])
        out.put(
            (
                statistics.median(samples["base"]) / 1000,
                statistics.median(samples["new"]) / 1000,
                diffs,
            )
        )


def _run(fn: Any, *args: Any) -> None:
    import uvloop

    uvloop.run(fn(*args))


def export(rev: str, modules: list[str], target: str) -> None:
    """Write ``modules`` as they are at ``rev`` under ``target`` (same relative paths)."""
    for name in modules:
        rel = Path(*name.split(".")).with_suffix(".py")
        text = subprocess.run(
            ["git", "show", f"{rev}:{rel.as_posix()}"], check=True, capture_output=True
        ).stdout
        dest = Path(target, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reqrep_ab", description=__doc__)
    parser.add_argument("rev", help="git revision of the base version (HEAD for an A/A run)")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--block", type=int, default=500, help="round trips per block")
    parser.add_argument("--modules", default=",".join(MODULES))
    parser.add_argument(
        "--reply-poll",
        type=float,
        default=None,
        help="the requester's rv.Transport(reply_poll=...) (a working tree that has it)",
    )
    args = parser.parse_args(argv)
    modules = [m for m in args.modules.split(",") if m]
    with tempfile.TemporaryDirectory() as base_dir:
        export(args.rev, modules, base_dir)
        port = free_port()
        ctx = mp.get_context("spawn")
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        replier = ctx.Process(target=_run, args=(_replier, port, base_dir, modules, ready, stop))
        replier.start()
        try:
            if not ready.wait(60):
                print("the replier did not start", file=sys.stderr)
                return 1
            requester = ctx.Process(
                target=_run,
                args=(
                    _requester,
                    port,
                    base_dir,
                    modules,
                    args.blocks,
                    args.block,
                    args.reply_poll,
                    out,
                ),
            )
            requester.start()
            base, new, diffs = out.get(timeout=60 + args.blocks * args.block * 0.01)
            requester.join(30)
        finally:
            stop.set()
            replier.join(30)
            if replier.is_alive():
                replier.kill()
    wins = sum(d < 0 for d in diffs)
    print(
        f"p50 base ({args.rev}) {base:.1f} µs, new (working tree) {new:.1f} µs; "
        f"median per-block difference {statistics.median(diffs):+.1f} µs; "
        f"new faster in {wins} of {len(diffs)} blocks"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
