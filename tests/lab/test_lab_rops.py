"""Remote operations between two lab hosts: exactly once through loss, kills and a cut link.

A performer (``ORDERS``, host 0) and an invoker (``SHOP``, host 1) run
tests/ropspeer.py with state files; the invoker places orders one after
another with ``invoke`` (3-way and 2-way). Meanwhile 10 % of the datagrams
each host receives are dropped, the performer is killed -9 and restarted
from its state file several times, and host 0 is cut off from the lab
network (nftables) for a while and then reconnected. Afterwards:

* no order took effect twice (the performer's effects log);
* every order settled for the invoker: ``ok`` means it took effect exactly
  once; the only other ending allowed is the permanent ``interrupted`` error
  of an order whose handler a kill cut short (taken effect at most once,
  never run again);
* the faults happened (datagrams dropped, kills, the partition).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.conftest import long_run
from tests.lab.lab import Lab, LabProcess

pytestmark = pytest.mark.lab

PEER = Path(__file__).resolve().parents[1] / "ropspeer.py"


def _lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


async def _start(lab: Lab, host: int, *args: str) -> LabProcess:
    proc = await lab.hosts[host].spawn(str(PEER), *args, "--network", lab.hosts[host].network())
    line = await proc.readline(30)
    assert line.strip() == b"ready", f"ropspeer {args[0]} did not start: {line!r}"
    return proc


@pytest.mark.timeout(600)
@pytest.mark.parametrize("handshake", [3, 2])
async def test_rops_across_hosts_exactly_once_through_kills_and_a_cut_link(
    lab2: Lab, tmp_path: Path, figures: dict[str, Any], handshake: int
) -> None:
    rng = random.Random(21 + handshake)
    orders = 400 if long_run() else 60
    kills = 12 if long_run() else 3
    service = str(free_port())
    effects = tmp_path / "effects.log"
    placed = tmp_path / "placed.log"
    performer_args = [
        "performer", "--service", service, "--name", "ORDERS",
        "--state", str(tmp_path / "orders.state"), "--log", str(effects), "--hold", "0.02",
    ]  # fmt: skip
    for host in lab2.hosts:
        host.loss(10)
    performer = await _start(lab2, 0, *performer_args)
    invoker = await _start(
        lab2, 1, "invoker", "--service", service, "--name", "SHOP",
        "--state", str(tmp_path / "shop.state"), "--out", str(placed), "--peer", "ORDERS",
        "--orders", str(orders), "--handshake", str(handshake), "--use-invoke",
    )  # fmt: skip

    def settled() -> int:
        return sum(1 for parts in _lines(placed) if parts[0] == "done")

    async def until(count: int, timeout: float = 120.0) -> None:
        async with asyncio.timeout(timeout):
            while settled() < count and not (placed.exists() and "finished" in placed.read_text()):
                await asyncio.sleep(0.05)

    # kill -9 of the performer at random points while orders flow, restart from its state.
    for n in range(kills):
        await until((n + 1) * orders // (kills + 3))
        await asyncio.sleep(rng.uniform(0.0, 0.2))
        performer.kill9()
        await performer.wait()
        await asyncio.sleep(rng.uniform(0.1, 0.6))  # invocations retry into the void
        performer = await _start(lab2, 0, *performer_args)
    # The performer's host cut off from the network for a while (both directions).
    await until((kills + 1) * orders // (kills + 3))
    lab2.hosts[0].partition()
    cut_at = settled()
    await asyncio.sleep(1.5)
    partition_drops = lab2.hosts[0].packets("drop")
    lab2.hosts[0].heal()
    async with asyncio.timeout(240):
        while not (placed.exists() and "finished" in placed.read_text()):
            await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # a late duplicate would take effect now

    executed = Counter(int(parts[1]) for parts in _lines(effects) if parts[0] == "exec")
    twice = {order: count for order, count in executed.items() if count > 1}
    assert not twice, f"orders that took effect more than once: {twice}"
    done = {int(parts[1]): parts[2] for parts in _lines(placed) if parts[0] == "done"}
    assert sorted(done) == list(range(orders)), "an order never settled for the invoker"
    interrupted = []
    for order, how in done.items():
        if how == "ok":
            assert executed[order] == 1, f"order {order} ok but took effect {executed[order]}x"
        else:
            assert how == "error:interrupted", f"order {order} ended {how}"
            interrupted.append(order)
    assert len(interrupted) <= kills  # at most the one running at each kill
    assert all(host.packets("drop") > 0 for host in lab2.hosts), "no loss was injected"
    assert partition_drops > 0, "the cut link dropped nothing"
    invoker.kill9()
    performer.kill9()
    figures.update(
        hosts=2, loss_percent=10, handshake=handshake, orders=orders, kills=kills,
        partitions=1, settled_before_cut=cut_at, executed_twice=0,
        interrupted=len(interrupted), ok=orders - len(interrupted),
        datagrams_dropped=sum(h.packets("drop") for h in lab2.hosts),
    )  # fmt: skip
