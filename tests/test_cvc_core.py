"""The cache core's pure parts: pattern coverage, the store and its limits, answer
parts, the requester's merge of several caches, and the store file format."""

from __future__ import annotations

import itertools
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync.errors import MalformedMessage
from rvasync.protocol.cvc import (
    AnswerCollector,
    Op,
    Outcome,
    RetainedStore,
    covers,
    encode_record,
    parse_log,
    reduce_patterns,
    split_parts,
    unpack_entries,
)
from rvasync.protocol.cvc.storefile import MAGIC
from rvasync.subjects import subject_matches

TOKENS = ["a", "b", "c"]
ALL_SUBJECTS = [".".join(t) for n in range(1, 5) for t in itertools.product(TOKENS, repeat=n)]
PATTERN = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=3).flatmap(
    lambda tokens: st.sampled_from([".".join(tokens), ".".join([*tokens, ">"])])
)


# --- patterns ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(PATTERN, PATTERN)
def test_covers_agrees_with_matching_every_subject(outer: str, inner: str) -> None:
    # "c" never appears in a pattern: it stands for every other element.
    expected = all(subject_matches(outer, s) for s in ALL_SUBJECTS if subject_matches(inner, s))
    assert covers(outer, inner) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(PATTERN, min_size=1, max_size=5))
def test_reduced_patterns_match_the_same_subjects(patterns: list[str]) -> None:
    kept = reduce_patterns(patterns)
    assert set(kept) <= set(patterns)
    for s in ALL_SUBJECTS:
        assert any(subject_matches(p, s) for p in kept) == any(
            subject_matches(p, s) for p in patterns
        )
    assert not any(covers(a, b) for a, b in itertools.permutations(kept, 2))


# --- store --------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete"]),
        st.sampled_from(ALL_SUBJECTS[:20]),
        st.binary(min_size=0, max_size=30),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.one_of(st.none(), st.integers(1, 8)), st.one_of(st.none(), st.integers(1, 200)))
def test_store_follows_a_model_and_never_exceeds_its_limits(ops, max_subjects, max_bytes):
    store = RetainedStore(max_subjects=max_subjects, max_bytes=max_bytes)
    model: dict[str, bytes] = {}
    refused = 0
    for stamp, (op, subject, wire) in enumerate(ops):
        if op == "delete":
            outcome = store.delete(subject)
            assert outcome is (Outcome.DELETED if subject in model else Outcome.ABSENT)
            model.pop(subject, None)
            continue
        new = {**model, subject: wire}
        fits = (max_subjects is None or len(new) <= max_subjects) and (
            max_bytes is None or sum(map(len, new.values())) <= max_bytes
        )
        outcome = store.put(subject, wire, float(stamp))
        if fits:
            assert outcome in (Outcome.STORED, Outcome.REPLACED)
            model = new
        else:
            assert outcome in (Outcome.REFUSED_BYTES, Outcome.REFUSED_SUBJECTS)
            refused += 1
        assert len(store) == len(model)
        assert store.size == sum(map(len, model.values()))
    assert {e.subject: e.wire for e in store} == model
    assert store.take_refusals().total == refused
    assert store.take_refusals().total == 0
    for pattern in ["a.>", "*", "a.*.c", "b.b", ">"]:
        expected = sorted(s for s in model if subject_matches(pattern, s))
        assert [e.subject for e in store.select(pattern)] == expected


def test_store_limits_must_be_positive_ints() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_subjects"):
            RetainedStore(max_subjects=bad)  # type: ignore[arg-type]  # the bad value tested


# --- answer parts -------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(blacklist_categories=["Cs"]), max_size=20),
            st.floats(allow_nan=False),
            st.binary(max_size=300),
        ),
        max_size=40,
    ),
    st.integers(1, 2000),
)
def test_parts_carry_every_entry_in_order(entries, max_bytes) -> None:
    parts = split_parts(entries, max_bytes)
    assert parts  # always a last part, even when empty
    got = [e for part in parts for e in unpack_entries(part)]
    assert got == entries
    for part in parts:
        assert len(part) <= max_bytes or len(unpack_entries(part)) == 1


def test_truncated_parts_are_malformed() -> None:
    (blob,) = split_parts([("A.B", 1.0, b"x" * 10)])
    for cut in range(1, len(blob)):
        with pytest.raises(MalformedMessage):
            unpack_entries(blob[:cut])


