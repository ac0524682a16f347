"""FtMember over the intra-process transport: activation, preemption, failover, handover.

Several members share one event loop and the process transport, with small
intervals (heartbeat 0.05 s, activation 0.25 s). Waits are bounded; the only
timings asserted are loose bounds that hold by construction (a crash cannot
be noticed before the activation interval minus one heartbeat) or by orders
of magnitude (a graceful handover takes far less than an activation interval).
"""

from __future__ import annotations

import asyncio

import pytest
from test_ft_driver_support import FAST, WAIT, Journal, actives, until

from rvasync.ftdriver import FtMember
from rvasync.protocol.ft import FtAction

A, D, P = FtAction.ACTIVATE, FtAction.DEACTIVATE, FtAction.PREPARE_TO_ACTIVATE


async def join_all(members: dict[str, FtMember]) -> None:
    for member in members.values():
        await member.join()


async def withdraw_all(members: dict[str, FtMember]) -> None:
    for member in members.values():
        await member.withdraw()


async def test_one_of_three_activates(rv_process_transport):
    journal = Journal()
    members = {
        name: FtMember(rv_process_transport, "SVC.TIME", callback=journal.callback(name), **FAST)
        for name in "abc"
    }
    await join_all(members)
    try:
        assert actives(members) == []  # every new member starts inactive
        await until(lambda: len(actives(members)) == 1, what="one active member")
        # Several more activation intervals: nobody else activates, nobody flips.
        await asyncio.sleep(4 * FAST["activation"])
        assert len(actives(members)) == 1
        assert len(journal.activations()) == 1
        (winner,) = actives(members)
        assert journal.of(winner) == [A]
        assert all(m.active_count == 1 for m in members.values())
    finally:
        await withdraw_all(members)


async def test_heavier_member_preempts_without_a_gap(rv_process_transport):
    journal = Journal()
    light = FtMember(
        rv_process_transport, "SVC.P", weight=100, callback=journal.callback("light"), **FAST
    )
    async with light:
        await until(lambda: light.active, what="the light member to activate")
        heavy = FtMember(
            rv_process_transport, "SVC.P", weight=200, callback=journal.callback("heavy"), **FAST
        )
        async with heavy:
            await until(lambda: heavy.active and not light.active, what="preemption")
            assert journal.of("light") == [A, D]
            assert journal.of("heavy") == [A]
            # The heavier one took over before the lighter one let go: no gap in service.
            assert journal.time_of("heavy", A) <= journal.time_of("light", D)


async def test_status_quo_among_equal_weights(rv_process_transport):
    journal = Journal()
    first = FtMember(rv_process_transport, "SVC.Q", callback=journal.callback("first"), **FAST)
    async with first:
        await until(lambda: first.active, what="the first member to activate")
        others = {
            name: FtMember(rv_process_transport, "SVC.Q", callback=journal.callback(name), **FAST)
            for name in ("second", "third")
        }
        await join_all(others)
        try:
            await asyncio.sleep(3 * FAST["activation"])
            assert first.active and actives(others) == []
            assert journal.activations() == ["first"]
        finally:
            await withdraw_all(others)


async def test_weight_change_reranks_at_once(rv_process_transport):
    journal = Journal()
    members = {
        name: FtMember(rv_process_transport, "SVC.W", callback=journal.callback(name), **FAST)
        for name in ("x", "y")
    }
    await join_all(members)
    try:
        await until(lambda: len(actives(members)) == 1, what="one active member")
        (old,) = actives(members)
        new = "y" if old == "x" else "x"
        members[new].weight = 90
        assert members[new].weight == 90
        await until(lambda: actives(members) == [new], what="the heavier member to take over")
        assert journal.of(old) == [A, D]
    finally:
        await withdraw_all(members)


