"""The secure daemon over real loopback sockets: TLS, logins, permissions, bad input.

One daemon engine per test, in the test's loop (``rv.Daemon(listen=0,
security=...)``), reached by real ``rv.Transport``s and by raw TLS sockets
speaking the client protocol (to do what a genuine transport never would).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl

import pytest

import rvasync as rv
from rvasync.daemon.auth import DaemonSecurity, hash_password
from rvasync.protocol import clientproto as cp
from rvasync.security import client_context
from rvasync.testcerts import make_cert, make_test_pki, write_cert_and_key

pytest.importorskip("cryptography")

WAIT = 20.0
PASSWORDS = {"alice": "alice-pw", "carol": "carol-pw", "admin": "admin-pw", "r1": "r1-pw"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("pki"))
    pki = make_test_pki(directory, clients=("bob", "stranger"))
    # Another CA, and a client certificate for "bob" that it signed.
    other_ca = make_cert(common_name="other CA", issuer=None, ca=True)
    write_cert_and_key(*pki.client("rogue"), make_cert(common_name="bob", issuer=other_ca))
    write_cert_and_key(
        os.path.join(directory, "other-ca.pem"), os.path.join(directory, "other-ca.key"), other_ca
    )
    return pki


@pytest.fixture(scope="module")
def expired_pki(tmp_path_factory):
    """A CA and a client certificate it signed that expired five days ago."""
    directory = str(tmp_path_factory.mktemp("expired"))
    ca = make_cert(common_name="CA with an expired client", issuer=None, ca=True)
    write_cert_and_key(os.path.join(directory, "ca.pem"), os.path.join(directory, "ca.key"), ca)
    write_cert_and_key(
        os.path.join(directory, "client.pem"),
        os.path.join(directory, "client.key"),
        make_cert(common_name="bob", issuer=ca, not_before_days=-10, days=-5),
    )
    daemon = make_cert(common_name="daemon", issuer=ca, server=True)
    write_cert_and_key(
        os.path.join(directory, "daemon.pem"), os.path.join(directory, "daemon.key"), daemon
    )
    return directory


def write_users(path, extra: str = "") -> None:
    text = f"""
[users.alice]
password = "{hash_password(PASSWORDS["alice"])}"
publish = ["ORDERS.>"]
subscribe = ["ORDERS.>"]

[users.carol]
password = "{hash_password(PASSWORDS["carol"])}"

[users.admin]
password = "{hash_password(PASSWORDS["admin"])}"

[users.bob]
cert_subject = "CN=bob"
subscribe = ["PRICES.*"]

