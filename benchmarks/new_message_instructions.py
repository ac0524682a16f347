"""Instructions per message sent, new message per send versus one prebuilt message re-sent.

Applications build a new ``rv.Message`` for every send; the throughput rows
that re-send one prebuilt message hide what that costs. This counts, with
``valgrind --tool=callgrind``, the instructions a publishing process runs per

* ``new``: ``await t.send(rv.Message("ORDERS.X", {"payload": b"x" * 128, "n": i}))``
* ``prebuilt``: ``await t.send(msg)`` with one message built before the loop
* ``build``: ``rv.Message("ORDERS.X", {...})`` alone (no send), the construction cost
* ``roundtrip``: encode and decode of the 10-field message of the codec rows

each for the in-process daemon and, with ``--standalone``, for a client of a
standalone daemon (``rvasync daemon``, not measured itself). ``--daemon-side``
counts the standalone daemon instead, for ``new`` and ``prebuilt``: its
instructions per message from a sender to one subscriber (a third process,
listening to the subject), the path of the ``pubsub-128B-1sub`` standalone row;
``--subscriber-side`` counts that subscriber instead (it receives with
``async for`` and reads the payload field, as the row's subscriber does). Like
``benchmarks.reqrep_instructions`` it runs a short and a long series and
prints the difference divided by the extra messages, which cancels start-up
and shut-down. Instruction counts, unlike wall-clock rates, do not drift with
the load of a shared machine.

Needs valgrind (``apt-get install valgrind``). Usage::

    python -m benchmarks.new_message_instructions [--short 2000] [--long 12000]
        [--standalone | --daemon-side | --subscriber-side]
        [--modes new,prebuilt,build,roundtrip]
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.procs import free_port
from benchmarks.reqrep_instructions import _collected
from benchmarks.reqrep_instructions import _start_daemon as start_measured_daemon

SENDER = r"""
import asyncio, sys
import uvloop
import rvasync as rv

port, mode, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
daemon = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
payload = b"x" * 128

def ten_fields():
    # The 10-field message of the codec rows (benchmarks/scenarios/micro.py CODEC_FIELDS).
    F = rv.FieldType
    meta = rv.Message()
    meta.add("trader", "alice", type=F.STRING)
    meta.add("desk", 7, type=F.I32)
    msg = rv.Message("bench.codec")
    msg.add("symbol", "RVAS.L", type=F.STRING)
    msg.add("price", 101.25, type=F.F64)
    msg.add("quantity", 1500, type=F.I64)
    msg.add("buy", True, type=F.BOOL)
    msg.add("venue", 42, type=F.U16)
    msg.add("time", rv.DateTime(1_700_000_000, 123_456), type=F.DATETIME)
    msg.add("blob", bytes(range(64)), type=F.OPAQUE)
    msg.add("levels", [100.0 + i * 0.25 for i in range(8)], type=F.F64ARRAY)
    msg.add("tags", ["equity", "lse", "gbp"], type=F.STRINGARRAY)
    msg.add("meta", meta, type=F.MSG)
    return msg

async def main():
    if mode == "build":
        for i in range(count):
            rv.Message("ORDERS.X", {"payload": payload, "n": i})
        return
    if mode == "roundtrip":
        msg = ten_fields()
        for _ in range(count):
            rv.Message.from_bytes(msg.to_bytes())
        return
    t = rv.Transport(service=str(port), daemon=daemon)
    await t.open()
    send = t.send
    if mode == "new":
        for i in range(count):
            await send(rv.Message("ORDERS.X", {"payload": payload, "n": i}))
    else:
        msg = rv.Message("ORDERS.X", {"payload": payload, "n": 0})
        for _ in range(count):
            await send(msg)
    await t.close()

uvloop.run(main())
"""

SUBSCRIBER = r"""
import asyncio, sys
import uvloop
import rvasync as rv

count, daemon = int(sys.argv[1]), sys.argv[2]

async def main():
    t = rv.Transport(service=sys.argv[3], daemon=daemon)
    await t.open()
    listener = t.listen("ORDERS.X")
    # The daemon has the interest once a message of this process comes back.
    await t.send(rv.Message("ORDERS.X", {"ready": True}))
    await listener.get(600)
    print("ready", flush=True)
    got = 0
    while got < count:
        await listener.get(600)
        got += 1
    print(got, flush=True)
    await t.close()

uvloop.run(main())
"""

#: The subscriber of the pubsub rows: ``async for`` on the listener, the payload field read.
ITERATING_SUBSCRIBER = r"""
import asyncio, sys
import uvloop
import rvasync as rv

count, daemon = int(sys.argv[1]), sys.argv[2]

async def main():
    t = rv.Transport(service=sys.argv[3], daemon=daemon)
    await t.open()
    listener = t.listen("ORDERS.X")
    await t.send(rv.Message("ORDERS.X", {"ready": True}))
    await listener.get(600)
    print("ready", flush=True)
    got = 0
    async for msg in listener:
        msg["payload"]
        got += 1
        if got >= count:
            break
    print(got, flush=True)
    await t.close()

