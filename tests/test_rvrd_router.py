"""The routing daemon over real sockets: separate networks (service ports) joined by routers.

Programs run on their own loops and in-process daemons (as separate processes
would); routers link over loopback TCP, some through a relay the test cuts
and heals.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

import rvasync as rv
from rvasync.rvrd import Router
from rvasync.testing import LOOPBACK
from tests.rvrd_support import WAIT, Hop, Program, router_config, services


async def _advisory(program: Program, listener: rv.Listener, name: str) -> rv.Message:
    """The next NEIGHBOR.<name> advisory (earlier ones may still be arriving)."""
    while True:
        msg = await program.next(listener)
        if msg.subject == f"_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.{name}":
            return msg


async def _pair() -> tuple[list[str], Router, Router]:
    sa, sb = services(2)
    ra = await Router(router_config("ra", [("A", sa)], [("rb", None, 1)])).start()
    rb = await Router(router_config("rb", [("B", sb)], [("ra", ra.port, 1)], listen=False)).start()
    await ra.wait_for(lambda: ra.neighbors == ["rb"] and rb.neighbors == ["ra"], WAIT)
    return [sa, sb], ra, rb


async def test_pubsub_and_request_reply_across_two_routers() -> None:
    (sa, sb), ra, rb = await _pair()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        lb = await pb.listen("ORDERS.>")
        await ra.wait_for(lambda: "ORDERS.>" in ra.listening("A"), WAIT)
        await pa.send("ORDERS.EU", n=1)
        msg = await pb.next(lb)
        assert msg.subject == "ORDERS.EU" and msg["n"] == 1
        # Requests both ways: the reply finds its way back through both routers.
        await pa.serve("SVC.A")
        await pb.serve("SVC.B")
        await rb.wait_for(lambda: "SVC.A" in rb.listening("B"), WAIT)
        await ra.wait_for(lambda: "SVC.B" in ra.listening("A"), WAIT)
        assert (await pb.request("SVC.A", q=21))["answer"] == 42
        assert (await pa.request("SVC.B", q=5))["answer"] == 10
        # Interest withdrawn: the router stops listening, nothing crosses any more.
        await pb.thread.run(lb.close())
        await ra.wait_for(lambda: "ORDERS.>" not in ra.listening("A"), WAIT)
        assert ra.core.stats.not_exported == 0
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_only_exported_and_imported_subjects_cross() -> None:
    sa, sb = services(2)
    cfg_a = router_config("ra", [("A", sa)], [("rb", None, 1)])
    cfg_a["network"][0]["export"] = ["PUBLIC.>"]
    ra = await Router(cfg_a).start()
    cfg_b = router_config("rb", [("B", sb)], [("ra", ra.port, 1)], listen=False)
    cfg_b["network"][0]["import"] = ["PUBLIC.>", "OTHER"]
    rb = await Router(cfg_b).start()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        await pb.listen("PUBLIC.X")
        await pb.listen("SECRET.X")
        await ra.wait_for(lambda: "PUBLIC.X" in ra.listening("A"), WAIT)
        # B imports no SECRET: not even advertised. A exports no OTHER: never listened to.
        await pb.listen("OTHER")
        await asyncio.sleep(0.3)
        assert ra.listening("A") == frozenset({"PUBLIC.X"})
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_ring_of_three_cut_and_healed() -> None:
    """A ring A-B-C: the direct link A-C is cheapest; cut, traffic goes round; healed, back."""
    sa, sb, sc = services(3)
    rc = await Router(router_config("rc", [("C", sc)], [("ra", None, 1), ("rb", None, 1)])).start()
    hop = await Hop(rc.port or 0).start()
    rb = await Router(
        router_config("rb", [("B", sb)], [("ra", None, 1), ("rc", rc.port, 1)])
    ).start()
    ra = await Router(
        router_config("ra", [("A", sa)], [("rb", rb.port, 1), ("rc", hop.port, 1)])
    ).start()
    routers = (ra, rb, rc)
    pa, pc = await Program(sa).open(), await Program(sc).open()
    try:
        await ra.wait_for(lambda: all(len(r.neighbors) == 2 for r in routers), WAIT)
        adv = await pa.listen("_RV.*.SYSTEM.ROUTER.NEIGHBOR.>")
        lc = await pc.listen("TICK")
        await ra.wait_for(lambda: "TICK" in ra.listening("A"), WAIT)
        await pa.send("TICK", n=0)
        assert (await pc.next(lc))["n"] == 0
        direct = rb.core.stats.forwarded
        assert direct == 0  # the cheapest path is the direct link: B carried nothing

        await hop.cut()
        await ra.wait_for(lambda: "rc" not in ra.neighbors and "ra" not in rc.neighbors, WAIT)
        seen = await _advisory(pa, adv, "DISCONNECTED")
        assert seen["neighbor"] == "rc" and seen["router"] == "ra"
        await ra.wait_for(lambda: ra.core.topology.reachable == {"ra", "rb", "rc"}, WAIT)
        await pa.send("TICK", n=1)
        assert (await pc.next(lc))["n"] == 1
        assert rb.core.stats.forwarded == direct + 1  # round the ring, through B

        await hop.heal()
        await ra.wait_for(lambda: "rc" in ra.neighbors, WAIT)
        seen = await _advisory(pa, adv, "CONNECTED")
        assert seen["neighbor"] == "rc"
        await ra.wait_for(lambda: "ra" in rc.neighbors, WAIT)

        def direct_again() -> bool:  # the healed link's records have reached ra
            tree = ra.core.topology.tree("n:A")
            return tree is not None and tree.parent.get("r:rc") == "r:ra"

        await ra.wait_for(direct_again, WAIT)
        await pa.send("TICK", n=2)
        assert (await pc.next(lc))["n"] == 2
        assert rb.core.stats.forwarded == direct + 1  # direct again
    finally:
        await pa.close()
        await pc.close()
        for r in routers:
            await r.close()
        await hop.close()


async def test_no_path_is_reported_as_dataloss_and_interest_resyncs() -> None:
    sa, sb = services(2)
    rb = await Router(router_config("rb", [("B", sb)], [("ra", None, 1)])).start()
    hop = await Hop(rb.port or 0).start()
    ra = await Router(router_config("ra", [("A", sa)], [("rb", hop.port, 1)], listen=False)).start()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        loss = await pa.listen("_RV.ERROR.SYSTEM.DATALOSS.>")
        loss_b = await pb.listen("_RV.ERROR.SYSTEM.DATALOSS.>")
        lb = await pb.listen("DATA.X")
        await ra.wait_for(lambda: "DATA.X" in ra.listening("A"), WAIT)
        await hop.cut()
        await ra.wait_for(lambda: ra.neighbors == [], WAIT)
        await pa.send("DATA.X", n=1)
        report = await pa.next(loss)
        assert report.subject == "_RV.ERROR.SYSTEM.DATALOSS.ROUTER"
        assert report["lost"] >= 1 and report["router"] == "ra" and report["network"] == "B"
        # Interest that appears while the link is down is learned after it heals.
        await pb.listen("DATA.Y")
        await hop.heal()
        await ra.wait_for(lambda: "DATA.Y" in ra.listening("A"), WAIT)
        await pa.send("DATA.X", n=2)
        assert (await pb.next(lb))["n"] == 2
        # The count reached B, where the listener missed the message (before: only A knew).
        while not (far := await pb.next(loss_b))["exact"]:
            assert far["reason"].startswith("link to ra broke")  # rb's window at the cut
        assert (far["lost"], far["network"], far["origin"], far["subject"]) == (
            1,
            "B",
            "A",
            "DATA.X",
        )
    finally:
        await pa.close()
        await pb.close()
        await ra.close()
        await rb.close()
        await hop.close()


async def test_a_router_with_a_state_file_reports_its_restart_on_its_networks(
    tmp_path: Path,
) -> None:
    """The new incarnation presents a window from its predecessor's last sign of life: what
    it was routing into its network meanwhile is lost, uncounted (both routers of a link
    killed at once leave nobody else to tell)."""
    (sa,) = services(1)
    config = router_config("ra", [("A", sa)], [])
    config["router"]["state"] = str(tmp_path / "ra.state")
    first = await Router(config).start()
    await first.close()
    pa = await Program(sa).open()
    try:
        loss = await pa.listen("_RV.ERROR.SYSTEM.DATALOSS.>")
        second = await Router(config).start()
        try:
            report = await pa.next(loss)
            assert report.subject == "_RV.ERROR.SYSTEM.DATALOSS.ROUTER"
            assert report["exact"] is False and report["lost"] == 0
            assert report["network"] == "A" and "restarted" in report["reason"]
            assert report["since"] <= report["until"]
            assert second.incarnation != first.incarnation
        finally:
            await second.close()
    finally:
        await pa.close()
    with pytest.raises(rv.InvalidArgument, match=r"router\.state"):
        Router({"router": {"name": "a", "state": 3}, "network": [{"name": "A"}]})


async def test_two_routers_on_one_lan_deliver_once_and_fail_over() -> None:
    """LAN A has two routers (redundancy) linked to the router of LAN B."""
    sa, sb = services(2)
    rb = Router(router_config("rb", [("B", sb)], [("ra1", None, 1), ("ra2", None, 1)]))
    await rb.start()
    ra1 = Router(router_config("ra1", [("A", sa)], [("rb", rb.port, 1)], listen=False))
    ra2 = Router(router_config("ra2", [("A", sa)], [("rb", rb.port, 1)], listen=False))
    await ra1.start()
    await ra2.start()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        la = await pa.listen("TO.A")
        await rb.wait_for(lambda: "TO.A" in rb.listening("B") and len(rb.neighbors) == 2, WAIT)
        await ra1.wait_for(lambda: ra1.core.topology.reachable == {"ra1", "ra2", "rb"}, WAIT)
        await ra2.wait_for(lambda: ra2.core.topology.reachable == {"ra1", "ra2", "rb"}, WAIT)
        for n in range(5):
            await pb.send("TO.A", n=n)
        got = [(await pa.next(la))["n"] for _ in range(5)]
        assert got == list(range(5))
        with pytest.raises(TimeoutError):
            await pa.next(la, timeout=0.5)  # no duplicate from the second router
        await ra1.close()
        await rb.wait_for(lambda: rb.neighbors == ["ra2"], WAIT)
        await pb.send("TO.A", n=99)
        assert (await pa.next(la))["n"] == 99
    finally:
        await pa.close()
        await pb.close()
        for r in (ra1, ra2, rb):
            with contextlib.suppress(Exception):
                await r.close()


def _weighted(config: dict[str, Any], weights: dict[str, int]) -> dict[str, Any]:
    config["network"][0]["weights"] = weights
    return config


async def test_subject_weights_divide_a_lan_between_its_two_routers() -> None:
    """LAN A's two routers split the subjects by weight; the survivor takes all on a failure."""
    sa, sb = services(2)
    rb = Router(router_config("rb", [("B", sb)], [("ra1", None, 1), ("ra2", None, 1)]))
    await rb.start()
    cfg1 = router_config("ra1", [("A", sa)], [("rb", rb.port, 1)], listen=False)
    cfg2 = router_config("ra2", [("A", sa)], [("rb", rb.port, 1)], listen=False)
    ra1 = Router(_weighted(cfg1, {"X.>": 10}))
    ra2 = Router(_weighted(cfg2, {"Y.>": 10}))
    await ra1.start()
    await ra2.start()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        la = await pa.listen("*.1")
        await rb.wait_for(lambda: "*.1" in rb.listening("B") and len(rb.neighbors) == 2, WAIT)
        for r in (ra1, ra2):
            await r.wait_for(lambda r=r: r.core.topology.reachable == {"ra1", "ra2", "rb"}, WAIT)
        for n in range(4):
            await pb.send("X.1", n=n)
            await pb.send("Y.1", n=n)
        got = sorted([(m.subject, m["n"]) for m in [await pa.next(la) for _ in range(8)]])
        assert got == sorted([(s, n) for s in ("X.1", "Y.1") for n in range(4)])
        with pytest.raises(TimeoutError):
            await pa.next(la, timeout=0.5)  # no duplicate
        assert ra1.attachments["A"].published == 4  # the X.> messages
        assert ra2.attachments["A"].published == 4  # the Y.> messages
        await ra1.close()
        await rb.wait_for(lambda: rb.neighbors == ["ra2"], WAIT)
        await ra2.wait_for(lambda: ra2.core.topology.reachable == {"ra2", "rb"}, WAIT)
        await pb.send("X.1", n=99)
        assert (await pa.next(la))["n"] == 99
        assert ra2.attachments["A"].published == 5
    finally:
        await pa.close()
        await pb.close()
        for r in (ra1, ra2, rb):
            with contextlib.suppress(Exception):
                await r.close()


