"""Fault tolerance core: parameters, records, single-member timing and the spec's examples.

Every scenario runs on the simulated clock and network of ``test_ft_core_sim``
(no real time). Default timing: heartbeat 1 s, activation 3 s.
"""

from __future__ import annotations

import itertools

import pytest
from test_ft_core_sim import SimNet

import rvasync as rv
from rvasync.protocol.ft import (
    DESC_ACTIVATION_DIFFERS,
    DESC_ACTIVE_GOAL_DIFFERS,
    DESC_HEARTBEAT_DIFFERS,
    DESC_OTHER_PREPARES_EARLY,
    DESC_THIS_PREPARES_EARLY,
    FtAction,
    FtAdvisory,
    FtMemberCore,
    FtMonitorCore,
    FtRecord,
    RecordKind,
    _tiebreak,
    control_subject,
)

A = FtAction.ACTIVATE
D = FtAction.DEACTIVATE
P = FtAction.PREPARE_TO_ACTIVATE


def rec(
    kind: RecordKind, member: str, seq: int, weight: int = 50, *, group: str = "GRP", **params
) -> FtRecord:
    """A record as a peer with default parameters would send it."""
    values = {"active_goal": 1, "heartbeat": 1.0, "activation": 3.0, "preparation": 0.0}
    values["period"] = 1.0
    values.update(params)
    return FtRecord(kind, group, member, seq, weight, **values)


def drive(core: FtMemberCore, until: float) -> list[tuple[float, list[FtAction], list[str]]]:
    """Serve a lone core's deadlines up to ``until``: (time, actions, record kinds) each."""
    trace = []
    while (deadline := core.next_deadline()) is not None and deadline <= until:
        out = core.handle_timer(deadline)
        trace.append((deadline, out.actions, [r.kind.value for r in out.records]))
    return trace


def ordered_ids(prefix: str, count: int) -> list[str]:
    """``count`` member ids, listed from highest to lowest rank at equal weight."""
    return sorted((f"{prefix}{i}" for i in range(count)), key=_tiebreak)


# -- parameters ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"weight": 0}, "weight must be at least 1"),
        ({"weight": -5}, "weight must be at least 1"),
        ({"weight": 1.5}, "weight must be an integer"),
        ({"weight": True}, "weight must be an integer"),
        ({"active_goal": 0}, "active_goal must be at least 1"),
        ({"heartbeat": 0}, "heartbeat interval must be positive"),
        ({"heartbeat": -1.0}, "heartbeat interval must be positive"),
        ({"activation": float("inf")}, "activation interval must be finite"),
        ({"heartbeat": 3.0, "activation": 3.0}, "strictly less than the activation"),
        ({"heartbeat": 4.0, "activation": 3.0}, "strictly less than the activation"),
        ({"preparation": -1.0}, "preparation interval must be zero or positive"),
        ({"preparation": 1.0}, "strictly greater than the heartbeat interval"),
        ({"preparation": 0.5}, "strictly greater than the heartbeat interval"),
        ({"preparation": 3.0}, "strictly less than the activation interval"),
        ({"member_id": ""}, "member_id must be a non-empty string"),
    ],
)
def test_bad_parameters_raise_invalid_argument_naming_the_rule(params, words) -> None:
    with pytest.raises(rv.InvalidArgument, match=words):
        FtMemberCore("GRP", **params)


def test_recommended_parameters_are_accepted() -> None:
    core = FtMemberCore("DBQ.FLIGHTS", heartbeat=3, activation=10, preparation=8)
    assert (core.heartbeat, core.activation, core.preparation) == (3.0, 10.0, 8.0)
    assert core.weight == 50 and core.active_goal == 1


@pytest.mark.parametrize("group", ["", "A..B", "A.*", "A.>", ".A", "A" * 300])
def test_group_name_follows_subject_syntax_without_wildcards(group: str) -> None:
    with pytest.raises(rv.InvalidSubject):
        FtMemberCore(group)
    with pytest.raises(rv.InvalidSubject):
        FtMonitorCore(group, lost_interval=3.0)


