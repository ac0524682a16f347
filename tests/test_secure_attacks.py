"""The secure daemon and its status page under attack (issue 35), quick tier.

Each attack runs against 127.0.0.0/8 only, from many loopback source
addresses where it matters (``local_addr=("127.x.y.z", 0)``), for a few
seconds at most, while a real user does real work. What each test checks is
what the attack must not achieve: lock a real user out, starve the client
port, keep connections forever, publish where it may not.

The figures docs/security.md quotes come from these tests (the limits are
the daemon's defaults unless a test says otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import resource
import ssl
import subprocess
import sys

import pytest

import rvasync as rv
from rvasync.daemon.auth import DaemonSecurity, hash_password
from rvasync.protocol import clientproto as cp
from rvasync.protocol.clientproto import ErrorCode
from rvasync.pytest_plugin import stop_process_group
from rvasync.security import client_context
from rvasync.testcerts import make_test_pki
from tests.test_secure_daemon import secure_daemon

pytest.importorskip("cryptography")
aiohttp = pytest.importorskip("aiohttp")
from rvasync.daemon.httpguard import HttpLimits  # noqa: E402
from rvasync.daemon.status_http import StatusServer  # noqa: E402

WAIT = 20.0
PASSWORDS = {"alice": "alice-pw", "carol": "carol-pw", "eve": "eve-pw", "r1": "r1-pw"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(str(tmp_path_factory.mktemp("pki")), clients=("bob",))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("users") / "users.toml"
    path.write_text(
        f"""
[users.alice]
password = "{hash_password(PASSWORDS["alice"])}"

[users.carol]
password = "{hash_password(PASSWORDS["carol"])}"

[users.eve]
password = "{hash_password(PASSWORDS["eve"])}"
publish = ["EVE.>"]
subscribe = ["EVE.>"]

[users.mute]
password = "{hash_password("mute-pw")}"
reply = false

[users.r1]
password = "{hash_password(PASSWORDS["r1"])}"
router = true

[users.bob]
cert_subject = "CN=bob"
subscribe = ["PRICES.*"]
"""
    )
    return path


def by_password(pki, user: str, password: str | None = None) -> rv.Security:
    return rv.Security(
        daemon_cert=pki.ca_cert, user=user, password=password or PASSWORDS.get(user, "x")
    )


async def raw_login(
    port: int, ctx: ssl.SSLContext, user: str, password: str, *, source: str = "127.0.0.1"
) -> cp.Frame | None:
    """Log in over a raw TLS connection from ``source``: the WELCOME or ERROR frame (None
    when the daemon closed first), the connection closed after."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1", local_addr=(source, 0)
            ),
            WAIT,
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    conn = cp.Connection(cp.Role.CLIENT)
    try:
        writer.write(conn.send(cp.Hello(user=user, password=password)))
        async with asyncio.timeout(WAIT):
            while True:
                data = await reader.read(65536)
                if not data:
                    return None
                for frame in conn.receive_data(data):
                    if isinstance(frame, cp.Welcome | cp.Error):
                        return frame
    except (OSError, TimeoutError, ssl.SSLError, cp.ProtocolError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 2)