async def test_two_routers_sharing_two_lans_need_no_link_between_them() -> None:
    """Both routers join A and B, with no neighbor link: they find each other on the LANs,
    deliver each message once, and when one goes away the other serves alone."""
    sa, sb = services(2)
    nets = [("A", sa), ("B", sb)]
    r1 = await Router(router_config("r1", nets, [], listen=False)).start()
    r2 = await Router(router_config("r2", nets, [], listen=False)).start()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        lb = await pb.listen("TO.B")
        for r in (r1, r2):
            await r.wait_for(
                lambda r=r: (
                    r.core.topology.reachable == {"r1", "r2"} and "TO.B" in r.listening("A")
                ),
                WAIT,
            )
        for n in range(5):
            await pa.send("TO.B", n=n)
        got = [(await pb.next(lb))["n"] for _ in range(5)]
        assert got == list(range(5))
        with pytest.raises(TimeoutError):
            await pb.next(lb, timeout=0.5)  # no duplicate from the other router
        served = r1.attachments["B"].published + r2.attachments["B"].published
        assert served == 5
        await r1.close()
        await r2.wait_for(lambda: r2.core.topology.reachable == {"r2"}, WAIT)
        await pa.send("TO.B", n=99)
        assert (await pb.next(lb))["n"] == 99
    finally:
        await pa.close()
        await pb.close()
        for r in (r1, r2):
            with contextlib.suppress(Exception):
                await r.close()