def test_set_weight_below_one_is_refused() -> None:
    core = FtMemberCore("GRP")
    core.join(0.0)
    with pytest.raises(rv.InvalidArgument, match="weight must be at least 1"):
        core.set_weight(0, 1.0)


def test_monitor_lost_interval_must_be_positive() -> None:
    with pytest.raises(rv.InvalidArgument, match="lost interval must be positive"):
        FtMonitorCore("GRP", lost_interval=0)


def test_join_twice_is_not_permitted() -> None:
    core = FtMemberCore("GRP")
    core.join(0.0)
    with pytest.raises(rv.NotPermitted, match="cannot join twice"):
        core.join(1.0)


# -- records -------------------------------------------------------------------


def test_record_round_trips_through_flat_fields() -> None:
    record = FtRecord(RecordKind.HEARTBEAT, "G.X", "m1", 7, 200, 2, 1.0, 3.0, 2.5, 1.0)
    fields = record.to_fields()
    assert all(isinstance(v, str | int | float) for v in fields.values())
    assert FtRecord.from_fields(fields) == record
    assert record.active and not FtRecord.from_fields({**fields, "kind": "STATUS"}).active


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"version": 2}, "version 2 is not supported"),
        ({"kind": "PING"}, "unknown fault tolerance record kind"),
        ({"seq": -1}, "'seq' must be an integer >= 0"),
        ({"weight": True}, "'weight' must be an integer"),
        ({"active_goal": 0}, "'active_goal' must be an integer >= 1"),
        ({"heartbeat": 0.0}, "'heartbeat' must be a finite positive number"),
        ({"preparation": float("nan")}, "'preparation' must be a finite non-negative"),
        ({"member": ""}, "'member' must be a non-empty string"),
    ],
)
def test_malformed_records_raise_naming_the_field(change, words) -> None:
    fields = rec(RecordKind.STATUS, "m1", 0, group="G").to_fields()
    with pytest.raises(rv.MalformedMessage, match=words):
        FtRecord.from_fields({**fields, **change})
    del fields["group"]
    with pytest.raises(rv.MalformedMessage, match="lacks field 'group'"):
        FtRecord.from_fields(fields)


def test_advisory_subject_and_fields() -> None:
    adv = FtAdvisory("ERROR", "PARAM_MISMATCH", "DBQ.PARTS", "Active goal differs")
    assert adv.subject == "_RV.ERROR.RVFT.PARAM_MISMATCH.DBQ.PARTS"
    assert adv.fields() == {"RVADV_DESC": "Active goal differs"}
    assert FtAdvisory("ERROR", "DISABLING_MEMBER", "G", None).fields() == {}
    assert control_subject("DBQ.PARTS") == "_RVFT.DBQ.PARTS"


# -- one member, driven by hand ------------------------------------------------


def test_new_member_waits_one_activation_interval_then_activates() -> None:
    core = FtMemberCore("GRP", member_id="solo")
    out = core.join(10.0)
    assert [r.kind for r in out.records] == [RecordKind.HELLO] and not out.actions
    assert not core.active
    trace = drive(core, 16.0)
    assert trace[:2] == [(11.0, [], ["STATUS"]), (12.0, [], ["STATUS"])]
    assert trace[2] == (13.0, [A], ["HEARTBEAT"])
    assert trace[3:] == [(t, [], ["HEARTBEAT"]) for t in (14.0, 15.0, 16.0)]
    assert core.active


