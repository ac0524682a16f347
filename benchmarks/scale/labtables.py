"""Markdown tables of the lab parts of the "Scale" section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.scale.tables import table

Row = Mapping[str, Any]


def _order(row: Row) -> tuple[int, float, int, str]:
    return (row["size"], row["loss"], row["hosts"], row["system"])


def _accounted(row: Row) -> bool:
    return bool(row["missing_unreported"] == 0 and row["out_of_order"] == 0)


def fanout_lines(rows: list[Row]) -> list[str]:
    body = []
    for r in sorted(rows, key=_order):
        body.append((
            r["system"], r["size"], f"{r['loss']:g} %", r["hosts"], r["messages"],
            r["rate"] or "unpaced", r["per_subscriber_msg_s"], r["min_subscriber_msg_s"],
            r["publisher_cpu_us_per_msg"], r["client_cpu_us_per_msg"],
            r["wire_packets_per_msg"], r["wire_bytes_per_msg"], r.get("naks_per_loss"),
            r.get("resent_per_loss"), r.get("naks_per_lost"), r.get("resent_per_lost"),
            r.get("resent_to_group"), r["reported_lost"], _accounted(r),
        ))  # fmt: skip
    head = [
        "system", "size (B)", "loss", "hosts", "messages", "offered (msg/s)",
        "msg/s per subscriber (median)", "(slowest)", "publisher daemon / broker CPU (µs/msg)",
        "publishing client CPU (µs/msg)", "packets / msg on the wire", "bytes / msg",
        "NAKs / loss", "resends / loss", "NAKs / lost (est.)", "resends / lost (est.)",
        "resends to the group", "DATALOSS (messages)", "each message once or counted",
    ]  # fmt: skip
    return [
        "One publisher host, N subscriber hosts; loss is nftables random loss on the input "
        "of every host (NATS's TCP gets it too). rvasync: the publisher's daemon is a "
        "standalone process; its CPU is measured apart from its client's. NATS: nats-server "
        "in its own namespace, subscribers over TCP; the broker's CPU is the comparable "
        "figure. Packets and bytes per message: what every host's interface sent (a "
        "multicast datagram once). The lab cannot tell which datagram each host missed, so "
        "lost datagrams are estimated from the losses (independent loss: D(1 - (1 - p)^N)); "
        "per loss is exact.\n",
        *table(head, body),
    ]


def overlap_lines(sim_rows: list[Row], lab_rows: list[Row]) -> list[str]:
    """Counts per loss and per lost datagram, simulated and measured, for 32 hosts and fewer."""
    sims = {(r["case"]["hosts"], r["case"]["loss"], r["case"]["size"]): r for r in sim_rows
            if r["case"]["model"] == "independent"}  # fmt: skip
    body = []
    for lab in sorted(lab_rows, key=_order):
        if lab["system"] != "rvasync" or not lab["loss"] or lab["hosts"] > 32:
            continue
        sim = sims.get((lab["hosts"], lab["loss"], lab["size"]))
        if sim is None:
            continue
        q = sim["ratios"]
        body.append((
            lab["size"], lab["hosts"], f"{lab['loss']:g} %",
            f"{_n(q['naks_per_loss'])} / {_n(lab.get('naks_per_loss'))}",
            f"{_n(q['repairs_per_loss'])} / {_n(lab.get('resent_per_loss'))}",
            f"{_n(q['naks_per_lost'])} / {_n(lab.get('naks_per_lost'))}",
            f"{_n(q['repairs_per_lost'])} / {_n(lab.get('resent_per_lost'))}",
            f"{sim['repairs_multicast']} of {sim['repairs']} / "
            f"{lab.get('resent_to_group')} of {lab.get('resent')}",
        ))  # fmt: skip
    if not body:
        return ["No configuration was both simulated and measured in the lab.\n"]
    head = [
        "size (B)",
        "hosts",
        "loss",
        "NAKs / loss (sim / lab)",
        "resends / loss (sim / lab)",
        "NAKs / lost (sim / lab est.)",
        "resends / lost (sim / lab est.)",
        "resends to the group (sim / lab)",
    ]
    return [
        "The same quantities where both exist (independent loss, 32 hosts and fewer). The "
        "streams differ (the simulation packs 10 messages of 128 B a datagram, the lab's "
        "paced client about 2 to 3), so per-message counts are not compared, only the "
        "repair traffic per loss and per lost datagram.\n",
        *table(head, body),
    ]


def _n(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}"


def subjects_lines(rows: list[Row]) -> list[str]:
    body = []
    for r in rows:
        body.append((
            r["hosts"], r["subjects"], r["listeners_per_host"], r["setup_seconds_max"],
            r["rss_mib_before"], r["rss_mib_after"], r["cpu_us_per_listener"],
            r["messages"], r["cpu_us_per_msg_median"], r["cpu_us_per_msg_max"],
            r["new_listener_ms_median"], r["new_listener_ms_max"], r["missing"],
        ))  # fmt: skip
    head = [
        "hosts",
        "subjects",
        "listeners per host",
        "set-up (s, slowest host)",
        "daemon RSS before (MiB)",
        "after (MiB)",
        "CPU per listener (µs)",
        "messages sent",
        "daemon CPU per message (µs, median host)",
        "(busiest host)",
        "new listener to first message (ms, median)",
        "(max)",
        "messages missing",
    ]
    return [
        "Each host's program (in-process daemon) listens to its share of the subjects; a "
        "publisher host sends round-robin over all of them, so every daemon receives every "
        "datagram and hands each message to the one host that listens. A new listener on a "
        "subject that is being published starts receiving once its own daemon knows the "
        "interest (no network round trip).\n",
        *table(head, body),
    ]


def routers_lines(rows: list[Row]) -> list[str]:
    body = []
    for r in rows:
        body.append((
            r["topology"], r["networks"], r["hops"], r.get("interest_ms"),
            r.get("wan_packets_per_interest"), r.get("pubsub_msg_s"),
            r.get("reqrep_per_s"), r.get("failover_ms"), r.get("failover_lost"),
            r.get("failover_missing_unreported"),
        ))  # fmt: skip
    head = [
        "topology",
        "networks",
        "hops",
        "interest propagation (ms)",
        "WAN packets per interest change",
        "pub/sub (msg/s)",
        "request/reply (per s)",
        "failover gap (ms)",
        "lost in failover (DATALOSS)",
        "missing, not reported",
    ]
    return [
        "One routing daemon per network (a lab site), linked over a WAN bridge. Interest "
        "propagation: a new listener at the far site, to the first probe from site 0 "
        "(probes every 5 ms). WAN packets per interest change: every router host's WAN "
        "interface, listen and unlisten. Pub/sub: 128 B paced at the rate shown, delivered "
        "rate at the far site. Request/reply: sequential round trips per second. Failover: "
        "a stream of 500 msg/s, the WAN link on its path cut: the gap in arrivals.\n",
        *table(head, body),
    ]
