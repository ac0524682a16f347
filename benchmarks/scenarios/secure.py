"""The secure daemon against nats-server with TLS, and against the plain standalone daemon.

Two rows of the secure-daemon issue: pub/sub of 128 B messages and 128 B
request/reply, each through a broker-like process that every client reaches
over TCP. Contenders: rvasync's standalone daemon with TLS and a password
login (``rvasync daemon --tls-cert --users``), the same daemon without TLS,
and nats-server with TLS and a password. The measured loops, roles and
metrics are those of ``pubsub-128B-1sub`` and ``reqrep-latency``; only the
capability differs ("secure-pubsub", "secure-reqrep"), so that only the
adapters of :mod:`benchmarks.systems.secure` take part.
"""

from __future__ import annotations

from benchmarks.registry import Metric, Scenario, scenario
from benchmarks.scenarios import pubsub, reqrep

scenario(
    Scenario(
        name="secure-pubsub-128B",
        title="Pub/sub through a TLS broker, 128 B, 1 subscriber",
        description=(
            "One publisher process sends 128 B messages on one subject to one subscriber "
            "process, both connected over TLS with a password login to a broker process "
            "(rvasync's secure standalone daemon, nats-server with TLS), and through rvasync's "
            "plain standalone daemon for the cost of TLS."
        ),
        capability="secure-pubsub",
        primary=pubsub.DELIVERED,
        extras=pubsub.THROUGHPUT_EXTRAS,
        roles={"sub": pubsub.subscriber, "pub": pubsub.publisher},
        layout=pubsub.layout,
        combine=pubsub.combine_throughput,
        params={"size": 128, "subs": 1, "pubs": 1, "messages": 200_000, "idle": 3.0},
        quick={"messages": 20_000, "idle": 2.0},
        timeout=180.0,
        quick_timeout=60.0,
        order=50,
    )
)

scenario(
    Scenario(
        name="secure-reqrep",
        title="Request/reply through a TLS broker, 128 B",
        description=(
            "One requester process sends 128 B requests one at a time to a replier process "
            "that echoes them, both connected over TLS with a password login to a broker "
            "process; latency percentiles over every timed round trip."
        ),
        capability="secure-reqrep",
        primary=Metric("p50_us", "p50", "µs", "lower"),
        extras=(
            Metric("p90_us", "p90", "µs", "lower"),
            Metric("p99_us", "p99", "µs", "lower"),
            Metric("p999_us", "p99.9", "µs", "lower"),
            Metric("round_trips_per_s", "round trips", "/s", "higher"),
        ),
        chart=("p50_us", "p90_us", "p99_us", "p999_us"),
        roles={"server": reqrep.replier, "client": reqrep.requester},
        layout=reqrep.layout,
        combine=reqrep.combine,
        params={"size": 128, "requests": 20_000, "warmup": 1_000, "request_timeout": 5.0},
        quick={"requests": 2_000, "warmup": 200},
        timeout=180.0,
        quick_timeout=60.0,
        order=51,
    )
)
