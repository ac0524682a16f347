"""A remote-operations peer process for the kill -9 tests (test_rops_processes.py).

Two roles on a loopback service, each a RemoteOps endpoint with a state file:

``performer``
    performs ``place``: appends ``exec <order>`` to ``--log`` (one line per
    write, so a kill -9 keeps it) as the order takes effect, then holds for
    ``--hold`` seconds before answering: the window in which the test kills it.
``invoker``
    places orders ``0 .. --orders - 1``. Each invocation is logged in ``--out``
    as ``start <order> <invoke id>`` once its start is on disk, and
    ``done <order> <how>`` when settled (``ok``, ``error:<code>``,
    ``failed:<executed>``). With ``--use-invoke`` it calls ``invoke`` and
    logs only the ``done`` lines (for runs that never kill the invoker). A
    restarted invoker first settles the invocations its state file holds, then
    places the orders it never started (``--pace`` seconds apart). It stops
    placing new ones once file ``--enough`` exists, and logs ``finished <n>``
    when orders ``0 .. n - 1`` are settled.

Both print ``ready`` once serving and exit 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rvasync as rv

POLICY = {"timeout": 0.3, "retries": 40, "backoff": 1.5, "max_wait": 1.0, "verify_attempts": 5}


async def run_performer(args: argparse.Namespace, stop: asyncio.Event) -> None:
    with open(args.log, "a", buffering=1) as log:
        async with (
            rv.Transport(args.service, args.network) as t,
            rv.RemoteOps(t, args.name, state=args.state) as ops,
        ):

            async def place(msg: rv.Message) -> rv.Message:
                log.write(f"exec {msg['order']}\n")
                await asyncio.sleep(args.hold)
                return rv.Message(fields={"placed": msg["order"]})

            ops.perform("place", place)
            print("ready", flush=True)
            await stop.wait()


async def _settle(ops: rv.RemoteOps, order: int, invoke_id: str, out: object) -> None:
    try:
        result = await ops.outcome(invoke_id)
        assert result["placed"] == order
        how = "ok"
    except rv.OperationError as exc:
        how = f"error:{exc.code}"
    except rv.DeliveryFailed as exc:
        how = f"failed:{exc.executed}"
    out.write(f"done {order} {how}\n")  # type: ignore[attr-defined]


async def run_invoker(args: argparse.Namespace, stop: asyncio.Event) -> None:
    out_path = Path(args.out)
    started: dict[int, str] = {}
    done: set[int] = set()
    if out_path.exists():
        for line in out_path.read_text().splitlines():
            parts = line.split()
            if parts and parts[0] == "start":
                started[int(parts[1])] = parts[2]
            elif parts and parts[0] == "done":
                done.add(int(parts[1]))
    with open(out_path, "a", buffering=1) as out:
        async with (
            rv.Transport(args.service, args.network) as t,
            rv.RemoteOps(t, args.name, state=args.state) as ops,
        ):
            print("ready", flush=True)
            for pending in ops.pending_invocations():
                # Started before the crash (perhaps before its start line was written).
                order = pending.argument["order"]
                if order not in started:
                    out.write(f"start {order} {pending.invoke_id}\n")
                    started[order] = pending.invoke_id
                await _settle(ops, order, pending.invoke_id, out)
                done.add(order)
            for order, invoke_id in started.items():
                if order not in done:  # settled before the crash, not yet logged
                    await _settle(ops, order, invoke_id, out)
            placed = args.orders
            for order in range(args.orders):
                if args.enough and Path(args.enough).exists():
                    placed = order
                    break
                if order in started:
                    continue
                if args.pace:
                    await asyncio.sleep(args.pace)
                if args.use_invoke:
                    # invoke() in one step (its first copy goes as a request); for runs
                    # that never kill the invoker, which could not tell what it started.
                    try:
                        result = await ops.invoke(
                            args.peer,
                            "place",
                            rv.Message(fields={"order": order}),
                            handshake=args.handshake,
                            **POLICY,
                        )
                        assert result["placed"] == order
                        how = "ok"
                    except rv.OperationError as exc:
                        how = f"error:{exc.code}"
                    except rv.DeliveryFailed as exc:
                        how = f"failed:{exc.executed}"
                    out.write(f"done {order} {how}\n")
                    continue
                invoke_id = await ops.start_invoke(
                    args.peer,
                    "place",
                    rv.Message(fields={"order": order}),
                    handshake=args.handshake,
                    **POLICY,
                )
                out.write(f"start {order} {invoke_id}\n")
                await _settle(ops, order, invoke_id, out)
            out.write(f"finished {placed}\n")
            await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", choices=["performer", "invoker"])
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", default=None)
    parser.add_argument("--name", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--peer", default="ORDERS")
    parser.add_argument("--log", help="performer: effects log")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--out", help="invoker: invocations log")
    parser.add_argument("--orders", type=int, default=1)
    parser.add_argument("--pace", type=float, default=0.0, help="invoker: seconds between orders")
    parser.add_argument("--handshake", type=int, default=3)
    parser.add_argument("--enough", help="invoker: place nothing new once this file exists")
    parser.add_argument(
        "--use-invoke", action="store_true", help="invoker: invoke() instead of start_invoke()"
    )
    args = parser.parse_args()

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        if args.role == "performer":
            await run_performer(args, stop)
        else:
            await run_invoker(args, stop)

    asyncio.run(run())


if __name__ == "__main__":
    main()