def test_status_rate_of_ranking_and_other_inactive_members() -> None:
    """The ranking inactive member reports at the heartbeat rate, the others slowly."""
    net = SimNet()
    for name, weight in (("top", 99), ("second", 20), ("third", 10)):
        net.member(name, weight=weight)
    net.join("top", "second", "third")
    net.run_for(30)

    def sent_between(name: str, start: float, end: float) -> list[FtRecord]:
        return [r for t, r in net.nodes[name].sent if start <= t < end]

    assert {r.kind for r in sent_between("top", 10, 22)} == {RecordKind.HEARTBEAT}
    assert len(sent_between("top", 10, 22)) == 12
    assert [(r.kind, r.period) for r in sent_between("second", 10, 22)] == [
        (RecordKind.STATUS, 1.0)
    ] * 12
    assert [(r.kind, r.period) for r in sent_between("third", 10, 22)] == [
        (RecordKind.STATUS, 3.0)
    ] * 4


def test_hint_precedes_activation_by_activation_minus_preparation() -> None:
    core = FtMemberCore("GRP", member_id="solo", preparation=2.5)
    core.join(0.0)
    actions = [(t, acts) for t, acts, _ in drive(core, 4.0) if acts]
    assert actions == [(2.5, [P]), (3.0, [A])]


def test_own_records_other_groups_and_stale_records_are_ignored() -> None:
    core = FtMemberCore("GRP", member_id="me", weight=10)
    core.join(0.0)
    mine = rec(RecordKind.HEARTBEAT, "me", 99, 500)
    other_group = rec(RecordKind.HEARTBEAT, "x", 0, 500, group="OTHER")
    core.receive(mine, 0.1)
    core.receive(other_group, 0.1)
    assert [m.member for m in core.ranking()] == ["me"]
    core.receive(rec(RecordKind.HEARTBEAT, "x", 5, 500), 0.2)
    core.receive(rec(RecordKind.BYE, "x", 6, 500), 0.3)
    # A heartbeat overtaken by the BYE must not bring the member back.
    core.receive(rec(RecordKind.HEARTBEAT, "x", 4, 500), 0.4)
    assert [m.member for m in core.ranking()] == ["me"]


def test_withdraw_of_an_active_member_deactivates_and_says_bye() -> None:
    core = FtMemberCore("GRP")
    core.join(0.0)
    core.handle_timer(3.0)
    out = core.withdraw(3.5)
    assert out.actions == [D]
    assert [r.kind for r in out.records] == [RecordKind.BYE]
    assert not core.active and core.next_deadline() is None
    assert not core.withdraw(4.0)


# -- the specification's examples ------------------------------------------------


def test_heavier_member_preempts_lighter_active_one() -> None:
    """Rank among Members with Different Weight: A (200) starts while B (100) is active."""
    net = SimNet()
    net.member("B", weight=100)
    net.member("A", weight=200)
    net.join("B")
    net.run_for(5)
    assert net.active() == {"B"}
    net.join("A")
    t_join = net.now
    net.run_for(2.9)
    assert net.active() == {"B"}  # A still in its first activation interval
    net.run_for(1)
    assert net.active() == {"A"}
    ((t_act, _),) = net.actions_of("A", A)
    ((t_deact, _),) = net.actions_of("B", D)
    assert t_act == pytest.approx(t_join + 3.0)
    assert t_act <= t_deact < t_act + 0.05  # B steps down on A's first heartbeat
    assert [a for _, a in net.nodes["B"].actions] == [A, D]


def test_equal_weights_start_together_exactly_one_activates() -> None:
    """Ranking Members with Equal Weight: C and D start at the same time."""
    net = SimNet()
    net.member("C")
    net.member("D")
    net.join("C", "D")
    net.run_for(10)
    assert len(net.active()) == 1
    winner = net.core("C").ranking()[0].member
    assert net.active() == {winner}
    assert [m.member for m in net.core("C").ranking()] == [
        m.member for m in net.core("D").ranking()
    ]