uvloop.run(main())
"""

COLLECTED = re.compile(r"Collected : (\d+)")
MODES = ("new", "prebuilt", "build", "roundtrip")


def _start_daemon(port: int) -> subprocess.Popen[bytes]:
    """A standalone daemon on ``port``, returned once it accepts connections."""
    argv = [sys.executable, "-m", "rvasync", "daemon", "--host", "127.0.0.1", "--listen", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the standalone daemon exited at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the daemon did not listen on {port} within 60 s")


def instructions(mode: str, count: int, workdir: Path, daemon: str) -> int:
    """Instructions the sender process ran for ``count`` messages of ``mode`` (whole process)."""
    script = workdir / "sender.py"
    script.write_text(SENDER)
    port = str(free_port(socket.SOCK_DGRAM))
    out = workdir / f"callgrind.{mode}.{count}.out"
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(script),
        port,
        mode,
        str(count),
        daemon,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the {mode} sender failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def daemon_instructions(mode: str, count: int, workdir: Path, measured: str = "daemon") -> int:
    """Instructions a standalone daemon (``measured="daemon"``) or the subscriber
    (``"subscriber"``) ran while ``count`` messages of ``mode`` went from a sender
    through the daemon to one subscriber (whole process; the others are not measured)."""
    sender = workdir / "sender.py"
    sender.write_text(SENDER)
    subscriber = workdir / "subscriber.py"
    subscriber.write_text(SUBSCRIBER if measured == "daemon" else ITERATING_SUBSCRIBER)
    service = str(free_port(socket.SOCK_DGRAM))
    daemon_port = free_port()
    where = f"127.0.0.1:{daemon_port}"
    out = workdir / f"callgrind.{measured}.{mode}.{count}.out"
    daemon = start_measured_daemon(daemon_port, measured == "daemon", out)
    sub: subprocess.Popen[str] | None = None
    sub_argv = [sys.executable, str(subscriber), str(count), where, service]
    if measured != "daemon":
        sub_argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *sub_argv]
    try:
        sub = subprocess.Popen(
            sub_argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert sub.stdout is not None and sub.stderr is not None
        if sub.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the subscriber did not start: {sub.stderr.read()}")
        done = subprocess.run(
            [sys.executable, str(sender), service, mode, str(count), where],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the sender failed:\n{done.stderr[-2000:]}")
        got = sub.stdout.readline().strip()
        sub.wait(900)
        if got != str(count):
            raise RuntimeError(f"the subscriber got {got!r} of {count}: {sub.stderr.read()}")
        if measured != "daemon":
            return _collected(sub.stderr.read(), "subscriber")
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(300)
        assert daemon.stderr is not None
        return _collected(daemon.stderr.read(), "daemon")
    finally:
        for proc in (sub, daemon):
            if proc is not None and proc.poll() is None:
                proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=2000, help="messages of the short run")
    parser.add_argument("--long", type=int, default=12000, help="messages of the long run")
    parser.add_argument(
        "--standalone", action="store_true", help="send through a standalone daemon"
    )
    parser.add_argument(
        "--daemon-side",
        action="store_true",
        help="count a standalone daemon passing the messages to one subscriber (new, prebuilt)",
    )
    parser.add_argument(
        "--subscriber-side",
        action="store_true",
        help="count the subscriber of --daemon-side's layout (new, prebuilt)",
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}"
    )
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("--short must be positive and below --long")
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes: {', '.join(unknown)}")
    if args.daemon_side or args.subscriber_side:
        if not set(modes) <= {"new", "prebuilt"}:
            parser.error(
                "--daemon-side and --subscriber-side count the modes new and prebuilt only"
            )
        measured = "daemon" if args.daemon_side else "subscriber"
        with tempfile.TemporaryDirectory() as tmp:
            for mode in modes:
                short = daemon_instructions(mode, args.short, Path(tmp), measured)
                long = daemon_instructions(mode, args.long, Path(tmp), measured)
                per = (long - short) / (args.long - args.short)
                where = "standalone daemon" if args.daemon_side else "standalone, subscriber"
                print(f"{mode} ({where}): {per:,.0f} instructions per message", flush=True)
        return 0
    daemon_proc: subprocess.Popen[bytes] | None = None
    daemon = ""
    try:
        if args.standalone:
            daemon_port = free_port()
            daemon_proc = _start_daemon(daemon_port)
            daemon = f"127.0.0.1:{daemon_port}"
        with tempfile.TemporaryDirectory() as tmp:
            for mode in modes:
                short = instructions(mode, args.short, Path(tmp), daemon)
                long = instructions(mode, args.long, Path(tmp), daemon)
                per = (long - short) / (args.long - args.short)
                where = "standalone" if args.standalone else "in-process"
                print(f"{mode} ({where}): {per:,.0f} instructions per message", flush=True)
    finally:
        if daemon_proc is not None:
            daemon_proc.send_signal(signal.SIGTERM)
            try:
                daemon_proc.wait(30)
            except subprocess.TimeoutExpired:
                daemon_proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