[users.r1]
password = "{hash_password(PASSWORDS["r1"])}"
router = true
{extra}
"""
    path.write_text(text)


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users.toml"
    write_users(path)
    return path


@contextlib.asynccontextmanager
async def secure_daemon(pki, users_file, **kwargs):
    security = DaemonSecurity(
        users_file=str(users_file),
        tls_cert=pki.daemon_cert,
        tls_key=pki.daemon_key,
        client_ca=pki.ca_cert,
        **kwargs,
    )
    daemon = rv.Daemon(listen=0, security=security, host_status_interval=0)
    await daemon.start()
    try:
        yield daemon, f"127.0.0.1:{daemon.listen_port}"
    finally:
        await daemon.stop()


def by_password(pki, user: str, password: str | None = None) -> rv.Security:
    return rv.Security(
        daemon_cert=pki.ca_cert, user=user, password=password or PASSWORDS.get(user, "x")
    )


def by_cert(pki, name: str) -> rv.Security:
    cert, key = pki.client(name)
    return rv.Security(daemon_cert=pki.ca_cert, user_cert=cert, user_key=key)


async def exchange(t: rv.Transport, subject: str, n: int = 3) -> list[int]:
    """Send n messages to subject through t and get them back through a listener of t."""
    listener = t.listen(subject)
    try:
        await t.link.ping(WAIT)
        for i in range(n):
            await t.send(rv.Message(subject, {"i": i}))
        return [(await listener.get(WAIT))["i"] for _ in range(n)]
    finally:
        await listener.close()


# -- logins -----------------------------------------------------------------------------------


async def test_password_login_over_tls_and_permitted_traffic(pki, users_file):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        async with rv.Transport(daemon=addr, security=by_password(pki, "alice")) as t:
            assert t.link.daemon_info["user"] == "alice"
            assert await exchange(t, "ORDERS.EU") == [0, 1, 2]
        clients = daemon.security
        assert clients.logins == 1 and clients.failed_logins == 0


async def test_certificate_login_maps_the_subject_to_a_user(pki, users_file):
    async with (
        secure_daemon(pki, users_file) as (_, addr),
        rv.Transport(daemon=addr, security=by_cert(pki, "bob")) as t,
    ):
        assert t.link.daemon_info["user"] == "bob"
        assert await exchange(t, "PRICES.X") == [0, 1, 2]
        with pytest.raises(rv.NotPermitted):
            t.listen("ORDERS.>")


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong"), ("nobody", "whatever"), ("bob", "no-password-set")],
)
async def test_a_wrong_password_or_unknown_user_is_refused(pki, users_file, user, password):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        with pytest.raises(rv.NotPermitted, match="wrong user name or password"):
            async with rv.Transport(daemon=addr, security=by_password(pki, user, password)):
                pass
        assert daemon.security.failed_logins == 1
        assert daemon.client_server.stats.login_refused == 1


async def test_a_certificate_of_no_user_is_refused(pki, users_file):
    async with secure_daemon(pki, users_file) as (_, addr):
        with pytest.raises(rv.NotPermitted, match="not a user of this daemon"):
            async with rv.Transport(daemon=addr, security=by_cert(pki, "stranger")):
                pass


async def test_a_certificate_from_an_unknown_ca_is_refused(pki, users_file):
    async with secure_daemon(pki, users_file) as (_, addr):
        with pytest.raises(rv.NotPermitted):
            async with rv.Transport(daemon=addr, security=by_cert(pki, "rogue")):
                pass


async def test_an_expired_certificate_is_refused(expired_pki, users_file):
    d = expired_pki
    security = DaemonSecurity(
        users_file=str(users_file),
        tls_cert=os.path.join(d, "daemon.pem"),
        tls_key=os.path.join(d, "daemon.key"),
        client_ca=os.path.join(d, "ca.pem"),
    )
    daemon = rv.Daemon(listen=0, security=security, host_status_interval=0)
    await daemon.start()
    try:
        client = rv.Security(
            daemon_cert=os.path.join(d, "ca.pem"),
            user_cert=os.path.join(d, "client.pem"),
            user_key=os.path.join(d, "client.key"),
        )
        with pytest.raises(rv.NotPermitted):
            async with rv.Transport(daemon=f"127.0.0.1:{daemon.listen_port}", security=client):
                pass
    finally:
        await daemon.stop()


async def test_a_daemon_whose_certificate_does_not_match_is_refused(pki, users_file, tmp_path):
    async with secure_daemon(pki, users_file) as (_, addr):
        other = os.path.join(pki.directory, "other-ca.pem")
        security = rv.Security(daemon_cert=other, user="alice", password=PASSWORDS["alice"])
        with pytest.raises(rv.NotPermitted, match="certificate does not verify"):
            async with rv.Transport(daemon=addr, security=security):
                pass
        # A right CA but the wrong name: the daemon's certificate is for 127.0.0.1/localhost.
        named = rv.Security(
            daemon_cert=pki.ca_cert,
            user="alice",
            password=PASSWORDS["alice"],
            server_name="daemon.example.com",
        )
        with pytest.raises(rv.NotPermitted, match="certificate does not verify"):
            async with rv.Transport(daemon=addr, security=named):
                pass


async def test_a_plain_client_to_the_tls_port_gets_a_clear_error(pki, users_file):
    async with secure_daemon(pki, users_file) as (_, addr):
        with pytest.raises(rv.DaemonUnavailable, match="secure daemon"):
            async with rv.Transport(daemon=addr):
                pass
        async with rv.Transport(daemon=addr, security=by_password(pki, "carol")) as t:
            assert await exchange(t, "ANY.THING") == [0, 1, 2]


async def test_a_tls_client_to_a_plain_daemon_is_refused(pki):
    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    try:
        with pytest.raises(rv.NotPermitted, match="TLS"):
            async with rv.Transport(
                daemon=f"127.0.0.1:{daemon.listen_port}", security=by_password(pki, "alice")
            ):
                pass
    finally:
        await daemon.stop()


async def test_no_credentials_over_tls_is_refused(pki, users_file):
    async with secure_daemon(pki, users_file) as (_, addr):
        with pytest.raises(rv.NotPermitted, match="needs a user name"):
            async with rv.Transport(daemon=addr, security=rv.Security(daemon_cert=pki.ca_cert)):
                pass


async def test_passwords_over_a_plain_link_are_refused_unless_allowed(users_file):
    with pytest.raises(rv.InvalidArgument, match="needs TLS"):
        DaemonSecurity(users_file=str(users_file))
    security = DaemonSecurity(users_file=str(users_file), allow_plain_passwords=True)
    daemon = rv.Daemon(listen=0, security=security, host_status_interval=0)
    await daemon.start()
    try:
        # A HELLO with a password on a plain link, the way an old or odd client would.
        hello = cp.Hello(user="carol", password=PASSWORDS["carol"])
        frames = await raw_session(
            None,
            daemon.listen_port,
            [hello],
            until=lambda fs: any(isinstance(f, cp.Welcome) for f in fs),
        )
        assert any(isinstance(f, cp.Welcome) for f in frames)
    finally:
        await daemon.stop()


# -- permissions ------------------------------------------------------------------------------


async def test_the_router_role_comes_from_the_users_file_never_from_a_description(pki, users_file):
    """A session may publish advisories (and router records) only with the router role,
    which a HELLO asks for and the users file grants (router = true); a description that
    looks like a router's grants nothing (issue 35, item 5)."""
    router = "rvasync-router:r1/A"
    advisory = rv.Message("_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.CONNECTED", {"router": "r1"})
    async with secure_daemon(pki, users_file) as (daemon, addr):
        t = rv.Transport(daemon=addr, security=by_password(pki, "carol"), router=True)
        with pytest.raises(rv.NotPermitted, match=r"may not connect as a routing daemon"):
            await t.open()
        await t.close()
        async with (
            rv.Transport(daemon=addr, security=by_password(pki, "admin")) as watcher_t,
            rv.Transport(
                daemon=addr, security=by_password(pki, "carol"), description=router
            ) as poser,
            rv.Transport(daemon=addr, security=by_password(pki, "r1"), router=True) as ok,
        ):
            assert ok.link.daemon_info["router"] is True
            assert poser.link.daemon_info["router"] is False
            watcher = watcher_t.listen("_RV.WARN.SYSTEM.ROUTER.>")
            await watcher_t.link.ping(WAIT)
            poser.send_internal(advisory)  # refused by the daemon: ILLEGAL_PUBLISH
            await poser.link.ping(WAIT)
            ok.send_internal(advisory)
            assert (await watcher.get(WAIT))["router"] == "r1"
            with pytest.raises(TimeoutError):
                await watcher.get(0.3)  # the poser's copy never came
        assert daemon.client_server.stats.router_refused == 1


