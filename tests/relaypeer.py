"""A relay agent process with fast timing, for the kill -9 tests (test_relay_processes.py).

``python tests/relaypeer.py NAME --ledger PATH --service S --network N``
prints ``ready`` once serving and exits 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rvasync as rv
from rvasync.protocol.relay import RelayTiming

TIMING = RelayTiming(
    locate_interval=0.2, retry=0.5, keepalive=0.5, agent_timeout=2.0, session_timeout=3.0
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--network", default=None)
    args = parser.parse_args()

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with (
            rv.Transport(args.service, args.network) as transport,
            rv.RelayAgent(transport, args.name, ledger=args.ledger, timing=TIMING),
        ):
            print("ready", flush=True)
            await stop.wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