def test_status_quo_higher_ranked_inactive_does_not_preempt_equal_weight() -> None:
    """Status Quo among Members with Equal Weight: E outranks F, F already active."""
    e, f = ordered_ids("E", 2)
    net = SimNet()
    net.member(f)
    net.member(e)
    net.join(f)
    net.run_for(5)
    net.join(e)
    net.run_for(30)
    assert [m.member for m in net.core(e).ranking()] == [e, f]
    assert net.active() == {f}
    assert net.actions_of(e) == []


def test_status_quo_vacancy_goes_to_the_higher_ranked_of_equals() -> None:
    """... but when neither E nor F is active and a member is needed, E activates."""
    e, f = ordered_ids("E", 2)
    net = SimNet()
    net.member("G", weight=200)
    net.member(f)
    net.member(e)
    net.join("G", f)
    net.run_for(5)
    net.join(e)
    net.run_for(5)
    assert net.active() == {"G"}
    net.withdraw("G")
    net.run_for(0.1)
    assert net.active() == {e}
    assert net.actions_of(f) == []


def test_active_goal_five_for_data_mirroring() -> None:
    """Example: Several Active Members: at least 5 copies while members remain."""
    net = SimNet()
    names = [f"M{i}" for i in range(7)]
    for name in names:
        net.member(name, active_goal=5)
    net.join(*names)
    net.run_for(5)
    assert len(net.active()) == 5
    victims = sorted(net.active())[:2]
    for v in victims:
        net.kill(v)
    net.run_for(4)
    assert len(net.active()) == 5
    assert not set(victims) & net.active()
    net.kill(sorted(net.active())[0])
    net.run_for(4)
    assert len(net.active()) == 4  # only four members left


def test_mutual_backup_across_a_wan() -> None:
    """Multiple Groups, Example: Mutual Backup across a WAN (Tokyo and Seattle)."""
    weights = {  # process: (weight in TOKYO.APP1, weight in SEATTLE.APP1)
        "A": (400, 100),
        "B": (300, 200),
        "J": (100, 400),
        "K": (200, 300),
    }
    net = SimNet(latency=(0.02, 0.08))
    params = {"heartbeat": 2.0, "activation": 10.0, "preparation": 8.0}
    for proc, (tokyo, seattle) in weights.items():
        net.member(f"{proc}@T", "TOKYO.APP1", proc, weight=tokyo, **params)
        net.member(f"{proc}@S", "SEATTLE.APP1", proc, weight=seattle, **params)
    net.join(*net.nodes)
    net.run_for(12)
    assert net.active("TOKYO.APP1") == {"A@T"}
    assert net.active("SEATTLE.APP1") == {"J@S"}
    net.kill("A")
    net.run_for(11)
    assert net.active("TOKYO.APP1") == {"B@T"}
    net.kill("B")
    net.run_for(11)
    # Both Tokyo processes are gone: K (200) outranks J (100) in the Tokyo group.
    assert net.active("TOKYO.APP1") == {"K@T"}
    assert net.active("SEATTLE.APP1") == {"J@S"}
    hint_then_activate = [a for _, a in net.nodes["K@T"].actions]
    assert hint_then_activate[-2:] == [P, A]
    assert net.actions_of("J@T") == []


# -- failures, handover, partitions ----------------------------------------------


def three_members(**params) -> SimNet:
    net = SimNet()
    for name, weight in (("X", 300), ("Y", 200), ("Z", 100)):
        net.member(name, weight=weight, **params)
    net.join("X", "Y", "Z")
    net.run_for(5)
    assert net.active() == {"X"}
    return net


def test_killed_active_is_replaced_by_exactly_one_after_the_activation_interval() -> None:
    net = three_members()
    net.kill("X")
    t_kill = net.now
    net.run_for(2.0)
    assert net.active() == set()  # silence shorter than the activation interval
    net.run_for(2.0)
    assert net.active() == {"Y"}
    ((t_act, _),) = net.actions_of("Y", A)
    assert t_kill + 3.0 - 1.0 <= t_act <= t_kill + 3.0 + 0.05
    net.run_for(20)
    assert net.actions_of("Z") == []
    assert [a for _, a in net.nodes["Y"].actions] == [A]  # no hints unless requested


