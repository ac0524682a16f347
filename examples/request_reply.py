"""Request/reply over an inbox on the intra-process transport.

A pricing service answers requests on PRICE.REQUEST; a client asks for two
symbols with send_request, and a third request for an unknown symbol gets
no answer and times out.

Run: python examples/request_reply.py
"""

import asyncio

import rvasync as rv

PRICES = {"ACME": 101.25, "GLOBEX": 47.5}


async def pricing_service(transport: rv.ProcessTransport, ready: asyncio.Event) -> None:
    async with transport.listen("PRICE.REQUEST") as requests:
        ready.set()
        async for request in requests:
            symbol = request["symbol"]
            if symbol in PRICES:
                await transport.send_reply(
                    rv.Message(fields={"symbol": symbol, "price": PRICES[symbol]}), request
                )


async def main() -> None:
    transport = rv.process_transport()
    ready = asyncio.Event()
    service = asyncio.create_task(pricing_service(transport, ready))
    await asyncio.wait_for(ready.wait(), timeout=5)

    for symbol in ("ACME", "GLOBEX"):
        reply = await transport.send_request(
            rv.Message("PRICE.REQUEST", {"symbol": symbol}), timeout=2
        )
        print(f"{reply['symbol']}: {reply['price']}")

    try:
        await transport.send_request(rv.Message("PRICE.REQUEST", {"symbol": "NOPE"}), timeout=0.2)
    except rv.RequestTimeout as exc:
        print(f"unknown symbol: {exc}")

    service.cancel()


if __name__ == "__main__":
    asyncio.run(main())
