"""The quick tier of the scale simulation (benchmarks/scale): a few simulated hosts, seconds.

The full sweep (2 to 1,000 hosts, every loss model, 100 networks of routers) is
``python -m benchmarks.scale sim``; these check that its harness counts what it
says and that the protocol's repair traffic keeps the bounds the page states,
on sizes CI can afford. The simulation is deterministic, so the counts are
exact, not timed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scale import cli, page, routers_sim, sim, targets

SHORT = sim.Traffic(size=128, messages=3000, per_turn=10, interval=0.001)


def test_every_message_is_delivered_once_or_counted_and_the_wire_is_counted() -> None:
    run = sim.run(sim.Case(hosts=6, loss=5.0, seed=3), SHORT)
    assert run.errors == 0
    assert run.delivered + run.reported_lost == 6 * SHORT.messages
    assert run.lost_datagrams > 10 and run.losses >= run.lost_datagrams
    assert run.data_datagrams == run.wire_datagrams["data"] >= SHORT.messages // 10
    ratios = run.ratios()
    assert 0 < ratios["repairs_per_loss"] <= 1.5
    assert ratios["datagrams_per_msg"] > 0.1  # data (10 a datagram) plus repairs and NAKs


def test_a_loss_every_host_shares_costs_two_resends_not_one_per_host() -> None:
    longer = sim.Traffic(size=128, messages=8000, per_turn=10, interval=0.001)
    run = sim.run(sim.Case(hosts=12, model="burst", seed=3), longer)
    assert run.errors == 0 and run.lost_datagrams >= 10
    assert run.losses == 12 * run.lost_datagrams  # every host missed every burst
    assert run.repairs <= 2 * run.lost_datagrams  # one to the first asker, one to the group
    assert run.repairs_multicast == run.lost_datagrams


def test_healthy_hosts_keep_their_rate_beside_a_lossy_one() -> None:
    lossy = sim.run(sim.Case(hosts=8, loss=1.0, model="lossy-host", seed=4), SHORT)
    plain = sim.run(sim.Case(hosts=8, loss=1.0, seed=4), SHORT)
    assert lossy.errors == plain.errors == 0
    assert lossy.healthy["hosts"] == 7
    assert lossy.healthy["rate_msg_s"] >= 0.95 * plain.healthy["rate_msg_s"]
    # the lossy host's own losses are repaired to it alone: the others get few copies
    assert lossy.healthy["duplicates_per_msg"] < 0.01


def test_routers_simulation_counts_frames_and_delivers_once() -> None:
    result = routers_sim.run("mesh", 8)
    assert result["build_frames"] > 0
    assert all(c["frames_listen"] > 0 and c["hops"] >= 1 for c in result["interest"])
    assert all(p["exactly_once"] for p in result["publish"])
    assert result["failover"] is not None and result["failover"]["rerouted"]


def test_the_sweep_covers_every_loss_model_from_32_hosts() -> None:
    cases = list(cli.sim_cases([2, 32], {"fanout", "models", "sizes"}))
    models = {c.model for c in cases if c.hosts == 32}
    assert models == set(sim.MODELS)
    assert {c.size for c in cases} == {128, 16384}
    assert all(c.model == "independent" for c in cases if c.hosts == 2)


def _lab_row(system: str, hosts: int, cpu: float) -> dict:
    return {
        "system": system, "size": 128, "loss": 1.0, "hosts": hosts, "messages": 1000,
        "rate": 1000.0, "per_subscriber_msg_s": 990.0, "min_subscriber_msg_s": 980.0,
        "publisher_cpu_us_per_msg": cpu, "client_cpu_us_per_msg": 30.0,
        "wire_packets_per_msg": 0.5, "wire_bytes_per_msg": 300.0, "reported_lost": 0,
        "missing_unreported": 0, "out_of_order": 0, "naks_per_loss": 0.9,
        "resent_per_loss": 1.0, "naks_per_lost": 1.0, "resent_per_lost": 1.1,
        "resent_to_group": 0, "resent": 10,
    }  # fmt: skip


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_scale_section_and_its_charts_come_from_the_results(tmp_path: Path) -> None:
    runs = [sim.run(sim.Case(hosts=n, loss=1.0), SHORT).as_dict() for n in (2, 6)]
    stamp = {"started": "then", "finished": "later", "command": "python -m x", "commit": "c"}
    document = {
        "sim": {"after": {**stamp, "rows": runs}, "before": {**stamp, "rows": runs[:1]}},
        "lab": {"fanout": {**stamp, "load_before": [5.0],
                           "rows": [_lab_row("rvasync", 2, 20.0), _lab_row("rvasync", 6, 21.0),
                                    _lab_row("nats", 2, 10.0), _lab_row("nats", 6, 30.0)]}},
    }  # fmt: skip
    from benchmarks.scale import plots

    chart = tmp_path / "scale-repairs.png"
    assert plots.repairs(runs, runs[:1], chart) and chart.stat().st_size > 1000
    text = "\n".join(page.section(document, {"scale-repairs": chart.name}))
    assert text.startswith("## Scale")
    assert "### Targets" in text and "![scale-repairs](scale-repairs.png)" in text
    assert "  - publisher daemon CPU per message, 128 B, 1 % loss, 6 hosts ÷ 2 hosts" in text
    assert "**Shared machine**" in text  # lab figures at load 5 are marked
    assert page.section({}, {}) == []


def test_a_bound_over_many_hosts_names_the_case_that_comes_closest() -> None:
    def row(hosts: int, model: str, naks: float, resends: float) -> dict[str, object]:
        case = {"hosts": hosts, "model": model, "loss": 1.0, "size": 128}
        ratios = {"naks_per_lost": naks, "repairs_per_lost": resends}
        return {"case": case, "lost_datagrams": 10, "ratios": ratios}

    rows = [
        row(32, "slow", 9.0, 9.0),
        row(100, "independent", 1.5, 1.9),
        row(300, "slow", 0.7, 3.0),
    ]
    naks, resends = targets.lines({"sim": {"after": {"rows": rows}}})[1:3]
    assert "100 to 300 simulated hosts" in naks and "**met** (1.50 ≤ 2)" in naks
    assert naks.endswith("the most in independent, 1 % loss, 100 hosts")
    assert "**missed** by 50% (3.00 > 2)" in resends
    assert resends.endswith("the most in slow, 1 % loss, 300 hosts")
