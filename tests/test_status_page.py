"""The daemon's status page: JSON, Prometheus text, the login it asks for, and what a
person sees in a real headless browser (Debian's chromium through selenium).

The browser test is skipped, with the reason, when chromium, chromedriver or
selenium are missing, except in CI (CI=true), where it fails instead.
``RVASYNC_SCREENSHOT=path.png`` saves what the browser showed (docs/img/status-page.png
was made so).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil

import pytest

import rvasync as rv
from rvasync.daemon.auth import DaemonSecurity, hash_password
from rvasync.security import client_context
from rvasync.testcerts import make_test_pki

aiohttp = pytest.importorskip("aiohttp")
from rvasync.daemon.status_http import StatusServer, metrics_text  # noqa: E402

WAIT = 20.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text(
        f"""
[users.alice]
password = "{hash_password("alice-pw")}"
publish = ["ORDERS.>"]
subscribe = ["ORDERS.>"]

[users.ops]
password = "{hash_password("ops-pw")}"
"""
    )
    return path


@contextlib.asynccontextmanager
async def daemon_with_page(security=None):
    daemon = rv.Daemon(listen=0, security=security, host_status_interval=0)
    await daemon.start()
    page = StatusServer(daemon, port=0)
    await page.start()
    try:
        yield daemon, page
    finally:
        await page.stop()
        await daemon.stop()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def get(page, path: str, *, auth=None, ssl=None):
    async with (
        aiohttp.ClientSession() as session,
        session.get(page.url + path.lstrip("/"), headers=auth or {}, ssl=ssl) as response,
    ):
        return response.status, response.headers, await response.text()


async def wait_for(predicate, what: str):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def busy_client(addr: str, subject: str, **kwargs) -> rv.Transport:
    t = rv.Transport(daemon=addr, description="status test client", **kwargs)
    await t.open()
    listener = t.listen(subject)
    await t.link.ping(WAIT)
    for i in range(5):
        await t.send(rv.Message(subject, {"i": i}))
    for _ in range(5):
        await listener.get(WAIT)
    return t


async def test_api_status_and_metrics_show_clients_subjects_counters_and_hosts():
    async with daemon_with_page() as (daemon, page):
        assert page.url.startswith("http://127.0.0.1:")
        t = await busy_client(f"127.0.0.1:{daemon.listen_port}", "STATUS.TEST")
        try:

            async def hosts_heard():
                daemon.publish_host_status()
                status, _, body = await get(page, "/api/status")
                assert status == 200
                data = json.loads(body)
                return data if data["hosts"] else None

            data = await wait_for(hosts_heard, "a HOST.STATUS on the page")
            [client] = [c for c in data["clients"] if c["description"] == "status test client"]
            assert client["subjects"] == ["STATUS.TEST"]
            assert client["messages_in"] == 5 and client["messages_out"] >= 5
            assert client["bytes_in"] > 0 and client["tls"] is False
            assert data["uptime_seconds"] >= 0 and data["services"]
            assert {"retransmissions", "data_loss_inbound"} <= set(data["services"][0])
            assert "hostaddr" in data["hosts"][0]
            status, headers, text = await get(page, "/metrics")
            assert status == 200 and headers["Content-Type"].startswith("text/plain")
            assert re.search(r"^rvasync_clients 1$", text, re.M)
            assert re.search(
                r'^rvasync_client_messages_in_total\{description="status test client",user=""\} 5$',
                text,
                re.M,
            )
            for line in text.splitlines():  # every line: a comment or "name{labels} number"
                assert line.startswith("# ") or re.fullmatch(
                    r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? -?[0-9.e+]+", line
                ), line
            status, _, html = await get(page, "/")
            assert status == 200 and "STATUS.TEST" in html and 'http-equiv="refresh"' in html
            assert data["services"][0]["clients"] == 1  # the page's own session is not shown
        finally:
            await t.close()

        # The page's HOST.STATUS session does not keep the service open once clients leave.
        async def released():
            return daemon.session_count == 0

        await wait_for(released, "the page to let go of the service")


def test_metrics_text_escapes_labels():
    status = {
        "uptime_seconds": 1,
        "clients": [],
        "identities": [
            {
                "description": "line\nbreak",
                "user": 'a"b\\c',
                "clients": 1,
                "connections": 1,
                "messages_in": 0,
                "bytes_in": 0,
                "messages_out": 0,
                "bytes_out": 0,
            }
        ],
        "client_port": {},
        "services": [],
        "hosts": [],
        "security": {},
    }
    text = metrics_text(status)
    assert 'user="a\\"b\\\\c"' in text and 'description="line\\nbreak"' in text


async def test_a_secure_daemons_page_asks_for_a_password_over_https(pki, users_file):
    security = DaemonSecurity(
        users_file=str(users_file), tls_cert=pki.daemon_cert, tls_key=pki.daemon_key
    )
    async with daemon_with_page(security) as (_, page):
        assert page.url.startswith("https://")
        ctx = client_context(cafile=pki.ca_cert)
        status, headers, text = await get(page, "/api/status", ssl=ctx)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert "password" in text
        bad = basic("ops", "wrong")
        assert (await get(page, "/metrics", auth=bad, ssl=ctx))[0] == 401
        good = basic("ops", "ops-pw")
        status, _, text = await get(page, "/api/status", auth=good, ssl=ctx)
        assert status == 200 and '"users": true' in text
        assert security.failed_logins == 1


# -- the browser -----------------------------------------------------------------------------


def _browser():
    """A headless chromium driven by selenium, or a reason why there is none."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None, "selenium is not installed (pip install selenium)"
    if chromium is None or driver_path is None:
        return (
            None,
            "chromium/chromedriver are not installed (apt-get install chromium chromium-driver)",
        )
    options = Options()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    # The test daemon's certificate comes from a throwaway CA the browser does not know.
    options.set_capability("acceptInsecureCerts", True)
    # The performance log holds the responses' status and headers (the 401 challenge).
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options), ""