async def flood(seconds: float, attempt, workers: int) -> list:
    """Run ``attempt(i)`` in a loop on ``workers`` tasks for ``seconds``: their results."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    results: list = []

    async def worker(i: int) -> None:
        while loop.time() < end:
            results.append(await attempt(i))

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(workers))), seconds + WAIT)
    return results


def texts(frames) -> list[str]:
    return [f.text for f in frames if isinstance(f, cp.Error)]


# -- item 1: a flood of made-up names --------------------------------------------------------


async def test_a_flood_of_made_up_names_locks_out_no_real_user(pki, users_file):
    """48 tasks log in with random names from eight hosts for 3 s; meanwhile alice logs
    in from a host she never used and carol's link is cut and reconnects. Every real
    login succeeds, and no made-up name costs a password check. (Before: the 32 login
    slots were full and real users got "too many logins under way; retry later".)"""
    ctx = client_context(cafile=pki.ca_cert)
    async with secure_daemon(pki, users_file) as (daemon, addr):
        port = daemon.listen_port
        gate = daemon.security.gate
        carol = rv.Transport(daemon=addr, security=by_password(pki, "carol"))
        await carol.open()
        try:
            echo = carol.listen("CAROL.ECHO")
            await carol.link.ping(WAIT)

            async def made_up(i: int):
                name = f"u{random.getrandbits(48):x}"
                return await raw_login(port, ctx, name, "guess", source=f"127.0.2.{i % 8 + 1}")

            async def real_users() -> list:
                await asyncio.sleep(0.5)
                answers = []
                for _ in range(4):
                    answers.append(
                        await raw_login(port, ctx, "alice", PASSWORDS["alice"], source="127.0.3.1")
                    )
                # carol's connection is cut by the daemon: her link must come back.
                for conn in list(daemon.client_server.sessions):
                    if conn.user == "carol":
                        conn.shut(ErrorCode.SHUTDOWN, "cut by the test")
                async with asyncio.timeout(WAIT):
                    while carol.link.reconnects < 1 or not carol.link.connected:
                        await asyncio.sleep(0.05)
                await carol.send(rv.Message("CAROL.ECHO", {"n": 1}))
                answers.append((await echo.get(WAIT))["n"])
                return answers

            checks_before = gate.password_checks
            flooded, real = await asyncio.gather(flood(3.0, made_up, 48), real_users())
        finally:
            await carol.close()
        assert all(isinstance(a, cp.Welcome) for a in real[:4]), real
        assert real[4] == 1
        refused = texts(flooded)
        assert len(refused) > 48, len(refused)  # the flood ran
        # Made-up names are refused (and their hosts braked) like any wrong password.
        assert {re.sub(r"\d+ s$", "N s", t) for t in refused} <= {
            "login refused: wrong user name or password",
            "login refused: too many failed logins; retry in N s",
        }, set(refused)
        # Alice's four logins and carol's reconnect: the only passwords checked.
        assert gate.password_checks - checks_before == 5
        print(f"figure: {len(refused)} made-up logins refused in 3 s, none checked")


async def test_made_up_and_real_names_are_refused_alike_and_only_real_ones_cost_a_check(
    pki, users_file
):
    """No user enumeration: the same words and no earlier than the same delay for a
    made-up name and for a real user with a wrong password; only the latter is checked."""
    ctx = client_context(cafile=pki.ca_cert)
    async with secure_daemon(pki, users_file, failed_login_delay=0.3) as (daemon, _):
        port = daemon.listen_port
        gate = daemon.security.gate
        loop = asyncio.get_running_loop()
        for user, checks in (("nobody-here", 0), ("alice", 1)):
            before = gate.password_checks
            started = loop.time()
            frame = await raw_login(port, ctx, user, "wrong", source="127.0.4.1")
            took = loop.time() - started
            assert isinstance(frame, cp.Error) and frame.code == "NOT_PERMITTED"
            assert frame.text == "login refused: wrong user name or password"
            assert took >= 0.3  # answered no earlier than the delay, whoever it was
            assert gate.password_checks - before == checks


async def test_silent_connections_from_many_hosts_leave_room_for_a_real_login(pki, users_file):
    """Ten hosts open 64 connections each to the client port and say nothing (no TLS
    handshake): 64 per host and 512 in all are kept, the rest closed at once. alice, from
    a host of her own, still logs in: her connection takes the place of the oldest one
    of a host holding the most, rather than being refused because the total is reached
    (before: closed at once, for as long as the flood lasted)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("this test opens 640 connections: needs a descriptor limit of 4096")
    # The daemon's total is a quarter of the limit: 512 needs 2048, both ends 1,280 more.
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    async with secure_daemon(pki, users_file) as (daemon, _):
        port = daemon.listen_port
        slots = daemon.client_server.unauthenticated
        writers = []
        try:
            for i in range(640):
                with contextlib.suppress(OSError):
                    writers.append((await connect(port, f"127.0.12.{i % 10 + 1}"))[1])
            async with asyncio.timeout(WAIT):
                while slots.in_use < slots.total or (
                    slots.refused + slots.evicted < 640 - slots.total
                ):
                    await asyncio.sleep(0.05)
            assert (slots.total, slots.per_host) == (512, 64)
            assert slots.held_by("127.0.12.1") <= 64
            flood_evicted = slots.evicted
            ctx = client_context(cafile=pki.ca_cert)
            for n in range(3):
                welcome = await raw_login(
                    port, ctx, "alice", PASSWORDS["alice"], source=f"127.0.13.{n + 1}"
                )
                assert isinstance(welcome, cp.Welcome), (n, welcome)
            assert slots.in_use <= slots.total
            # Her first login found every slot taken (each later one, hers given back).
            assert slots.evicted > flood_evicted
        finally:
            for writer in writers:
                writer.close()
        print(
            f"figure: {slots.total} silent connections held, {flood_evicted} of the flood's "
            f"made room, {slots.refused} closed at once; alice's made room "
            f"{slots.evicted - flood_evicted} time(s)"
        )


