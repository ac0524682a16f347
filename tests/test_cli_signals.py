"""INT, TERM and HUP on every long-running command: daemon, router, relay, cache.

Issue 43 item 4: SIGHUP killed a plain ``rvasync daemon`` (status 129, clients got
no goodbye) although its help presents HUP as the users-file reload. Now every
long-running command stops cleanly (status 0, its "stopped" line) on INT and
TERM, and on HUP reloads what it can or logs that nothing needed it, and goes
on serving (docs/cli.md, "Signals").
"""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

import rvasync as rv
from rvasync.testing import free_port

WAIT = 30.0


def _commands(service: str, network: str, tmp_path) -> dict[str, tuple[list[str], str, str]]:
    """name -> (arguments, the stream of its ready line, what the line starts with)."""
    net = ["--service", service, "--network", network]
    config = tmp_path / "router.toml"
    config.write_text(
        f'[router]\nname = "sig"\n\n[[network]]\nname = "A"\nservice = "{service}"\n'
        f'network = "{network}"\n'
    )
    return {
        "daemon": (["daemon", "--listen", "0"], "stdout", "rvasync daemon listening on"),
        "router": (["router", "--config", str(config)], "stdout", "rvasync router sig ready"),
        "relay": (
            ["relay", "SIGRELAY", "--ledger", str(tmp_path / "r.ledger"), *net],
            "stdout",
            "rvasync relay: SIGRELAY serving",
        ),
        "cache": (["cache", "SIG.>", *net], "stderr", "rvasync cache: retaining"),
    }


async def _line_with(stream: asyncio.StreamReader, text: str, seen: list[str]) -> str:
    async with asyncio.timeout(WAIT):
        while True:
            raw = await stream.readline()
            if not raw:
                raise AssertionError(f"stream ended before {text!r}: {seen}")
            line = raw.decode(errors="replace").strip()
            seen.append(line)
            if text in line:
                return line


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("command", "stop"),
    [
        ("daemon", signal.SIGTERM),
        ("daemon", signal.SIGINT),
        ("router", signal.SIGTERM),
        ("router", signal.SIGINT),
        ("relay", signal.SIGTERM),
        ("cache", signal.SIGTERM),
    ],
)
async def test_hup_keeps_serving_and_int_or_term_stop_cleanly(rv_service, tmp_path, command, stop):
    service, network = rv_service
    args, ready_stream, ready = _commands(service, network, tmp_path)[command]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rvasync",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out: list[str] = []
    err: list[str] = []
    try:
        stream, seen = {"stdout": (proc.stdout, out), "stderr": (proc.stderr, err)}[ready_stream]
        line = await _line_with(stream, ready, seen)
        proc.send_signal(signal.SIGHUP)
        await _line_with(proc.stderr, "SIGHUP: nothing to reload", err)
        assert proc.returncode is None  # HUP did not stop it
        if command == "daemon":  # and it still serves its clients
            port = int(line.split(":")[1].split()[0])
            async with rv.Transport(str(free_port()), daemon=f"127.0.0.1:{port}") as t:
                await t.link.ping(WAIT)
        proc.send_signal(stop)
        assert await asyncio.wait_for(proc.wait(), WAIT) == 0, err
        rest = (await proc.stderr.read()).decode(errors="replace")
        assert "stopped" in rest or any("stopped" in line for line in err), (err, rest)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
