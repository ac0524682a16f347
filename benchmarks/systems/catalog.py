"""The contenders, with the reasons a system cannot take part in a capability at all."""

from __future__ import annotations

from benchmarks.registry import System, system

_NO_FORMAT = "carries opaque bytes: it has no self-describing message format to encode"
_RAW_ONLY = (
    "rvasync-only: it compares rvasync's async for with its own callbacks (the intraprocess "
    "scenario compares the systems)"
)
_NO_FT = "has no fault-tolerance groups (weighted active/standby members)"

RVASYNC = system(
    System(
        name="rvasync",
        label="rvasync",
        kind="rvasync",
        description="this project (uvloop event loop; native hot paths when built)",
    )
)

NATS = system(
    System(
        name="nats",
        label="NATS",
        kind="peer",
        description="nats-py client with a local nats-server broker process",
        not_applicable={
            "inproc": "nats-py has no in-process transport; every message goes through "
            "nats-server (see the pub/sub scenarios)",
            "codec": f"NATS {_NO_FORMAT}",
            "match": "nats-py does no client-side subject matching; nats-server does, and the "
            "fan-out scenarios measure it",
            "inproc-raw": _RAW_ONLY,
            "failover": f"NATS {_NO_FT}; queue groups share load instead",
            "queue-failover": "one nats-server is the JetStream work queue's scheduler, and "
            "killing it leaves no successor (a clustered JetStream electing a new stream leader "
            "would be the counterpart; not set up here)",
            "relay": "NATS has no relay agents (a JetStream durable consumer that reconnects is "
            "the closest thing; see the certified scenarios)",
        },
        order=1,
    )
)

ZMQ = system(
    System(
        name="zmq",
        label="ZeroMQ",
        kind="peer",
        description="pyzmq (zmq.asyncio), brokerless, PUB/SUB and REQ/REP over TCP",
        not_applicable={
            "fanout": "ZeroMQ has no subject wildcards and filters by byte prefix per "
            "socket; N listeners would be N sockets",
            "codec": f"ZeroMQ {_NO_FORMAT}",
            "match": "pyzmq has no subject index (libzmq filters prefixes inside each socket)",
            "inproc-raw": _RAW_ONLY,
            "failover": f"ZeroMQ {_NO_FT}",
            "certified": "ZeroMQ has no persistence or acknowledged delivery",
            "relay": "ZeroMQ has no persistence or acknowledged delivery to relay",
            "routed-pubsub": "ZeroMQ has no brokers to join into a routed domain",
            "routed-reqrep": "ZeroMQ has no brokers to join into a routed domain",
            "retained": "ZeroMQ keeps no last value per subject (no cache or store)",
            "queue": "ZeroMQ has no acknowledged work queue (PUSH/PULL neither acknowledges "
            "nor reassigns a dead worker's tasks)",
            "queue-failover": "ZeroMQ has no scheduler to fail over",
        },
        order=2,
    )
)

FLOOR = system(
    System(
        name="floor",
        label="floor (bare UDP)",
        kind="floor",
        description="a bare uvloop UDP socket pair on 127.0.0.1: no framework, no subjects, "
        "no loss recovery",
        not_applicable={
            "fanout": "a bare socket has no subjects, so no listeners to match",
            "codec": "the floor moves raw bytes; there is nothing to encode",
            "match": "a bare socket has no subjects to match",
            "inproc-raw": _RAW_ONLY,
            "failover": "a bare socket has no groups or members",
            "certified": "a bare socket has no persistence or acknowledgement",
            "relay": "a bare socket has no persistence or acknowledgement",
            "routed-pubsub": "a bare socket has no routers",
            "routed-reqrep": "a bare socket has no routers",
            "retained": "a bare socket keeps no values",
            "queue": "a bare socket has no workers or acknowledgements",
            "queue-failover": "a bare socket has no scheduler",
        },
    )
)

MSGPACK = system(
    System(
        name="msgpack",
        label="msgpack dict",
        kind="reference",
        description="msgpack.packb/unpackb of a dict holding the same values (reference)",
    )
)

SCAN = system(
    System(
        name="scan",
        label="linear scan",
        kind="reference",
        description="testing every pattern in turn with a plain element-wise matcher (reference)",
    )
)

SPARK_PARQUET = system(
    System(
        name="spark-parquet",
        label="Spark Parquet reader",
        kind="reference",
        description="spark.read.parquet over the same committed capture files, no rvasync code "
        "(the floor of the rvasync data source)",
    )
)
