"""A circuit peer process for the two-process circuit tests (the spec's invitation paradigm).

Run ``python tests/vcpeer.py SERVICE NETWORK HEARTBEAT SILENCE``. It opens a
network transport (its own in-process daemon), listens for requests on
``VC.REQUEST``, answers the first with an invitation whose reply subject is a
new accept terminal's connect subject, prints ``READY`` first and then one
JSON line per event: ``{"connected": true}``, ``{"advisory": subject,
"description": ...}`` for VC.DISCONNECTED. Every ``ECHO.<n>`` message arriving on the circuit is
sent back on it as ``BACK.<n>`` with the same fields; an ``EXIT`` message
closes the terminal on purpose and ends the process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rvasync as rv


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main() -> None:
    service, network = sys.argv[1], sys.argv[2]
    heartbeat, silence = float(sys.argv[3]), float(sys.argv[4])
    async with rv.Transport(service, network) as transport:
        requests = transport.listen("VC.REQUEST")
        emit({"ready": os.getpid()})
        request = await requests.get()
        vc = rv.VcTransport.accept(transport, heartbeat=heartbeat, silence=silence)
        advisories = vc.listen("_RV.*.SYSTEM.VC.DISCONNECTED")
        data = vc.listen(">")
        invitation = rv.Message(fields={"hello": "connect to my reply subject"})
        invitation.reply_subject = vc.connect_subject
        await transport.send_reply(invitation, request)

        async def report() -> None:
            async for adv in advisories:
                emit({"advisory": adv.subject, "description": adv.get("description")})

        reporter = asyncio.create_task(report())
        await vc.wait_connected(30)
        emit({"connected": True})
        async for msg in data:
            if msg.subject == "EXIT":
                await vc.close()
                break
            if msg.subject.startswith("ECHO."):
                back = rv.Message("BACK." + msg.subject[5:], {"i": msg["i"]})
                await vc.send(back)
        await asyncio.wait_for(reporter, 5)
        emit({"exit": True})


asyncio.run(main())
