"""The quick fuzz tier (CI): every boundary x twin for a few thousand mutants, plus hypothesis.

An exception outside a boundary's documented classes fails the test with its
reproducer (hex). The long run is ``python -m tests.fuzz.run`` (see run.py).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync.errors import InvalidArgument, InvalidSubject

from .boundaries import Boundary, Defect, boundaries
from .run import Mutator, fuzz

ALL = boundaries()
BY_KEY = {b.key: b for b in ALL}
# Inputs per boundary and twin: a few seconds each (files on disk are slower).
QUICK_INPUTS = {
    "capture": 1500,
    "capture_marker": 1500,
    "reliable": 3000,
    "reliable_seq": 1500,
    "http": 400,  # a real HTTP exchange over loopback each
}


def report(result: dict) -> str:
    lines = [f"{result['boundary']}[{result['twin']}]: {result['outcomes']}"]
    for crash in result["crashes"]:
        lines.append(f"{crash['kind']} {crash.get('exception', '')}: {crash.get('message', '')}")
        lines.append(crash.get("traceback", ""))
        shown = crash["input_hex"]
        if len(shown) > 2000:
            shown = f"{shown[:2000]}... ({len(shown) // 2} bytes; the JSON of run.py keeps all)"
        lines.append(f"reproducer: bytes.fromhex({shown!r})")
    return "\n".join(lines)


@pytest.mark.parametrize("key", list(BY_KEY))
def test_mutants_raise_only_documented_errors(key):
    boundary = BY_KEY[key]
    result = fuzz(boundary, QUICK_INPUTS.get(boundary.name, 4000), seed=11, seconds=30)
    assert not result["crashes"] and not result["undocumented"], report(result)
    assert result["hangs"] == 0
    assert result["memory_problem"] is None
    # The corpus is valid, and mutants reach both outcomes (not all rejected up front).
    assert result["outcomes"]["ok"] > 0


@pytest.mark.parametrize("key", list(BY_KEY))
def test_the_corpus_is_valid(key):
    boundary = BY_KEY[key]
    for seed in boundary.seeds():
        boundary.consume(seed)  # valid input: no exception at all


def test_an_undocumented_exception_fails_the_run():
    """The check itself: register a wrong error class and the fuzzer reports crashes."""
    codec = BY_KEY["codec[pure]"]
    wrong = Boundary("codec", "pure", codec.corpus, codec.consume, (InvalidSubject,))
    result = fuzz(wrong, 300, seed=3)
    assert result["undocumented"] > 0
    assert result["crashes"] and result["crashes"][0]["exception"] == "MalformedMessage"
    assert bytes.fromhex(result["crashes"][0]["input_hex"]) is not None


def test_a_defect_in_a_never_raising_boundary_fails_the_run(monkeypatch):
    """For the reliable core, internal errors are the defect: make one happen and see it."""
    reliable = BY_KEY[next(k for k in BY_KEY if k.startswith("reliable"))]
    from rvasync.protocol.reliable import ReliableEndpoint

    def broken(self, *args):
        raise RuntimeError("planted")

    monkeypatch.setattr(ReliableEndpoint, "_on_heartbeat", broken)
    result = fuzz(reliable, 300, seed=3)
    assert result["undocumented"] > 0
    assert result["crashes"][0]["exception"] == Defect.__name__
    assert "planted" in result["crashes"][0]["message"]


def test_a_hang_is_caught_and_reported():
    def slow(data: bytes) -> None:
        if data[:1] == b"\x00":
            while True:
                pass

    hanging = Boundary("slow", "-", lambda: [b"\x00", b"\x01"], slow, ())
    result = fuzz(hanging, 50, seed=1, input_timeout=0.05, max_crashes=2)
    assert result["hangs"] > 0 and result["crashes"][0]["kind"] == "hang"


# -- hypothesis: arbitrary bytes and structured mutations of the corpus -----------------------

HYPOTHESIS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check(boundary: Boundary, data: bytes) -> None:
    try:
        boundary.consume(data)
    except boundary.errors:
        pass


@pytest.mark.parametrize("key", list(BY_KEY))
@HYPOTHESIS
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes(key, data):
    check(BY_KEY[key], data)


@pytest.mark.parametrize("key", list(BY_KEY))
@HYPOTHESIS
@given(
    pick=st.integers(0, 10**6),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
    cut=st.none() | st.integers(0, 10**6),
    tail=st.binary(max_size=16),
    seed=st.integers(0, 2**32),
    fix=st.booleans(),
)
def test_structured_mutations_of_the_corpus(key, pick, edits, cut, tail, seed, fix):
    boundary = BY_KEY[key]
    corpus = boundary.seeds()
    buf = bytearray(corpus[pick % len(corpus)])
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    if cut is not None and buf:
        del buf[cut % len(buf) :]
    buf += tail
    data = bytes(buf)
    if seed % 2:  # and one of the fuzzer's own mutations (msgpack lengths, splices ...)
        data = Mutator(corpus, seed).next()
    if fix and boundary.fixup is not None:
        data = boundary.fixup(data, random.Random(seed))
    check(boundary, data)


def test_mutated_ledger_files_through_the_file_reader(tmp_path):
    """The CM driver's own opening of a ledger file (lock, read, replay, truncate a torn tail)."""
    from rvasync.cmdriver.ledgerfile import _open_log
    from rvasync.protocol.cm.ledger_format import LedgerCorrupt

    from .boundaries import LEDGER_NAME

    ledger = BY_KEY["ledger[-]"]
    mutator = Mutator(ledger.seeds(), 17)
    rng = random.Random(17)
    path = str(tmp_path / "cm.ledger")
    outcomes: dict[str, int] = {}
    for _ in range(150):
        data = ledger.fixup(mutator.next(), rng)
        with open(path, "wb") as f:
            f.write(data)
        try:
            log, replay = _open_log(path, LEDGER_NAME)
        except (LedgerCorrupt, InvalidArgument) as exc:
            outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
            continue
        size = log.size
        log.close()
        assert size == replay.valid_length or replay.state is None
        outcomes["ok"] = outcomes.get("ok", 0) + 1
    assert outcomes.get("ok") and outcomes.get("LedgerCorrupt"), outcomes
