"""Micro-benchmark of the reliable multicast core over a perfect in-memory link.

Two ReliableEndpoints in one process; the sender's datagrams are handed
straight to the receiver. Each "turn" sends ``--batch`` payloads, flushes
(as the daemon does once per event-loop turn), passes the datagrams over and
drains the receiver's events. Reported: messages per second end to end (both
endpoints' CPU in one process, so a cross-process pipeline can go faster),
and the send-only and receive-only rates, for the pure and native rmframe.

Run: python -m benchmarks.reliable_core [-n 200000] [--size 128] [--batch 1000]
"""

from __future__ import annotations

import argparse
import gc
import time

from rvasync import _accel
from rvasync.protocol.reliable import ReliableEndpoint


def run_once(frame, count: int, size: int, batch: int, max_datagram: int) -> dict[str, float]:
    payload = bytes(range(256))[:size] * (size // 256 + 1)
    payload = payload[:size]
    a = ReliableEndpoint(now=0.0, session_id=1, frame=frame, max_datagram=max_datagram)
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame, max_datagram=max_datagram)
    send = a.send_multicast
    received = 0
    send_time = recv_time = 0.0
    now = 0.0
    clock = time.perf_counter
    gc_was = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            t0 = clock()
            for _ in range(n):
                send(payload)
            a.flush(now)
            out = a.datagrams_to_send()
            t1 = clock()
            for data, _dest in out:
                b.receive_datagram(data, "a", now)
            for event in b.events():
                payloads = getattr(event, "payloads", None)
                if payloads is not None:
                    received += len(payloads)
            t2 = clock()
            send_time += t1 - t0
            recv_time += t2 - t1
            sent += n
            now += 0.0001
        total = clock() - start
    finally:
        if gc_was:
            gc.enable()
    assert received == count, (received, count)
    assert b.stats.internal_errors == 0
    return {
        "end_to_end": count / total,
        "send": count / send_time,
        "receive": count / recv_time,
        "datagrams": a.stats.datagrams_sent,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--max-datagram", type=int, default=60000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    for frame in _accel.implementations("rmframe"):
        kind = "native" if frame.__name__.startswith("rvasync_native") else "pure"
        best = None
        for _ in range(args.repeat):
            result = run_once(frame, args.count, args.size, args.batch, args.max_datagram)
            if best is None or result["end_to_end"] > best["end_to_end"]:
                best = result
        print(
            f"{kind:6s} n={args.count} size={args.size} batch={args.batch} "
            f"max_datagram={args.max_datagram}: "
            f"end-to-end {best['end_to_end']:,.0f} msg/s, "
            f"send {best['send']:,.0f} msg/s, receive {best['receive']:,.0f} msg/s, "
            f"{best['datagrams']} datagrams"
        )


if __name__ == "__main__":
    main()
