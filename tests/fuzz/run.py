"""A seeded mutation fuzzer over every boundary of tests/fuzz/boundaries.py.

    python -m tests.fuzz.run --inputs 1000000 [--boundary NAME[,NAME]] [--twin pure|native|-]
                             [--seconds S] [--seed N] --out FILE.json

This is a plain, deterministic mutation fuzzer (no coverage guidance): each
input is a corpus item (valid bytes made by the project's own encoders) put
through 1 to 6 random mutations: bit flips, bytes set to interesting values
(0, 0xff, 0x7f, 0x80, lengths), interesting integers written over a field
(u8/u16/u32/u64, either byte order), msgpack-aware tweaks of a length or count
(fixstr/fixarray/str8/bin16/array32 ...), truncation, extension, deletion,
duplicated chunks, and splices of two corpus items; 1 input in 16 is pure
random bytes. Then the boundary's ``fixup`` (recomputing CRCs, as a forger
would) runs on most mutants so that mutations reach past the checksums.
Hypothesis is far too slow for a million inputs per boundary (it manages a
few hundred examples per second here, with shrinking machinery we do not need
at this scale), so the hypothesis tests live in the quick tier only. atheris
is not installed in this environment; this fuzzer does not depend on it.

Checks, per input: any exception outside the boundary's documented classes is
a crash (its reproducer is saved, hex, in the output); an input taking longer
than ``--input-timeout`` seconds is a hang (a SIGALRM timer interrupts it, and a
faulthandler watchdog kills the whole run if native code ignores the alarm).
Across the run: resident memory (RSS) is sampled every 2000 inputs and a growth
over ``--max-rss-growth`` MiB after the warm-up is reported as unbounded
memory. Writes figures per boundary and twin (inputs, seconds, inputs/s,
outcomes by exception class, crashes, hangs, RSS) as JSON and prints a table;
exits non-zero if anything was found.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import random
import signal
import struct
import sys
import time
import traceback
from typing import Any

from .boundaries import Boundary, boundaries

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x3F, 0x40, 0xC0, 0xC1, 0x90, 0xA0)
INTERESTING_INTS = (
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    31,
    32,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x3FFF,
    0x4000,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x3FFFFFFF,
    0x40000000,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    2**26,
    2**26 + 1,
    2**32,
    2**63 - 1,
    2**63,
    2**64 - 1,
)
_WIDTHS = ((1, "B"), (2, "H"), (4, "I"), (8, "Q"))

# msgpack tags with a length or count: tag -> (size of the length, big-endian) ; fix-forms
# carry it in the tag's low bits.
_MSGPACK_LEN = {
    0xC4: 1,
    0xC5: 2,
    0xC6: 4,
    0xD9: 1,
    0xDA: 2,
    0xDB: 4,
    0xDC: 2,
    0xDD: 4,
    0xDE: 2,
    0xDF: 4,
}


class Hang(BaseException):
    """Raised by the SIGALRM handler inside a consume that overran its time."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


