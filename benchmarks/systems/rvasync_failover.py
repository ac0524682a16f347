"""rvasync fault tolerance for the failover scenarios: ``rv.FtMember`` member programs.

Each member is :mod:`benchmarks.systems.rvasync_ft_member` in its own process,
with ``rv.Transport(service=<the row's UDP port>, network=None)``: every member
has its in-process daemon, and the daemons meet on the service over loopback.
"""

from __future__ import annotations

import sys

from benchmarks.environments import UdpPort
from benchmarks.registry import adapter
from benchmarks.scenarios.failover import Failover
from benchmarks.systems.rvasync_api import missing


@adapter
class RvFailover(Failover):
    """Members are ``python -m benchmarks.systems.rvasync_ft_member`` processes."""

    system = "rvasync"
    capability = "failover"
    environment = UdpPort

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "FtMember")

    def member_argv(self, name: str, group: str) -> list[str]:
        p = self.params
        return [
            sys.executable,
            "-m",
            "benchmarks.systems.rvasync_ft_member",
            "--service",
            str(self.env["ports"][0]),
            "--group",
            group,
            "--name",
            name,
            "--heartbeat",
            str(p["heartbeat"]),
            "--activation",
            str(p["activation"]),
        ]
