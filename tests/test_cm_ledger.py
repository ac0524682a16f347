"""The ledger: replayed state, the on-disk frame format, torn tails, corruption, compaction."""

from __future__ import annotations

import itertools
import re
import struct
import zlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync.protocol.cm import (
    CmCorrespondent,
    LedgerCorrupt,
    LedgerDecoder,
    LedgerState,
    compact_ledger,
    decode_ledger,
    encode_record,
    encode_records,
    new_ledger,
)
from rvasync.protocol.cm.ledger import (
    Allowed,
    Disallowed,
    ListenerConfirmed,
    MessageRemoved,
    MessagesRemoved,
    Registration,
    RegistrationRemoved,
    Source,
    SourceConfirmed,
    SourceRemoved,
    StoredMessage,
    SubjectMark,
)
from rvasync.protocol.cm.ledger_format import FRAME_HEADER_SIZE, MAGIC
from rvasync.protocol.cm.records import Confirm

T0 = 1_000_000.0

names = st.sampled_from(["A", "B", "C.D"])
subjects = st.sampled_from(["FOO", "BAR.BAZ"])
seqs = st.integers(0, 2**40)

records = st.one_of(
    st.builds(SubjectMark, subject=subjects, last_sent=seqs),
    st.builds(
        StoredMessage,
        subject=subjects,
        sequence=st.integers(1, 50),
        time_limit=st.floats(0, 1e6),
        expiry=st.floats(0, 2e9),
        payload=st.binary(max_size=64),
    ),
    st.builds(MessageRemoved, subject=subjects, sequence=st.integers(1, 50)),
    st.builds(
        Registration,
        subject=subjects,
        listener=names,
        address=st.sampled_from(["", "_INBOX.X.1"]),
        begin=st.integers(1, 50),
        confirmed=st.integers(0, 50),
        last_sent=st.integers(0, 50),
        anticipated=st.booleans(),
    ),
    st.builds(ListenerConfirmed, subject=subjects, listener=names, sequence=st.integers(0, 50)),
    st.builds(RegistrationRemoved, subject=subjects, listener=names),
    st.builds(Disallowed, listener=names),
    st.builds(Allowed, listener=names),
    st.builds(Source, sender=names, subject=subjects, address=st.just("_INBOX.Y"), confirmed=seqs),
    st.builds(SourceConfirmed, sender=names, subject=subjects, sequence=seqs),
    st.builds(SourceRemoved, sender=names, subject=subjects),
)


def replayed(items) -> LedgerState:
    state = LedgerState(name="OWNER")
    state.apply_all(items)
    return state


def frame_offsets(data: bytes) -> list[int]:
    offsets, offset = [], len(MAGIC)
    while offset < len(data):
        offsets.append(offset)
        (length,) = struct.unpack_from("<I", data, offset)
        offset += FRAME_HEADER_SIZE + length
    return offsets


# --- round trip ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(items=st.lists(records, max_size=30))
def test_records_round_trip_and_replay_to_the_same_state(items):
    data = new_ledger("OWNER", created=T0) + encode_records(items)
    replay = decode_ledger(data, expected_name="OWNER")
    assert replay.name == "OWNER" and replay.created == T0
    assert replay.records == items
    assert replay.state == replayed(items)
    assert (replay.valid_length, replay.torn_bytes) == (len(data), 0)
    assert decode_ledger(memoryview(bytearray(data))).records == items


@settings(max_examples=60, deadline=None)
@given(items=st.lists(records, max_size=30))
def test_compaction_replays_to_the_same_state(items):
    state = replayed(items)
    compacted = decode_ledger(compact_ledger(state), expected_name="OWNER")
    assert compacted.state == state
    # Compaction writes nothing that has been resolved.
    for record in compacted.records:
        assert not isinstance(
            record,
            MessageRemoved
            | ListenerConfirmed
            | RegistrationRemoved
            | Allowed
            | SourceConfirmed
            | SourceRemoved,
        )


