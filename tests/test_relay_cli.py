"""``rvasync relay``: it serves, and refuses a damaged ledger or a name already in use."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

RELAY = [sys.executable, "-m", "rvasync", "relay"]


async def _start(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *RELAY, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


@pytest.mark.timeout(60)
async def test_serves_and_refuses_a_second_agent_of_the_same_name(rv_service, tmp_path):
    service, network = rv_service
    net = ["--service", service, "--network", network]
    first = await _start("RA_CLI", "--ledger", str(tmp_path / "a.ledger"), *net)
    try:
        line = await asyncio.wait_for(first.stdout.readline(), 30)
        assert line.startswith(b"rvasync relay: RA_CLI serving"), line
        second = await _start("RA_CLI", "--ledger", str(tmp_path / "b.ledger"), *net)
        _out, err = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode == 2
        assert b"another relay agent named 'RA_CLI' is already running" in err, err
    finally:
        first.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(first.wait(), 20) == 0


@pytest.mark.timeout(60)
async def test_corrupt_ledger_and_bad_name_are_clear_errors(rv_service, tmp_path):
    service, _network = rv_service
    ledger = tmp_path / "ra.ledger"
    ledger.write_bytes(b"RVRELAY1" + b"\x00\x00\x00\x05\x00\x00\x00\x00garbage and more garbage")
    proc = await _start("RA_BAD", "--ledger", str(ledger), "--service", service)
    _out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"corrupt" in err and str(ledger).encode() in err, err
    proc = await _start("bad..name", "--ledger", str(ledger))
    _out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and b"relay agent name" in err, err


@pytest.mark.timeout(60)
async def test_bad_reply_lifetime_is_a_clear_error():
    for bad in ("0", "-3", "soon", "inf"):
        proc = await _start("RA_X", "--reply-lifetime", bad)
        _out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 2 and b"--reply-lifetime" in err and b"seconds" in err, err
