"""The command loop of the programs the lab runs in its hosts (agent.py, scalepeer.py).

Such a program reads one JSON command a line from stdin and writes one JSON
answer a line to stdout: :func:`serve` runs that loop, handing each command
(its ``op`` and the other fields) to the program's handler, until stdin ends
or ``{"op": "exit"}`` comes. A command that raises is answered with
``{"failed": "..."}``: the program lives on.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]


def emit(obj: object) -> None:
    """One answer line."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def stdin_lines() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def serve(reader: asyncio.StreamReader, handle: Handler) -> None:
    """Answer each command line with what ``handle(op, fields)`` returns, until ``exit``."""
    while line := await reader.readline():
        command = json.loads(line)
        op = command.pop("op")
        if op == "exit":
            return
        try:
            emit(await handle(op, command))
        except Exception as exc:  # an answer, not a dead program
            emit({"failed": f"{type(exc).__name__}: {exc}"})
