"""Two networks joined by two routing daemons (rvrd) on loopback.

Network "paris" and network "tokyo" are two Rendezvous services (UDP ports)
that multicast does not join, standing in for two sites. Router "rparis" is
attached to paris, router "rtokyo" to tokyo, and the two are neighbors over
TCP. A program in Tokyo listens to PRICES.> and answers QUOTE requests; a
program in Paris publishes prices and asks for a quote. Only the subjects
listened to in Tokyo cross the link, and the reply finds its way back to the
Paris inbox through both routers.

Run: python examples/routing.py
"""

import asyncio

import rvasync as rv
from rvasync.testing import LOOPBACK, free_port


async def main() -> None:
    paris, tokyo = str(free_port()), str(free_port())

    rparis = rv.Router(
        {
            "router": {"name": "rparis", "listen": "127.0.0.1:0"},
            "network": [{"name": "paris", "service": paris, "network": LOOPBACK}],
            "neighbor": [{"name": "rtokyo"}],  # rtokyo dials in
        }
    )
    await rparis.start()
    rtokyo = rv.Router(
        {
            "router": {"name": "rtokyo"},
            "network": [{"name": "tokyo", "service": tokyo, "network": LOOPBACK}],
            "neighbor": [{"name": "rparis", "address": f"127.0.0.1:{rparis.port}", "cost": 10}],
        }
    )
    await rtokyo.start()

    async with (
        rv.Transport(paris, LOOPBACK) as in_paris,
        rv.Transport(tokyo, LOOPBACK) as in_tokyo,
    ):
        prices = in_tokyo.listen("PRICES.>")

        async def quote(request: rv.Message) -> None:
            await in_tokyo.send_reply(rv.Message(fields={"bid": 99.5, "from": "tokyo"}), request)

        in_tokyo.listen("QUOTE.ACME", callback=quote)

        # Interest travels from Tokyo's daemons to rtokyo, across the link, to rparis.
        await rparis.wait_for(
            lambda: {"PRICES.>", "QUOTE.ACME"} <= rparis.listening("paris"), timeout=10
        )
        print("rparis listens on paris to:", sorted(rparis.listening("paris")))

        await in_paris.send(rv.Message("PRICES.ACME", {"last": 100.25}))
        await in_paris.send(rv.Message("NEWS.ACME", {"text": "nobody in Tokyo listens"}))
        msg = await prices.get(10)
        print(f"tokyo got {msg.subject} last={msg['last']}")

        reply = await in_paris.send_request(rv.Message("QUOTE.ACME"), timeout=10)
        print(f"paris got a quote from {reply['from']}: bid={reply['bid']}")
        print(f"messages rparis forwarded: {rparis.core.stats.forwarded}")

    await rtokyo.close()
    await rparis.close()


if __name__ == "__main__":
    asyncio.run(main())
