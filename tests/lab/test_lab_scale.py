"""The quick tier of the lab's scale sweep (benchmarks/scale/lab.py): three subscriber hosts.

One publisher host (a standalone daemon and its client), one nats-server host,
three subscriber hosts, 1 % random loss on every host: rvasync's multicast and
NATS over TCP each carry 1,000 messages; every subscriber gets each once, in
order, or a DATALOSS counting it, and the harness yields every figure the page
shows. The full sweep (2 to 32 hosts, 0/1/5 % loss, 128 B and 16 KiB) is
``sudo python -m benchmarks.scale lab``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from benchmarks.scale.lab import Config, FanoutLab, run_config
from tests.lab.conftest import _require_lab
from tests.lab.lab import Lab

pytestmark = pytest.mark.lab


@pytest.fixture
async def fan() -> AsyncIterator[FanoutLab]:
    _require_lab()
    async with Lab(5) as lab:
        fanout = FanoutLab(lab)
        try:
            await fanout.start(need_nats=True)
            yield fanout
        finally:
            await fanout.close()


async def test_fan_out_to_three_hosts_beside_nats(fan: FanoutLab, figures: dict[str, Any]) -> None:
    rows = {}
    for system in ("rvasync", "nats"):
        config = Config(system, size=128, loss=1.0, hosts=3, messages=1000, rate=1000.0)
        rows[system] = row = await run_config(fan, config)
        assert row["missing_unreported"] == 0, row
        assert row["out_of_order"] == 0, row
        assert row["delivered"] + row["reported_lost"] == 3 * 1000
        assert row["per_subscriber_msg_s"] and row["publisher_cpu_us_per_msg"] > 0
        assert row["wire_packets_per_msg"] > 0 and row["wire_bytes_per_msg"] > 100
    rv = rows["rvasync"]
    assert rv["losses"] > 0, "no loss was injected"
    assert rv["resent"] >= rv["losses"] - rv["reported_lost"] > 0
    assert rv["naks_per_loss"] <= 3 and rv["resent_per_loss"] <= 3, rv
    per_message = {f"{k}_{s}": v for s, r in rows.items() for k, v in r.items() if "_msg" in k}
    figures.update(hosts=3, loss_percent=1, **per_message)