class Mutator:
    """Seeded mutations of corpus items (deterministic for a seed and a corpus)."""

    def __init__(self, corpus: list[bytes], seed: int) -> None:
        self.corpus = corpus
        self.rng = random.Random(seed)
        self.ops = (
            (self.flip, 6),
            (self.set_byte, 6),
            (self.set_int, 5),
            (self.msgpack_length, 6),
            (self.truncate, 3),
            (self.extend, 2),
            (self.delete, 2),
            (self.duplicate, 2),
            (self.splice, 3),
            (self.insert_interesting, 2),
        )
        self._choices = [op for op, weight in self.ops for _ in range(weight)]

    def next(self) -> bytes:
        rng = self.rng
        if rng.random() < 1 / 16:
            return rng.randbytes(rng.choice((0, 1, 4, 8, 16, 64, 256, 1024)) + rng.randrange(8))
        buf = bytearray(rng.choice(self.corpus))
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 6))):
            rng.choice(self._choices)(buf)
        return bytes(buf)

    # each op mutates buf in place -----------------------------------------------------------

    def _pos(self, buf: bytearray) -> int:
        rng = self.rng
        # Headers hold most of the structure: favour the first bytes.
        if rng.random() < 0.4:
            return rng.randrange(min(len(buf), 64))
        return rng.randrange(len(buf))

    def flip(self, buf: bytearray) -> None:
        if buf:
            buf[self._pos(buf)] ^= 1 << self.rng.randrange(8)

    def set_byte(self, buf: bytearray) -> None:
        if buf:
            rng = self.rng
            value = rng.choice(INTERESTING_BYTES) if rng.random() < 0.7 else rng.randrange(256)
            buf[self._pos(buf)] = value

    def set_int(self, buf: bytearray) -> None:
        if not buf:
            return
        rng = self.rng
        size, code = rng.choice(_WIDTHS)
        value = rng.choice(INTERESTING_INTS) & ((1 << (8 * size)) - 1)
        if rng.random() < 0.3:
            value = (value + rng.choice((-1, 1))) & ((1 << (8 * size)) - 1)
        packed = struct.pack(rng.choice("<>") + code, value)
        i = self._pos(buf)
        buf[i : i + size] = packed[: len(buf) - i] if i + size > len(buf) else packed

    def msgpack_length(self, buf: bytearray) -> None:
        """Find a msgpack length-carrying tag and change its length or count."""
        rng = self.rng
        n = len(buf)
        if not n:
            return
        start = rng.randrange(n)
        for k in range(min(n, 512)):
            i = (start + k) % n
            tag = buf[i]
            if 0x80 <= tag <= 0xBF:  # fixmap, fixarray, fixstr
                base = tag & 0xE0 if tag >= 0xA0 else tag & 0xF0
                limit = 31 if tag >= 0xA0 else 15
                low = tag - base
                buf[i] = base | rng.choice((0, 1, limit, max(0, low - 1), min(limit, low + 1)))
                return
            size = _MSGPACK_LEN.get(tag)
            if size is not None and i + size < n:
                old = int.from_bytes(buf[i + 1 : i + 1 + size], "big")
                top = (1 << (8 * size)) - 1
                new = rng.choice((0, 1, top, old + 1, old - 1, old * 2, n, n - i))
                buf[i + 1 : i + 1 + size] = (new & top).to_bytes(size, "big")
                return
        self.set_byte(buf)

    def truncate(self, buf: bytearray) -> None:
        if buf:
            del buf[self.rng.randrange(len(buf)) :]

    def extend(self, buf: bytearray) -> None:
        rng = self.rng
        buf += rng.randbytes(rng.choice((1, 2, 4, 8, 40)))

    def delete(self, buf: bytearray) -> None:
        if buf:
            i = self._pos(buf)
            del buf[i : i + self.rng.choice((1, 2, 4, 8, 32))]

    def duplicate(self, buf: bytearray) -> None:
        if buf:
            rng = self.rng
            i = rng.randrange(len(buf))
            j = min(len(buf), i + rng.choice((1, 4, 16, 64, 512)))
            at = rng.randrange(len(buf) + 1)
            buf[at:at] = buf[i:j] * rng.choice((1, 2, 8))

    def splice(self, buf: bytearray) -> None:
        rng = self.rng
        other = rng.choice(self.corpus)
        if not other:
            return
        cut = rng.randrange(len(buf) + 1)
        start = rng.randrange(len(other))
        buf[cut:] = other[start:]

    def insert_interesting(self, buf: bytearray) -> None:
        rng = self.rng
        at = rng.randrange(len(buf) + 1)
        buf[at:at] = bytes([rng.choice(INTERESTING_BYTES)]) * rng.choice((1, 2, 4))


def _rss_kib() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:  # not Linux: the peak instead
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _max_rss_kib() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def fuzz(
    boundary: Boundary,
    inputs: int,
    *,
    seed: int = 1,
    seconds: float | None = None,
    input_timeout: float = 2.0,
    max_rss_growth_mib: float = 256.0,
    max_crashes: int = 20,
    progress: bool = False,
) -> dict[str, Any]:
    """Run ``inputs`` mutants through ``boundary``; return its figures (see the module doc)."""
    corpus = boundary.seeds()
    mutator = Mutator(corpus, seed)
    fixup = boundary.fixup
    fix_rng = random.Random(seed + 1)
    consume = boundary.consume
    documented = boundary.errors
    outcomes: dict[str, int] = {}
    crashes: list[dict[str, Any]] = []
    crash_kinds: set[str] = set()
    hangs = 0
    slowest = 0.0
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    rss_start = rss_peak = _rss_kib()
    rss_base = None
    memory_problem = None
    started = time.perf_counter()
    deadline = None if seconds is None else started + seconds
    done = 0
    clean = 0
    try:
        for done in range(1, inputs + 1):
            data = mutator.next()
            if fixup is not None and fix_rng.random() < 0.75:
                data = fixup(data, fix_rng)
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, input_timeout)
            try:
                consume(data)
                clean += 1
            except documented as exc:
                name = type(exc).__name__
                outcomes[name] = outcomes.get(name, 0) + 1
            except Hang:
                hangs += 1
                crashes.append({"kind": "hang", "input_hex": data.hex(), "seconds": input_timeout})
            except Exception as exc:
                name = type(exc).__name__
                tb = exc.__traceback__
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
                key = f"{name} at {where}"  # one reproducer per exception class and place
                outcomes[f"UNDOCUMENTED {name}"] = outcomes.get(f"UNDOCUMENTED {name}", 0) + 1
                if key not in crash_kinds and len(crashes) < max_crashes:
                    crash_kinds.add(key)
                    crashes.append(
                        {
                            "kind": "exception",
                            "exception": name,
                            "message": str(exc)[:500],
                            "traceback": traceback.format_exc(limit=-6)[-3000:],
                            "input_hex": data.hex(),
                        }
                    )
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            elapsed = time.perf_counter() - t0
            if elapsed > slowest:
                slowest = elapsed
            if done % 2000 == 0:
                rss = _rss_kib()
                rss_peak = max(rss_peak, rss)
                if rss_base is None and done >= 20000:
                    rss_base = rss  # after warm-up: caches, interned strings, allocator pools
                if (
                    rss_base is not None
                    and memory_problem is None
                    and rss - rss_base > max_rss_growth_mib * 1024
                ):
                    memory_problem = f"RSS grew {(rss - rss_base) // 1024} MiB after warm-up"
                if progress and done % 100000 == 0:
                    rate = done / (time.perf_counter() - started)
                    print(f"  {boundary.key}: {done} inputs, {rate:.0f}/s", file=sys.stderr)
                if deadline is not None and time.perf_counter() > deadline:
                    break
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    total = time.perf_counter() - started
    outcomes["ok"] = clean
    return {
        "boundary": boundary.name,
        "twin": boundary.twin,
        "consume": boundary.notes,
        "documented_errors": [e.__name__ for e in boundary.errors],
        "corpus_items": len(corpus),
        "inputs": done,
        "seconds": round(total, 2),
        "inputs_per_second": round(done / total) if total else None,
        "outcomes": dict(sorted(outcomes.items())),
        "crashes": crashes,
        "undocumented": sum(v for k, v in outcomes.items() if k.startswith("UNDOCUMENTED")),
        "hangs": hangs,
        "slowest_input_seconds": round(slowest, 4),
        "rss_kib_start": rss_start,
        "rss_kib_peak": rss_peak,
        "max_rss_kib_of_process": _max_rss_kib(),
        "memory_problem": memory_problem,
    }