def _start_browser():
    driver, reason = _browser()
    if driver is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI: {reason}")
        pytest.skip(reason)
    return driver


def _look(driver, url: str, auth: tuple[str, str] | None) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}}
        )
    driver.get(url)
    seen = {"body": driver.find_element(By.TAG_NAME, "body").text, "title": driver.title}
    challenges = []
    for entry in driver.get_log("performance"):
        event = json.loads(entry["message"])["message"]
        if event.get("method") == "Network.responseReceived":
            response = event["params"]["response"]
            if response["url"] == url:
                headers = {k.lower(): v for k, v in response.get("headers", {}).items()}
                challenges.append((response["status"], headers.get("www-authenticate", "")))
    seen["responses"] = challenges
    if auth is not None:
        seen["clients"] = driver.find_element(By.ID, "clients").text
        seen["hosts"] = driver.find_element(By.ID, "hosts").text
        shot = os.environ.get("RVASYNC_SCREENSHOT")
        if shot:
            driver.save_screenshot(shot)
    return seen


async def test_a_person_sees_the_status_page_in_a_real_browser(pki, users_file):
    driver = await asyncio.to_thread(_start_browser)
    security = DaemonSecurity(
        users_file=str(users_file), tls_cert=pki.daemon_cert, tls_key=pki.daemon_key
    )
    try:
        async with daemon_with_page(security) as (daemon, page):
            addr = f"127.0.0.1:{daemon.listen_port}"
            login = rv.Security(daemon_cert=pki.ca_cert, user="alice", password="alice-pw")
            t = await busy_client(addr, "ORDERS.EU", security=login)
            try:

                async def heard():
                    daemon.publish_host_status()
                    ctx = client_context(cafile=pki.ca_cert)
                    auth = basic("ops", "ops-pw")
                    _, _, body = await get(page, "/api/status", auth=auth, ssl=ctx)
                    return '"hostaddr"' in body

                await wait_for(heard, "HOST.STATUS heard")
                locked = await asyncio.to_thread(_look, driver, page.url, None)
                # Headless, the browser's login prompt has nowhere to show: what it was
                # asked is in its network log, and the page shows nothing of the daemon.
                assert any(
                    status == 401 and challenge.startswith("Basic")
                    for status, challenge in locked["responses"]
                ), locked["responses"]
                assert "alice" not in locked["body"]
                seen = await asyncio.to_thread(_look, driver, page.url, ("ops", "ops-pw"))
            finally:
                await t.close()
    finally:
        await asyncio.to_thread(driver.quit)
    assert seen["title"].startswith("rvasync daemon")
    body = seen["body"]
    for text in ("Uptime", "Clients", "Retransmissions", "Data loss", "Hosts seen"):
        assert text in body, text
    assert "secure (TLS, users)" in body
    assert "alice" in seen["clients"] and "ORDERS.EU" in seen["clients"]
    assert "yes" in seen["clients"]  # the TLS column
    assert "127.0.0.1" in seen["hosts"]


def test_the_page_is_rendered_from_its_template_and_escapes_what_clients_chose():
    from rvasync.daemon.status_http import render_html

    status = {
        "totals": dict.fromkeys(
            ("clients", "messages_in", "messages_out", "bytes_in", "bytes_out"), 1
        )
        | {"retransmissions": 0, "data_loss": 0, "bytes_in": 3 * 1024 * 1024},
        "security": {"tls": True, "users": True, "failed_logins": 4},
        "listen": "127.0.0.1:7500",
        "uptime_seconds": 90061,
        "version": "v",
        "pid": 7,
        "clients": [
            {
                "id": 1,
                "user": "alice",
                "peer": "127.0.0.1:5",
                "tls": True,
                "description": "<script>alert(1)</script>",
                "subjects": ["A.>", "B"],
                "messages_in": 1,
                "bytes_in": 2048,
                "messages_out": 0,
                "bytes_out": 0,
            }
        ],
        "services": [],
        "hosts": [],
    }
    page = render_html(status)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'id="clients"' in page and 'id="services-empty"' in page and 'id="hosts-empty"' in page
    assert "1 d 01:01:01" in page and "3.0 MiB" in page and "2.0 KiB" in page
    assert "secure (TLS, users)" in page and "Failed logins" in page and "A.&gt;, B" in page
