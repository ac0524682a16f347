"""Instructions per one-way message on each side, plain transport against a circuit.

The throughput rows (``pubsub-128B-1sub``, variant ``ipm-circuit`` beside
``ipm``) swing by tens of percent on a shared machine; instruction counts do
not. This runs a subscriber and a publisher process (the in-process daemon on
a free service port, 128 B messages, a new ``rv.Message`` per send as the
rows do) with one side under ``valgrind --tool=callgrind``, once for a short
and once for a longer series, and prints the difference divided by the extra
messages (start-up, the circuit's handshake and shut-down cancel out).

``--mode plain`` publishes on the transport; ``--mode circuit`` on a virtual
circuit between the two (the benchmark row's invitation dance);
``--mode circuit-direct`` the same with both transports on a two-part service,
so the circuit's frames take the direct channels.

Needs valgrind (``apt-get install valgrind``). Usage::

    python -m benchmarks.oneway_instructions [--mode circuit] [--short 2000] [--long 12000]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.procs import free_port
from benchmarks.reqrep_instructions import _callgrind, _collected

SIDE = r"""
import asyncio, sys
import uvloop
import rvasync as rv
from rvasync.protocol.vc import CircuitParams

# Under callgrind the measured side runs some 50 times slower, so the partner's acks
# reach it late in its own time and the default retransmission timer (0.2 s) would
# resend frames that were never lost (counted as the measured side's work, or the
# partner's duplicates arriving there). The timer waits a heartbeat here: what is
# counted is the steady stream, as in a native run (where nothing is resent).
PARAMS = CircuitParams(heartbeat=5.0, silence=60.0, retransmit=5.0)

port, role, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
SUBJECT, ASK, DONE = "bench.data", "bench.circuit.ask", "bench.done"

async def subscriber(t):
    if mode == "plain":
        listener = t.listen(SUBJECT)
    else:
        vc = rv.VcTransport(t, connect_subject=None, params=PARAMS)
        listener = vc.listen(SUBJECT)
        asks = t.listen(ASK)
        done = t.listen(DONE)
    print("ready", flush=True)
    if mode != "plain":
        ask = await asyncio.wait_for(anext(asks), 600)
        await t.send_reply(rv.Message(fields={}, reply_subject=vc.connect_subject), ask)
    got = 0
    async for msg in listener:
        if msg["data"] == b"end":
            break
        got += 1
    assert got == count, (got, count)
    if mode == "plain":
        await t.send(rv.Message(DONE, {}))
    else:
        await asyncio.wait_for(vc.close(), 120)
        # This transport (and its daemon) stays until the publisher has heard the CLOSE
        # frame and its ack: closed at once, the daemon could take the frame with it,
        # leaving the publisher to resend until its disconnect time.
        await asyncio.wait_for(anext(done), 600)

async def publisher(t):
    if mode == "plain":
        send = t.send
        done = t.listen(DONE)
        await asyncio.sleep(0.5)  # the subscriber's interest reaches this daemon
    else:
        invitation = await t.send_request(rv.Message(ASK, {}), 600)
        vc = rv.VcTransport(t, connect_subject=invitation.reply_subject, params=PARAMS)
        await vc.wait_connected(600)
        send = vc.send
    data = b"x" * 128
    for i in range(count):
        await send(rv.Message(SUBJECT, {"data": data}))
        if i % 256 == 255:
            await asyncio.sleep(0)
    await send(rv.Message(SUBJECT, {"data": b"end"}))
    if mode == "plain":
        await asyncio.wait_for(anext(done), 600)  # the subscriber may still ask for resends
    else:
        await asyncio.wait_for(vc.close(), 120)
        await t.send(rv.Message(DONE, {}))
        await asyncio.sleep(0.5)  # DONE leaves before this daemon closes

async def main():
    service = port + (":" if mode == "circuit-direct" else "")
    t = rv.Transport(service=service, reply_poll=0)
    await t.open()
    try:
        await (subscriber(t) if role == "subscriber" else publisher(t))
    finally:
        await t.close()

uvloop.run(main())
"""

MODES = ("plain", "circuit", "circuit-direct")


def instructions(count: int, measured: str, mode: str, workdir: Path) -> int:
    """Instructions the ``measured`` side ran for ``count`` messages (whole process)."""
    script = workdir / "side.py"
    script.write_text(SIDE)
    port = str(free_port(socket.SOCK_DGRAM))

    def command(role: str) -> list[str]:
        base = [sys.executable, str(script), port, role, str(count), mode]
        if role != measured:
            return base
        return _callgrind(base, workdir / f"callgrind.{role}.{count}.out")

    subscriber = subprocess.Popen(
        command("subscriber"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert subscriber.stdout is not None and subscriber.stderr is not None
        if subscriber.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the subscriber did not start: {subscriber.stderr.read()}")
        publisher = subprocess.run(
            command("publisher"), capture_output=True, text=True, timeout=900
        )
        if publisher.returncode:
            raise RuntimeError(f"the publisher failed:\n{publisher.stderr[-3000:]}")
        subscriber.wait(900)
        sub_err = subscriber.stderr.read()
        if subscriber.returncode:
            raise RuntimeError(f"the subscriber failed:\n{sub_err[-3000:]}")
        err = publisher.stderr if measured == "publisher" else sub_err
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
    return _collected(err, measured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="circuit")
    parser.add_argument("--short", type=int, default=2000, help="messages of the short run")
    parser.add_argument("--long", type=int, default=12000, help="messages of the long run")
    parser.add_argument("--side", choices=("publisher", "subscriber"), action="append")
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("--short must be positive and below --long")
    with tempfile.TemporaryDirectory() as tmp:
        for side in args.side or ("publisher", "subscriber"):
            short = instructions(args.short, side, args.mode, Path(tmp))
            long = instructions(args.long, side, args.mode, Path(tmp))
            per = (long - short) / (args.long - args.short)
            print(f"{args.mode} {side}: {per:,.0f} instructions per message", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
