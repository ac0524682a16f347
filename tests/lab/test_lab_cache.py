"""The current value cache between lab hosts: lossy links, kill -9, restart from the store.

h0 publishes every version of 200 subjects while 10% of the datagrams h1 (the
cache, with a store file) and h2 (the requester) receive are lost. h2 then
asks for every retained value: each subject answers with its last version,
once. The cache is killed -9 and restarted on its store file; with nothing
published any more, h2 gets every value again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.lab import Lab

pytestmark = pytest.mark.lab

PEER = str(Path(__file__).resolve().parents[1] / "cvcpeer.py")
SUBJECTS = 200
VERSIONS = 3


async def fetch(lab: Lab, service: str) -> dict[str, int]:
    proc = await lab.hosts[2].spawn(
        PEER, "fetch", service, lab.hosts[2].network(), str(SUBJECTS), str(VERSIONS)
    )
    line = await proc.readline(90)
    assert line, "the fetcher exited without an answer"
    got: dict[str, int] = json.loads(line)
    return got


@pytest.mark.timeout(300)
async def test_cache_across_hosts_under_loss_and_kill_9(
    lab3: Lab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    service = str(free_port())
    store = str(tmp_path / "lab.store")
    h0, h1, h2 = lab3.hosts
    cache = await h1.spawn(PEER, "cache", service, h1.network(), store)
    assert (await cache.readline(30)).strip() == b"ready 0"
    h1.loss(10)
    h2.loss(10)
    publisher = await h0.spawn(PEER, "publish", service, h0.network(), str(SUBJECTS), str(VERSIONS))
    assert (await publisher.readline(120)).strip() == b"done"
    expected = {f"LAB.S{n}": VERSIONS for n in range(SUBJECTS)}
    assert await fetch(lab3, service) == expected
    dropped = h1.packets() + h2.packets()
    assert dropped > 0  # the loss happened
    cache.kill9()
    await cache.wait()
    restarted = await h1.spawn(PEER, "cache", service, h1.network(), store)
    assert (await restarted.readline(30)).strip() == f"ready {SUBJECTS}".encode()
    assert await fetch(lab3, service) == expected
    figures.update(subjects=SUBJECTS, versions=VERSIONS, loss_pct=10, dropped=dropped, kills=1)


@pytest.mark.timeout(300)
async def test_a_second_cache_answers_a_late_listener_after_the_first_is_killed(
    lab3: Lab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """Two caches on two hosts retain the same subjects; the first started (the one a
    Rendezvous fault-tolerant group would make active) is killed -9; a listener that
    joins afterwards with retained=True still gets every last value, from the other,
    each subject once."""
    service = str(free_port())
    h0, h1, h2 = lab3.hosts
    first = await h1.spawn(PEER, "cache", service, h1.network(), str(tmp_path / "first.store"))
    assert (await first.readline(30)).strip() == b"ready 0"
    second = await h2.spawn(PEER, "cache", service, h2.network(), str(tmp_path / "second.store"))
    assert (await second.readline(30)).strip() == b"ready 0"
    h1.loss(5)
    h2.loss(5)
    publisher = await h0.spawn(PEER, "publish", service, h0.network(), str(SUBJECTS), str(VERSIONS))
    assert (await publisher.readline(120)).strip() == b"done"
    expected = {f"LAB.S{n}": VERSIONS for n in range(SUBJECTS)}
    assert await fetch(lab3, service) == expected
    first.kill9()
    await first.wait()
    joiner = await h0.spawn(PEER, "join", service, h0.network(), str(SUBJECTS), str(VERSIONS))
    line = await joiner.readline(90)
    assert line, "the joiner exited without a report"
    got: dict[str, list[int]] = json.loads(line)
    assert got == {subject: [VERSIONS] for subject in expected}  # every value, once
    dropped = h1.packets() + h2.packets()
    figures.update(subjects=SUBJECTS, versions=VERSIONS, loss_pct=5, dropped=dropped, kills=1)