async def test_bad_config_and_unknown_neighbors_are_refused() -> None:
    with pytest.raises(rv.InvalidArgument, match=r"router\.name"):
        Router({"router": {"name": "bad name"}, "network": [{"name": "A"}]})
    with pytest.raises(rv.InvalidArgument, match=r"network"):
        Router({"router": {"name": "a"}})
    with pytest.raises(rv.InvalidArgument, match=r"network\[0\]\.weights.*'X' must be an integer"):
        Router({"router": {"name": "a"}, "network": [{"name": "A", "weights": {"X": 0}}]})
    with pytest.raises(rv.InvalidArgument, match=r"network\[0\]\.weights.*bad subject pattern"):
        Router({"router": {"name": "a"}, "network": [{"name": "A", "weights": {"X..Y": 2}}]})
    _, ra, rb = await _pair()
    try:
        # A stranger that says HELLO with another name is refused; the router carries on.
        reader, writer = await asyncio.open_connection("127.0.0.1", ra.port)
        from rvasync.protocol.rvrd import frames

        writer.write(frames.encode(["HELLO", frames.VERSION, "stranger", 1]))
        writer.write(b"\xc1junk!")
        with contextlib.suppress(Exception):
            async with asyncio.timeout(WAIT):
                while await reader.read(1024):
                    pass
        writer.close()
        assert ra.neighbors == ["rb"]
    finally:
        await rb.close()
        await ra.close()