# --- the requester's merge ----------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_merge_of_several_caches_in_any_order_with_duplicates_and_silence(data) -> None:
    n_caches = data.draw(st.integers(1, 4))
    caches = [f"c{i}" for i in range(n_caches)]
    silent = set(data.draw(st.sets(st.sampled_from(caches), max_size=n_caches)))
    # Each cache holds some subjects, with its own stamps.
    holdings = {
        cache: data.draw(
            st.dictionaries(st.sampled_from(ALL_SUBJECTS[:12]), st.integers(0, 50), max_size=8)
        )
        for cache in caches
    }
    events: list[tuple[str, int, bool, list[tuple[str, float, str]]]] = []
    for cache in caches:
        if cache in silent:
            continue
        items = sorted(holdings[cache].items())
        n_parts = data.draw(st.integers(1, 3))
        chunks = [items[i::n_parts] for i in range(n_parts)]
        for number, chunk in enumerate(chunks):
            entries = [(s, float(stamp), f"{cache}:{s}") for s, stamp in chunk]
            events.append((cache, number, number == n_parts - 1, entries))
    events += data.draw(st.lists(st.sampled_from(events), max_size=4)) if events else []
    order = data.draw(st.permutations(events))
    collector: AnswerCollector[str] = AnswerCollector()
    seen: set[tuple[str, int]] = set()
    for cache, number, last, entries in order:
        peers = [c for c in caches if c != cache]
        assert collector.on_part(cache, peers, number, last, entries) == (
            (cache, number) not in seen
        )
        seen.add((cache, number))
    answering = [c for c in caches if c not in silent]
    assert collector.heard == bool(answering)
    assert collector.complete == (bool(answering) and not silent)
    assert sorted(collector.missing()) == (sorted(silent) if answering else [])
    best: dict[str, tuple[float, str]] = {}
    for cache in answering:  # caches in id order; the first received wins ties
        for s, stamp in holdings[cache].items():
            if s not in best or stamp > best[s][0]:
                best[s] = (float(stamp), cache)
    result = collector.result()
    assert [r.split(":")[1] for r in result] == sorted(best)  # one per subject, in order
    for item in result:
        cache, subject = item.split(":")
        assert holdings[cache][subject] == best[subject][0]  # the newest stamp


# --- store file format ----------------------------------------------------------------


def log_bytes(records) -> bytes:
    return MAGIC + b"".join(encode_record(*r) for r in records)


RECORDS = [
    (Op.PUT, "A.B", 1.5, b"wire-1"),
    (Op.PUT, "A.C", 2.5, b"wire-2" * 10),
    (Op.DELETE, "A.B", 3.0, b""),
    (Op.PUT, "\u00e9t\u00e9.X", 4.0, b""),
]


def test_log_round_trip() -> None:
    parsed = parse_log(log_bytes(RECORDS))
    assert parsed.corrupt is None and parsed.torn == 0
    assert [(r.op, r.subject, r.stamp, r.wire) for r in parsed.records] == RECORDS
    assert parse_log(b"").records == []


def test_every_truncation_is_a_torn_tail_never_corruption() -> None:
    data = log_bytes(RECORDS)
    full = parse_log(data).records
    for cut in range(len(data)):
        parsed = parse_log(data[:cut])
        assert parsed.corrupt is None, cut
        assert parsed.records == full[: len(parsed.records)]
        assert parsed.good_end + parsed.torn == cut


def test_damage_anywhere_in_a_complete_record_is_corruption_the_last_one_included() -> None:
    # A crash can cut the last record short; it cannot leave a whole record
    # with a wrong checksum: that is damage, and dropping it would serve an
    # older value silently.
    data = bytearray(log_bytes(RECORDS))
    for at in range(len(MAGIC), len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        parsed = parse_log(bytes(damaged))
        assert parsed.corrupt is not None, at
        assert len(parsed.records) < len(RECORDS)
    assert "bad magic" in (parse_log(b"NOTACACHEFILE").corrupt or "")


def test_unknown_op_with_a_valid_crc_is_corruption() -> None:
    body = bytes([9]) + b"\0" * 10
    head = len(body).to_bytes(4, "little") + (len(body) ^ 0xFFFFFFFF).to_bytes(4, "little")
    record = head + zlib.crc32(body).to_bytes(4, "little") + body
    parsed = parse_log(MAGIC + record + encode_record(*RECORDS[0]))
    assert parsed.corrupt is not None and "unknown record op 9" in parsed.corrupt
