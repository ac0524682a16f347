"""tibrvcmsend and tibrvcmlisten, ported to rvasync: certified delivery with ledgers.

The certified pair of the Rendezvous samples, written against rvasync's API:

    python examples/tibrv_certified.py listen [-service S] [-network N] [-daemon D]
                                              [-ledger FILE] [-cmname NAME] SUBJECT...
    python examples/tibrv_certified.py send [-service S] [-network N] [-daemon D]
                                            [-ledger FILE] [-cmname NAME] [-interval S]
                                            [-rounds N] SUBJECT MESSAGE

``listen`` (correspondent RVCMSUB unless given, requesting old messages)
prints ``subject=S, reply=R, message={...}, certified sender=TRUE,
sequence=N`` for each certified message, ``... receipt uncertified`` for one
that is not certified to it. ``send`` (correspondent RVCMPUB) sends MESSAGE in
a DATA field once every ``-interval`` seconds, ``-rounds`` times, then waits
until every registered listener has confirmed everything (tibrvcmsend itself
keeps dispatching for ever).

Run with no arguments for a demonstration of what "certified" buys: the
listener is stopped in the middle of the stream and restarted with its
ledger, and it still gets every message the sender sent meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rvasync as rv

WAIT = 60.0


def options(argv: list[str], what: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"tibrvcm{what}", allow_abbrev=False)
    parser.add_argument("-service", default=None)
    parser.add_argument("-network", default=None)
    parser.add_argument("-daemon", default=None)
    parser.add_argument("-ledger", default=None)
    parser.add_argument("-cmname", default="RVCMSUB" if what == "listen" else "RVCMPUB")
    if what == "send":
        parser.add_argument("-interval", type=float, default=1.0)
        parser.add_argument("-rounds", type=int, default=10)
        parser.add_argument("subject")
        parser.add_argument("message")
    else:
        parser.add_argument("subjects", nargs="+")
    return parser.parse_args(argv)


async def tibrvcmlisten(argv: list[str]) -> None:
    args = options(argv, "listen")
    async with (
        rv.Transport(args.service, args.network, args.daemon, description="tibrvcmlisten") as t,
        rv.CmTransport(t, args.cmname, ledger=args.ledger, require_old=True) as cm,
    ):
        queue = rv.Queue()
        for subject in args.subjects:
            print(f"tibrvcmlisten: Listening to subject {subject}", flush=True)
            cm.listen(subject, queue=queue, explicit_confirm=True)
        async for msg in queue:
            head = f"subject={msg.subject}, reply={msg.reply_subject or 'none'}, message={msg}, "
            if msg.cm is not None and msg.cm.sequence is not None:
                print(f"{head}certified sender=TRUE, sequence={msg.cm.sequence}", flush=True)
            else:
                certified = "TRUE" if msg.cm is not None else "FALSE"
                print(f"{head}certified sender={certified}, receipt uncertified", flush=True)
            await msg.listener.confirm(msg)  # the callback has returned: confirmed


async def tibrvcmsend(argv: list[str]) -> None:
    args = options(argv, "send")
    async with (
        rv.Transport(args.service, args.network, args.daemon, description="tibrvcmsend") as t,
        rv.CmTransport(t, args.cmname, ledger=args.ledger) as cm,
    ):
        message = rv.Message(args.subject, {"DATA": args.message})
        print(f'Publishing: subject={args.subject} "{args.message}"', flush=True)
        for current_round in range(1, args.rounds + 1):
            await asyncio.sleep(args.interval)  # tibrvcmsend's timer
            await cm.send(message.copy())
            print(f"tibrvcmsend: Success in sending message {current_round}", file=sys.stderr)
        # Until every listener that registered has confirmed everything (bounded).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while loop.time() < deadline:
            listeners = [lst for r in cm.review_ledger(args.subject) for lst in r.listeners]
            if listeners and all(lst.unconfirmed == 0 for lst in listeners):
                break
            await asyncio.sleep(0.1)


# -- the demonstration ---------------------------------------------------------------------


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", __file__, *args], stdout=subprocess.PIPE, text=True
    )


def lines(proc: subprocess.Popen[str], count: int, deadline: float) -> list[str]:
    """The next ``count`` lines of ``proc`` (bounded by ``deadline``)."""
    assert proc.stdout is not None
    got = []
    while len(got) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demonstration took too long (had {got})")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the program ended early (had {got})")
        got.append(line.rstrip("\n"))
        print("  ", got[-1], flush=True)
    return got


async def demonstration() -> None:
    daemon = rv.Daemon(listen=0)
    await daemon.start()
    where = f"127.0.0.1:{daemon.listen_port}"
    with tempfile.TemporaryDirectory() as tmp:
        ledger = str(Path(tmp) / "listener.ledger")
        listen_args = ("listen", "-daemon", where, "-ledger", ledger, "ORDERS.>")
        deadline = time.monotonic() + WAIT
        print("the listener starts, with a file ledger:", flush=True)
        listener = start(*listen_args)
        sender = None
        try:
            await asyncio.to_thread(lines, listener, 1, deadline)
            await asyncio.sleep(0.5)
            print("the sender sends 6 certified messages, one every 0.5 s:", flush=True)
            sender = start(
                "send", "-daemon", where, "-interval", "0.5", "-rounds", "6", "ORDERS.NEW", "buy"
            )
            await asyncio.to_thread(lines, listener, 2, deadline)
            print("the listener stops; the sender goes on", flush=True)
            listener.terminate()
            listener.wait(WAIT)
            await asyncio.sleep(1.5)
            print("the listener restarts with its ledger and gets what it missed:", flush=True)
            listener = start(*listen_args)
            await asyncio.to_thread(lines, listener, 1, deadline)
            seen: list[str] = []
            while not any(line.endswith("sequence=6") for line in seen):
                seen += await asyncio.to_thread(lines, listener, 1, deadline)
            await asyncio.to_thread(sender.wait, WAIT)  # confirmed everything: it ends
            print("every message delivered; the sender ended once all were confirmed", flush=True)
        finally:
            for proc in (listener, sender):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(WAIT)
            await daemon.stop()
    print("demo finished", flush=True)


def main() -> None:
    if len(sys.argv) < 2:
        asyncio.run(demonstration())
    elif sys.argv[1] == "listen":
        try:
            asyncio.run(tibrvcmlisten(sys.argv[2:]))
        except KeyboardInterrupt:
            pass
    elif sys.argv[1] == "send":
        asyncio.run(tibrvcmsend(sys.argv[2:]))
    else:
        sys.exit(f"usage: {sys.argv[0]} [listen|send] ...")


if __name__ == "__main__":
    main()
