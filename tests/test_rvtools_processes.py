"""The Rendezvous tools' counterparts, run as processes the way an operator runs them (a
``*_processes`` module: the pure-twin CI pass skips it, the tools run the same code either way).

``rvasync send SUBJECT TEXT`` (tibrvsend), ``rvasync cm send`` / ``cm listen``
(tibrvcmsend / tibrvcmlisten), ``rvasync dq listen`` (tibrvdqlisten),
``rvasync ft time`` / ``ft monitor`` (tibrvfttime / tibrvftmon): same
arguments (the one-dash spellings), same output lines. Every process gets a
bounded ``--timeout``/``--count`` or is stopped by the test, whatever the outcome.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from test_cli_tools import rvasync

from rvasync.cli.cm import cm_line
from rvasync.cli.dq import dq_line
from rvasync.message import CmLabel, Message
from rvasync.pytest_plugin import stop_process_group

WAIT = 30.0
TIMESTAMPS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{9}Z\)"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rvasync", *args], capture_output=True, text=True, timeout=WAIT
    )


def read_until(stream: object, text: str, proc: subprocess.Popen[str]) -> list[str]:
    """Lines of ``stream`` up to the first holding ``text`` (bounded by WAIT)."""
    deadline = time.monotonic() + WAIT
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = stream.readline()  # type: ignore[attr-defined]
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if text in line:
            return seen
    stop_process_group(proc)
    raise AssertionError(f"no {text!r}; saw {seen}")


# -- the line formats (no processes) -------------------------------------------------------


def test_cm_and_dq_lines_are_the_tibrv_lines() -> None:
    msg = Message("A.B", {"DATA": "x"})
    assert cm_line(msg) == (
        'subject=A.B, reply=none, message={DATA="x"}, certified sender=FALSE, receipt uncertified'
    )
    assert dq_line(msg) == 'subject=A.B, reply=none, message={DATA="x"}, certified= FALSE'
    msg.cm = CmLabel("RVCMPUB", None)
    assert cm_line(msg).endswith("certified sender=TRUE, receipt uncertified")
    msg.cm = CmLabel("RVCMPUB", 7)
    msg.reply_subject = "R.S"
    assert cm_line(msg) == (
        'subject=A.B, reply=R.S, message={DATA="x"}, certified sender=TRUE, sequence=7'
    )
    assert dq_line(msg) == 'subject=A.B, reply=R.S, message={DATA="x"}, certified= TRUE, sequence=7'


@pytest.mark.parametrize(
    "tool", [["cm", "send"], ["cm", "listen"], ["dq", "listen"], ["ft", "monitor"], ["ft", "time"]]
)
def test_every_tool_has_help(tool: list[str]) -> None:
    done = run(*tool, "--help")
    assert done.returncode == 0 and "-service" in done.stdout and "usage: rvasync" in done.stdout


# -- send and listen ------------------------------------------------------------------------


def test_send_text_goes_in_a_data_field_one_message_per_text(rv_daemon: str, rv_service) -> None:
    service = rv_service[0]
    listen = rvasync(
        "listen", "NEWS.>", "--count", "3", "--timeout", str(WAIT),
        "-daemon", rv_daemon, "-service", service,
    )  # fmt: skip
    try:
        read_until(listen.stderr, "listening to NEWS.>", listen)
        send = run(
            "send", "-daemon", rv_daemon, "-service", service,
            "NEWS.A", "first message", "second one", "n:U8=7",
        )  # fmt: skip
        assert send.returncode == 0, send.stderr
        assert send.stdout.splitlines() == [
            'Publishing: subject=NEWS.A "first message"',
            'Publishing: subject=NEWS.A "second one"',
        ]
        again = run("send", "-daemon", rv_daemon, "-service", service, "NEWS.B", "x=1")
        assert again.stdout.strip() == "sent 1 message to NEWS.B"
        out, err = listen.communicate(timeout=WAIT)
        assert listen.returncode == 0, err
        lines = out.splitlines()
        assert [line.split(": ", 1)[1] for line in lines] == [
            'subject=NEWS.A, message={n=7 DATA="first message"}',
            'subject=NEWS.A, message={n=7 DATA="second one"}',
            "subject=NEWS.B, message={x=1}",
        ]
        assert all(re.match(TIMESTAMPS + ": subject=", line) for line in lines), lines
    finally:
        stop_process_group(listen)


# -- certified delivery ----------------------------------------------------------------------


def test_cm_send_to_cm_listen(rv_daemon: str, rv_service, tmp_path) -> None:
    service = rv_service[0]
    ledger = tmp_path / "listener.ledger"
    listen = rvasync(
        "cm", "listen", "-daemon", rv_daemon, "-service", service, "-ledger", str(ledger),
        "-cmname", "LISTENER", "ORDERS.>", "ZERO.\u200bWIDTH", "--count", "3",
        "--timeout", str(WAIT),
    )  # fmt: skip
    try:
        # A zero-width character is legal in a subject, and printed escaped (not invisible).
        assert read_until(listen.stdout, "ZERO.", listen)[-2:] == [
            "rvasync cm listen: Listening to subject ORDERS.>",
            "rvasync cm listen: Listening to subject ZERO.\\u200bWIDTH",
        ]
        send = run(
            "cm", "send", "-daemon", rv_daemon, "-service", service, "-cmname", "SENDER",
            "-interval", "0.1", "-rounds", "3", "ORDERS.NEW", "buy 10",
        )  # fmt: skip
        assert send.returncode == 0, send.stderr
        assert send.stdout.strip() == 'Publishing: subject=ORDERS.NEW "buy 10"'
        assert send.stderr.splitlines()[:4] == [
            'rvasync cm send: Sending "buy 10" to "ORDERS.NEW"',
            "rvasync cm send: Success in sending message 1",
            "rvasync cm send: Success in sending message 2",
            "rvasync cm send: Success in sending message 3",
        ]
        out, err = listen.communicate(timeout=WAIT)
        assert listen.returncode == 0, err
        lines = out.splitlines()
        assert len(lines) == 3
        head = 'subject=ORDERS.NEW, reply=none, message={DATA="buy 10"}, certified sender=TRUE, '
        assert all(line.startswith(head) for line in lines), lines
        # The first message comes before the registration: received, but uncertified.
        assert lines[-1] == head + "sequence=3"
        assert ledger.exists()
    finally:
        stop_process_group(listen)


def test_dq_listen_takes_the_tasks(rv_daemon: str, rv_service) -> None:
    service = rv_service[0]
    worker = rvasync(
        "dq", "listen", "-daemon", rv_daemon, "-service", service, "-cmname", "WORKERS",
        "-heartbeat", "0.3", "-activation", "1", "TASKS", "ZERO.\u200bWIDTH", "--count", "3",
        "--timeout", str(WAIT),
    )  # fmt: skip
    try:
        assert read_until(worker.stdout, "ZERO.", worker)[-2:] == [
            "rvasync dq listen: Listening to subject TASKS",
            "rvasync dq listen: Listening to subject ZERO.\\u200bWIDTH",
        ]
        # Tasks sent while no member schedules reach no worker: wait for the election.
        read_until(worker.stderr, "_RV.INFO.RVCM.QUEUE.SCHEDULER.ACTIVE.WORKERS", worker)
        send = run(
            "cm", "send", "-daemon", rv_daemon, "-service", service,
            "-interval", "0.1", "-rounds", "3", "TASKS", "job",
        )  # fmt: skip
        assert send.returncode == 0, send.stderr
        out, err = worker.communicate(timeout=WAIT)
        assert worker.returncode == 0, err
        lines = out.splitlines()
        assert len(lines) == 3
        assert all(
            line.startswith('subject=TASKS, reply=none, message={DATA="job"}, certified= ')
            for line in lines
        ), lines
        assert lines[-1].endswith("certified= TRUE, sequence=3")
    finally:
        stop_process_group(worker)


# -- fault tolerance ---------------------------------------------------------------------------


def test_ft_time_is_seen_by_ft_monitor_and_publishes_the_time(rv_daemon: str, rv_service) -> None:
    service = rv_service[0]
    common = ["-daemon", rv_daemon, "-service", service]
    monitor = rvasync("ft", "monitor", *common, "-lost-interval", "1")
    listen = rvasync("listen", "TIBRVFT_TIME", "--count", "1", "--timeout", str(WAIT), *common)
    member = None
    try:
        read_until(monitor.stderr, "Waiting for group information...", monitor)
        read_until(listen.stderr, "listening to TIBRVFT_TIME", listen)
        member = rvasync(
            "ft", "time", *common, "-interval", "0.2", "-heartbeat", "0.3", "-activation", "1"
        )
        intro = read_until(member.stdout, "####### ACTIVATE: TIBRVFT_TIME_EXAMPLE", member)
        assert intro == [
            "rvasync ft time initializing...",
            "Active group member will publish time every 0.2 seconds.",
            "Subject is TIBRVFT_TIME",
            "Inactive will not publish time",
            "####### ACTIVATE: TIBRVFT_TIME_EXAMPLE",
        ]
        seen = read_until(monitor.stdout, "active members", monitor)
        assert (
            seen[-1] == "Group [TIBRVFT_TIME_EXAMPLE]: has 1 active members (after one activated)."
        )
        out, err = listen.communicate(timeout=WAIT)
        assert listen.returncode == 0, err
        assert re.fullmatch(
            TIMESTAMPS + r": subject=TIBRVFT_TIME, message=\{DATA=\d{4}-\d\d-\d\d "
            r"\d\d:\d\d:\d\d\.000000000Z\}",
            out.strip(),
        ), out
        member.terminate()
        member.wait(WAIT)
        seen = read_until(monitor.stdout, "active members", monitor)
        assert (
            seen[-1]
            == "Group [TIBRVFT_TIME_EXAMPLE]: has 0 active members (after one deactivated)."
        )
    finally:
        for proc in (monitor, listen, member):
            if proc is not None:
                stop_process_group(proc)
