"""A secure daemon: TLS, a user with a password and subject limits, and its status page.

This program makes throwaway certificates (the ``cryptography`` package), adds
the user ``alice`` to a users file with ``rvasync passwd`` (she may publish and
listen to ``ORDERS.>`` only), and starts ``rvasync daemon`` with TLS, the users
file and a status page on a free port. Then it logs in as alice, sends and
receives an order, shows what happens outside her subjects and with a wrong
password, reads the status page's JSON, and stops everything.

Run: python examples/secure_daemon.py
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request

import rvasync as rv
from rvasync.security import client_context
from rvasync.testcerts import make_test_pki

SERVICE = "17473"  # the UDP service of this example's transports


def add_user(users: str, name: str, password: str, *patterns: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "rvasync", "passwd", users, name,
         "--publish", *patterns, "--subscribe", *patterns],
        input=password + "\n", text=True, check=True, capture_output=True, timeout=30,
    )  # fmt: skip


async def start_daemon(pki, users: str) -> tuple[subprocess.Popen[str], str, str]:
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0",
         "--tls-cert", pki.daemon_cert, "--tls-key", pki.daemon_key,
         "--users", users, "--http", "0"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    lines = [await asyncio.wait_for(asyncio.to_thread(daemon.stdout.readline), 20) for _ in "12"]
    address = re.search(r"listening on (\S+:\d+)", lines[0])
    page = re.search(r"status page on (\S+)", lines[1])
    if address is None or page is None:
        raise SystemExit(f"the daemon did not start: {lines!r}")
    for line in lines:
        print(f"daemon: {line.strip()}")
    return daemon, address.group(1), page.group(1)


def read_status(url: str, ca: str, user: str, password: str) -> dict:
    request = urllib.request.Request(url + "api/status")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10, context=client_context(cafile=ca)) as reply:
        return json.load(reply)


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        pki = make_test_pki(os.path.join(directory, "pki"))
        users = os.path.join(directory, "users.toml")
        add_user(users, "alice", "alice-secret", "ORDERS.>")
        daemon, address, page = await start_daemon(pki, users)
        try:
            login = rv.Security(daemon_cert=pki.ca_cert, user="alice", password="alice-secret")
            async with rv.Transport(SERVICE, daemon=address, security=login) as t:
                orders = t.listen("ORDERS.>")
                await t.link.ping()  # the daemon has the LISTEN before the order goes out
                await t.send(rv.Message("ORDERS.EU", {"qty": 10}))
                msg = await orders.get(timeout=10)
                print(f"alice got {msg.subject} qty={msg['qty']} over TLS")
                try:
                    t.listen(">")
                except rv.NotPermitted as exc:
                    print(f"refused: {exc}")
                try:
                    await t.send(rv.Message("PRICES.X", {"px": 1.0}))
                except rv.NotPermitted as exc:
                    print(f"refused: {exc}")
                status = await asyncio.to_thread(
                    read_status, page, pki.ca_cert, "alice", "alice-secret"
                )
                [client] = status["clients"]
                print(
                    f"status page: {len(status['clients'])} client, user {client['user']}, "
                    f"subjects {client['subjects']}, {client['messages_in']} message(s) in, "
                    f"up {status['uptime_seconds']} s"
                )
            wrong = rv.Security(daemon_cert=pki.ca_cert, user="alice", password="guess")
            try:
                async with rv.Transport(SERVICE, daemon=address, security=wrong):
                    pass
            except rv.NotPermitted as exc:
                print(f"wrong password: {exc}")
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            await asyncio.to_thread(daemon.wait, 20)


if __name__ == "__main__":
    asyncio.run(main())
