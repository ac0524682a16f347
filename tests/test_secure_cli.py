"""The secure daemon from the command line, as real processes: ``rvasync passwd``,
``rvasync daemon --tls-cert --users --http``, and ``rvasync send/listen`` logging in."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rvasync.pytest_plugin import stop_process_group
from rvasync.security import client_context
from rvasync.testcerts import make_test_pki

pytest.importorskip("cryptography")
pytest.importorskip("aiohttp")

WAIT = 30.0


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "rvasync", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT,
        env={**os.environ, **(env or {})},
    )


def passwd(users: str, user: str, password: str, *extra: str) -> None:
    done = run("passwd", users, user, *extra, stdin=password + "\n")
    assert done.returncode == 0, done.stderr
    assert f"user '{user}' written" in done.stdout


def test_passwd_writes_hashes_the_daemon_accepts_and_refuses_bad_input(tmp_path):
    users = str(tmp_path / "users.toml")
    passwd(users, "alice", "pw-a", "--publish", "ORDERS.>", "--subscribe", "ORDERS.>")
    passwd(users, "alice", "pw-a2")  # a new password keeps the permissions
    text = Path(users).read_text()
    assert "pw-a" not in text and "scrypt$" in text and '"ORDERS.>"' in text
    from rvasync.daemon.auth import load_users, verify_password

    alice = load_users(users).by_name["alice"]
    assert verify_password("pw-a2", alice.password_hash)
    assert alice.permissions.publish == ("ORDERS.>",)
    # The reply and router permissions, kept by a later change of password.
    passwd(users, "r1", "pw-r", "--router", "yes", "--reply", "no")
    passwd(users, "r1", "pw-r2")
    r1 = load_users(users).by_name["r1"].permissions
    assert r1.router and not r1.reply
    done = run("passwd", users, "bob", stdin="")
    assert done.returncode == 2 and "no password" in done.stderr
    done = run("passwd", users, "bob", "--subscribe", "a..b", stdin="x\n")
    assert done.returncode == 2 and "empty element" in done.stderr
    assert "bob" not in Path(users).read_text()  # nothing written for a refused change


def test_daemon_send_listen_and_status_page_as_processes(tmp_path):
    pki = make_test_pki(str(tmp_path / "pki"))
    users = str(tmp_path / "users.toml")
    passwd(users, "alice", "pw-a", "--publish", "ORDERS.>", "--subscribe", "ORDERS.>")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0",
         "--tls-cert", pki.daemon_cert, "--tls-key", pki.daemon_key, "--users", users,
         "--http", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        line = daemon.stdout.readline()
        found = re.search(r"listening on (\S+:\d+) \(pid \d+, TLS\)", line)
        assert found, line
        addr = found.group(1)
        page = re.search(r"status page on (\S+)", daemon.stdout.readline())
        assert page and page.group(1).startswith("https://127.0.0.1:")
        login = ["--daemon", addr, "--daemon-cert", pki.ca_cert, "--user", "alice"]
        env = {"RVASYNC_PASSWORD": "pw-a"}
        listen = subprocess.Popen(
            [sys.executable, "-m", "rvasync", "listen", "ORDERS.>", "--count", "1",
             "--timeout", str(WAIT), *login],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True, env={**os.environ, **env},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + WAIT
            while "listening to ORDERS.>" not in listen.stderr.readline():
                assert time.monotonic() < deadline and listen.poll() is None
            sent = run("send", "ORDERS.EU", "qty:U32=3", *login, env=env)
            assert sent.returncode == 0, sent.stderr
            out, err = listen.communicate(timeout=WAIT)
            assert listen.returncode == 0, err
            assert "ORDERS.EU" in out and "qty" in out
        finally:
            stop_process_group(listen)
        # Outside the user's patterns, and with a wrong password: one clear line, status 2.
        refused = run("send", "PRICES.X", "a=1", *login, env=env)
        assert refused.returncode == 2 and "may not publish" in refused.stderr
        wrong = run("send", "ORDERS.EU", "a=1", *login, env={"RVASYNC_PASSWORD": "nope"})
        assert wrong.returncode == 2 and "wrong user name or password" in wrong.stderr
        # A new user added while the daemon runs, then SIGHUP: no restart needed.
        passwd(users, "dave", "pw-d")
        os.kill(daemon.pid, signal.SIGHUP)
        dave = ["--daemon", addr, "--daemon-cert", pki.ca_cert, "--user", "dave", "--password"]
        sent = run("send", "ANY.THING", "a=1", *dave, "pw-d")
        assert sent.returncode == 0, sent.stderr
        # The status page, logged in as a user of the same file.
        request = urllib.request.Request(page.group(1) + "api/status")
        request.add_header("Authorization", "Basic " + _b64("dave:pw-d"))
        with urllib.request.urlopen(request, timeout=WAIT, context=client_context(
            cafile=pki.ca_cert)) as response:  # fmt: skip
            status = json.load(response)
        assert status["security"] == {**status["security"], "tls": True, "users": True}
        assert status["security"]["failed_logins"] >= 1
        assert daemon.poll() is None
        os.kill(daemon.pid, signal.SIGTERM)
        assert daemon.wait(WAIT) == 0
    finally:
        stop_process_group(daemon)


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def test_daemon_refuses_bad_security_options_in_one_line(tmp_path):
    done = run("daemon", "--listen", "0", "--users", str(tmp_path / "none.toml"))
    assert done.returncode == 2 and "needs TLS" in done.stderr
    done = run("daemon", "--listen", "0", "--tls-cert", str(tmp_path / "none.pem"))
    assert done.returncode == 2 and "certificate" in done.stderr
    done = run("send", "A", "x=1", "--daemon-cert", str(tmp_path / "none.pem"))
    assert done.returncode == 2
