"""Lab fixtures: a fresh set of hosts per test, torn down whatever happens.

Outside CI the lab tests skip (with the reason) where namespaces cannot be
made; in CI (``CI=true``) a lab that cannot be made fails the run instead,
so a machine without root or nftables never passes for one that tested.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.lab import Lab, available


def _require_lab() -> None:
    ok, why = available()
    if ok:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the lab tests: {why}")
    pytest.skip(why)


@pytest.fixture
async def lab3() -> AsyncIterator[Lab]:
    _require_lab()
    async with Lab(3) as lab:
        yield lab


@pytest.fixture
async def lab2() -> AsyncIterator[Lab]:
    _require_lab()
    async with Lab(2) as lab:
        yield lab


def long_run() -> bool:
    """True for the long soak (``RVASYNC_LAB_LONG=1``): more messages, more loss rates."""
    return os.environ.get("RVASYNC_LAB_LONG", "") not in ("", "0")


_FIGURES: list[dict[str, Any]] = []


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A dict a test fills with what it did (messages, faults, kills ...).

    With ``RVASYNC_LAB_FIGURES=FILE`` every test's figures are written to FILE
    as JSON at the end of the session: the source of docs/reliability.md's table.
    """
    row: dict[str, Any] = {"test": request.node.name}
    yield row
    _FIGURES.append(row)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("RVASYNC_LAB_FIGURES")
    if target and _FIGURES:
        Path(target).write_text(json.dumps(_FIGURES, indent=1) + "\n")