def test_graceful_withdraw_hands_over_at_once() -> None:
    net = three_members()
    net.withdraw("X")
    t = net.now
    net.run_for(0.1)
    assert net.active() == {"Y"}
    ((t_act, _),) = net.actions_of("Y", A)
    assert t_act - t < 0.05


def test_independent_confirmation_hands_over_at_once() -> None:
    net = three_members()
    net.kill("X", confirm=True)
    t = net.now
    net.run_for(0.1)
    assert net.active() == {"Y"}
    ((t_act, _),) = net.actions_of("Y", A)
    assert t_act - t < 0.05


def test_hint_comes_before_activation_on_immediate_handover() -> None:
    net = three_members(preparation=2.0)
    net.withdraw("X")
    net.run_for(0.1)
    assert [a for _, a in net.nodes["Y"].actions] == [P, A]
    (t_hint, _), (t_act, _) = net.nodes["Y"].actions
    assert t_hint == t_act


def test_hints_on_silence_and_hints_without_activation() -> None:
    """Prepare-to-Activate Hints: at the preparation interval of silence; only a hint."""
    net = three_members(preparation=1.8)
    # One lost heartbeat: 2 s of silence passes the preparation interval only.
    net.loss = 1.0
    net.run_for(1.0)
    net.loss = 0.0
    net.run_for(5.0)
    assert [a for _, a in net.nodes["Y"].actions] == [P]
    assert net.actions_of("Z") == []  # only the ranking inactive member is hinted
    assert net.active() == {"X"}
    net.kill("X")
    net.run_for(4)
    acts = net.nodes["Y"].actions
    assert [a for _, a in acts] == [P, P, A]
    assert 0 < acts[2][0] - acts[1][0] <= 3.0 - 1.8 + 1e-9


def test_partition_keeps_goal_on_each_side_and_heal_removes_extras() -> None:
    net = SimNet()
    weights = {"N1": 100, "N2": 90, "S1": 80, "S2": 70}
    for name, weight in weights.items():
        net.member(name, weight=weight, active_goal=1)
    net.join(*weights)
    net.run_for(5)
    assert net.active() == {"N1"}
    net.partition({"N1", "N2"}, {"S1", "S2"})
    net.run_for(5)
    assert net.active() == {"N1", "S1"}
    net.run_for(30)  # stays so while apart
    assert net.active() == {"N1", "S1"}
    net.heal()
    t_heal = net.now
    net.run_for(3.0)
    assert net.active() == {"N1"}
    ((t_down, _),) = net.actions_of("S1", D)
    assert t_down - t_heal <= 3.0
    too_many = net.advisories_of("N1", "TOO_MANY_ACTIVE")
    assert len(too_many) == 1
    assert too_many[0].subject == "_RV.WARN.RVFT.TOO_MANY_ACTIVE.GRP"
    assert net.advisories_of("S1", "TOO_MANY_ACTIVE") == []  # it is about to deactivate


def test_partition_heal_with_equal_weights_keeps_the_higher_ranked_active() -> None:
    first, second = ordered_ids("Q", 2)
    net = SimNet()
    net.member(first)
    net.member(second)
    net.partition({first})
    net.join(first, second)
    net.run_for(5)
    assert net.active() == {first, second}
    net.heal()
    net.run_for(3)
    assert net.active() == {first}