def test_compaction_keeps_exactly_the_unconfirmed_state():
    core = CmCorrespondent("JAN", "_INBOX.JAN", now=T0, file_ledger=True)
    data = bytearray(new_ledger("JAN"))
    core.add_listener("DB_PER", "STORE.THIS")
    core.add_listener("LOG", "STORE.THIS")
    for i in range(1, 101):
        core.send("STORE.THIS", b"payload %d" % i, T0, time_limit=0)
    for listener, upto in (("DB_PER", 90), ("LOG", 70)):
        address = "_INBOX." + listener
        core.receive(Confirm(listener, address, subject="STORE.THIS", sequence=upto), T0)
    for out in core.drain():
        if hasattr(out, "lsn"):
            data += encode_record(out.record)
    full = decode_ledger(bytes(data), expected_name="JAN")
    assert full.state == core.ledger
    compacted_bytes = compact_ledger(core.ledger)
    compacted = decode_ledger(compacted_bytes, expected_name="JAN")
    assert compacted.state == core.ledger
    stored = [r.sequence for r in compacted.records if isinstance(r, StoredMessage)]
    assert stored == list(range(71, 101))  # what LOG (and partly DB_PER) still owes
    regs = {r.listener: r.confirmed for r in compacted.records if isinstance(r, Registration)}
    assert regs == {"DB_PER": 90, "LOG": 70}
    marks = [r.last_sent for r in compacted.records if isinstance(r, SubjectMark)]
    assert marks == [core.ledger.subjects["STORE.THIS"].last_sent]
    assert 100 < marks[0] <= 100 + 8192  # the numbers reserved ahead stay reserved
    assert len(compacted_bytes) < len(data)
    # A correspondent restored from the compacted file (a crash after it)
    # carries on after every number that may have been handed out.
    again = CmCorrespondent("JAN", "_INBOX.JAN.2", now=T0, ledger=compacted.state)
    assert again.send("STORE.THIS", b"next", T0).sequence == marks[0] + 1
    [review] = again.review_ledger("STORE.THIS")
    assert (review.total_messages, review.last_sent) == (31, marks[0] + 1)
    # A clean close records the exact last number: the next instance continues at 101.
    core.close(T0)
    closing = [out.record for out in core.drain() if hasattr(out, "lsn")]
    assert closing == [SubjectMark("STORE.THIS", 100)]
    state = core.ledger.copy()
    resumed = CmCorrespondent("JAN", "_INBOX.JAN.3", now=T0, ledger=state)
    assert resumed.send("STORE.THIS", b"next", T0).sequence == 101


def test_uncertified_sends_reserve_sequence_blocks():
    core = CmCorrespondent("JAN", "_INBOX.JAN", now=T0, file_ledger=True)
    core.drain()
    results = []
    for _ in range(70):
        results.append(core.send("FOO", b"x", T0))
        core.durable(core.last_lsn)  # the writer keeps up
    marks = [o.record for o in core.drain() if hasattr(o, "lsn")]
    # A block of 64, renewed half a block before it runs out.
    assert marks == [SubjectMark("FOO", 64), SubjectMark("FOO", 96), SubjectMark("FOO", 128)]
    assert [r.lsn for r in results if r.lsn is not None] == [1, 2, 3]
    assert results[0].hold_lsn == 1 and results[1].hold_lsn is None
    restored = CmCorrespondent("JAN", "_INBOX.JAN.2", now=T0, ledger=replayed_as("JAN", marks))
    assert restored.send("FOO", b"y", T0).sequence == 129


def test_a_sender_that_outruns_its_ledger_reserves_bigger_blocks():
    core = CmCorrespondent("JAN", "_INBOX.JAN", now=T0, file_ledger=True)
    core.drain()
    results = [core.send("FOO", b"x", T0) for _ in range(2000)]  # nothing written meanwhile
    marks = [o.record.last_sent for o in core.drain() if isinstance(o.record, SubjectMark)]
    blocks = [b - a for a, b in itertools.pairwise([0, *marks])]
    assert marks[0] == 64 and all(b > a for a, b in itertools.pairwise(blocks[1:]))
    assert max(marks) - 2000 <= 8192
    # Until the writer catches up, every number waits for the reservation covering it.
    assert all(r.hold_lsn is not None for r in results)


