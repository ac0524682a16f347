"""Light tests of the benchmark harness: statistics, the registry, the report writer.

Nothing here measures anything or starts a process; the harness's end-to-end
check is ``python -m benchmarks run --quick``.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

# benchmarks/ is a top-level package of the repository, not part of the installed
# distribution: make the checkout importable however pytest was started.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import report, stats  # noqa: E402
from benchmarks.cli import main as cli_main  # noqa: E402
from benchmarks.cli import parser  # noqa: E402
from benchmarks.interfaces import Match  # noqa: E402
from benchmarks.machine import cpu_model  # noqa: E402
from benchmarks.measure import CountingSink, end_marker, payload, timed_batches  # noqa: E402
from benchmarks.registry import (  # noqa: E402
    Metric,
    Params,
    Registry,
    RoleGroup,
    Scenario,
    System,
    Variant,
    discover,
)

# -- stats ------------------------------------------------------------------------------


def test_percentile_interpolates_linearly_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert stats.percentile(values, 0) == 1.0
    assert stats.percentile(values, 100) == 4.0
    assert stats.percentile(values, 50) == 2.5
    assert stats.percentile(values, 90) == pytest.approx(3.7)
    assert stats.percentile([7.0], 99.9) == 7.0


def test_percentile_of_a_large_sample() -> None:
    values = list(range(1, 10_001))  # 1..10000
    qs = stats.percentiles(values, (50, 90, 99, 99.9))
    assert qs[50] == pytest.approx(5000.5)
    assert qs[90] == pytest.approx(9000.1)
    assert qs[99] == pytest.approx(9900.01)
    assert qs[99.9] == pytest.approx(9990.001)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        stats.percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        stats.percentile([1.0], 101)


def test_summaries_over_repetitions() -> None:
    reps = [{"a": 3.0, "b": 1.0}, {"a": 1.0, "b": float("nan")}, {"a": 2.0, "label": "x"}]
    summary = stats.summarize_reps(reps)
    assert summary["a"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3.0}
    assert summary["b"]["n"] == 1.0  # the NaN is not a number to summarise
    assert "label" not in summary


def test_ratio_is_none_when_meaningless() -> None:
    assert stats.ratio(6.0, 3.0) == 2.0
    assert stats.ratio(None, 3.0) is None
    assert stats.ratio(1.0, 0.0) is None
    assert stats.ratio(float("inf"), 1.0) is None


# -- measuring helpers ------------------------------------------------------------------


def test_counting_sink_counts_data_and_stops_on_end_markers() -> None:
    sink = CountingSink(expected=10, publishers=2)
    assert sink(payload(32)) is False
    assert sink(payload(32)) is False
    assert sink(end_marker(0)) is False
    assert sink(end_marker(0)) is False  # a repeated marker is the same publisher
    assert sink(end_marker(1)) is True
    result = sink.result()
    assert result["count"] == 2
    assert result["bytes"] == 64
    assert result["ends"] == 2
    assert result["t_last"] >= result["t_first"] > 0


def test_counting_sink_is_done_at_the_expected_count() -> None:
    sink = CountingSink(expected=2, publishers=1)
    assert sink(payload(16)) is False
    assert sink(payload(16)) is True


def test_payload_never_looks_like_an_end_marker() -> None:
    with pytest.raises(ValueError, match="16-byte"):
        payload(8)
    assert len(end_marker(123)) < 16


def test_timed_batches_grows_the_batch_then_measures() -> None:
    calls: list[int] = []

    def fake_batch(n: int) -> int:
        calls.append(n)
        return n * 1_000_000  # 1 ms per operation

    figures = timed_batches(fake_batch, seconds=0.1, min_batch_seconds=0.004)
    assert calls[:3] == [1, 2, 4]
    assert all(f == pytest.approx(1_000_000) for f in figures)
    assert len(figures) >= 5


# -- registry ---------------------------------------------------------------------------

EXPECTED_SCENARIOS = {
    "pubsub-128B-1sub",
    "pubsub-16KiB-1sub",
    "pubsub-128B-10sub",
    "pubsub-16KiB-10sub",
    "fanin-10pub",
    "large-64MiB",
    "reqrep-latency",
    "intraprocess",
    "fanout-1",
    "fanout-1000",
    "fanout-100000",
    "micro-codec",
    "micro-match-10",
    "micro-match-100000",
}


def test_discovery_registers_every_scenario_and_system() -> None:
    registry = discover()
    assert set(registry.scenarios) >= EXPECTED_SCENARIOS
    assert {"rvasync", "nats", "zmq", "floor"} <= set(registry.systems)
    for scenario in registry.scenarios.values():
        for quick in (False, True):
            params = scenario.resolved_params(quick)
            assert params["timeout"] > 0
            for group in scenario.layout(params):
                assert group.role in scenario.roles
                assert group.count >= 1


def test_every_planned_row_has_a_status_and_absent_rows_a_reason() -> None:
    registry = discover()
    for scenario in registry.ordered_scenarios():
        params = scenario.resolved_params(quick=True)
        for system in registry.ordered_systems():
            for plan in registry.plans(scenario, system, params):
                assert plan.status in ("ok", "unavailable", "n/a")
                if plan.status != "ok":
                    assert plan.reason, (scenario.name, system.name)


def test_peer_without_a_capability_is_na_with_its_reason() -> None:
    registry = discover()
    scenario = registry.scenario("intraprocess")
    (plan,) = registry.plans(scenario, registry.systems["nats"], scenario.resolved_params(True))
    assert plan.status == "n/a"
    assert "in-process" in (plan.reason or "")


def test_floor_cannot_carry_the_large_message() -> None:
    registry = discover()
    scenario = registry.scenario("large-64MiB")
    (plan,) = registry.plans(scenario, registry.systems["floor"], scenario.resolved_params(True))
    assert plan.status == "n/a"
    assert "65,507" in (plan.reason or "")


def test_references_appear_only_where_they_are_the_reference() -> None:
    registry = discover()
    pubsub = registry.scenario("pubsub-128B-1sub")
    codec = registry.scenario("micro-codec")
    msgpack = registry.systems["msgpack"]
    assert registry.plans(pubsub, msgpack, pubsub.resolved_params(True)) == []
    assert len(registry.plans(codec, msgpack, codec.resolved_params(True))) == 1


def test_selection_by_prefix_and_unknown_names() -> None:
    registry = discover()
    names = [s.name for s in registry.select_scenarios(["fanout", "micro-codec"])]
    assert names == ["fanout-1", "fanout-1000", "fanout-100000", "micro-codec"]
    exact = registry.select_scenarios(["fanout-1"])
    assert [s.name for s in exact] == ["fanout-1"]
    with pytest.raises(KeyError, match="matches no scenario"):
        registry.select_scenarios(["nope"])
    with pytest.raises(KeyError, match="unknown system"):
        registry.select_systems(["rvasync", "kafka"])
    assert [s.name for s in registry.select_systems(["floor", "rvasync"])] == ["rvasync", "floor"]


async def _role(ctx: Any) -> dict[str, Any]:
    return {}


def _toy_scenario(name: str = "toy", capability: str = "match") -> Scenario:
    return Scenario(
        name=name,
        title="Toy",
        description="toy",
        capability=capability,
        primary=Metric("x", "x", "ns", "lower"),
        roles={"run": _role},
        layout=lambda p: (RoleGroup("run"),),
        combine=lambda results, p: {"x": 1.0},
        params={"n": 1},
        quick={"n": 0},
    )


class _ToyMatch(Match):
    system = "toy"
    capability = "match"

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (
            Variant(name="fast", label="fast"),
            Variant(name="built", label="built", unavailable=lambda: "not built here"),
        )

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        return "too big" if params.get("n") == 1 and variant.name == "fast" else None

    def build(self, patterns: Sequence[str]) -> None:
        self.patterns = list(patterns)

    def match(self, subject: str) -> int:
        return 0


def test_a_new_module_adds_scenarios_and_adapters_without_the_runner() -> None:
    registry = Registry()
    registry.add_system(System(name="toy", label="Toy", kind="peer"))
    registry.add_system(System(name="bare", label="Bare", kind="floor"))
    scenario = registry.add_scenario(_toy_scenario())
    registry.add_adapter(_ToyMatch)
    toy, bare = registry.systems["toy"], registry.systems["bare"]
    quick = registry.plans(scenario, toy, scenario.resolved_params(quick=True))
    assert [(p.label, p.status) for p in quick] == [
        ("Toy (fast)", "ok"),
        ("Toy (built)", "unavailable"),
    ]
    full = registry.plans(scenario, toy, scenario.resolved_params(quick=False))
    assert (full[0].status, full[0].reason) == ("n/a", "too big")
    (absent,) = registry.plans(scenario, bare, scenario.resolved_params(quick=True))
    assert absent.status == "n/a" and "no 'match' adapter" in (absent.reason or "")


def test_registry_refuses_duplicates_and_unknown_roles() -> None:
    registry = Registry()
    registry.add_scenario(_toy_scenario())
    with pytest.raises(ValueError, match="twice"):
        registry.add_scenario(_toy_scenario())
    registry.add_adapter(_ToyMatch)
    with pytest.raises(ValueError, match="two adapters"):
        registry.add_adapter(_ToyMatch)
    broken = _toy_scenario("broken")
    broken = Scenario(**{**broken.__dict__, "layout": lambda p: (RoleGroup("missing"),)})
    with pytest.raises(ValueError, match="role 'missing'"):
        registry.add_scenario(broken)
    with pytest.raises(ValueError, match="kind"):
        registry.add_system(System(name="odd", label="Odd", kind="other"))  # type: ignore[arg-type]


def test_quick_parameters_override_the_full_ones() -> None:
    scenario = _toy_scenario()
    assert scenario.resolved_params(quick=False)["n"] == 1
    quick = scenario.resolved_params(quick=True)
    assert quick["n"] == 0 and quick["quick"] is True
    assert quick["timeout"] == scenario.quick_timeout


# -- report -----------------------------------------------------------------------------


def _row(system: str, kind: str, label: str, value: float | None, **extra: Any) -> dict:
    status = extra.pop("status", "ok" if value is not None else "unavailable")
    summary = (
        {"rate": {"median": value, "min": value * 0.9, "max": value * 1.1, "n": 3.0}}
        if value is not None
        else {}
    )
    return {
        "system": system,
        "kind": kind,
        "variant": "",
        "label": label,
        "headline": True,
        "status": status,
        "reason": extra.pop("reason", None),
        "reps": [],
        "summary": summary,
        "error": extra.pop("error", None),
        "seconds": 1.0,
        **extra,
    }


FAKE_RESULTS: dict[str, Any] = {
    "schema": 1,
    "started": "2026-01-01T00:00:00+00:00",
    "finished": "2026-01-01T00:10:00+00:00",
    "command": "python -m benchmarks run --repeat 3",
    "mode": "full",
    "repeat": 3,
    "machine": {
        "cpu_model": "Test CPU 9000",
        "cores": 2,
        "usable_cores": 2,
        "python": "CPython 3.11.7",
        "platform": "Linux",
        "event_loop": "uvloop",
        "versions": {"nats-py": "2.16.0", "pyzmq": None},
        "rvasync_native": ["codec"],
    },
    "scenarios": [
        {
            "name": "pubsub-x",
            "title": "Pub/sub X",
            "description": "a fake scenario",
            "capability": "pubsub",
            "params": {"size": 128, "timeout": 60},
            "primary": {"key": "rate", "label": "delivered", "unit": "msg/s", "better": "higher"},
            "extras": [],
            "chart": ["rate"],
            "rows": [
                _row("rvasync", "rvasync", "rvasync", 200_000.0),
                _row("nats", "peer", "NATS", 100_000.0),
                _row("zmq", "peer", "ZeroMQ", None, status="failed", error="Boom | bang\nmore"),
                _row("floor", "floor", "floor (bare UDP)", 400_000.0),
            ],
        },
        {
            "name": "later",
            "title": "Later capability",
            "description": "rvasync cannot do this yet",
            "capability": "certified",
            "params": {},
            "primary": {"key": "rate", "label": "p50", "unit": "µs", "better": "lower"},
            "extras": [],
            "rows": [
                _row(
                    "rvasync",
                    "rvasync",
                    "rvasync",
                    None,
                    reason="not available in this rvasync build: rv.CmTransport missing",
                ),
                _row("nats", "peer", "NATS", 50.0),
                _row("zmq", "peer", "ZeroMQ", None, status="n/a", reason="no persistence"),
            ],
        },
    ],
}


def test_report_shows_ratios_machine_and_absences() -> None:
    page = report.render(FAKE_RESULTS, {"pubsub-x": "img/perf-pubsub-x.png"})
    assert "Test CPU 9000, 2 cores" in page
    assert "`python -m benchmarks run --repeat 3`" in page
    assert "CPython 3.11.7" in page
    assert "2026-01-01T00:00:00+00:00" in page
    # rvasync / NATS = 2, rvasync / floor = 0.5, in the headline and the scenario table
    assert "| 2x |" in page
    assert "| 0.5x |" in page
    assert "| **rvasync** | 200,000 | 180,000 - 220,000 | (headline) |" in page
    assert "**failed**: Boom \\| bang" in page
    assert "![Pub/sub X](img/perf-pubsub-x.png)" in page
    assert "not available in this rvasync build: rv.CmTransport missing" in page
    assert "not in this build" in page
    assert "| n/a |" in page


def test_headline_row_prefers_marked_rows_that_ran() -> None:
    scenario = copy.deepcopy(FAKE_RESULTS["scenarios"][0])
    pure = _row("rvasync", "rvasync", "rvasync (pure)", 50_000.0, headline=False)
    native = _row("rvasync", "rvasync", "rvasync (native)", None, headline=True)
    scenario["rows"] = [native, pure, _row("nats", "peer", "NATS", 100_000.0)]
    assert report.headline_row(scenario) is pure  # the marked one did not run
    assert report.row_ratio(scenario, scenario["rows"][2]) == pytest.approx(0.5)
    scenario["rows"][0] = _row("rvasync", "rvasync", "rvasync (native)", 300_000.0)
    assert report.headline_row(scenario) is scenario["rows"][0]
    assert report.row_ratio(scenario, pure) == pytest.approx(6.0)


def test_number_formatting() -> None:
    assert report.fmt(1234567.8) == "1,234,568"
    assert report.fmt(123.4) == "123"
    assert report.fmt(12.34) == "12.3"
    assert report.fmt(1.234) == "1.23"
    assert report.fmt(0.01234) == "0.0123"
    assert report.fmt(None) == "—"
    assert report.fmt_ratio(0.4567) == "0.457x"
    assert report.fmt_ratio(12345.6) == "12,346x"
    assert report.fmt_ratio(0.0001) == "1/10,000x"


def test_write_page_writes_markdown_and_charts(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "performance.md"
    images = tmp_path / "docs" / "img"
    report.write_page(FAKE_RESULTS, page, images)
    text = page.read_text()
    assert text.startswith("# Performance")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (images / "perf-pubsub-x.png").read_bytes()[:4] == b"\x89PNG"
    assert "](img/perf-pubsub-x.png)" in text


def _partial_run(**changes: Any) -> dict[str, Any]:
    later = copy.deepcopy(FAKE_RESULTS["scenarios"][0])
    later["rows"][0]["summary"]["rate"].update(median=300_000.0, min=290_000.0, max=310_000.0)
    run = {
        **copy.deepcopy(FAKE_RESULTS),
        "started": "2026-02-01T00:00:00+00:00",
        "finished": "2026-02-01T00:01:00+00:00",
        "command": "python -m benchmarks run --only pubsub-x",
        "scenarios": [later],
    }
    run.update(changes)
    return run


def test_a_partial_run_replaces_its_scenarios_and_the_page_names_its_run() -> None:
    merged = report.merge(FAKE_RESULTS, _partial_run())
    first, second = merged["scenarios"]
    assert first["rows"][0]["summary"]["rate"]["median"] == 300_000.0
    assert first["measured"]["command"] == "python -m benchmarks run --only pubsub-x"
    assert second == FAKE_RESULTS["scenarios"][1] and "measured" not in second
    assert FAKE_RESULTS["scenarios"][0]["rows"][0]["summary"]["rate"]["median"] == 200_000.0
    page = report.render(merged)
    assert page.count("2026-02-01T00:00:00+00:00 to 2026-02-01T00:01:00+00:00") == 2
    assert "Re-measured" in page and "`pubsub-x`" in page
    assert "Measured in a later run" in page.split("### Pub/sub X")[1].split("###")[0]
    assert "Measured in a later run" not in page.split("### Later capability")[1]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"mode": "quick"}, "'quick' run"),
        ({"machine": {**FAKE_RESULTS["machine"], "cores": 8}}, "differs in cores"),
        ({"scenarios": []}, "measured no scenario"),
        (
            {"scenarios": [{**FAKE_RESULTS["scenarios"][0], "name": "nope"}]},
            "not in the full run: nope",
        ),
    ],
)
def test_a_partial_run_that_does_not_fit_is_refused(changes: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        report.merge(FAKE_RESULTS, _partial_run(**changes))


def test_report_update_rewrites_the_results_and_the_page(tmp_path: Path) -> None:
    results, partial = tmp_path / "latest.json", tmp_path / "partial.json"
    results.write_text(json.dumps(FAKE_RESULTS))
    partial.write_text(json.dumps(_partial_run()))
    page, images = tmp_path / "performance.md", tmp_path / "img"
    argv = ["report", "--results", str(results), "--update", str(partial)]
    argv += ["--page", str(page), "--images", str(images)]
    assert cli_main(argv) == 0
    assert json.loads(results.read_text())["scenarios"][0]["measured"]["started"].startswith(
        "2026-02-01"
    )
    assert "Re-measured" in page.read_text()
    partial.write_text(json.dumps(_partial_run(mode="quick")))
    assert cli_main(argv) == 2


# -- command line and machine -----------------------------------------------------------


def test_a_run_records_the_sizing_variables_it_ran_with(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import cli

    monkeypatch.delenv("RVASYNC_BENCH_SPARK_ROWS", raising=False)
    assert cli._settings() == ""
    monkeypatch.setenv("RVASYNC_BENCH_SPARK_ROWS", "10000000")
    assert cli._settings() == "RVASYNC_BENCH_SPARK_ROWS=10000000 "


def test_command_line_parses_lists() -> None:
    args = parser().parse_args(
        ["run", "--quick", "--only", "pubsub,fanout", "--systems", "rvasync,nats", "--repeat", "2"]
    )
    assert args.quick and args.repeat == 2
    assert args.only == ["pubsub", "fanout"]
    assert args.systems == ["rvasync", "nats"]


def test_cpu_model_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Fancy CPU @ 3GHz\n")
    assert cpu_model(info) == "Fancy CPU @ 3GHz"


def test_reqrep_ab_switches_code_in_place_bound_references_included(tmp_path):
    """``benchmarks.reqrep_ab`` runs a base copy's code in the working tree's functions,
    so references taken before the switch (bound methods, partials) follow it."""
    import functools
    import textwrap

    from benchmarks.reqrep_ab import Versions

    source = Path(stats.__file__).read_text()
    changed = source.replace(
        "def ratio(numerator: float | None, denominator: float | None) -> float | None:\n",
        "def ratio(numerator: float | None, denominator: float | None) -> float | None:\n"
        + textwrap.indent("return -1.0  # the base version\n", "    "),
        1,
    )
    assert changed != source
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "stats.py").write_text(changed)
    versions = Versions(str(tmp_path), ["benchmarks.stats"])
    early = functools.partial(stats.ratio, 6.0)
    try:
        assert early(3.0) == 2.0
        versions.use("base")
        assert stats.ratio(6.0, 3.0) == -1.0 and early(3.0) == -1.0
        versions.use("new")
        assert early(3.0) == 2.0
    finally:
        versions.use("new")
