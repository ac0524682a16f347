"""Remote operations latency: a 2-way and a 3-way invocation against plain request/reply.

The same two processes as ``reqrep-latency`` (a performer echoing the
argument's payload, an invoker timing one call at a time), on capability
``rops``: rvasync's rows are plain ``send_request`` (the baseline), a 2-way
and a 3-way ``RemoteOps.invoke`` without a state file; NATS's row is its
plain request/reply. The first copy of each invocation goes as a request
(its answer comes back on the transport's reply path), and a 3-way
acknowledgment rides on the next invocation, so both handshakes send one
message each way per call.
"""

from __future__ import annotations

from benchmarks.registry import Metric, Scenario, scenario
from benchmarks.scenarios.reqrep import combine, layout, replier, requester

scenario(
    Scenario(
        name="rops-latency",
        title="Remote operations (exactly-once request/reply) latency, 128 B",
        description=(
            "One invoker process calls an echo operation in a performer process one call "
            "at a time: rvasync send_request, RemoteOps 2-way and 3-way (no state file), "
            "and NATS request/reply; latency percentiles over every timed call."
        ),
        capability="rops",
        primary=Metric("p50_us", "p50", "µs", "lower"),
        extras=(
            Metric("p90_us", "p90", "µs", "lower"),
            Metric("p99_us", "p99", "µs", "lower"),
            Metric("p999_us", "p99.9", "µs", "lower"),
            Metric("round_trips_per_s", "calls", "/s", "higher"),
        ),
        chart=("p50_us", "p90_us", "p99_us"),
        roles={"server": replier, "client": requester},
        layout=layout,
        combine=combine,
        params={"size": 128, "requests": 10_000, "warmup": 1_000, "request_timeout": 5.0},
        quick={"requests": 500, "warmup": 100},
        timeout=240.0,
        quick_timeout=60.0,
        order=41,
    )
)
