"""The pytest plugin fixtures and the native/pure selection."""

import os
import socket
import subprocess
import sys

import rvasync
from rvasync import _accel


def test_rv_service_is_a_free_loopback_pair(rv_service):
    service, network = rv_service
    assert network == "127.0.0.1"
    port = int(service)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", port))


def test_implementations_pure_first():
    for name in _accel.HOT_PATHS:
        found = _accel.implementations(name)
        assert found[0].__name__ == f"rvasync.fallback.{name}"
        assert all(m.__name__.endswith(name) for m in found)


def test_pure_forced_by_environment():
    env = dict(os.environ, RVASYNC_PURE="1")
    code = (
        "import rvasync, rvasync._accel as a; "
        "print(rvasync.native_enabled(), a.load('codec').__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "rvasync.fallback.codec"]


def test_native_enabled_matches_modules_in_use():
    used = [_accel.load(name).__name__.startswith("rvasync_native.") for name in _accel.HOT_PATHS]
    assert rvasync.native_enabled() == all(used)
