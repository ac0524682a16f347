"""``receive_labeled`` (the driver's per-message entry) does exactly what ``receive`` does.

Two listener cores get the same inputs, one with each labeled message as a
``DataRecord`` through ``receive``, the other as its parts through
``receive_labeled`` (which skips making the record when it can); their outputs
must match after every step, whatever the order, gaps, duplicates, moves and
confirmations.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync.protocol.cm import CmCorrespondent
from rvasync.protocol.cm.records import DataRecord, RegisterReply

T0 = 1_000_000.0
BAZ = "_INBOX.BAZ.1"
ADDRESSES = (BAZ, "_INBOX.BAZ.2", "_RVCM.P2P.ANY.BAZ")

steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("data"),
            st.integers(1, 12),
            st.sampled_from(ADDRESSES),
            st.sampled_from(("FOO", "BAR")),
        ),
        st.tuples(st.just("reply"), st.integers(1, 6), st.booleans()),
        st.tuples(st.just("confirm"), st.integers(1, 12)),
        st.tuples(st.just("own"), st.integers(1, 12)),
    ),
    max_size=40,
)


def _core() -> tuple[CmCorrespondent, int]:
    core = CmCorrespondent("SUE", "_INBOX.SUE.1", now=T0)
    lid = core.listen("FOO", now=T0)
    core.drain()
    return core, lid


@settings(max_examples=150, deadline=None)
@given(ops=steps)
def test_receive_labeled_matches_receive(ops):
    by_record, lid = _core()
    by_parts, _ = _core()
    for op in ops:
        if op[0] in ("data", "own"):
            if op[0] == "data":
                _, seq, address, subject = op
                origin = "BAZ"
            else:
                _, seq = op
                origin, address, subject = "SUE", "_INBOX.SUE.1", "FOO"
            payload = b"m%d" % seq
            by_record.receive(DataRecord(origin, address, subject, seq, 0.0, payload), T0)
            by_parts.receive_labeled(origin, address, subject, seq, 0.0, payload, T0)
        elif op[0] == "reply":
            _, begin, resumed = op
            record = RegisterReply("BAZ", BAZ, "FOO", begin, begin + 2, resumed)
            for core in (by_record, by_parts):
                core.receive(record, T0)
        else:
            for core in (by_record, by_parts):
                core.confirm_many([(lid, "BAZ", "FOO", op[1])])
        assert by_parts.drain() == by_record.drain()
        assert by_parts.review_sources() == by_record.review_sources()