def failed(result: dict[str, Any]) -> bool:
    return bool(result["crashes"] or result["undocumented"] or result["memory_problem"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.run", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--inputs", type=int, default=1_000_000, help="inputs per boundary and twin"
    )
    parser.add_argument("--boundary", default="", help="comma-separated names (default: all)")
    parser.add_argument("--twin", default="", help="only this twin (pure, native or -)")
    parser.add_argument(
        "--seconds", type=float, default=None, help="time cap per boundary and twin"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--input-timeout", type=float, default=2.0)
    parser.add_argument("--max-rss-growth", type=float, default=256.0, help="MiB")
    parser.add_argument("--out", required=True, help="JSON file for the figures")
    args = parser.parse_args(argv)

    wanted = {n for n in args.boundary.split(",") if n}
    selected = [
        b
        for b in boundaries()
        if (not wanted or b.name in wanted) and (not args.twin or b.twin == args.twin)
    ]
    if not selected:
        parser.error(f"no boundary matches {args.boundary!r} / {args.twin!r}")
    # A hard watchdog: native code that ignores SIGALRM still cannot hang the run forever.
    per_boundary = args.seconds if args.seconds is not None else args.inputs * 0.01
    faulthandler.dump_traceback_later(len(selected) * (per_boundary + 60) + 600, exit=True)
    results = []
    started = time.time()
    for boundary in selected:
        result = fuzz(
            boundary,
            args.inputs,
            seed=args.seed,
            seconds=args.seconds,
            input_timeout=args.input_timeout,
            max_rss_growth_mib=args.max_rss_growth,
            progress=True,
        )
        results.append(result)
        print(
            f"{boundary.key:24} {result['inputs']:>9} inputs {result['seconds']:>8.1f} s "
            f"{result['inputs_per_second']:>7}/s  undocumented {result['undocumented']}  "
            f"hangs {result['hangs']}",
            file=sys.stderr,
        )
    faulthandler.cancel_dump_traceback_later()
    report = {
        "command": "python -m tests.fuzz.run "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "engine": "plain seeded mutation fuzzer (tests/fuzz/run.py); not coverage-guided",
        "seed": args.seed,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "total_seconds": round(time.time() - started, 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": results,
        "failed": [f"{r['boundary']}[{r['twin']}]" for r in results if failed(r)],
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print()
    print(
        f"{'boundary':16} {'twin':7} {'inputs':>9} {'seconds':>8} {'inputs/s':>9} "
        f"{'undoc.':>7} {'hangs':>6}  outcomes"
    )
    for r in results:
        shown = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())
        print(
            f"{r['boundary']:16} {r['twin']:7} {r['inputs']:>9} {r['seconds']:>8.1f} "
            f"{r['inputs_per_second']:>9} {r['undocumented']:>7} {r['hangs']:>6}  {shown}"
        )
    for r in results:
        for crash in r["crashes"]:
            print(
                f"\nCRASH {r['boundary']}[{r['twin']}] {crash['kind']}: "
                f"{crash.get('exception', '')} {crash.get('message', '')[:200]}"
            )
            print(f"  input: {crash['input_hex'][:400]}")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
