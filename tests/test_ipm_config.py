"""Configuring the in-process daemon (the spec's IPM): code, explicit file, implicit file, defaults.

Also the misuses issue 34 item 7 names: a ``Daemon`` started after the loop's
first transport, and listening on another transport's inbox, raise
InvalidArgument instead of being accepted and never used.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import rvasync as rv
from rvasync.daemon.engine import IN_PROCESS_RELIABILITY, running_in_process_daemon
from rvasync.daemon.ipmconfig import ENV_VAR, IMPLICIT_NAME


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of its own, and no RVASYNC_IPM_CONFIG from outside."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    return tmp_path


def in_process() -> rv.Daemon:
    daemon = running_in_process_daemon()
    assert daemon is not None
    return daemon


async def open_one(rv_service: tuple[str, str]) -> rv.Daemon:
    async with rv.Transport(*rv_service):
        return in_process()


# -- where the parameters come from ----------------------------------------------------------


async def test_the_defaults_without_any_file(workdir, rv_service) -> None:
    daemon = await open_one(rv_service)
    assert daemon.reliability == IN_PROCESS_RELIABILITY and daemon.started_on_first_use


async def test_the_implicit_file_in_the_working_directory(workdir, rv_service) -> None:
    (workdir / IMPLICIT_NAME).write_text("reliability = 2.5\nheartbeat_interval = 0.5\n")
    daemon = await open_one(rv_service)
    assert daemon.reliability == 2.5


async def test_the_environment_names_the_implicit_file(workdir, rv_service, monkeypatch) -> None:
    (workdir / IMPLICIT_NAME).write_text("reliability = 2.5\n")
    named = workdir / "elsewhere.toml"
    named.write_text("reliability = 7\n")
    monkeypatch.setenv(ENV_VAR, str(named))
    daemon = await open_one(rv_service)
    assert daemon.reliability == 7


async def test_an_environment_naming_nothing_is_an_error(workdir, rv_service, monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(workdir / "missing.toml"))
    with pytest.raises(rv.InvalidArgument, match=f"{ENV_VAR}=.*missing.toml"):
        await open_one(rv_service)


async def test_an_explicit_file_overrides_the_implicit_one(workdir, rv_service) -> None:
    (workdir / IMPLICIT_NAME).write_text("reliability = 2.5\n")
    explicit = workdir / "explicit.toml"
    explicit.write_text("reliability = 9\nmax_datagram = 1400\n")
    daemon = rv.Daemon.from_file(explicit)
    await daemon.start()
    try:
        assert await open_one(rv_service) is daemon
        assert daemon.reliability == 9 and not daemon.started_on_first_use
    finally:
        await daemon.stop()


async def test_code_overrides_the_explicit_file(workdir) -> None:
    explicit = workdir / "explicit.toml"
    explicit.write_text("reliability = 9\n")
    assert rv.Daemon.from_file(explicit, reliability=1.5).reliability == 1.5
    explicit.write_text("heartbeat_interval = 0.5\n")
    # no reliability anywhere: the in-process default for a daemon that does not listen
    assert rv.Daemon.from_file(explicit).reliability == IN_PROCESS_RELIABILITY
    assert rv.Daemon.from_file(explicit, listen=0).reliability == 60.0


async def test_a_daemon_started_in_code_skips_the_implicit_file(workdir, rv_service) -> None:
    (workdir / IMPLICIT_NAME).write_text("reliability = 2.5\n")
    daemon = rv.Daemon(reliability=3.0)
    await daemon.start()
    try:
        assert await open_one(rv_service) is daemon and daemon.reliability == 3.0
    finally:
        await daemon.stop()


async def test_parameters_are_frozen_once_the_daemon_runs(workdir, rv_service) -> None:
    (workdir / IMPLICIT_NAME).write_text("reliability = 2.5\n")
    async with rv.Transport(*rv_service):
        (workdir / IMPLICIT_NAME).write_text("reliability = 8\n")
        async with rv.Transport(*rv_service):
            assert in_process().reliability == 2.5


# -- bad files --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("reliability = 2.5\nbogus = 1\n", ["line 2", "unknown key 'bogus'", "reliability"]),
        ("\n\nreliability = -1\n", ["line 3", "key 'reliability'", ">= 0"]),
        ('reliability = "fast"\n', ["line 1", "key 'reliability'", "number of seconds"]),
        ("heartbeat_interval = 5\npeer_timeout = 2\n", ["line", "key 'peer_timeout'", "exceed"]),
        ("reliability = \n", ["not valid TOML", "line 1"]),
        ("[daemon]\nreliability = 1\n", ["line 1", "[daemon] is a table"]),
        ("max_datagram = 10\n", ["line 1", "key 'max_datagram'", "256..65507"]),
        ("listen = 7500\n", ["line 1", "key 'listen'", "standalone clients"]),
        ("security = 1\n", ["unknown key 'security'"]),
    ],
)
async def test_a_bad_implicit_file_names_the_file_the_line_and_the_key(
    workdir, rv_service, text: str, words: list[str]
) -> None:
    (workdir / IMPLICIT_NAME).write_text(text)
    with pytest.raises(rv.InvalidArgument) as caught:
        await open_one(rv_service)
    message = str(caught.value)
    assert IMPLICIT_NAME in message
    for word in words:
        assert word in message, (word, message)
    assert running_in_process_daemon() is None


def test_a_bad_explicit_file(workdir) -> None:
    with pytest.raises(rv.InvalidArgument, match="cannot read it"):
        rv.Daemon.from_file(workdir / "missing.toml")
    (workdir / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(rv.InvalidArgument, match="not UTF-8"):
        rv.Daemon.from_file(workdir / "bin.toml")


# -- issue 34 item 7: misuses that were silently accepted -----------------------------------------


async def test_a_daemon_started_after_the_first_transport_is_refused(workdir, rv_service) -> None:
    async with rv.Transport(*rv_service):
        late = rv.Daemon(reliability=1.0)
        with pytest.raises(rv.InvalidArgument, match=r"already running .*never be used"):
            await late.start()
        assert not late.running
        standalone = rv.Daemon(listen=0)  # serving TCP clients is still a use
        await standalone.start()
        await standalone.stop()


async def test_a_second_in_process_daemon_is_refused_too(workdir) -> None:
    first = rv.Daemon()
    await first.start()
    try:
        with pytest.raises(rv.InvalidArgument, match="started by the program"):
            await rv.Daemon().start()
    finally:
        await first.stop()


async def test_listening_on_another_transports_inbox_is_refused(rv_service) -> None:
    async with rv.Transport(*rv_service) as a, rv.Transport(*rv_service) as b:
        inbox = a.create_inbox()
        with pytest.raises(rv.InvalidArgument, match="made by another transport"):
            b.listen(inbox)
        with pytest.raises(rv.InvalidArgument, match="made by another transport"):
            rv.process_transport().listen(inbox)
        async with a.listen(inbox) as mine:
            await b.send(rv.Message(inbox, {"n": 1}))
            async with asyncio.timeout(10):
                assert (await mine.get())["n"] == 1