def test_partition_with_goal_two() -> None:
    net = SimNet()
    names = [f"W{i}" for i in range(6)]
    for i, name in enumerate(names):
        net.member(name, weight=100 - i, active_goal=2)
    net.join(*names)
    net.run_for(5)
    assert net.active() == {"W0", "W1"}
    net.partition({"W0", "W2", "W4"})
    net.run_for(5)
    assert net.active() == {"W0", "W2", "W1", "W3"}
    net.heal()
    net.run_for(3)
    assert net.active() == {"W0", "W1"}
    # The extras (W2, W3) were active when they should not be: the two that stay
    # say so; newcomers that belong among the actives raise nothing (test_ft_core_timing).
    assert net.advisories_of("W0", "TOO_MANY_ACTIVE") and net.advisories_of("W1", "TOO_MANY_ACTIVE")


# -- weight ------------------------------------------------------------------------


def test_lowering_the_active_members_weight_hands_over() -> None:
    net = three_members()
    net.set_weight("X", 150)
    net.run_for(0.2)
    assert net.active() == {"Y"}
    assert [a for _, a in net.nodes["X"].actions] == [A, D]


def test_raising_an_inactive_members_weight_preempts() -> None:
    net = three_members()
    net.set_weight("Z", 1000)
    net.run_for(0.2)
    assert net.active() == {"Z"}
    assert [m.member for m in net.core("X").ranking()] == ["Z", "X", "Y"]


def test_disabled_member_deactivates_and_is_a_last_resort() -> None:
    net = three_members()
    net.disable("X")
    net.run_for(0.2)
    assert net.active() == {"Y"}
    advs = net.advisories_of("X")
    assert [(a.subject, a.fields()) for a in advs] == [("_RV.ERROR.RVFT.DISABLING_MEMBER.GRP", {})]
    assert net.advisories_of("Y") == []  # only the disabled member presents it
    assert net.core("X").weight == 0 and net.core("X").disabled
    net.kill("Y")
    net.run_for(4)
    assert net.active() == {"Z"}
    net.kill("Z")
    net.run_for(4)
    assert net.active() == {"X"}  # no one else is left
    net.set_weight("X", 10)
    assert not net.core("X").disabled


def test_lone_disabled_member_waits_an_activation_interval_before_reactivating() -> None:
    net = SimNet()
    net.member("solo")
    net.join("solo")
    net.run_for(4)
    net.disable("solo")
    t = net.now
    net.run_for(2.9)
    assert net.active() == set()
    net.run_for(0.2)
    assert net.active() == {"solo"}
    assert net.actions_of("solo", A)[-1][0] == pytest.approx(t + 3.0)


# -- advisories ----------------------------------------------------------------------


def test_param_mismatch_errors_for_active_goal_and_activation_interval() -> None:
    net = SimNet()
    net.member("U", weight=200, active_goal=1, activation=3.0)
    net.member("V", weight=100, active_goal=2, activation=4.0)
    net.join("U", "V")
    net.run_for(20)
    for name in ("U", "V"):
        advs = net.advisories_of(name, "PARAM_MISMATCH")
        assert sorted((a.subject, a.description) for a in advs) == [
            ("_RV.ERROR.RVFT.PARAM_MISMATCH.GRP", DESC_ACTIVATION_DIFFERS),
            ("_RV.ERROR.RVFT.PARAM_MISMATCH.GRP", DESC_ACTIVE_GOAL_DIFFERS),
        ]
    # Appendix C, TOO_MANY_ACTIVE: goal 1 and goal 2 members both activate, and
    # the goal-1 member (which keeps its place) complains.
    assert net.active() == {"U", "V"}
    assert len(net.advisories_of("U", "TOO_MANY_ACTIVE")) == 1
    assert net.advisories_of("V", "TOO_MANY_ACTIVE") == []


def test_param_mismatch_warnings_for_heartbeat_and_preparation() -> None:
    net = SimNet()
    net.member("H", heartbeat=1.0, preparation=0.0)
    net.member("Q", heartbeat=0.5, preparation=1.0)
    net.join("H", "Q")
    net.run_for(20)
    warn = "_RV.WARN.RVFT.PARAM_MISMATCH.GRP"
    h_descs = sorted((a.subject, a.description) for a in net.advisories_of("H", "PARAM_MISMATCH"))
    q_descs = sorted((a.subject, a.description) for a in net.advisories_of("Q", "PARAM_MISMATCH"))
    assert h_descs == sorted([(warn, DESC_HEARTBEAT_DIFFERS), (warn, DESC_OTHER_PREPARES_EARLY)])
    assert q_descs == sorted([(warn, DESC_HEARTBEAT_DIFFERS), (warn, DESC_THIS_PREPARES_EARLY)])


