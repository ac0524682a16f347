"""Exactly-once orders with rv.RemoteOps: retries through loss and a performer crash.

The parent is the shop front (the invoker); a child process (this file with
``--performer``) is the order service (the performer). Both keep a state
file. The service writes every order it places to a ledger file, and is
slower than the shop's first timeout, so the shop retries while the service
is still working: those copies are recognised as duplicates.

Midway, the parent kills the service with SIGKILL while it is placing orders
and starts it again only a second later: the invocations sent meanwhile are
lost, and the shop keeps retrying them until the restarted service (which
reloaded its state file) answers. An order the crash cut short is never
placed again: its invoker is told ``interrupted``.

At the end the ledger is checked: no order was placed twice, every order the
shop was told "placed" is in the ledger exactly once.

Run: python examples/remote_operations.py
"""

import asyncio
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import TextIO

import rvasync as rv
from rvasync.testing import free_port

ORDERS = 8
RETRY = {"timeout": 0.2, "retries": 40, "backoff": 1.5, "max_wait": 1.0}


async def performer(service: str, workdir: Path) -> None:
    """The order service: places each order once, however often it is asked."""
    with open(workdir / "ledger.txt", "a", buffering=1) as ledger:  # one write per line
        await serve(service, workdir, ledger)


async def serve(service: str, workdir: Path, ledger: TextIO) -> None:
    async with (
        rv.Transport(service) as t,
        rv.RemoteOps(t, "ORDER_SERVICE", state=str(workdir / "service.state")) as ops,
    ):

        async def place(order: rv.Message) -> rv.Message:
            if order["qty"] <= 0:
                raise rv.OperationError("bad_quantity", detail="quantity must be positive")
            ledger.write(f"{order['order_id']}\n")  # the effect that must not repeat
            await asyncio.sleep(0.3)  # slower than the shop's first timeout
            return rv.Message(fields={"confirmation": f"C-{order['order_id']}"})

        ops.perform("place_order", place)
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed or terminated


async def start_service(service: str, workdir: Path) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--performer",
        service,
        str(workdir),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"ready", line
    return proc


async def main() -> None:
    service = str(free_port())
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        service_proc = await start_service(service, workdir)
        async with (
            rv.Transport(service) as t,
            rv.RemoteOps(t, "SHOP", state=str(workdir / "shop.state")) as shop,
        ):

            async def order(n: int) -> str:
                await asyncio.sleep(0.15 * n)
                msg = rv.Message(fields={"order_id": n, "qty": 0 if n == 7 else 1 + n})
                try:
                    result = await shop.invoke("ORDER_SERVICE", "place_order", msg, **RETRY)
                    return f"placed, confirmation {result['confirmation']}"
                except rv.OperationError as exc:
                    if exc.code == "interrupted":
                        return "interrupted by the crash (placed at most once)"
                    return f"refused: {exc.code} ({exc.detail})"
                except rv.DeliveryFailed as exc:
                    return f"not delivered (executed={exc.executed})"

            async def crash_midway() -> None:
                ledger = workdir / "ledger.txt"
                while not ledger.exists() or len(ledger.read_text().split()) < 3:
                    await asyncio.sleep(0.01)
                service_proc.send_signal(signal.SIGKILL)  # while it places an order
                await service_proc.wait()
                print("-- order service killed (kill -9); back in 1 s from its state file")
                await asyncio.sleep(1.0)
                return None

            crash = asyncio.create_task(crash_midway())
            outcomes = asyncio.gather(*(order(n) for n in range(ORDERS)))
            await crash
            service_proc = await start_service(service, workdir)
            try:
                results = await asyncio.wait_for(outcomes, 45)
            finally:
                service_proc.send_signal(signal.SIGTERM)
                await service_proc.wait()
            placed = Counter(int(x) for x in (workdir / "ledger.txt").read_text().split())
            for n, text in enumerate(results):
                print(f"order {n}: {text:48} in ledger {placed[n]}x")
            stats = shop.stats
            print(
                f"shop: {stats['invoker_invoked']} invocations, "
                f"{stats['invoker_retried']} retries, {stats['invoker_verified']} verifies"
            )
            assert all(count == 1 for count in placed.values()), "an order was placed twice!"
            for n, text in enumerate(results):
                if text.startswith("placed"):
                    assert placed[n] == 1
                elif text.startswith("refused: bad_quantity"):
                    assert placed[n] == 0
                else:  # cut short by the crash: placed at most once, never again
                    assert "interrupted" in text and placed[n] <= 1, text
            print("no order placed twice; every confirmed order placed exactly once")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--performer":
        asyncio.run(performer(sys.argv[2], Path(sys.argv[3])))
    else:
        asyncio.run(main())
