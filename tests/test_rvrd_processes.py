"""``rvasync router --config FILE`` in real processes, joining two networks for programs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from pathlib import Path

import pytest

from rvasync.testing import free_port
from tests.rvrd_support import WAIT, Program, services

TOML = """\
[router]
name = "{name}"
{listen}
retry_min = 0.05
retry_max = 0.5
heartbeat = 0.2
neighbor_timeout = 2.0

[[network]]
name = "{net}"
service = "{service}"
network = "127.0.0.1"

[[neighbor]]
name = "{other}"
{address}
cost = 1
"""


def _env() -> dict[str, str]:
    """This tree first on the path, so the child runs the code under test."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


async def _start(path: Path) -> asyncio.subprocess.Process:
    env = _env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rvasync",
        "router",
        "--config",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        line = await proc.stdout.readline()
    assert b"ready" in line, line
    return proc


async def _stop(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        async with asyncio.timeout(10):
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def test_two_router_processes_carry_pubsub_and_request_reply(tmp_path: Path) -> None:
    sa, sb = services(2)
    port = free_port(socket.SOCK_STREAM)
    (tmp_path / "a.toml").write_text(
        TOML.format(
            name="ra",
            listen=f'listen = "127.0.0.1:{port}"',
            net="A",
            service=sa,
            other="rb",
            address="",
        )
    )
    (tmp_path / "b.toml").write_text(
        TOML.format(
            name="rb",
            listen="",
            net="B",
            service=sb,
            other="ra",
            address=f'address = "127.0.0.1:{port}"',
        )
    )
    ra = await _start(tmp_path / "a.toml")
    rb = await _start(tmp_path / "b.toml")
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        await pb.serve("SVC.B")
        lb = await pb.listen("NEWS.>")
        # The routers learn the interest and link up in the background: retry until through.
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    reply = await pa.request("SVC.B", timeout=0.5, q=4)
                    break
                except TimeoutError:
                    continue
        assert reply["answer"] == 8
        await pa.send("NEWS.TODAY", n=1)
        assert (await pb.next(lb))["n"] == 1
    finally:
        await pa.close()
        await pb.close()
        await _stop(rb)
        await _stop(ra)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[router]\nname = 'a'\n", "at least one [[network]]"),
        (
            "[router]\nname = 'a'\n[[network]]\nname = 'A'\nimport = ['A..B']\n",
            ":5: network[0].import",
        ),
        ("[router]\nname = 'a'\nbogus = 1\n[[network]]\nname = 'A'\n", ":3: router.bogus"),
        ("[router\n", "not valid TOML"),
        (
            "[router]\nname = 'a'\n[[network]]\nname = 'A'\nweights = { 'X.>' = -1 }\n",
            ":5: network[0].weights",
        ),
    ],
)
async def test_bad_config_files_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(text)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rvasync",
        "router",
        "--config",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, err = await proc.communicate()
    assert proc.returncode == 2
    assert expected in err.decode(), err
