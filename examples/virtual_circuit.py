"""A virtual circuit between two processes, set up the way the spec recommends.

1. A (this process) asks for a circuit: a request on VC.REQUEST.
2. B (a child process) accepts: ``rv.VcTransport.accept(t)`` gives a terminal
   whose ``connect_subject`` is an inbox, and B invites A by replying with
   that inbox as the invitation's *reply subject*.
3. A connects: ``rv.VcTransport.connect(t, invitation.reply_subject)``.
4. Both test the connection the two-part way: listen for VC.CONNECTED, and
   also call ``wait_connected(0)`` in case the advisory came and went first.

Then A sends commands over the circuit and B answers on it (only the
opposite terminal ever sees them, in order), and A closes its terminal: B
gets an INFO VC.DISCONNECTED (a deliberate close, not a failure) and exits.

Run: python examples/virtual_circuit.py
"""

import asyncio
import subprocess
import sys

import rvasync as rv
from rvasync.testing import free_port


async def two_part_test(vc: rv.VcTransport, advisories: rv.Listener) -> None:
    """The spec's test of a new terminal: the advisory, or an immediate successful poll."""
    while True:
        try:
            await vc.wait_connected(0)  # part 2: connected already (advisory maybe missed)?
            return
        except TimeoutError:
            pass
        advisory = await advisories.get(10)  # part 1: wait for VC.CONNECTED
        if advisory.subject.endswith("VC.CONNECTED"):
            return


async def b_accepts(service: str) -> None:
    async with rv.Transport(service, description="circuit acceptor B") as t:
        requests = t.listen("VC.REQUEST")
        print("ready", flush=True)
        request = await requests.get(30)
        vc = rv.VcTransport.accept(t)
        advisories = vc.listen("_RV.*.SYSTEM.VC.>")
        commands = vc.listen("COMMAND.>")
        invitation = rv.Message(fields={"circuit": "welcome"}, reply_subject=vc.connect_subject)
        await t.send_reply(invitation, request)
        await two_part_test(vc, advisories)
        print("B: circuit connected", flush=True)
        async for command in commands:  # ends when the circuit ends
            answer = rv.Message(fields={"done": command["n"] * 10})
            await vc.send_reply(answer, command)
        ended = await advisories.get(10)
        while not ended.subject.endswith("VC.DISCONNECTED"):  # VC.CONNECTED, if still queued
            ended = await advisories.get(10)
        print(f"B: {ended.subject} ({ended['description']})", flush=True)
        await vc.close()


async def a_asks(service: str) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", service], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        async with rv.Transport(service, description="circuit connector A") as t:
            invitation = None
            while invitation is None:  # B's daemon may still be meeting ours: ask again
                try:
                    invitation = await t.send_request(rv.Message("VC.REQUEST", {}), 1.0)
                except rv.RequestTimeout:
                    pass
            vc = rv.VcTransport.connect(t, invitation.reply_subject)
            advisories = vc.listen("_RV.*.SYSTEM.VC.>")
            await two_part_test(vc, advisories)
            print("A: circuit connected")
            for n in range(1, 4):
                reply = await vc.send_request(rv.Message("COMMAND.RUN", {"n": n}), 5)
                print(f"A: command {n} -> {reply['done']}")
            await vc.close()
            print("A: closed my terminal")
        print(child.stdout.readline().strip())
        print(child.stdout.readline().strip())
        if child.wait(30) != 0:
            raise SystemExit("the child failed")
    finally:
        if child.poll() is None:
            child.kill()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(b_accepts(sys.argv[2]))
    else:
        asyncio.run(a_asks(str(free_port())))