def replayed_as(name, items) -> LedgerState:
    state = LedgerState(name=name)
    state.apply_all(items)
    return state


# --- torn tails ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(items=st.lists(records, min_size=1, max_size=10), data=st.data())
def test_torn_last_record_is_discarded(items, data):
    whole = new_ledger("OWNER") + encode_records(items)
    last = frame_offsets(whole)[-1]
    cut = data.draw(st.integers(last + 1, len(whole) - 1), label="cut")
    replay = decode_ledger(whole[:cut], path="/var/ledger", expected_name="OWNER")
    assert replay.records == items[:-1]
    assert replay.valid_length == last
    assert replay.torn_bytes == cut - last


def test_trailing_zeros_and_a_header_cut_short_are_torn_tails():
    items = [SubjectMark("FOO", 1), SubjectMark("FOO", 2)]
    whole = new_ledger("OWNER") + encode_records(items)
    last = frame_offsets(whole)[-1]
    zeros = whole + bytes(4096)
    replay = decode_ledger(zeros)
    assert replay.records == items and replay.torn_bytes == 4096
    garbage_header = whole[:last] + b"\x07" * 9
    assert decode_ledger(garbage_header).valid_length == last


def test_a_complete_last_frame_with_a_flipped_bit_is_corruption_not_a_torn_tail():
    # A crash cuts an append short; it cannot leave a whole frame with a wrong
    # checksum. Dropping it silently would forget a record the file holds.
    items = [SubjectMark("FOO", 1), SubjectMark("FOO", 2)]
    whole = new_ledger("OWNER") + encode_records(items)
    last = frame_offsets(whole)[-1]
    for position in range(last, len(whole)):
        for bit in (0, 7):
            damaged = bytearray(whole)
            damaged[position] ^= 1 << bit
            with pytest.raises(LedgerCorrupt) as caught:
                decode_ledger(bytes(damaged), path="L")
            assert caught.value.offset == last, position


def test_empty_and_half_created_files_are_new_ledgers():
    for data in (b"", MAGIC[:3], MAGIC, new_ledger("OWNER")[:-2]):
        replay = decode_ledger(data)
        assert replay.state is None and replay.valid_length == 0
        assert replay.torn_bytes == len(data)
    replay = decode_ledger(new_ledger("OWNER"))
    assert replay.state == LedgerState(name="OWNER") and replay.record_count == 0


# --- corruption -----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(items=st.lists(records, min_size=2, max_size=10), data=st.data())
def test_damage_before_an_intact_record_is_reported_with_its_offset(items, data):
    whole = bytearray(new_ledger("OWNER") + encode_records(items))
    offsets = frame_offsets(bytes(whole))
    victim = data.draw(st.integers(1, len(offsets) - 2), label="victim")  # not header, not last
    start, end = offsets[victim], offsets[victim + 1]
    position = data.draw(st.integers(start, end - 1), label="position")
    whole[position] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    with pytest.raises(LedgerCorrupt) as caught:
        decode_ledger(bytes(whole), path="/var/ledger/JOE.led")
    assert caught.value.offset == start
    assert caught.value.path == "/var/ledger/JOE.led"
    assert f"'/var/ledger/JOE.led' is corrupt at offset {start}" in str(caught.value)
    assert isinstance(caught.value, rv.RvError)


def _frame(body: bytes) -> bytes:
    length = struct.pack("<I", len(body))
    return length + struct.pack("<II", zlib.crc32(length), zlib.crc32(body)) + body


