"""The network tools: ``rvasync daemon``, ``rvasync send`` and ``rvasync listen``."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rvasync.cli import main
from rvasync.cli.listen import format_message
from rvasync.cli.send import parse_field
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.pytest_plugin import stop_process_group
from rvasync.rvdatetime import DateTime
from rvasync.testing import free_port

WAIT = 30.0


def rvasync(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rvasync", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_stderr_line(proc: subprocess.Popen, text: str) -> None:
    deadline = time.monotonic() + WAIT
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return
    stop_process_group(proc)
    raise AssertionError(f"no {text!r} on stderr; saw {seen} {proc.stderr.read()}")


# -- field syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("n=7", ("n", 7, None)),
        ("x=2.5", ("x", 2.5, None)),
        ("s=hello world", ("s", "hello world", None)),
        ("s=", ("s", "", None)),
        ("e=a=b", ("e", "a=b", None)),
        ("nan=nan", ("nan", "nan", None)),
        ("n:u8=255", ("n", 255, FieldType.U8)),
        ("h:I32=0x10", ("h", 16, FieldType.I32)),
        ("f:F32=1.5", ("f", 1.5, FieldType.F32)),
        ("b:BOOL=yes", ("b", True, FieldType.BOOL)),
        ("t:STRING=12", ("t", "12", FieldType.STRING)),
        ("o:OPAQUE=abc", ("o", b"abc", FieldType.OPAQUE)),
        ("ip:IPADDR32=10.0.0.1", ("ip", ipaddress.IPv4Address("10.0.0.1"), FieldType.IPADDR32)),
        ("xs:I16ARRAY=1,-2,3", ("xs", [1, -2, 3], FieldType.I16ARRAY)),
        ("fs:F64ARRAY=0.5,2", ("fs", [0.5, 2.0], FieldType.F64ARRAY)),
        ("ss:STRINGARRAY=a,b", ("ss", ["a", "b"], FieldType.STRINGARRAY)),
        ("ss:STRINGARRAY=", ("ss", [], FieldType.STRINGARRAY)),
        ("url=http://x", ("url", "http://x", None)),
    ],
)
def test_field_syntax(spec, expected):
    assert parse_field(spec) == expected


def test_typed_datetime_and_nested_message():
    name, value, ftype = parse_field("when:DATETIME=2024-05-01T12:00:00Z")
    assert (name, ftype) == ("when", FieldType.DATETIME)
    assert value == DateTime.from_datetime(dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC))
    assert isinstance(parse_field("now:DATETIME=now")[1], DateTime)
    form = json.dumps({"fields": [{"name": "a", "type": "U16", "value": 3}]})
    _, inner, ftype = parse_field(f"sub:MSG={form}")
    assert ftype is FieldType.MSG and inner.field("a").type is FieldType.U16
    _, many, _ = parse_field(f"subs:MSGARRAY=[{form},{form}]")
    assert len(many) == 2


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("novalue", "expected name=value"),
        ("=3", "expected name=value"),
        ("n:NUMBER=3", "'NUMBER' is not a field type"),
        ("n:I32=abc", "field 'n:I32=abc'"),
        ("b:BOOL=maybe", "not a boolean"),
        ("m:MSG={", "not JSON"),
    ],
)
def test_bad_fields_are_named(spec, problem):
    from rvasync.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=problem):
        parse_field(spec)


def test_send_reports_bad_input_in_one_line(capsys):
    assert main(["send", "A.B", "n:U8=300", "--daemon", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rvasync send:") and "U8" in err[0]
    # Checked while parsing (before any daemon is contacted): argparse's usage error.
    for argv in (["send", "_RV.X", "--daemon", "127.0.0.1:1"], ["send", "A", "--count", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2


def test_send_to_a_daemon_that_is_not_there_is_status_2(capsys):
    port = free_port(socket.SOCK_STREAM)
    assert main(["send", "A.B", "x=1", "--daemon", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0]


def test_listen_line_is_the_tibrvlisten_line():
    msg = Message("A.B", reply_subject="_INBOX.X.1")
    msg.add("s", "hi")
    msg.add("n", 7)
    msg.add("u", 7, FieldType.U8)
    msg.add("o", b"\x01\x02")
    msg.add("sub", Message(fields={"z": 1.5}))
    moment = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
    ns = int(moment.timestamp()) * 1_000_000_000 + 5_123
    line = format_message(msg, ns)
    local = moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert line == (
        f"{local} (2024-05-01 12:00:00.000005123Z): subject=A.B, reply=_INBOX.X.1, "
        'message={s="hi" n=7 u=7 o=[2 opaque bytes] sub={z=1.5}}'
    )
    # reply= only where the message has a reply subject, as tibrvlisten prints it
    assert format_message(Message("A", {"n": 1}), ns).endswith(": subject=A, message={n=1}")


def test_listen_line_escapes_what_came_from_the_wire():
    """One message whose subject held a line break forged a whole extra output line
    (issue 43): subjects and strings are escaped, so a message is always one line."""
    msg = Message(fields={"DATA": "x\n2024-01-01 00:00:00 (forged): subject=Y"})
    msg.subject = "A\n2024-01-01 00:00:00 (forged): subject=EVIL\x1b[2J\u202e"
    msg.reply_subject = "R\r\x00"
    line = format_message(msg, 0)
    assert "\n" not in line and "\r" not in line and line.isprintable()
    assert "subject=A\\n2024-01-01" in line and "\\x1b[2J\\u202e" in line
    assert "reply=R\\r\\x00" in line


# -- the tools as processes ----------------------------------------------------------------------


def test_send_listen_round_trip_through_a_standalone_daemon(rv_daemon, rv_service):
    service = rv_service[0]
    listen = rvasync(
        "listen", "PRICES.>", "--count", "2", "--timeout", str(WAIT), "--json",
        "--daemon", rv_daemon, "--service", service,
    )  # fmt: skip
    try:
        wait_for_stderr_line(listen, "listening to PRICES.>")
        send = subprocess.run(
            [sys.executable, "-m", "rvasync", "send", "PRICES.IBM", "px=101.5", "qty:U32=10",
             "venue=NYSE", "--count", "2", "--daemon", rv_daemon, "--service", service],
            capture_output=True, text=True, timeout=WAIT,
        )  # fmt: skip
        assert send.returncode == 0, send.stderr
        assert send.stdout.strip() == "sent 2 messages to PRICES.IBM"
        out, err = listen.communicate(timeout=WAIT)
        assert listen.returncode == 0, err
        forms = [json.loads(line) for line in out.splitlines()]
        assert len(forms) == 2
        fields = {f["name"]: (f["type"], f["value"]) for f in forms[0]["fields"]}
        assert forms[0]["subject"] == "PRICES.IBM"
        assert fields == {"px": ("F64", 101.5), "qty": ("U32", 10), "venue": ("STRING", "NYSE")}
    finally:
        stop_process_group(listen)


def test_send_listen_round_trip_with_in_process_daemons(rv_service):
    service, network = rv_service
    listen = rvasync(
        "listen", "NEWS", "--count", "1", "--timeout", str(WAIT),
        "--service", service, "--network", network,
    )  # fmt: skip
    try:
        wait_for_stderr_line(listen, "listening to NEWS")
        deadline = time.monotonic() + WAIT
        # The sender's daemon meets the listener's on the service; a message sent before
        # the two have met is not retained for the newcomer, so resend until one lands.
        while listen.poll() is None and time.monotonic() < deadline:
            subprocess.run(
                [sys.executable, "-m", "rvasync", "send", "NEWS", "headline=ok",
                 "--service", service, "--network", network],
                capture_output=True, timeout=WAIT, check=True,
            )  # fmt: skip
            try:
                listen.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
        out, err = listen.communicate(timeout=WAIT)
        assert listen.returncode == 0, err
        assert 'subject=NEWS, message={headline="ok"}' in out
    finally:
        stop_process_group(listen)


def test_listen_timeout_without_enough_messages_is_status_1(rv_daemon):
    done = subprocess.run(
        [sys.executable, "-m", "rvasync", "listen", "QUIET", "--count", "1", "--timeout", "0.3",
         "--daemon", rv_daemon],
        capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert done.returncode == 1
    assert "with 0 of 1 messages" in done.stderr


def test_daemon_stops_on_sigterm_and_when_idle():
    daemon = rvasync("daemon", "--listen", "0")
    try:
        line = daemon.stdout.readline()
        assert "rvasync daemon listening on 127.0.0.1:" in line and f"pid {daemon.pid}" in line
        os.kill(daemon.pid, signal.SIGTERM)
        assert daemon.wait(WAIT) == 0
    finally:
        stop_process_group(daemon)
    idle = rvasync("daemon", "--listen", "0", "--idle-exit", "0.2")
    try:
        assert "listening on" in idle.stdout.readline()
        assert idle.wait(WAIT) == 0
    finally:
        stop_process_group(idle)


def test_daemon_on_a_busy_port_is_status_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "rvasync", "daemon", "--listen", str(port)],
            capture_output=True, text=True, timeout=WAIT,
        )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("rvasync daemon:") and str(port) in lines[-1]
