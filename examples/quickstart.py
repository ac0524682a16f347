"""Quick start: publish messages on subjects and listen with a wildcard, in one process.

Run: python examples/quickstart.py
"""

import asyncio

import rvasync as rv


async def main() -> None:
    transport = rv.process_transport()

    async with transport.listen("ORDERS.>") as orders:
        for n, (region, qty) in enumerate([("EU", 5), ("US", 12), ("APAC", 7)], start=1):
            msg = rv.Message(f"ORDERS.{region}.NEW", {"order_id": n, "qty": qty})
            msg.add("price", 19.5, rv.FieldType.F32)
            await transport.send(msg)

        for _ in range(3):
            msg = await asyncio.wait_for(orders.get(), timeout=5)
            print(f"{msg.subject:<16} order {msg['order_id']} qty {msg['qty']} at {msg['price']}")


if __name__ == "__main__":
    asyncio.run(main())