def test_too_few_active_when_members_fail_as_they_activate() -> None:
    """TOO_FEW_ACTIVE diagnosis: member processes terminate immediately upon activation."""
    net = SimNet()
    for name, weight in (("X", 400), ("R1", 300), ("R2", 200), ("C", 100)):
        net.member(name, weight=weight)
    net.join("X", "R1", "R2", "C")
    net.run_for(5)
    net.doomed = {"R1", "R2"}
    net.kill("X")
    net.run_for(7.5)
    assert net.active() == set()
    advs = net.advisories_of("C", "TOO_FEW_ACTIVE")
    assert [a.subject for a in advs] == ["_RV.WARN.RVFT.TOO_FEW_ACTIVE.GRP"]
    assert "fewer than the active goal of 1" in (advs[0].description or "")
    net.run_for(10)  # once both are known lost, C takes over
    assert net.active() == {"C"}
    assert len(net.advisories_of("C", "TOO_FEW_ACTIVE")) == 1


def test_too_few_active_with_mismatched_goals() -> None:
    net = SimNet()
    net.member("X", weight=300, active_goal=1)
    net.member("Y", weight=200, active_goal=1)
    net.member("M", weight=100, active_goal=2)
    net.join("X", "Y", "M")
    net.run_for(10)
    assert net.active() == {"X"}  # Y's goal is 1, and M ranks below Y
    assert len(net.advisories_of("M", "TOO_FEW_ACTIVE")) == 1
    assert net.advisories_of("Y", "TOO_FEW_ACTIVE") == []


def test_no_advisories_in_an_ordinary_failover() -> None:
    net = three_members()
    net.kill("X")
    net.run_for(20)
    assert net.active() == {"Y"}
    assert all(net.advisories_of(n) == [] for n in ("Y", "Z"))


# -- monitor -------------------------------------------------------------------------


def test_monitor_counts_active_members_at_every_change() -> None:
    net = SimNet()
    mon = net.monitor("M", lost_interval=3.0)
    for i in range(4):
        net.member(f"K{i}", weight=10 + i, active_goal=2)
    net.join("K0", "K1", "K2", "K3")
    net.run_for(5)
    assert mon.core.active_count == 2
    net.withdraw("K3")
    net.run_for(0.5)
    net.kill("K2")
    net.run_for(5)
    counts = [c for _, c in mon.counts]
    assert counts[:2] == [1, 2]
    assert counts[-1] == 2 and mon.core.active_count == 2
    assert all(a != b for a, b in itertools.pairwise(counts))
    assert mon.core.active_members() == sorted(net.active())


def test_monitor_is_passive_and_reports_loss_after_lost_interval() -> None:
    mon = FtMonitorCore("GRP", lost_interval=3.0)
    beat = rec(RecordKind.HEARTBEAT, "m", 0, 50)
    assert mon.receive(beat, 1.0) == [1]
    assert mon.receive(beat, 1.5) == []  # duplicate
    assert mon.next_deadline() == 4.0
    assert mon.handle_timer(3.9) == []
    assert mon.handle_timer(4.0) == [0]
    assert mon.next_deadline() is None
    status = rec(RecordKind.STATUS, "n", 0, 50)
    assert mon.receive(status, 5.0) == []
    n_beat = rec(RecordKind.HEARTBEAT, "n", 1, 50)
    assert mon.receive(n_beat, 5.1) == [1]
    assert mon.peer_gone("n", 5.2) == [0]
