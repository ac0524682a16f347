"""``rvasync cache`` as a real process: kill -9 with a store file, restart, values still there.

The cache runs in its own process with its own in-process daemon; the test's
transport reaches it over the loopback service. Every wait is bounded and the
process group is killed whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import rvasync as rv
from rvasync.message import Message
from rvasync.pytest_plugin import stop_process_group

WAIT = 30.0


@contextlib.contextmanager
def cache_process(*args: str):
    """Start ``rvasync cache ARGS``; yields (process, stderr file)."""
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rvasync", "cache", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
        try:
            yield proc, errors
        finally:
            stop_process_group(proc)


def stderr_text(errors) -> str:
    errors.seek(0)
    return errors.read().decode(errors="replace")


async def ready(proc, errors) -> str:
    """Wait (bounded) for the cache's ready line on stderr."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        text = stderr_text(errors)
        if "rvasync cache: retaining" in text:
            return text
        if proc.poll() is not None:
            pytest.fail(f"cache exited {proc.returncode}: {text}")
        await asyncio.sleep(0.05)
    pytest.fail(f"cache not ready in {WAIT} s: {stderr_text(errors)}")


async def retained(transport, pattern: str, expected: dict[str, int]) -> None:
    deadline = time.monotonic() + WAIT
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(rv.RequestTimeout):
            got = {m.subject: m["v"] for m in await transport.request_retained(pattern, 2.0)}
            if got == expected:
                return
        await asyncio.sleep(0.1)
    assert got == expected


async def test_kill_9_then_restart_keeps_every_retained_value(rv_service, tmp_path):
    service, network = rv_service
    store = str(tmp_path / "scores.store")
    args = ["SCORE.>", "--store", store, "--service", service, "--network", network]
    values = {f"SCORE.{n}": n for n in range(50)}
    async with rv.Transport(service, network) as client:
        with cache_process(*args) as (proc, errors):
            await ready(proc, errors)
            for subject, value in values.items():
                await client.send(Message(subject, {"v": value}))
            await client.send(rv.retained_deletion("SCORE.7"))
            del values["SCORE.7"]
            await retained(client, "SCORE.>", values)  # answered: so it is in the file
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(WAIT)
            assert proc.returncode == -signal.SIGKILL
        with cache_process(*args) as (proc, errors):
            text = await ready(proc, errors)
            assert "49 subjects restored" in text
            # Nothing is published again: every value comes from the store file.
            await retained(client, "SCORE.>", values)


async def test_rvasync_listen_retained_prints_retained_values_then_live(rv_service):
    service, network = rv_service
    net = ["--service", service, "--network", network]
    async with rv.Transport(service, network) as client:
        with cache_process("TEMP.>", *net) as (proc, errors):
            await ready(proc, errors)
            await client.send(Message("TEMP.PARIS", {"v": 21}))
            await client.send(Message("TEMP.OSLO", {"v": 4}))
            await retained(client, "TEMP.>", {"TEMP.PARIS": 21, "TEMP.OSLO": 4})
            listen = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "rvasync", "listen", "TEMP.*", "--retained", "--json", "--count", "3"),
                *("--timeout", str(WAIT), *net),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            assert listen.stderr is not None and listen.stdout is not None
            line = await asyncio.wait_for(listen.stderr.readline(), WAIT)
            assert b"listening to TEMP.*" in line
            stdout = listen.stdout

            async def printed() -> tuple[str, int]:
                item = json.loads(await asyncio.wait_for(stdout.readline(), WAIT))
                return item["subject"], item["fields"][0]["value"]

            first = [await printed(), await printed()]
            await client.send(Message("TEMP.OSLO", {"v": 5}))
            live = await printed()
            assert await asyncio.wait_for(listen.wait(), WAIT) == 0
    assert sorted(first) == [("TEMP.OSLO", 4), ("TEMP.PARIS", 21)]
    assert live == ("TEMP.OSLO", 5)


async def test_a_corrupt_store_file_stops_the_cache_with_a_clear_error(rv_service, tmp_path):
    service, network = rv_service
    store = tmp_path / "bad.store"
    store.write_bytes(b"this is not a store file")
    with cache_process(
        "A.>", "--store", str(store), "--service", service, "--network", network
    ) as (
        proc,
        errors,
    ):
        assert proc.wait(WAIT) == 2
        assert "is corrupt: not an rvasync cache store file" in stderr_text(errors)
    assert store.read_bytes() == b"this is not a store file"  # left as it was


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["A..B"], "A..B"),
        (["A.>", "--max-subjects", "0"], "--max-subjects"),
        (["A.>", "--max-bytes", "x"], "--max-bytes"),
        (["A.>", "--hello-interval", "0"], "--hello-interval"),
    ],
)
def test_bad_command_lines_are_refused(argv, message):
    result = subprocess.run(
        [sys.executable, "-m", "rvasync", "cache", *argv],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
