"""rvasync.transport.backpressure.ReadHold: when a standalone daemon's link holds its
reading for its listener queues (issue 43 item 1), on made-up backlogs and times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rvasync.transport.backpressure import ReadHold

LIMIT = 1000


def test_holds_at_half_and_reads_again_at_a_quarter():
    hold = ReadHold()
    assert not hold.check(499, LIMIT, 0.0)
    assert hold.check(500, LIMIT, 0.0) and hold.held
    assert hold.poll(400, LIMIT, 1.0, stall_after=5.0)  # draining: still held
    assert hold.poll(251, LIMIT, 2.0, stall_after=5.0)
    assert not hold.poll(250, LIMIT, 3.0, stall_after=5.0) and not hold.held
    assert hold.check(600, LIMIT, 4.0)  # and again when it fills up


def test_a_slow_consumer_is_not_taken_for_a_stuck_one():
    hold = ReadHold()
    hold.check(500, LIMIT, 0.0)
    for second in range(1, 200):  # one message a second: slow, but it drains
        assert hold.poll(500 - second, LIMIT, float(second), stall_after=5.0)


def test_gives_up_on_a_backlog_that_does_not_drain_until_it_is_down_to_a_quarter():
    hold = ReadHold()
    hold.check(500, LIMIT, 0.0)
    assert hold.poll(500, LIMIT, 4.9, stall_after=5.0)
    assert not hold.poll(500, LIMIT, 5.0, stall_after=5.0) and not hold.held
    # Reading on: the listener queues' own bound applies, no hold however full.
    assert not hold.check(1000, LIMIT, 6.0)
    assert not hold.check(251, LIMIT, 7.0)
    assert not hold.check(250, LIMIT, 8.0)  # down to a quarter: back-pressure again ...
    assert hold.check(500, LIMIT, 9.0)  # ... from half


def test_no_bound_no_hold():
    hold = ReadHold()
    assert not hold.check(10**9, 0, 0.0)
    hold.check(500, LIMIT, 0.0)
    assert not hold.poll(500, 0, 1.0)  # the bound removed while held: read on


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2 * LIMIT), st.floats(0, 3)), max_size=200))
def test_never_held_with_the_backlog_at_a_quarter_nor_longer_than_a_stall(steps):
    hold = ReadHold()
    now = 0.0
    unchanged_since = None  # when the backlog last went down during the hold
    lowest = None
    for polling, backlog, step in steps:
        now += step
        held = hold.poll(backlog, LIMIT, now, 5.0) if hold.held and polling else None
        if held is None:
            was = hold.held
            held = hold.check(backlog, LIMIT, now)
            if held and not was:
                assert backlog >= LIMIT // 2
                unchanged_since, lowest = now, backlog
            continue
        if held:
            assert backlog > LIMIT // 4
            if backlog < lowest:
                unchanged_since, lowest = now, backlog
            assert now - unchanged_since < 5.0