async def test_crash_of_active_member_fails_over_after_activation_interval(rv_process_transport):
    journal = Journal()
    members = {
        name: FtMember(rv_process_transport, "SVC.CRASH", callback=journal.callback(name), **FAST)
        for name in "abc"
    }
    await join_all(members)
    try:
        await until(lambda: len(actives(members)) == 1, what="one active member")
        (victim,) = actives(members)
        loop = asyncio.get_running_loop()
        members[victim]._halt()  # no BYE, no DEACTIVATE: as if killed
        crashed_at = loop.time()
        survivors = {n: m for n, m in members.items() if n != victim}
        await until(lambda: len(actives(survivors)) == 1, what="a survivor to activate")
        (successor,) = actives(survivors)
        took = journal.time_of(successor, A) - crashed_at
        # Silence must last the activation interval since the last heartbeat,
        # which was sent at most one heartbeat interval before the crash.
        assert took >= FAST["activation"] - FAST["heartbeat"] - 0.01
        await asyncio.sleep(2 * FAST["activation"])
        assert len(actives(survivors)) == 1
        assert journal.activations() == [victim, successor]
    finally:
        await withdraw_all(members)


async def test_graceful_exit_hands_over_without_waiting(rv_process_transport):
    journal = Journal()
    slow = {"heartbeat": 0.1, "activation": 1.0}  # long interval: a wait would show
    members = {
        name: FtMember(rv_process_transport, "SVC.BYE", callback=journal.callback(name), **slow)
        for name in "abc"
    }
    await join_all(members)
    try:
        await until(lambda: len(actives(members)) == 1, what="one active member")
        (leaver,) = actives(members)
        left_at = asyncio.get_running_loop().time()
        await members[leaver].withdraw()
        assert journal.of(leaver) == [A, D]  # told to stop serving before leaving
        assert not members[leaver].joined
        stayers = {n: m for n, m in members.items() if n != leaver}
        await until(lambda: len(actives(stayers)) == 1, what="handover")
        (successor,) = actives(stayers)
        assert journal.time_of(successor, A) - left_at < slow["activation"] / 2
    finally:
        await withdraw_all(members)


async def test_hints_precede_activation(rv_process_transport):
    journal = Journal()
    member = FtMember(
        rv_process_transport,
        "SVC.HINT",
        heartbeat=0.05,
        preparation=0.15,
        activation=0.25,
        callback=journal.callback("m"),
    )
    async with member:
        await until(lambda: member.active, what="activation")
    # One hint, however late the loop runs the timers (a late one used to make
    # the hint look stale, and a second came with the ACTIVATE).
    assert journal.of("m") == [P, A, D]


async def test_disable_and_reenable(rv_process_transport):
    journal = Journal()
    members = {
        name: FtMember(rv_process_transport, "SVC.DIS", callback=journal.callback(name), **FAST)
        for name in ("x", "y")
    }
    advisories = rv_process_transport.listen("_RV.ERROR.RVFT.DISABLING_MEMBER.SVC.DIS")
    await join_all(members)
    try:
        await until(lambda: len(actives(members)) == 1, what="one active member")
        (first,) = actives(members)
        other = "y" if first == "x" else "x"
        members[first].weight = 0
        assert members[first].weight == 0 and not members[first].active
        advisory = await advisories.get(WAIT)
        assert "RVADV_DESC" not in advisory  # the spec's DISABLING_MEMBER carries no text
        await until(lambda: actives(members) == [other], what="the other member to take over")
        members[first].disable()  # already disabled: nothing more happens
        members[first].weight = 60  # re-enabled and now heavier
        await until(lambda: actives(members) == [first], what="the re-enabled member to return")
        assert journal.of(first) == [A, D, A]
        assert advisories.queue.poll() is None
    finally:
        await withdraw_all(members)
        await advisories.close()