async def test_listen_and_send_outside_the_patterns_raise_not_permitted(pki, users_file):
    async with (
        secure_daemon(pki, users_file) as (_, addr),
        rv.Transport(daemon=addr, security=by_password(pki, "alice")) as t,
    ):
        with pytest.raises(rv.NotPermitted, match="may not listen"):
            t.listen(">")
        with pytest.raises(rv.NotPermitted, match="may not publish"):
            await t.send(rv.Message("PRICES.X", {"a": 1}))
        # The refused listener was not left behind, and the link still works.
        assert await exchange(t, "ORDERS.US") == [0, 1, 2]


async def raw_session(ctx, port, frames, *, read_for: float = WAIT, raw: bytes = b"", until=None):
    """Connect (TLS when ctx), send ``frames`` (then ``raw`` bytes), return what came back
    until the daemon hangs up, ``until(frames)`` is true, or ``read_for`` seconds pass."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1" if ctx else None
        ),
        WAIT,
    )
    conn = cp.Connection(cp.Role.CLIENT)
    received: list[cp.Frame] = []
    try:
        for frame in frames:
            writer.write(conn.send(frame))
        if raw:
            writer.write(raw)
        await writer.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + read_for
        while loop.time() < deadline:
            try:
                data = await asyncio.wait_for(reader.read(65536), deadline - loop.time())
            except (TimeoutError, ConnectionError, ssl.SSLError):
                break
            if not data:
                break
            try:
                received += conn.receive_data(data)
            except cp.ProtocolError as exc:
                received += exc.frames
                break
            if until is not None and until(received):
                break
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 2)
    return received


async def test_the_daemon_enforces_permissions_whatever_the_client_does(pki, users_file):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        port = daemon.listen_port
        async with rv.Transport(daemon=addr, security=by_password(pki, "admin")) as admin:
            everything = admin.listen("PRICES.>")
            await admin.link.ping(WAIT)
            ctx = client_context(cafile=pki.ca_cert)
            frames = await raw_session(
                ctx,
                port,
                [
                    cp.Hello(user="alice", password=PASSWORDS["alice"]),
                    cp.Listen(">"),
                    cp.Publish([rv.Message("PRICES.X", {"forged": 1}).to_bytes()]),
                    cp.Publish([rv.Message("ORDERS.OK", {"fine": 1}).to_bytes()]),
                    cp.Ping(7),
                ],
                until=lambda fs: any(isinstance(f, cp.Pong) and f.token == 7 for f in fs),
            )
            kinds = [type(f) for f in frames]
            assert cp.Welcome in kinds and cp.Pong in kinds
            errors = [f for f in frames if isinstance(f, cp.Error)]
            assert any(e.code == "NOT_PERMITTED" and "'>'" in e.text for e in errors)
            advisories = [
                rv.Message.from_bytes(f.message) for f in frames if isinstance(f, cp.Advisory)
            ]
            assert any("ILLEGAL_PUBLISH" in (a.subject or "") for a in advisories)
            with pytest.raises(TimeoutError):
                await everything.get(0.5)  # nothing of the forged publish was delivered
            assert daemon.client_server.stats.not_permitted == 2


# -- bad input --------------------------------------------------------------------------------


async def test_garbage_before_and_after_the_handshake_harms_no_other_client(pki, users_file):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        port = daemon.listen_port
        async with rv.Transport(daemon=addr, security=by_password(pki, "carol")) as good:
            # Plain garbage where a TLS ClientHello should be.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(os.urandom(3000))
            await writer.drain()
            with contextlib.suppress(ConnectionError):
                await asyncio.wait_for(reader.read(), WAIT)  # the daemon hangs up
            writer.close()
            # Garbage inside TLS, after a good login, and before any login.
            ctx = client_context(cafile=pki.ca_cert)
            hello = cp.Hello(user="carol", password=PASSWORDS["carol"])
            after = await raw_session(ctx, port, [hello], raw=b"\xff" * 64)
            assert any(isinstance(f, cp.Error) and f.code == "PROTOCOL" for f in after)
            before = await raw_session(ctx, port, [], raw=b"GET / HTTP/1.0\r\n\r\n")
            assert any(isinstance(f, cp.Error) and f.code == "PROTOCOL" for f in before)
            assert await exchange(good, "STILL.HERE") == [0, 1, 2]


async def test_a_flood_of_failed_logins_is_rate_limited_and_good_clients_go_on(pki, users_file):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        async with rv.Transport(daemon=addr, security=by_password(pki, "carol")) as good:
            listener = good.listen("HEARTBEAT")
            stop = asyncio.Event()
            delivered = 0

            async def keep_talking() -> None:
                nonlocal delivered
                i = 0
                while not stop.is_set():
                    await good.send(rv.Message("HEARTBEAT", {"i": i}))
                    assert (await listener.get(WAIT))["i"] == i
                    delivered += 1
                    i += 1
                    await asyncio.sleep(0.01)

            async def bad_login() -> BaseException | None:
                try:
                    async with rv.Transport(
                        daemon=addr, security=by_password(pki, "alice", "guess")
                    ):
                        return None
                except rv.RvError as exc:
                    return exc

            talker = asyncio.ensure_future(keep_talking())
            results = await asyncio.wait_for(
                asyncio.gather(*(bad_login() for _ in range(500))), 120
            )
            before_end = delivered
            stop.set()
            await asyncio.wait_for(talker, WAIT)
        assert all(isinstance(r, rv.NotPermitted | rv.DaemonUnavailable) for r in results)
        refused = [r for r in results if isinstance(r, rv.NotPermitted)]
        assert refused, "no login was refused"
        assert any("too many" in str(r) for r in refused)
        security = daemon.security
        # Few passwords were checked: the limiter (and the cap on checks under way)
        # refused the rest at once. Blocking doubles from 1 s, so a longer flood
        # (a slow machine) lets only a few more checks through.
        # Few passwords were checked: at most a few at once per host, and the brake.
        assert 0 < security.gate.password_checks <= 20, security.gate.password_checks
        assert before_end > 0  # the good client was served during the flood
        # The checks that ran failed, and count: a few more and the brake holds alice.
        later = [str(await bad_login()) for _ in range(3)]
        assert "too many failed logins" in later[-1], later
        # Another user logs in at once: the brake holds for alice from this host only.
        async with rv.Transport(daemon=addr, security=by_password(pki, "admin")) as t:
            assert await exchange(t, "AFTER.FLOOD") == [0, 1, 2]


# -- the users file changes -------------------------------------------------------------------


async def test_the_users_file_is_reloaded_without_a_restart(pki, users_file):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        dave = by_password(pki, "dave", "dave-pw")
        with pytest.raises(rv.NotPermitted):
            async with rv.Transport(daemon=addr, security=dave):
                pass
        write_users(
            users_file,
            f'[users.dave]\npassword = "{hash_password("dave-pw")}"\nsubscribe = ["D.*"]\n',
        )
        os.utime(users_file, ns=(1, os.stat(users_file).st_mtime_ns + 10**9))
        async with rv.Transport(daemon=addr, security=dave) as t:
            assert t.link.daemon_info["user"] == "dave"
            with pytest.raises(rv.NotPermitted):
                t.listen("E.x")
        # A broken file keeps the users loaded before it.
        users_file.write_text("[users.dave\n")
        os.utime(users_file, ns=(1, os.stat(users_file).st_mtime_ns + 2 * 10**9))
        async with rv.Transport(daemon=addr, security=dave) as t:
            assert t.link.daemon_info["user"] == "dave"
        assert daemon.security.reloads == 1


def test_security_arguments_are_checked(pki, tmp_path):
    with pytest.raises(rv.InvalidArgument, match="no such file"):
        rv.Security(daemon_cert=str(tmp_path / "missing.pem"))
    with pytest.raises(rv.InvalidArgument, match="password or a user_cert"):
        rv.Security(daemon_cert=pki.ca_cert, user="alice")
    with pytest.raises(rv.InvalidArgument, match="needs a user name"):
        rv.Security(daemon_cert=pki.ca_cert, password="x")
    with pytest.raises(rv.InvalidArgument, match="daemon="):
        rv.Transport(security=rv.Security(daemon_cert=pki.ca_cert))
    with pytest.raises(rv.InvalidArgument, match=r"rv\.Security"):
        rv.Transport(daemon="127.0.0.1:1", security="alice:pw")
    with pytest.raises(rv.InvalidArgument, match="cannot load"):
        rv.Security(daemon_cert=pki.daemon_key).ssl_context()
    with pytest.raises(rv.InvalidArgument, match="listen=PORT"):
        rv.Daemon(security=DaemonSecurity(tls_cert=pki.daemon_cert, tls_key=pki.daemon_key))
    assert "alice-pw" not in repr(by_password(pki, "alice"))


async def test_a_reload_applies_to_users_already_logged_in(pki, users_file):
    async with secure_daemon(pki, users_file) as (daemon, addr):
        admin = rv.Transport(daemon=addr, security=by_password(pki, "admin"))
        alice = rv.Transport(daemon=addr, security=by_password(pki, "alice"))
        carol = rv.Transport(daemon=addr, security=by_password(pki, "carol"))
        for t in (admin, alice, carol):
            await t.open()
        try:
            orders = alice.listen("ORDERS.EU")
            await alice.link.ping(WAIT)
            await admin.send(rv.Message("ORDERS.EU", {"n": 1}))
            assert (await orders.get(WAIT))["n"] == 1
            # Alice loses ORDERS.>, carol leaves the file; admin stays as she was.
            users_file.write_text(
                users_file.read_text()
                .replace('subscribe = ["ORDERS.>"]', 'subscribe = ["PRICES.*"]')
                .replace("[users.carol]", "[users.carol_gone]")
            )
            assert daemon.security.reload()
            await alice.link.ping(WAIT)
            await admin.send(rv.Message("ORDERS.EU", {"n": 2}))
            await admin.link.ping(WAIT)
            await alice.link.ping(WAIT)
            with pytest.raises(TimeoutError):
                await orders.get(0.5)  # the daemon dropped alice's interest
            assert daemon.client_server.stats.not_permitted == 1

            async def carol_logged_out() -> None:
                while carol.link.connected:
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(carol_logged_out(), WAIT)
        finally:
            for t in (admin, alice, carol):
                await t.close()
