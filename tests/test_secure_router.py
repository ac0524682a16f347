"""A routing daemon attached to a secure standalone daemon: it logs in as a user the users
file makes a router (issue 35, item 5), and only such a user may."""

from __future__ import annotations

import asyncio

import pytest

import rvasync as rv
from rvasync.daemon.auth import DaemonSecurity, hash_password
from rvasync.rvrd import Router
from rvasync.testcerts import make_test_pki
from rvasync.testing import LOOPBACK
from tests.rvrd_support import WAIT, Program, router_config, services

pytest.importorskip("cryptography")


@pytest.fixture
def secure_files(tmp_path):
    pki = make_test_pki(str(tmp_path / "pki"))
    users = tmp_path / "users.toml"
    users.write_text(
        f"""
[users.r1]
password = "{hash_password("r1-pw")}"
router = true

[users.alice]
password = "{hash_password("alice-pw")}"
"""
    )
    (tmp_path / "r1.pw").write_text("r1-pw\n")
    (tmp_path / "alice.pw").write_text("alice-pw\n")
    return pki, users, tmp_path


def login(pki, tmp_path, user: str) -> dict[str, str]:
    return {"daemon_cert": pki.ca_cert, "user": user, "password_file": str(tmp_path / f"{user}.pw")}


async def test_a_router_logs_in_to_a_secure_daemon_with_the_router_permission(secure_files):
    pki, users, tmp_path = secure_files
    security = DaemonSecurity(
        users_file=str(users), tls_cert=pki.daemon_cert, tls_key=pki.daemon_key
    )
    daemon = rv.Daemon(listen=0, security=security, host_status_interval=0)
    await daemon.start()
    addr = f"127.0.0.1:{daemon.listen_port}"
    sa, sb = services(2)
    cfg_a = router_config("ra", [("A", sa)], [("rb", None, 1)])
    cfg_a["network"][0] |= {"daemon": addr, **login(pki, tmp_path, "r1")}
    ra = rb = ta = pb = None
    try:
        ra = await Router(cfg_a).start()
        rb = await Router(
            router_config("rb", [("B", sb)], [("ra", ra.port, 1)], listen=False)
        ).start()
        alice = rv.Security(daemon_cert=pki.ca_cert, user="alice", password="alice-pw")
        ta = rv.Transport(sa, LOOPBACK, daemon=addr, security=alice)
        await ta.open()
        pb = await Program(sb).open()
        la = ta.listen("TO.A")
        lb = await pb.listen("TO.B")
        await rb.wait_for(lambda: "TO.A" in rb.listening("B"), WAIT)
        await ra.wait_for(lambda: "TO.B" in ra.listening("A"), WAIT)
        link = ra.attachments["A"].transport.link
        assert link is not None and link.daemon_info["router"] is True
        await link.ping(WAIT)
        await ta.send(rv.Message("TO.B", {"n": 1}))
        assert (await pb.next(lb))["n"] == 1
        await pb.send("TO.A", n=2)
        assert (await la.get(WAIT))["n"] == 2
        # A user without router = true cannot attach a router.
        cfg_bad = router_config("rx", [("A", sa)], [], listen=False)
        cfg_bad["network"][0] |= {"daemon": addr, **login(pki, tmp_path, "alice")}
        with pytest.raises(rv.NotPermitted, match="may not connect as a routing daemon"):
            await asyncio.wait_for(Router(cfg_bad).start(), WAIT)
    finally:
        for closing in (ta, pb):
            if closing is not None:
                await closing.close()
        for router in (rb, ra):
            if router is not None:
                await router.close()
        await daemon.stop()


def test_a_router_login_is_checked_with_the_configuration():
    cfg = router_config("rx", [("A", "7500")], [], listen=False)
    cfg["network"][0]["user"] = "r1"
    with pytest.raises(rv.InvalidArgument, match="a login needs daemon"):
        Router(cfg)
    cfg["network"][0]["daemon"] = "127.0.0.1:1"
    with pytest.raises(rv.InvalidArgument, match="needs password_file or user_cert"):
        Router(cfg)
