"""The chaos tier (issue #34): every kind of traffic across three routed networks, under faults.

tests/lab/chaos.py builds the run and judges it. One run serves every test
of this module (a module fixture); each test checks one kind of traffic, so
a failure names the kind, and a known defect owned by another area is an
explicit expectation of its own test (an ``xfail`` naming it) rather than a
tolerance anywhere else.

Quick tier (``pytest tests/lab/test_lab_chaos.py``): each fault once
(chaos.QUICK). Long tier: ``RVASYNC_LAB_LONG=1`` (the lab's long switch) or
``RVASYNC_CHAOS_FAULTS=N``: N faults drawn at random from chaos.FAULTS (50
with the long switch), more traffic; ``RVASYNC_CHAOS_SEED`` picks the draw.
Figures go to ``RVASYNC_LAB_FIGURES`` like the other lab tests'.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.chaos import FAULTS, QUICK, ChaosRun, Verdict
from tests.lab.conftest import _require_lab, long_run
from tests.lab.multilan import MultiLab

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]


def _plan() -> tuple[list[str], int]:
    seed = int(os.environ.get("RVASYNC_CHAOS_SEED", "34"))
    count = int(os.environ.get("RVASYNC_CHAOS_FAULTS", "50" if long_run() else "0"))
    if not count:
        return list(QUICK), seed
    rng = random.Random(seed)
    return [rng.choice(FAULTS) for _ in range(count)], seed


async def _chaos(tmp: Path) -> tuple[dict[str, Verdict], dict[str, Any]]:
    faults, seed = _plan()
    async with MultiLab(3, hosts=3) as lab:
        run = ChaosRun(lab, tmp, str(free_port()), faults)
        try:
            await run.start()
            await run.run(random.Random(seed))
            end = await run.finish()
            verdicts = run.verdicts(end)
        finally:
            await run.close()
        dropped = sum(h.packets("drop") for site in lab.sites for h in site.hosts)
    figures = {"faults": len(run.faults), "seed": seed, "datagrams_dropped": dropped,
               "wan_packets_dropped": run.wan_drops}  # fmt: skip
    return verdicts, figures


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    _require_lab()
    verdicts, figures = asyncio.run(_chaos(tmp_path_factory.mktemp("chaos")))
    yield {"verdicts": verdicts, "figures": figures}


def _check(chaos: dict[str, Any], kind: str, figures: dict[str, Any]) -> None:
    verdict: Verdict = chaos["verdicts"][kind]
    figures.update(kind=kind, **chaos["figures"], **verdict.figures)
    assert not verdict.problems, verdict.problems


def test_chaos_pubsub_delivered_or_accounted_for(chaos: dict[str, Any], figures: dict) -> None:
    _check(chaos, "pubsub", figures)


def test_chaos_request_reply_delivered_or_accounted_for(
    chaos: dict[str, Any], figures: dict
) -> None:
    _check(chaos, "reqrep", figures)


def test_chaos_certified_exactly_once(chaos: dict[str, Any], figures: dict) -> None:
    _check(chaos, "certified", figures)


def test_chaos_queue_tasks_exactly_once(chaos: dict[str, Any], figures: dict) -> None:
    _check(chaos, "queue", figures)


def test_chaos_remote_operations_exactly_once(chaos: dict[str, Any], figures: dict) -> None:
    _check(chaos, "rops", figures)
