"""Relay agents: certified delivery between two programs that keep dropping off the network.

LAPTOP_A sends price updates on PRICES.EUR through relay agent RA_B;
LAPTOP_D listens through relay agent RA_C (as in the specification's
picture, the two laptops use different agents). Both laptops disconnect
from their agents and reconnect several times while updates flow:

* while LAPTOP_A is away, its updates wait in its own process and go out
  when it reconnects;
* while LAPTOP_D is away, RA_C stores the updates for it (in its ledger
  file) and hands them over when it reconnects;
* confirmations travel back the same way, so LAPTOP_A's ledger empties only
  once LAPTOP_D has really received every update.

At the end every update arrived once and in order, and all are confirmed.
Everything runs in this one process over a loopback service (the agents
and the laptops would normally be separate programs: ``rvasync relay RA_B
--ledger ra_b.ledger`` runs an agent).

Run: python examples/relay_agent.py
"""

import asyncio
import tempfile
from pathlib import Path

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.protocol.relay import RelayTiming
from rvasync.testing import free_port

SUBJECT = "PRICES.EUR"
UPDATES = 40
# Shorter intervals than the defaults, so the example runs in a few seconds.
TIMING = RelayTiming(locate_interval=0.1, retry=0.3, keepalive=0.5, agent_timeout=3.0)


async def wait_for(predicate, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def main() -> None:
    service = str(free_port())
    with tempfile.TemporaryDirectory() as directory:
        async with (
            rv.Transport(service) as network,
            rv.RelayAgent(network, "RA_B", ledger=Path(directory, "ra_b.ledger"), timing=TIMING),
            rv.RelayAgent(network, "RA_C", ledger=Path(directory, "ra_c.ledger"), timing=TIMING),
        ):
            relay_events: list[str] = []
            network.listen(
                "_RV.INFO.RVCM.RELAY.>",
                callback=lambda msg: relay_events.append(msg.subject.split(".")[4]),
            )
            sender = CmTransport(network, "LAPTOP_A", relay_agent="RA_B", relay_timing=TIMING)
            listener_cm = CmTransport(
                network, "LAPTOP_D", relay_agent="RA_C", require_old=True, relay_timing=TIMING
            )
            # Anticipate the listener: every update is certified, even the first.
            await sender.add_listener("LAPTOP_D", SUBJECT)
            prices = listener_cm.listen(SUBJECT)
            await wait_for(lambda: relay_events.count("CONNECTED") >= 2)
            print("both laptops connected to their relay agents")

            received: list[int] = []

            async def consume() -> None:
                async for msg in prices:
                    received.append(msg["n"])

            consumer = asyncio.create_task(consume())
            # Who goes offline after which update (and comes back 4 updates later).
            schedule = {5: "A", 10: "D", 17: "A", 22: "D", 28: "A", 31: "D"}
            away: dict[str, int] = {}
            for n in range(1, UPDATES + 1):
                await sender.send(rv.Message(SUBJECT, {"n": n, "price": 1.08 + n / 1000}))
                for who, since in list(away.items()):
                    if n - since == 4:
                        cm = sender if who == "A" else listener_cm
                        await cm.connect_relay()  # returns at once; RELAY.CONNECTED follows
                        del away[who]
                        print(f"  after update {n}: LAPTOP_{who} reconnects")
                if n in schedule:
                    who = schedule[n]
                    cm = sender if who == "A" else listener_cm
                    await cm.disconnect_relay()  # returns at once; RELAY.DISCONNECTED follows
                    away[who] = n
                    print(
                        f"  after update {n}: LAPTOP_{who} disconnects "
                        f"(LAPTOP_D has {len(received)} updates so far)"
                    )
                await asyncio.sleep(0.05)
            for who in away:
                await (sender if who == "A" else listener_cm).connect_relay()
            await wait_for(lambda: len(received) == UPDATES)
            await listener_cm.close()  # the last update counts as taken; confirmations go out
            await wait_for(lambda: sender.review_ledger(SUBJECT)[0].total_messages == 0)
            consumer.cancel()
            assert received == list(range(1, UPDATES + 1)), received
            print(f"LAPTOP_D received all {UPDATES} updates once, in order")
            print("LAPTOP_A's ledger holds nothing unconfirmed")
            print(
                f"relay advisories: {relay_events.count('CONNECTED')} RELAY.CONNECTED, "
                f"{relay_events.count('DISCONNECTED')} RELAY.DISCONNECTED"
            )
            await sender.close()


if __name__ == "__main__":
    asyncio.run(main())
