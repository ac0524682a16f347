"""One side of the lab's direct-communication and virtual-circuit test (a lab host process).

``server``: a transport with direct communication; tells its inbox on
``LAB.WHERE``, echoes requests sent to that inbox, and accepts one virtual
circuit per ask on ``LAB.VC.ASK``; on the circuit it counts ``VC.DATA``
messages and, at the end marker, answers ``VC.SUM`` (how many, in order or
not) on the circuit. ``client``: asks for the inbox, warms up until a
round trip goes direct both ways, does ``--requests``
request/reply round trips to it (counted), then opens a circuit, sends ``--messages``
numbered messages and an end marker, waits for ``VC.SUM``, and prints one
JSON line with what it saw (the direct channel's counters included).
"""

from __future__ import annotations

import argparse
import asyncio
import json

import rvasync as rv

WAIT = 60.0


async def server(t: rv.Transport) -> None:
    inbox = t.create_inbox()
    where = t.listen("LAB.WHERE")
    asks = t.listen("LAB.VC.ASK")
    requests = t.listen(inbox)

    async def tell() -> None:
        async for ask in where:
            await t.send_reply(rv.Message(fields={"inbox": inbox}), ask)

    async def echo() -> None:
        async for request in requests:
            await t.send_reply(rv.Message(fields={"n": request["n"]}), request)

    async def circuit(vc: rv.VcTransport) -> None:
        data = vc.listen("VC.DATA")
        await vc.wait_connected(WAIT)
        count, ordered = 0, True
        async for msg in data:
            if msg["i"] < 0:
                await vc.send(rv.Message("VC.SUM", {"count": count, "ordered": int(ordered)}))
                break
            ordered = ordered and msg["i"] == count
            count += 1

    tasks = [asyncio.ensure_future(tell()), asyncio.ensure_future(echo())]
    print("ready", flush=True)
    async for ask in asks:
        vc = rv.VcTransport.accept(t, silence=10.0, heartbeat=1.0)
        tasks.append(asyncio.ensure_future(circuit(vc)))
        await t.send_reply(rv.Message(fields={}, reply_subject=vc.connect_subject), ask)


async def client(t: rv.Transport, requests: int, messages: int) -> dict[str, object]:
    answer = await t.send_request(rv.Message("LAB.WHERE", {}), WAIT)
    inbox = answer["inbox"]
    direct = t.direct
    assert direct is not None
    # Until each side's HELLO is answered, its requests (or replies) rightly take the
    # daemon path; a HELLO or ACK lost to the lab's loss delays that proof by the
    # HELLO retry (0.5 s). So warm up until a round trip goes direct both ways,
    # then count the round trips that follow: those must all be direct.
    deadline = asyncio.get_running_loop().time() + WAIT
    while asyncio.get_running_loop().time() < deadline:
        sent, received = direct.sent, direct.received
        await t.send_request(rv.Message(inbox, {"n": -1}), WAIT)
        if direct.sent > sent and direct.received > received:
            break
        await asyncio.sleep(0.05)
    base_sent, base_received = direct.sent, direct.received
    for n in range(requests):
        reply = await t.send_request(rv.Message(inbox, {"n": n}), WAIT)
        assert reply["n"] == n
    rr_sent, rr_received = direct.sent - base_sent, direct.received - base_received
    end_sent, end_received = direct.sent, direct.received
    invitation = await t.send_request(rv.Message("LAB.VC.ASK", {}), WAIT)
    vc = rv.VcTransport.connect(t, invitation.reply_subject, silence=10.0, heartbeat=1.0)
    sums = vc.listen("VC.SUM")
    await vc.wait_connected(WAIT)
    for i in range(messages):
        await vc.send(rv.Message("VC.DATA", {"i": i}))
        if i % 50 == 49:
            await asyncio.sleep(0.01)
    await vc.send(rv.Message("VC.DATA", {"i": -1}))
    total = await sums.get(WAIT)
    result = {
        "rr_direct_sent": rr_sent,
        "rr_direct_received": rr_received,
        "vc_count": total["count"],
        "vc_ordered": total["ordered"],
        "vc_direct_sent": direct.sent - end_sent,
        "vc_direct_received": direct.received - end_received,
    }
    await vc.close()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("server", "client"))
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", required=True)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--messages", type=int, default=500)
    args = parser.parse_args()
    async with rv.Transport(f"{args.service}:", args.network) as t:
        if args.role == "server":
            await server(t)
        else:
            result = await client(t, args.requests, args.messages)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
