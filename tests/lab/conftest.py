"""Lab fixtures: a fresh set of hosts per test, torn down whatever happens.

Outside CI the lab tests skip (with the reason) where namespaces cannot be
made; in CI (``CI=true``) a lab that cannot be made fails the run instead,
so a machine without root or nftables never passes for one that tested.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

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