def test_well_framed_but_meaningless_records_are_corruption():
    header = new_ledger("OWNER")
    cases = {
        "unknown record kind 'bogus'": _frame(msgpack.packb(["bogus", {}])),
        "not valid msgpack": _frame(b"\xc1"),
        "not a [kind, fields] pair": _frame(msgpack.packb({"a": 1})),
        "lacks field 'last_sent'": _frame(msgpack.packb(["subject_mark", {"subject": "X"}])),
        "must be int, not str": _frame(
            msgpack.packb(["subject_mark", {"subject": "X", "last_sent": "7"}])
        ),
    }
    for message, frame in cases.items():
        with pytest.raises(LedgerCorrupt, match=re.escape(message)) as caught:
            decode_ledger(header + frame, path="L")
        assert caught.value.offset == len(header)


def test_bad_magic_wrong_version_and_missing_header():
    with pytest.raises(LedgerCorrupt, match="not a ledger file") as caught:
        decode_ledger(b"NOTALEDGERFILE", path="x")
    assert caught.value.offset == 0
    with pytest.raises(LedgerCorrupt, match="format version 9"):
        decode_ledger(MAGIC + _frame(msgpack.packb(["header", {"name": "A", "version": 9}])))
    with pytest.raises(LedgerCorrupt, match="expected the header"):
        decode_ledger(MAGIC + encode_record(SubjectMark("FOO", 1)))


def test_a_ledger_of_another_correspondent_is_refused():
    data = new_ledger("SUE_PER") + encode_record(SubjectMark("FOO", 1))
    with pytest.raises(
        rv.InvalidArgument, match="belongs to correspondent 'SUE_PER', not 'JOE_PER'"
    ):
        decode_ledger(data, path="/tmp/joe.led", expected_name="JOE_PER")
    with pytest.raises(rv.InvalidSubject):
        new_ledger("bad..name")


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(
        st.one_of(
            records,
            st.builds(
                MessagesRemoved,
                subject=subjects,
                first=st.integers(1, 50),
                last=st.integers(1, 60),
            ),
        ),
        max_size=40,
    )
)
def test_stored_bytes_is_the_sum_of_the_stored_payloads(items):
    """The running payload total a ledger review reports matches the stored messages,
    after any replay, in a copy, and after compaction."""
    state = replayed(items)
    compacted = decode_ledger(compact_ledger(state), expected_name="OWNER").state
    for each in (state, state.copy(), compacted):
        for entry in each.subjects.values():
            assert entry.stored_bytes == sum(len(m.payload) for m in entry.messages.values())


@settings(max_examples=60, deadline=None)
@given(items=st.lists(records, max_size=20), data=st.data())
def test_a_ledger_fed_in_pieces_replays_as_the_whole_file(items, data):
    """A driver replays a large ledger a piece at a time: same state, same tail, same errors."""
    whole = new_ledger("OWNER") + encode_records(items)
    whole += data.draw(st.sampled_from([b"", whole[8:19], bytes(20)]), label="tail")
    damaged = bytearray(whole)
    if data.draw(st.booleans(), label="damage") and len(whole) > 80:
        damaged[data.draw(st.integers(8, len(whole) - 20), label="at")] ^= 0x10
    cuts = sorted(data.draw(st.lists(st.integers(0, len(damaged)), max_size=6), label="cuts"))
    pieces = [bytes(damaged[a:b]) for a, b in itertools.pairwise([0, *cuts, len(damaged)])]

    def outcome(feed):
        try:
            replay = feed()
        except LedgerCorrupt as exc:
            return ("corrupt", exc.offset)
        return (replay.state, replay.valid_length, replay.torn_bytes, replay.records)

    def in_pieces():
        decoder = LedgerDecoder(path="L", expected_name="OWNER")
        for piece in pieces:
            decoder.feed(piece)
        return decoder.finish()

    whole_outcome = outcome(lambda: decode_ledger(bytes(damaged), path="L", expected_name="OWNER"))
    assert outcome(in_pieces) == whole_outcome
