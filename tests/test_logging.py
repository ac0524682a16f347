"""rvasync logs through the standard library's logging, with its structured fields.

Levels, handlers and ``logging.config`` set by the application govern
rvasync's records; a program that configures nothing, and the ``rvasync``
commands, still get readable key=value lines on stderr.
"""

from __future__ import annotations

import logging
import logging.config
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rvasync._logging import stderr_logger
from rvasync.advisories import build_advisory, log_unheard
from rvasync.rvrd import Router
from tests.rvrd_support import WAIT, router_config, services

ROOT = Path(__file__).resolve().parents[1]


class Collect(logging.Handler):
    """Keeps every record it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def rvlog() -> Iterator[logging.Logger]:
    """The ``rvasync`` logger, given back as it was (handlers, level, propagation)."""
    logger = logging.getLogger("rvasync")
    saved = (logger.handlers[:], logger.level, logger.propagate, logger.disabled)
    try:
        yield logger
    finally:
        logger.handlers[:], logger.level, logger.propagate, logger.disabled = saved


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, *args] if args else [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_level_set_on_the_rvasync_logger_silences_info(rvlog: logging.Logger) -> None:
    collect = Collect()
    rvlog.addHandler(collect)
    rvlog.setLevel(logging.WARNING)
    stderr_logger("rvasync.daemon.auth").info("users file reloaded", users=2)
    log_unheard(build_advisory("WARN", "SOMETHING", {"n": 1}))
    assert [(r.name, r.levelno, r.getMessage()) for r in collect.records] == [
        ("rvasync.advisories", logging.WARNING, "unheard advisory")
    ]
    rvlog.setLevel(logging.INFO)
    stderr_logger("rvasync.daemon.auth").info("users file reloaded", users=2)
    assert collect.records[-1].getMessage() == "users file reloaded"


def test_a_handler_from_dictconfig_gets_the_structured_fields(rvlog: logging.Logger) -> None:
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"collect": {"()": Collect}},
            "loggers": {"rvasync": {"handlers": ["collect"], "level": "INFO"}},
        }
    )
    (collect,) = rvlog.handlers
    assert isinstance(collect, Collect)
    # Fields named like LogRecord attributes are kept too, under another name.
    log_unheard(build_advisory("ERROR", "DATALOSS", {"lost": 3}))
    stderr_logger("rvasync.queues").warning("odd", name="q", process=7)
    unheard, odd = collect.records
    assert unheard.name == "rvasync.advisories" and unheard.levelno == logging.ERROR
    assert unheard.subject == "_RV.ERROR.SYSTEM.DATALOSS"  # type: ignore[attr-defined]
    assert unheard.fields == {"lost": 3}  # type: ignore[attr-defined]
    assert odd.name == "rvasync.queues"
    assert (odd.field_name, odd.field_process) == ("q", 7)  # type: ignore[attr-defined]


def test_a_program_that_configures_nothing_gets_a_line_on_stderr() -> None:
    done = _run(
        "from rvasync.advisories import build_advisory, log_unheard\n"
        "log_unheard(build_advisory('ERROR', 'DATALOSS', {'lost': 3}))\n"
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert "level='error' event='unheard advisory'" in line
    assert "subject='_RV.ERROR.SYSTEM.DATALOSS' fields={'lost': 3}" in line


def test_a_program_with_a_handler_gets_the_record_once_through_it() -> None:
    done = _run(
        "import logging\n"
        "logging.basicConfig(format='%(levelname)s %(name)s %(message)s %(subject)s')\n"
        "from rvasync.advisories import build_advisory, log_unheard\n"
        "log_unheard(build_advisory('WARN', 'X', {'lost': 3}))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "WARNING rvasync.advisories unheard advisory _RV.WARN.SYSTEM.X"
    ]


def test_the_daemon_command_still_prints_its_info_lines() -> None:
    done = _run("", "-m", "rvasync", "daemon", "--listen", "0", "--idle-exit", "0.2")
    assert done.returncode == 0, done.stderr
    assert "level='info' event='daemon idle; stopping' idle_exit=0.2" in done.stderr


async def test_router_advisories_a_network_took_are_logged_at_debug(
    rvlog: logging.Logger,
) -> None:
    collect = Collect()
    rvlog.addHandler(collect)
    rvlog.setLevel(logging.DEBUG)
    sa, sb = services(2)
    ra = await Router(router_config("ra", [("A", sa)], [("rb", None, 1)])).start()
    rb = await Router(router_config("rb", [("B", sb)], [("ra", ra.port, 1)], listen=False)).start()
    try:
        await ra.wait_for(lambda: ra.neighbors == ["rb"] and rb.neighbors == ["ra"], WAIT)
    finally:
        await rb.close()
        await ra.close()
    advised = [r for r in collect.records if r.getMessage() == "router advisory"]
    assert advised, [r.getMessage() for r in collect.records]
    assert {r.levelno for r in advised} == {logging.DEBUG}
    assert any(
        r.subject == "_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.CONNECTED"  # type: ignore[attr-defined]
        for r in advised
    )