async def test_a_connection_past_its_handshake_gives_its_slot_to_a_newcomer(
    pki, users_file, monkeypatch
):
    """4 unauthenticated slots, 2 per host: two hosts finish their TLS handshakes and say
    nothing. alice, from a third host, logs in: the oldest of them (TLS done, no HELLO:
    the connection's own abort, not the handshake's cancel) is closed for her."""
    from rvasync.daemon import server

    monkeypatch.setattr(server, "MAX_UNAUTHENTICATED", 4)
    monkeypatch.setattr(server, "MAX_UNAUTHENTICATED_PER_HOST", 2)
    ctx = client_context(cafile=pki.ca_cert)
    async with secure_daemon(pki, users_file) as (daemon, _):
        port = daemon.listen_port
        slots = daemon.client_server.unauthenticated
        assert (slots.total, slots.per_host) == (4, 2)
        held = []
        try:
            for source in ("127.0.14.1", "127.0.14.1", "127.0.14.2", "127.0.14.2"):
                held.append(
                    await asyncio.wait_for(
                        asyncio.open_connection(
                            "127.0.0.1",
                            port,
                            ssl=ctx,
                            server_hostname="127.0.0.1",
                            local_addr=(source, 0),
                        ),
                        WAIT,
                    )
                )
            assert slots.in_use == 4
            welcome = await raw_login(port, ctx, "alice", PASSWORDS["alice"], source="127.0.14.3")
            assert isinstance(welcome, cp.Welcome), welcome
            assert await asyncio.wait_for(held[0][0].read(), WAIT) == b""  # made room
            assert slots.evicted == 1 and slots.held_by("127.0.14.1") == 1
        finally:
            for _, writer in held:
                writer.close()


# -- item 2: brute force from many hosts ------------------------------------------------------


async def test_brute_force_from_60_hosts_gets_few_checks_and_alice_still_logs_in(pki, users_file):
    """60 loopback hosts guess alice's password for 3 s. The per-user brake lets a handful
    of checks through (before: 251 in 12 s, none throttled); alice still logs in from the
    host she used before, bob by certificate and carol from a new host."""
    ctx = client_context(cafile=pki.ca_cert)
    async with secure_daemon(pki, users_file, failed_login_delay=0.05) as (daemon, addr):
        port = daemon.listen_port
        gate = daemon.security.gate
        home = await raw_login(port, ctx, "alice", PASSWORDS["alice"], source="127.0.0.1")
        assert isinstance(home, cp.Welcome)

        async def guess(i: int):
            return await raw_login(port, ctx, "alice", f"guess{i}", source=f"127.0.1.{i + 1}")

        async def real_users() -> list:
            await asyncio.sleep(1.0)  # the brake holds alice by now
            answers = [await raw_login(port, ctx, "alice", PASSWORDS["alice"])]
            answers.append(
                await raw_login(port, ctx, "carol", PASSWORDS["carol"], source="127.0.5.1")
            )
            cert, key = pki.client("bob")
            bob = rv.Security(daemon_cert=pki.ca_cert, user_cert=cert, user_key=key)
            async with rv.Transport(daemon=addr, security=bob) as t:
                answers.append(t.link.daemon_info["user"])
            return answers

        checks_before = gate.password_checks
        guesses, real = await asyncio.gather(flood(3.0, guess, 60), real_users())
        guessed = gate.password_checks - checks_before - 2  # alice's and carol's logins
    assert isinstance(real[0], cp.Welcome) and isinstance(real[1], cp.Welcome), real
    assert real[2] == "bob"
    refused = texts(guesses)
    braked = [t for t in refused if "too many failed logins" in t]
    assert len(braked) > len(refused) // 2, (len(braked), len(refused))
    # 5 free, then one each after 1 and 2 s of refusals (and one at most for the
    # attempts under way when the brake closed): docs/security.md quotes this.
    assert 5 <= guessed <= 8, guessed
    print(f"figure: {len(guesses)} guesses from 60 hosts in 3 s, {guessed} checked")


