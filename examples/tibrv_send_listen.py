"""tibrvsend and tibrvlisten, ported to rvasync: the same arguments, the same output.

The two sample programs every Rendezvous installation ships, written against
rvasync's API line for line (docs/migrating-from-rendezvous.md maps each call):

    python examples/tibrv_send_listen.py listen [-service S] [-network N] [-daemon D] SUBJECT...
    python examples/tibrv_send_listen.py send [-service S] [-network N] [-daemon D] SUBJECT TEXT...

``listen`` prints ``tibrvlisten: Listening to subject X`` for each subject,
then one line per message: local time, UTC time, subject, reply subject when
there is one, and the message's text form (``str(msg)``); it runs until
Ctrl-C. ``send`` publishes each TEXT in a message of its own, in a field
named DATA, printing ``Publishing: subject=S "TEXT"`` first.

Run with no arguments for a demonstration: a standalone daemon on a free
loopback port, a listener process and a sender process through it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import rvasync as rv

WAIT = 30.0


def options(argv: list[str], what: str) -> argparse.Namespace:
    """The tibrv programs' options: -service, -network, -daemon, then the arguments."""
    parser = argparse.ArgumentParser(prog=f"tibrv{what}", allow_abbrev=False)
    parser.add_argument("-service", default=None)
    parser.add_argument("-network", default=None)
    parser.add_argument("-daemon", default=None)
    parser.add_argument("subject")
    parser.add_argument("rest", nargs="+" if what == "send" else "*")
    return parser.parse_args(argv)


def time_strings() -> tuple[str, str]:
    """tibrvMsg_GetCurrentTimeString: local time, and UTC with nanoseconds."""
    now = time.time_ns()
    seconds, fraction = divmod(now, 1_000_000_000)
    local = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    gmt = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"
    return local, gmt


async def tibrvlisten(argv: list[str]) -> None:
    args = options(argv, "listen")
    async with rv.Transport(
        args.service, args.network, args.daemon, description="tibrvlisten"
    ) as t:
        queue = rv.Queue()  # TIBRV_DEFAULT_QUEUE
        for subject in [args.subject, *args.rest]:
            print(f"tibrvlisten: Listening to subject {subject}", flush=True)
            t.listen(subject, queue=queue)
        async for msg in queue:  # while (tibrvQueue_Dispatch(...) == TIBRV_OK)
            local, gmt = time_strings()
            if msg.reply_subject:
                print(
                    f"{local} ({gmt}): subject={msg.subject}, reply={msg.reply_subject}, "
                    f"message={msg}",
                    flush=True,
                )
            else:
                print(f"{local} ({gmt}): subject={msg.subject}, message={msg}", flush=True)


async def tibrvsend(argv: list[str]) -> None:
    args = options(argv, "send")
    async with rv.Transport(args.service, args.network, args.daemon, description="tibrvsend") as t:
        message = rv.Message(args.subject)
        for text in args.rest:
            print(f'Publishing: subject={args.subject} "{text}"', flush=True)
            message["DATA"] = text  # tibrvMsg_UpdateString: adds the field the first time
            await t.send(message)


# -- the demonstration ---------------------------------------------------------------------


def run_program(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", __file__, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def read_line(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    if time.monotonic() > deadline:
        raise TimeoutError("the demonstration took too long")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("the listener ended early")
    return line.rstrip("\n")


async def demonstration() -> None:
    daemon = rv.Daemon(listen=0)  # an rvd for the two programs, on a free loopback port
    await daemon.start()
    where = f"127.0.0.1:{daemon.listen_port}"
    print(f"demo: a daemon on {where}, tibrvlisten and tibrvsend through it", flush=True)
    listener = run_program("listen", "-daemon", where, "DEMO.>")
    try:
        deadline = time.monotonic() + WAIT
        print("listener:", await asyncio.to_thread(read_line, listener, deadline), flush=True)
        await asyncio.sleep(0.5)  # its interest reaches the daemon
        sender = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, __file__, "send", "-daemon", where, "DEMO.NEWS", "hello", "world"],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        for line in sender.stdout.splitlines():
            print("sender:  ", line, flush=True)
        for _ in range(2):
            print("listener:", await asyncio.to_thread(read_line, listener, deadline), flush=True)
    finally:
        listener.terminate()
        listener.wait(WAIT)
        await daemon.stop()
    print("demo finished", flush=True)


def main() -> None:
    if len(sys.argv) < 2:
        asyncio.run(demonstration())
    elif sys.argv[1] == "listen":
        try:
            asyncio.run(tibrvlisten(sys.argv[2:]))
        except KeyboardInterrupt:
            pass
    elif sys.argv[1] == "send":
        asyncio.run(tibrvsend(sys.argv[2:]))
    else:
        sys.exit(f"usage: {sys.argv[0]} [listen|send] [-service S] [-network N] [-daemon D] ...")


if __name__ == "__main__":
    main()
