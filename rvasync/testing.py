"""Helpers for testing programs built on rvasync (used by the pytest plugin)."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["LOOPBACK", "free_port"]

LOOPBACK = "127.0.0.1"


def free_port(kind: int = socket.SOCK_DGRAM, host: str = LOOPBACK) -> int:
    """A port on ``host`` that is free for UDP (default) *and* TCP right now.

    Services are UDP ports and standalone daemons listen on TCP ports; asking
    for one free in both means the same number can serve either role.
    """
    other = socket.SOCK_STREAM if kind == socket.SOCK_DGRAM else socket.SOCK_DGRAM
    for _ in range(64):
        with socket.socket(socket.AF_INET, kind) as first:
            first.bind((host, 0))
            port: int = first.getsockname()[1]
            with contextlib.suppress(OSError), socket.socket(socket.AF_INET, other) as second:
                second.bind((host, port))
                return port
    raise OSError(f"no port free for both UDP and TCP on {host}")