async def test_param_mismatch_advisory_is_presented(rv_process_transport):
    journal = Journal()
    seen = rv_process_transport.listen("_RV.*.RVFT.PARAM_MISMATCH.SVC.MIS")
    a = FtMember(rv_process_transport, "SVC.MIS", callback=journal.callback("a"), **FAST)
    b = FtMember(
        rv_process_transport,
        "SVC.MIS",
        heartbeat=0.06,
        activation=0.25,
        callback=journal.callback("b"),
    )
    async with a, b:
        first = await seen.get(WAIT)
        second = await seen.get(WAIT)
    assert {first.subject, second.subject} == {"_RV.WARN.RVFT.PARAM_MISMATCH.SVC.MIS"}
    assert first["RVADV_DESC"] == second["RVADV_DESC"] == "Heartbeat interval differs"
    await seen.close()


async def test_one_member_in_two_groups_mutual_backup(rv_process_transport):
    """Figure 20: Tokyo serves its group and backs up Seattle's, and the other way round."""
    journal = Journal()
    t = rv_process_transport
    tokyo = {
        "TOKYO": FtMember(t, "SRV.TOKYO", weight=100, callback=journal.callback("tk@T"), **FAST),
        "SEATTLE": FtMember(t, "SRV.SEATTLE", weight=10, callback=journal.callback("tk@S"), **FAST),
    }
    seattle = {
        "TOKYO": FtMember(t, "SRV.TOKYO", weight=10, callback=journal.callback("se@T"), **FAST),
        "SEATTLE": FtMember(
            t, "SRV.SEATTLE", weight=100, callback=journal.callback("se@S"), **FAST
        ),
    }
    await join_all(tokyo)
    await join_all(seattle)
    try:
        await until(
            lambda: tokyo["TOKYO"].active and seattle["SEATTLE"].active, what="home servers"
        )
        await asyncio.sleep(2 * FAST["activation"])
        assert not tokyo["SEATTLE"].active and not seattle["TOKYO"].active
        for membership in tokyo.values():  # the whole Tokyo process dies
            membership._halt()
        await until(lambda: seattle["TOKYO"].active, what="Seattle to cover Tokyo")
        assert seattle["SEATTLE"].active
        assert journal.of("se@T") == [A] and journal.of("se@S") == [A]
    finally:
        await withdraw_all(tokyo)
        await withdraw_all(seattle)


async def test_active_goal_of_two(rv_process_transport):
    journal = Journal()
    members = {
        name: FtMember(
            rv_process_transport,
            "SVC.TWO",
            active_goal=2,
            callback=journal.callback(name),
            **FAST,
        )
        for name in "abcd"
    }
    await join_all(members)
    try:
        await until(lambda: len(actives(members)) == 2, what="two active members")
        victim = actives(members)[0]
        await members[victim].withdraw()
        rest = {n: m for n, m in members.items() if n != victim}
        await until(lambda: len(actives(rest)) == 2, what="the goal restored")
        assert len(journal.activations()) == 3
    finally:
        await withdraw_all(members)


async def test_member_leaves_while_still_new(rv_process_transport):
    journal = Journal()
    member = FtMember(rv_process_transport, "SVC.NEW", callback=journal.callback("m"), **FAST)
    async with member:
        assert member.joined and not member.active
    assert journal.entries == [] and not member.joined
    await member.withdraw()  # twice is harmless


async def test_exit_by_exception_still_withdraws(rv_process_transport):
    journal = Journal()
    member = FtMember(rv_process_transport, "SVC.EXC", callback=journal.callback("m"), **FAST)
    with pytest.raises(RuntimeError, match="boom"):
        async with member:
            await until(lambda: member.active, what="activation")
            raise RuntimeError("boom")
    assert journal.of("m") == [A, D]


async def test_repr_names_group_and_state(rv_process_transport):
    member = FtMember(rv_process_transport, "SVC.REPR", callback=lambda m, a: None, **FAST)
    assert "not joined" in repr(member) and "'SVC.REPR'" in repr(member)
    async with member:
        assert "inactive" in repr(member)
    assert member.group == "SVC.REPR" and member.transport is rv_process_transport
    assert (member.heartbeat, member.activation, member.preparation) == (0.05, 0.25, 0.0)
    assert member.active_goal == 1 and member.malformed_records == 0
