"""A certified-delivery peer process for the kill -9 tests (test_cm_driver_processes.py).

Two roles, each a persistent correspondent on a loopback service:

``sender``
    sends labeled messages on ``--subject`` until the subject's sequence
    number reaches ``--target`` (continuing where its ledger says it stopped,
    after a restart; each process sends at least one) or until file
    ``--enough`` exists, appends the number each send returned to ``--log``
    (one line each), prints ``done <last
    sequence>``, then stays up to answer retransmission requests until SIGTERM.
``listener``
    listens with ``require_old=True`` and appends one line per delivery to
    ``--out``: the sequence number of a certified message, or ``u`` for an
    uncertified one (a certified line also carries the sender's ``--tag``);
    ``gap <first> <last>`` per DELIVERY.UNAVAILABLE advisory, ``moved`` per
    REGISTRATION.MOVED. A line ``start`` marks each new process. Certified messages
    are confirmed automatically, i.e. after their line is written.

With ``--relay NAME`` either role sends its certified traffic through relay
agent NAME (test_relay_processes.py). Both print ``ready`` once listening,
and exit 0 on SIGTERM after closing cleanly. Run ``python tests/cmpeer.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.errors import NotPermitted
from rvasync.message import Message
from rvasync.protocol.cm import CmTiming
from rvasync.protocol.relay import RelayTiming

TIMING = CmTiming(
    confirm_request_interval=0.3,
    register_retry_interval=0.2,
    register_attempts=5,
    retransmit_interval=0.2,
)
RELAY_TIMING = RelayTiming(
    locate_interval=0.2, retry=0.5, keepalive=0.5, agent_timeout=2.0, session_timeout=3.0
)


async def run_sender(args: argparse.Namespace, stop: asyncio.Event) -> None:
    async with (
        rv.Transport(args.service, args.network) as transport,
        CmTransport(
            transport,
            args.name,
            ledger=args.ledger,
            sync_ledger=args.sync,
            timing=TIMING,
            relay_agent=args.relay,
            relay_timing=RELAY_TIMING,
        ) as cm,
    ):
        if args.anticipate:
            await cm.add_listener(args.anticipate, args.subject)
        print("ready", flush=True)
        if args.send_nothing:
            print("done 0", flush=True)
            await stop.wait()
            return
        log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115
        last = 0
        standing_by = False
        while not stop.is_set() and not enough(args):
            try:
                last = await cm.send(Message(args.subject, {"payload": b"x" * 64, "tag": args.tag}))
            except NotPermitted:
                if not args.standby_ok:
                    raise
                if not standing_by:
                    print("standby", flush=True)  # another live instance holds the name
                    standing_by = True
                await asyncio.sleep(0.05)
                continue
            if standing_by:
                print("active", flush=True)
                standing_by = False
            if log is not None:
                log.write(f"{last}\n")  # one write per line: kill -9 keeps it
            if last >= args.target:
                break
            if args.pace:
                await asyncio.sleep(args.pace)
        print(f"done {last}", flush=True)
        await stop.wait()


async def run_listener(args: argparse.Namespace, stop: asyncio.Event) -> None:
    with open(args.out, "a", buffering=1) as out:  # one write per line: kill -9 keeps it
        out.write("start\n")
        async with (
            rv.Transport(args.service, args.network) as transport,
            CmTransport(
                transport,
                args.name,
                ledger=args.ledger,
                require_old=True,
                timing=TIMING,
                relay_agent=args.relay,
                relay_timing=RELAY_TIMING,
            ) as cm,
        ):
            listener = cm.listen(args.subject)
            transport.listen(
                "_RV.ERROR.RVCM.DELIVERY.UNAVAILABLE.>",
                callback=lambda adv: out.write(f"gap {adv['seqno_begin']} {adv['seqno_end']}\n"),
            )
            transport.listen(
                "_RV.INFO.RVCM.REGISTRATION.MOVED.>", callback=lambda adv: out.write("moved\n")
            )
            print("ready", flush=True)

            async def consume() -> None:
                async for msg in listener:
                    label = msg.cm
                    if label is not None and label.sequence is not None:
                        out.write(f"{label.sequence} {msg.get('tag', '')}\n")
                    else:
                        out.write("u\n")

            task = asyncio.create_task(consume())
            await stop.wait()
            task.cancel()


def enough(args: argparse.Namespace) -> bool:
    """Whether the run asked the sender to send nothing new (``--enough`` exists)."""
    return args.enough is not None and Path(args.enough).exists()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", choices=["sender", "listener"])
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", default=None)
    parser.add_argument("--name", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--subject", default="REMEMBER.THIS")
    parser.add_argument("--target", type=int, default=1000)
    parser.add_argument("--pace", type=float, default=0.0, help="seconds between sends")
    parser.add_argument("--sync", action="store_true", help="sync_ledger=True")
    parser.add_argument("--out", help="listener: where deliveries are logged")
    parser.add_argument("--log", help="sender: where the numbers sends returned are logged")
    parser.add_argument("--tag", default="", help="sender: put in every message (who sent it)")
    parser.add_argument(
        "--standby-ok",
        action="store_true",
        help="sender: while another live instance holds the name, keep trying (prints "
        "'standby', then 'active' once it sends)",
    )
    parser.add_argument("--anticipate", help="sender: add this listener before sending")
    parser.add_argument(
        "--send-nothing", action="store_true", help="sender: send nothing new, only what is owed"
    )
    parser.add_argument("--relay", default=None, help="relay agent name (relay_agent=)")
    parser.add_argument("--enough", help="sender: send nothing new once this file exists")
    args = parser.parse_args()

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        if args.role == "sender":
            await run_sender(args, stop)
        else:
            await run_listener(args, stop)

    asyncio.run(run())


if __name__ == "__main__":
    main()