async def test_certified_delivery_across_routers() -> None:
    """Registration, labeled data and confirmations all cross (``_RVCM.`` subjects route)."""
    (sa, sb), ra, rb = await _pair()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:

        async def receiver() -> tuple[rv.CmTransport, rv.CmListener]:
            assert pb.t is not None
            cm = rv.CmTransport(pb.t, "RECEIVER")
            return cm, cm.listen("CM.ORDERS")

        async def sender() -> tuple[rv.CmTransport, rv.Listener]:
            assert pa.t is not None
            return rv.CmTransport(pa.t, "SENDER"), pa.t.listen("_RV.INFO.RVCM.DELIVERY.>")

        _, orders = await pb.thread.run(receiver())
        cm, confirms = await pa.thread.run(sender())
        await ra.wait_for(lambda: "CM.ORDERS" in ra.listening("A"), WAIT)
        # Until the listener has registered, messages arrive uncertified (as on one network).
        n = 0
        async with asyncio.timeout(WAIT):
            while True:
                await pa.thread.run(cm.send(rv.Message("CM.ORDERS", {"n": n})))
                n += 1
                msg = await pb.next(orders)
                if msg.cm is not None and msg.cm.sequence is not None:
                    break
        first = msg.cm.sequence
        for k in range(5):
            await pa.thread.run(cm.send(rv.Message("CM.ORDERS", {"n": n + k})))
        got = [await pb.next(orders) for _ in range(5)]
        assert [m["n"] for m in got] == [n + k for k in range(5)]
        assert [m.cm.sequence for m in got] == [first + 1 + k for k in range(5)]
        # The confirmations came back across both routers (an iterated message is confirmed
        # when the next one is taken, so the last one taken is not confirmed yet).
        async with asyncio.timeout(WAIT):
            while True:
                adv = await pa.next(confirms)
                if (
                    adv.subject == "_RV.INFO.RVCM.DELIVERY.CONFIRM.CM.ORDERS"
                    and adv.get("seqno") == first + 4
                ):
                    break
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_a_routed_message_republished_under_another_subject_crosses_back() -> None:
    """The ``_rvrd`` tag is bound to its subject: a relay program's copy is a new message."""
    (sa, sb), ra, rb = await _pair()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        la = await pa.listen("BACK.X")
        lb = await pb.listen("OUT.X")
        await ra.wait_for(lambda: "OUT.X" in ra.listening("A"), WAIT)
        await rb.wait_for(lambda: "BACK.X" in rb.listening("B"), WAIT)
        await pa.send("OUT.X", n=7)
        routed = await pb.next(lb)
        assert "_rvrd" in routed  # the tag programs may see (docs/routing.md)

        async def relay() -> None:
            assert pb.t is not None
            copy = routed.copy()
            copy.subject = "BACK.X"
            await pb.t.send(copy)

        await pb.thread.run(relay())
        back = await pa.next(la)
        assert back["n"] == 7 and back.subject == "BACK.X"
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_messages_pass_through_with_their_fields_and_one_tag() -> None:
    """The far router edits the wire bytes (rvasync.wireedit): every field arrives as sent,
    with one ``_rvrd`` tag more, whatever the data holds (here the tag's own encoded name,
    which sends the near router down its general path) and however many fields there are."""
    (sa, sb), ra, rb = await _pair()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        lb = await pb.listen("PASS.>")
        await ra.wait_for(lambda: "PASS.>" in ra.listening("A"), WAIT)
        inner = rv.Message(fields={"deep": "x"})
        many = {f"f{i}": i for i in range(20)}  # past a fixarray in the field count
        await pa.send("PASS.MARK", data=b"\xa5_rvrd", inner=inner, text="t" * 300)
        await pa.send("PASS.MANY", **many)
        first, second = await pb.next(lb), await pb.next(lb)
        assert first.subject == "PASS.MARK" and first["data"] == b"\xa5_rvrd"
        assert first["inner"]["deep"] == "x" and first["text"] == "t" * 300
        assert second.subject == "PASS.MANY"
        assert {f.name: f.value for f in second if f.name != "_rvrd"} == many
        for msg in (first, second):
            (tag,) = msg.get_all("_rvrd")
            assert tag.endswith(f" {msg.subject}")
        # Both were edited in their bytes, origin and all (every send stamps one): none
        # was decoded and encoded again on its way into B.
        assert rb.attachments["B"].published >= 2
        assert rb.attachments["B"].decoded_out == 0
        # On the way in, only the one whose bytes hold the tag's name was decoded (to look
        # for a tag among its fields); the other was routed from its head alone.
        assert ra.attachments["A"].decoded_in == 1
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_a_burst_crosses_in_order_with_consecutive_tags() -> None:
    """A burst published in one loop turn crosses as batches (one routing decision, one
    BATCH frame, one DeliverRun at the far router): every message arrives, in order, each
    with its own tag (consecutive sequence numbers of the importing router, two hops: the
    link and the delivery), and none is
    decoded on either router."""
    (sa, sb), ra, rb = await _pair()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    try:
        lb = await pb.listen("BURST.X")
        await ra.wait_for(lambda: "BURST.X" in ra.listening("A"), WAIT)
        count = 300  # over MAX_BATCH: more than one BATCH frame

        async def burst() -> None:
            assert pa.t is not None
            for i in range(count):
                await pa.t.send(rv.Message("BURST.X", {"i": i, "data": b"x" * 128}))

        await pa.thread.run(burst())
        got = [await pb.next(lb) for _ in range(count)]
        assert [msg["i"] for msg in got] == list(range(count))
        tags = [msg["_rvrd"].split(" ") for msg in got]
        importer = ra.core.importer  # the router and its incarnation
        assert importer.startswith("ra.")
        assert all(
            t[0] == "A" and t[1] == importer and t[3] == "2" and t[4] == "BURST.X" for t in tags
        )
        seqs = [int(t[2]) for t in tags]
        assert seqs == list(range(seqs[0], seqs[0] + count))
        assert ra.attachments["A"].decoded_in == 0
        assert rb.attachments["B"].decoded_out == 0
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_router_through_a_standalone_daemon(rv_daemon: str) -> None:
    """Network A is reached through a standalone daemon (the router's and the program's)."""
    sa, sb = services(2)
    cfg_a = router_config("ra", [("A", sa)], [("rb", None, 1)])
    cfg_a["network"][0]["daemon"] = rv_daemon
    ra = await Router(cfg_a).start()
    rb = await Router(router_config("rb", [("B", sb)], [("ra", ra.port, 1)], listen=False)).start()
    ta = rv.Transport(sa, LOOPBACK, daemon=rv_daemon)
    await ta.open()
    pb = await Program(sb).open()
    try:
        adv = ta.listen("_RV.WARN.SYSTEM.ROUTER.>")
        la = ta.listen("TO.A")
        lb = await pb.listen("TO.B")
        await rb.wait_for(lambda: "TO.A" in rb.listening("B"), WAIT)
        await ra.wait_for(lambda: "TO.B" in ra.listening("A"), WAIT)
        # The router's listen travels to the standalone daemon as a frame;
        # a ping round trip proves the daemon has taken it (CI saw the race).
        link = ra.attachments["A"].transport.link
        assert link is not None
        await link.ping(WAIT)
        await ta.send(rv.Message("TO.B", {"n": 1}))
        assert (await pb.next(lb))["n"] == 1
        await pb.send("TO.A", n=2)
        assert (await la.get(WAIT))["n"] == 2
        await rb.close()
        # The router's advisory reaches programs of the standalone daemon too.
        async with asyncio.timeout(WAIT):
            while (await adv.get(WAIT)).subject != "_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.DISCONNECTED":
                pass
    finally:
        await ta.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def test_a_neighbor_sending_garbage_loses_its_link_not_the_router() -> None:
    (sa,) = services(1)
    ra = await Router(router_config("ra", [("A", sa)], [("rx", None, 1)])).start()
    try:
        from rvasync.protocol.rvrd import frames

        for junk in (b"\xc1\xc1", frames.encode(["DATA", 1]), frames.encode("not a list")):
            reader, writer = await asyncio.open_connection("127.0.0.1", ra.port)
            writer.write(frames.encode(["HELLO", frames.VERSION, "rx", 1]))
            await ra.wait_for(lambda: ra.neighbors == ["rx"], WAIT)
            writer.write(junk)
            await ra.wait_for(lambda: ra.neighbors == [], WAIT)
            async with asyncio.timeout(WAIT):
                while await reader.read(4096):
                    pass
            writer.close()
        assert ra.core.stats.bad_frames >= 1
    finally:
        await ra.close()


