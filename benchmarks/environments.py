"""Environments shared by several adapters: loopback ports chosen by the runner.

The runner picks the ports (rather than each worker binding port 0) so that every
process of a repetition knows them before any of them starts.
"""

from __future__ import annotations

import socket
from typing import Any

from benchmarks.interfaces import Environment
from benchmarks.procs import LOOPBACK, free_ports


class LoopbackPorts(Environment):
    """``{"host": "127.0.0.1", "ports": [...]}``: one free TCP port by default."""

    kind: int = socket.SOCK_STREAM

    def count(self) -> int:
        """How many ports the scenario needs."""
        return 1

    async def __aenter__(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "ports": free_ports(self.count(), self.kind)}


class UdpPortPerSubscriber(LoopbackPorts):
    """One free UDP port per subscriber (at least one): bare sockets have no fan-out."""

    kind = socket.SOCK_DGRAM

    def count(self) -> int:
        return max(1, int(self.params.get("subs", 1)))


class UdpPort(LoopbackPorts):
    """One free UDP port (a service for daemons that share it)."""

    kind = socket.SOCK_DGRAM