# -- item 3: the status page -----------------------------------------------------------------


@contextlib.asynccontextmanager
async def page_of(daemon, **limits):
    page = StatusServer(daemon, port=0, limits=HttpLimits(**limits))
    await page.start()
    try:
        yield page
    finally:
        await page.stop()


async def hold(port: int, source: str, first: bytes = b"", drip: bytes = b"") -> float | None:
    """Open a connection to the page from ``source``, send ``first``, then ``drip`` every
    0.1 s: seconds until the page closed it (None: still open after WAIT)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return 0.0
    try:
        if first:
            writer.write(first)
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(65536), 0.1)
                except TimeoutError:
                    if drip:
                        writer.write(drip)
                    continue
                if not data:
                    return loop.time() - started
    except TimeoutError:
        return None
    except OSError:
        return loop.time() - started
    finally:
        writer.close()


async def test_slowloris_and_idle_connections_are_closed_and_the_client_port_goes_on():
    """40 connections dripping a request head one header a tenth of a second, 20 idle ones
    and 10 that made a request and then sat: every one is closed by the page (before:
    none ever was), and clients log in and talk throughout."""
    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    try:
        async with page_of(
            daemon, header_timeout=1.0, idle_timeout=0.5, max_connections=100, max_per_host=100
        ) as page:
            slow = [
                hold(page.port, f"127.0.6.{i % 20 + 1}", b"GET / HTTP/1.1\r\n", b"X-a: b\r\n")
                for i in range(40)
            ]
            idle = [hold(page.port, f"127.0.7.{i + 1}") for i in range(20)]
            used = [
                hold(page.port, "127.0.8.1", b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
                for _ in range(10)
            ]

            async def client() -> int:
                async with rv.Transport(daemon=f"127.0.0.1:{daemon.listen_port}") as t:
                    listener = t.listen("STILL.HERE")
                    await t.link.ping(WAIT)
                    await t.send(rv.Message("STILL.HERE", {"n": 7}))
                    return (await listener.get(WAIT))["n"]

            results = await asyncio.gather(*slow, *idle, *used, client())
    finally:
        await daemon.stop()
    closed, talked = results[:-1], results[-1]
    assert talked == 7
    assert all(c is not None for c in closed), closed.count(None)


async def connect(port: int, source: str):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def test_the_page_caps_its_connections_and_still_answers():
    """5 per host and 10 in all: the 6th from a host is closed at once; at the total, a
    newcomer from another host takes the place of the oldest connection of the host
    holding the most, and one from that host is closed at once."""
    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    try:
        async with page_of(daemon, max_connections=10, max_per_host=5, header_timeout=5) as page:
            held = [await connect(page.port, f"127.0.9.{h}") for h in (1, 1, 1, 1, 1, 2, 2, 2)]
            await asyncio.sleep(0.2)
            assert page.connections.in_use == 8
            over_host = await hold(page.port, "127.0.9.1")
            assert over_host is not None and over_host < 1.0  # closed at once
            more = [await connect(page.port, f"127.0.9.{h}") for h in (3, 4)]
            await asyncio.sleep(0.2)
            assert page.connections.in_use == 10
            newcomer = await connect(page.port, "127.0.9.5")
            oldest_reader = held[0][0]
            assert await asyncio.wait_for(oldest_reader.read(), WAIT) == b""  # made room
            assert page.connections.held_by("127.0.9.1") == 4
            assert page.connections.held_by("127.0.9.5") == 1
            # 127.0.9.1 holds the most now: nobody has more to give up for it.
            over_all = await hold(page.port, "127.0.9.1")
            assert over_all is not None and over_all < 1.0
            for _, writer in [*held, *more, newcomer]:
                writer.close()
            async with asyncio.timeout(WAIT):
                while page.connections.in_use:
                    await asyncio.sleep(0.05)
            async with (
                aiohttp.ClientSession() as session,
                session.get(page.url + "api/status") as response,
            ):
                assert response.status == 200
            assert page.connections.refused == 2 and page.connections.evicted == 1
    finally:
        await daemon.stop()


async def test_a_request_without_credentials_is_answered_401_and_its_connection_closed(
    users_file,
):
    security = DaemonSecurity(users_file=str(users_file), allow_plain_passwords=True)
    daemon = rv.Daemon(listen=0, security=security, host_status_interval=0)
    await daemon.start()
    try:
        async with page_of(daemon, idle_timeout=30) as page:
            request = b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n"
            reader, writer = await connect(page.port, "127.0.11.1")
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), WAIT)  # to the close
            writer.close()
            assert answer.startswith(b"HTTP/1.1 401 ")
    finally:
        await daemon.stop()


def _ready(proc) -> tuple[str, str]:
    line = proc.stdout.readline()
    found = re.search(r"listening on (\S+:\d+)", line)
    page = re.search(r"status page on (\S+)", proc.stdout.readline())
    assert found and page, line
    return found.group(1), page.group(1)


def _low_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


async def test_exhausting_the_page_never_stops_the_client_port_from_accepting():
    """A daemon limited to 256 descriptors, 400 connections opened to its page: the page
    keeps a few (the cap is a 32nd of the limit) and closes the rest at once, so clients
    still connect. (Before: the page took every descriptor and the client port stopped
    accepting.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip("this test opens 400 connections: needs a descriptor limit of 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1024), hard))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0", "--http", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_low_descriptor_limit,
    )
    writers = []
    try:
        addr, url = await asyncio.wait_for(asyncio.to_thread(_ready, proc), WAIT)
        http_port = int(url.rsplit(":", 1)[1].strip("/"))
        for i in range(400):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", http_port, local_addr=(f"127.0.10.{i % 200 + 1}", 0)
                )
                writers.append(writer)
        async with asyncio.timeout(WAIT), rv.Transport(daemon=addr) as t:
            listener = t.listen("THROUGH")
            await t.link.ping(WAIT)
            await t.send(rv.Message("THROUGH", {"n": 1}))
            assert (await listener.get(WAIT))["n"] == 1
        assert proc.poll() is None
    finally:
        for writer in writers:
            writer.close()
        stop_process_group(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


async def test_malformed_requests_are_answered_400_and_logged_in_one_line(capsys):
    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    bad = [
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"\x00\xff not http\r\n\r\n",
        b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    ]
    try:
        async with page_of(daemon) as page:
            for request in bad:
                reader, writer = await asyncio.open_connection("127.0.0.1", page.port)
                writer.write(request)
                answer = await asyncio.wait_for(reader.read(100), WAIT)
                writer.close()
                assert re.match(rb"HTTP/1\.[01] 400 ", answer), answer
    finally:
        await daemon.stop()
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "bad HTTP request" in line]
    assert len(lines) == len(bad), err


