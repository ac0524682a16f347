"""A current value cache peer for the lab: one role per process, driven by argv.

``cache SERVICE NETWORK STORE``: a CurrentValueCache on ``LAB.>`` with a store
file; prints ``ready N`` (N subjects restored) and runs until killed.
``publish SERVICE NETWORK SUBJECTS VERSIONS``: every version of every subject
``LAB.S<n>`` (field ``v``), then ``done``.
``fetch SERVICE NETWORK SUBJECTS VERSIONS``: asks the caches until every
subject answers with its last version (bounded), then prints the answer as
JSON (subject -> version).
``join SERVICE NETWORK SUBJECTS VERSIONS``: a late-joining listener,
``listen("LAB.>", retained=True)``, until every subject has reached its last
version (bounded) and one quiet second more; prints every version it was
given, per subject, as JSON (subject -> list of versions).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time

import rvasync as rv


async def cache(service: str, network: str, store: str) -> None:
    async with (
        rv.Transport(service, network) as t,
        rv.CurrentValueCache(t, "LAB.>", store=store) as c,
    ):
        print(f"ready {len(c)}", flush=True)
        await asyncio.Event().wait()


async def publish(service: str, network: str, subjects: int, versions: int) -> None:
    async with rv.Transport(service, network) as t:
        for version in range(1, versions + 1):
            for n in range(subjects):
                await t.send(rv.Message(f"LAB.S{n}", {"v": version}))
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # let the reliable protocol repair the last losses
        print("done", flush=True)


async def fetch(service: str, network: str, subjects: int, versions: int) -> None:
    expected = {f"LAB.S{n}": versions for n in range(subjects)}
    got: dict[str, int] = {}
    deadline = time.monotonic() + 60
    async with rv.Transport(service, network) as t:
        while time.monotonic() < deadline:
            with contextlib.suppress(rv.RequestTimeout):
                answer = await t.request_retained("LAB.>", timeout=5.0)
                subjects_seen = [m.subject for m in answer]
                assert len(subjects_seen) == len(set(subjects_seen)), "a subject twice"
                got = {m.subject: m["v"] for m in answer}
                if got == expected:
                    break
            await asyncio.sleep(0.2)
    print(json.dumps(got), flush=True)


async def join(service: str, network: str, subjects: int, versions: int) -> None:
    got: dict[str, list[int]] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    async with rv.Transport(service, network) as t:
        listener = t.listen("LAB.>", retained=True)
        complete = False
        while loop.time() < deadline:
            try:
                msg = await listener.get(1.0 if complete else deadline - loop.time())
            except TimeoutError:
                break
            got.setdefault(msg.subject or "", []).append(msg["v"])
            complete = len(got) == subjects and all(v[-1] == versions for v in got.values())
    print(json.dumps(got), flush=True)


def main() -> None:
    role, service, network, *rest = sys.argv[1:]
    if role == "cache":
        asyncio.run(cache(service, network, rest[0]))
    elif role == "publish":
        asyncio.run(publish(service, network, int(rest[0]), int(rest[1])))
    elif role == "join":
        asyncio.run(join(service, network, int(rest[0]), int(rest[1])))
    else:
        asyncio.run(fetch(service, network, int(rest[0]), int(rest[1])))


if __name__ == "__main__":
    main()