async def test_fault_tolerance_group_spans_two_networks() -> None:
    """A member on each network: the heavier one (A) is active, B waits; A leaves, B activates.

    The ``_RVFT.`` heartbeats cross the routers like any subject with interest.
    """
    (sa, sb), ra, rb = await _pair()
    pa, pb = await Program(sa).open(), await Program(sb).open()
    b_active = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:

        async def join(program: Program, weight: int, on_active: Any) -> rv.FtMember:
            assert program.t is not None
            member = rv.FtMember(
                program.t, "RVRD.FT", weight=weight, active_goal=1, heartbeat=0.2,
                activation=1.0, callback=on_active,
            )  # fmt: skip
            await member.__aenter__()
            return member

        def a_cb(member: rv.FtMember, action: rv.FtAction) -> None:
            pass

        def b_cb(member: rv.FtMember, action: rv.FtAction) -> None:
            if action == rv.FtAction.ACTIVATE:
                loop.call_soon_threadsafe(b_active.set)

        member_a = await pa.thread.run(join(pa, 100, a_cb))
        await ra.wait_for(lambda: any("_RVFT" in s for s in rb.listening("B")), WAIT)
        await asyncio.sleep(0.5)  # A's heartbeats reach B before B joins
        member_b = await pb.thread.run(join(pb, 10, b_cb))
        await asyncio.sleep(2.0)  # twice the activation interval: B must stay inactive
        assert not b_active.is_set() and not member_b.active
        assert member_a.active
        await pa.thread.run(member_a.__aexit__(None, None, None))
        await asyncio.wait_for(b_active.wait(), WAIT)
        await pb.thread.run(member_b.__aexit__(None, None, None))
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()