async def test_the_page_of_a_daemon_without_users_stays_on_loopback_unless_allowed():
    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    try:
        with pytest.raises(rv.InvalidArgument, match="allow_public"):
            await StatusServer(daemon, host="0.0.0.0").start()  # refused before binding
        page = StatusServer(daemon, host="127.0.0.2")
        await page.start()  # another loopback address is fine
        await page.stop()
    finally:
        await daemon.stop()


def test_the_cli_refuses_a_public_page_without_users():
    done = subprocess.run(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0", "--http", "0",
         "--http-host", "0.0.0.0"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--http-public" in done.stderr and "Traceback" not in done.stderr


# -- items 4 and 5: inbox and reserved subjects -----------------------------------------------


async def session(port: int, ctx, user: str, password: str, frames, *, until_pong: int = 9):
    """Log in raw, send ``frames`` then a PING: every frame received up to the PONG."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"), WAIT
    )
    conn = cp.Connection(cp.Role.CLIENT)
    received: list[cp.Frame] = []
    try:
        for frame in [cp.Hello(user=user, password=password), *frames, cp.Ping(until_pong)]:
            writer.write(conn.send(frame))
        async with asyncio.timeout(WAIT):
            while not any(isinstance(f, cp.Pong) for f in received):
                data = await reader.read(65536)
                if not data:
                    break
                received += conn.receive_data(data)
    finally:
        writer.close()
    return received


async def heard(listener: rv.Listener, seconds: float) -> list[str]:
    """Subjects ``listener`` receives within ``seconds``, the daemons' advisories left out."""
    subjects = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while True:
                msg = await listener.get(WAIT)
                if not (msg.subject or "").startswith("_RV."):
                    subjects.append(msg.subject)
    return subjects


def publish(subject: str) -> cp.Publish:
    return cp.Publish([rv.Message(subject, {"forged": subject}).to_bytes()])


def illegal(frames) -> list[str]:
    """The subjects of the ILLEGAL_PUBLISH advisories among ``frames``."""
    advisories = [rv.Message.from_bytes(f.message) for f in frames if isinstance(f, cp.Advisory)]
    return [a["sub"] for a in advisories if "ILLEGAL_PUBLISH" in (a.subject or "")]


async def test_a_publish_to_an_inbox_names_one_concrete_inbox(pki, users_file):
    """eve (EVE.> only) publishing _INBOX.> and the like reached every '>' listener."""
    ctx = client_context(cafile=pki.ca_cert)
    wild = ["_INBOX.>", "_INBOX.*", "_INBOX.*.*.*", "_INBOX.7F000001.*.1", "_INBOX.nobody"]
    async with (
        secure_daemon(pki, users_file) as (daemon, addr),
        rv.Transport(daemon=addr, security=by_password(pki, "alice")) as alice,
    ):
        everything = alice.listen(">")
        await alice.link.ping(WAIT)
        frames = await session(
            daemon.listen_port, ctx, "eve", PASSWORDS["eve"], [publish(s) for s in wild]
        )
        assert sorted(illegal(frames)) == sorted(wild)
        assert await heard(everything, 0.5) == []
        # A user without the reply permission may not answer at all.
        inbox = alice.create_inbox()
        mine = alice.listen(inbox)
        await alice.link.ping(WAIT)
        muted = await session(daemon.listen_port, ctx, "mute", "mute-pw", [publish(inbox)])
        assert illegal(muted) == [inbox]
        eve = await session(daemon.listen_port, ctx, "eve", PASSWORDS["eve"], [publish(inbox)])
        assert illegal(eve) == []
        assert (await mine.get(WAIT))["forged"] == inbox  # a reply to one inbox is fine


async def test_router_and_advisory_subjects_are_for_routers_only(pki, users_file):
    """carol may do everything a client may, yet not publish _RV. or _RVRD. subjects nor
    receive router records; the drivers' protocol subjects and _LOCAL are hers to use.
    (Before: _RVRD.LAN. records from any client reached routers.)"""
    ctx = client_context(cafile=pki.ca_cert)
    async with (
        secure_daemon(pki, users_file) as (daemon, addr),
        rv.Transport(daemon=addr, security=by_password(pki, "r1"), router=True) as router,
        rv.Transport(daemon=addr, security=by_password(pki, "alice")) as alice,
    ):
        records = router.listen("_RVRD.LAN.>")
        everything = alice.listen(">")
        await router.link.ping(WAIT)
        await alice.link.ping(WAIT)
        forged = ["_RVRD.LAN.HELLO", "_RVRD.LAN.LSA", "_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.X"]
        allowed = ["_RVCM.P2P.x.y", "_RVFT.G", "_RVCMQ.Q.x", "_LOCAL.X"]
        frames = await session(
            daemon.listen_port,
            ctx,
            "carol",
            PASSWORDS["carol"],
            [cp.Listen("_RVRD.>"), *(publish(s) for s in forged + allowed)],
        )
        assert sorted(illegal(frames)) == sorted(forged)
        assert any(isinstance(f, cp.Error) and "routing daemons only" in f.text for f in frames), (
            frames
        )
        assert sorted(await heard(everything, 0.5)) == sorted(allowed)
        with pytest.raises(TimeoutError):
            await records.get(0.3)
        # The router's own records reach routers, not alice's '>'.
        router.send_internal(rv.Message("_RVRD.LAN.HELLO", {"router": "r1"}))
        assert (await records.get(WAIT))["router"] == "r1"
        assert await heard(everything, 0.3) == []
        # A restricted user gets the protocol subjects only if its patterns name them.
        eve = await session(
            daemon.listen_port, ctx, "eve", PASSWORDS["eve"], [publish("_RVCM.P2P.x.y")]
        )
        assert illegal(eve) == ["_RVCM.P2P.x.y"]


async def test_a_daemon_without_users_grants_the_router_role_by_its_configuration():
    open_daemon = rv.Daemon(listen=0, host_status_interval=0)  # default: loopback routers
    closed_daemon = rv.Daemon(listen=0, host_status_interval=0, router_hosts=())
    await open_daemon.start()
    await closed_daemon.start()
    try:
        async with rv.Transport(daemon=f"127.0.0.1:{open_daemon.listen_port}", router=True) as t:
            assert t.link.daemon_info["router"] is True
        t = rv.Transport(daemon=f"127.0.0.1:{closed_daemon.listen_port}", router=True)
        with pytest.raises(rv.NotPermitted, match="router_hosts"):
            await t.open()
        await t.close()
        # A description that looks like a router's is only a description.
        async with rv.Transport(
            daemon=f"127.0.0.1:{closed_daemon.listen_port}", description="rvasync-router:x/y"
        ) as poser:
            assert poser.link.daemon_info["router"] is False
    finally:
        await open_daemon.stop()
        await closed_daemon.stop()
    with pytest.raises(rv.InvalidArgument, match="router_hosts"):
        rv.Daemon(listen=0, router_hosts=["not a network"])


# -- item 6 ------------------------------------------------------------------------------------


async def test_a_restricted_user_gets_replies_on_its_own_inbox(pki, users_file):
    """eve (EVE.> only) listens on her own create_inbox() and asks alice through EVE.ASK
    with it as the reply subject: no _INBOX.> needed (before: NotPermitted)."""
    async with (
        secure_daemon(pki, users_file) as (_, addr),
        rv.Transport(daemon=addr, security=by_password(pki, "alice")) as alice,
        rv.Transport(daemon=addr, security=by_password(pki, "eve")) as eve,
    ):

        async def answer(request: rv.Message) -> None:
            await alice.send_reply(rv.Message(None, {"answer": 42}), request)

        alice.listen("EVE.ASK", callback=answer)
        await alice.link.ping(WAIT)
        inbox = eve.create_inbox()
        replies = eve.listen(inbox)
        await eve.link.ping(WAIT)
        await eve.send(rv.Message("EVE.ASK", {"q": 1}, reply_subject=inbox))
        assert (await replies.get(WAIT))["answer"] == 42
        reply = await eve.send_request(rv.Message("EVE.ASK", {"q": 2}), WAIT)
        assert reply["answer"] == 42


async def test_listening_to_someone_elses_inbox_takes_none_of_its_replies(pki, users_file):
    """Any concrete inbox may be listened to at the daemon (so that a user's own works
    without a pattern): that is safe only because an inbox's messages go to the session
    owning it, by address. The library refuses to listen on another transport's inbox;
    eve and carol asking the daemon for it anyway (as a client without the library's
    check would), and carol on '>', get nothing."""
    async with (
        secure_daemon(pki, users_file) as (_, addr),
        rv.Transport(daemon=addr, security=by_password(pki, "alice")) as alice,
        rv.Transport(daemon=addr, security=by_password(pki, "eve")) as eve,
        rv.Transport(daemon=addr, security=by_password(pki, "carol")) as carol,
    ):
        inbox = alice.create_inbox()
        mine = alice.listen(inbox)
        with pytest.raises(rv.InvalidArgument, match="made by another transport"):
            eve.listen(inbox)
        eve.link.add_interest(inbox)  # past the library's check: straight to the daemon
        carol.link.add_interest(inbox)
        spies = [carol.listen(">")]
        for t in (alice, eve, carol):
            await t.link.ping(WAIT)
        await carol.send(rv.Message(inbox, {"n": 1}))
        await eve.send(rv.Message(inbox, {"n": 2}))
        assert sorted([(await mine.get(WAIT))["n"], (await mine.get(WAIT))["n"]]) == [1, 2]
        for spy in spies:
            assert await heard(spy, 0.3) == []


async def test_errors_after_a_certificate_login_name_its_user(pki, users_file):
    cert, key = pki.client("bob")
    bob = rv.Security(daemon_cert=pki.ca_cert, user_cert=cert, user_key=key)
    async with (
        secure_daemon(pki, users_file) as (_, addr),
        rv.Transport(daemon=addr, security=bob) as t,
    ):
        with pytest.raises(rv.NotPermitted, match="user 'bob' may not listen"):
            t.listen("ORDERS.X")
