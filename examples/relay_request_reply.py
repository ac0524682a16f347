"""Relay agents: a request answered while the requester was off the network.

LAPTOP_A asks a quote service for a price with ``send_request`` through its
relay agent RA_B and then disconnects from the agent (the laptop goes
offline). The service answers a moment later. Without reply name
substitution that answer would go to LAPTOP_A's inbox and be lost; RA_B
sent the request with a surrogate inbox of its own instead, so the answer
waits at RA_B and reaches LAPTOP_A's ``send_request`` when the laptop
reconnects, with LAPTOP_A's own inbox as its subject.

The service itself sits behind a relay agent too (RA_C) and answers with a
certified reply (``cm.send_reply``): replies work whichever side has the
agent.

Run: python examples/relay_request_reply.py
"""

import asyncio
import tempfile
from pathlib import Path

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.protocol.relay import RelayTiming
from rvasync.testing import free_port

SUBJECT = "QUOTES.EUR"
# Shorter intervals than the defaults, so the example runs in a few seconds.
# reply_lifetime: how long RA_B relays answers to a request (one hour here too).
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
            events: list[str] = []
            network.listen("_RV.INFO.RVCM.RELAY.>", callback=lambda msg: events.append(msg.subject))
            laptop = CmTransport(network, "LAPTOP_A", relay_agent="RA_B", relay_timing=TIMING)
            quotes = CmTransport(network, "QUOTER", relay_agent="RA_C", relay_timing=TIMING)
            questions = quotes.listen(SUBJECT)
            await wait_for(lambda: len(events) >= 2)
            await asyncio.sleep(0.3)  # RA_C listens for the service from now on
            print("LAPTOP_A and the quote service are connected to their relay agents")

            asked, answered = asyncio.Event(), asyncio.Event()

            async def serve() -> None:
                question = await questions.get(20.0)
                print(f"service: got a request, reply subject {question.reply_subject}")
                asked.set()
                await answered.wait()  # answer only once LAPTOP_A is offline
                await quotes.send_reply(rv.Message(None, {"price": 1.0842}), question)
                print("service: answered while LAPTOP_A is offline")

            server = asyncio.create_task(serve())
            request = asyncio.create_task(
                laptop.send_request(rv.Message(SUBJECT, {"pair": "EUR/USD"}), timeout=30.0)
            )
            await asyncio.wait_for(asked.wait(), 20.0)  # it left through RA_B
            await laptop.disconnect_relay()
            await wait_for(lambda: any(".DISCONNECTED." in s for s in events))
            print("LAPTOP_A disconnected from RA_B (offline)")
            answered.set()
            await server
            await asyncio.sleep(0.5)
            assert not request.done(), "no answer can reach an offline laptop"
            print("RA_B holds the answer for LAPTOP_A")
            await laptop.connect_relay()
            reply = await asyncio.wait_for(request, 20.0)
            print(f"LAPTOP_A back online: price {reply['price']} on its inbox {reply.subject}")
            assert reply["price"] == 1.0842 and reply.subject.startswith("_INBOX.")
            await laptop.close()
            await quotes.close()


if __name__ == "__main__":
    asyncio.run(main())
