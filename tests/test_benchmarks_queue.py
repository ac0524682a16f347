"""Light tests of the distributed-queue benchmark scenarios (queue-tasks, queue-failover).

Nothing here measures or starts a broker; the end-to-end check is
``python -m benchmarks run --quick --only queue``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.registry import Variant, discover  # noqa: E402
from benchmarks.scenarios import queue, queue_failover  # noqa: E402
from benchmarks.systems.rvasync_queue import RvQueueFailover  # noqa: E402


def test_rows_side_by_side() -> None:
    registry = discover()
    rows: dict[str, dict[str, str]] = {}
    for name in ("queue-tasks", "queue-failover"):
        scenario = registry.scenario(name)
        params = scenario.resolved_params(quick=True)
        rows[name] = {
            plan.label: plan.status
            for system in registry.ordered_systems()
            for plan in registry.plans(scenario, system, params)
        }
    tasks = rows["queue-tasks"]
    assert "rvasync" in tasks
    assert sum(1 for label in tasks if label.startswith("NATS (JetStream work queue")) == 2
    assert "NATS (core queue group (no acknowledgement))" in tasks
    assert tasks["ZeroMQ"] == "n/a" and tasks["floor (bare UDP)"] == "n/a"
    assert rows["queue-failover"]["NATS"] == "n/a"


def test_layout_starts_the_scheduler_then_workers_then_the_sender() -> None:
    params = discover().scenario("queue-tasks").resolved_params(quick=True)
    groups = queue.layout(params)
    assert [(g.role, g.count, g.passive) for g in groups] == [
        ("scheduler", 1, True),
        ("worker", 4, True),
        ("sender", 1, False),
    ]


def test_tasks_combine_checks_exactly_once() -> None:
    sender = {"sent": 100, "t_start": 0, "t_sent": 50_000_000, "t_done": 200_000_000}
    workers = [{"count": 40, "t_last": 100_000_000}, {"count": 60, "t_last": 150_000_000}]
    out = queue.combine({"sender": [sender], "worker": workers}, {})
    assert out == {
        "tasks_per_s": 500.0,
        "handled_per_s": 100 / 0.15,
        "sent_per_s": 2000.0,
        "busiest_share": 0.6,
    }
    workers[1]["count"] = 61  # a task handled twice
    with pytest.raises(RuntimeError, match="sum 101"):
        queue.combine({"sender": [sender], "worker": workers}, {})


def test_failover_combine_and_member_command_line() -> None:
    run = {"takeover_ms": [900.0, 700.0, 1100.0], "active_ms": [850.0, 650.0, 1000.0], "dups": 0}
    out = queue_failover.combine({"run": [run]}, {})
    assert out == {"takeover_ms": 900.0, "max_ms": 1100.0, "active_ms": 850.0, "duplicates": 0.0}
    with pytest.raises(RuntimeError, match="no failover"):
        queue_failover.combine({"run": [{**run, "takeover_ms": []}]}, {})
    params = discover().scenario("queue-failover").resolved_params(quick=True)
    bench = RvQueueFailover(params, {"ports": [7500]}, Variant())
    scheduler = bench.member_argv("s1", "Q", "JOBS.RUN", scheduler=True)
    worker = bench.member_argv("w2", "Q", "JOBS.RUN", scheduler=False)
    assert scheduler[scheduler.index("--worker-tasks") + 1] == "0"
    assert worker[worker.index("--worker-tasks") + 1] != "0"
    assert int(scheduler[scheduler.index("--scheduler-weight") + 1]) > int(
        worker[worker.index("--scheduler-weight") + 1]
    )
    assert scheduler[scheduler.index("--activation") + 1] == str(params["activation"])
