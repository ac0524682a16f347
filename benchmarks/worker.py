"""Entry point of every measured process: ``python -m benchmarks.worker SPEC_JSON``.

The spec names the scenario, system, variant, role and index, and carries the
parameters and the environment (broker URL, ports ...). The worker runs the
role's coroutine under uvloop when it is installed (for every system alike), and
talks to the runner with ``@@bench`` JSON lines on stdout (``ready``, ``result``,
``error``) and plain lines on stdin (``go``, ``stop``; end of input means stop).
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Coroutine
from typing import Any

from benchmarks.interfaces import Adapter
from benchmarks.procs import PROTOCOL_PREFIX
from benchmarks.registry import Params, Variant, discover


def emit(event: str, data: dict[str, Any] | None = None, **extra: Any) -> None:
    """Print one protocol line for the runner."""
    line = json.dumps({"event": event, "data": data or {}, **extra})
    sys.stdout.write(PROTOCOL_PREFIX + line + "\n")
    sys.stdout.flush()


class WorkerContext:
    """What a role coroutine gets: its parameters, adapter, index and the runner's signals."""

    def __init__(
        self,
        *,
        params: Params,
        adapter: Adapter,
        role: str,
        index: int,
        env: dict[str, Any],
    ) -> None:
        self.params = params
        self.adapter = adapter
        self.role = role
        self.index = index
        self.env = env
        self._commands: asyncio.Queue[str] | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def _start_reader(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        self._commands = asyncio.Queue()

        async def pump() -> None:
            assert self._commands is not None
            while True:
                line = await reader.readline()
                if not line:
                    self._commands.put_nowait("stop")
                    return
                self._commands.put_nowait(line.decode().strip())

        self._reader_task = asyncio.create_task(pump())

    async def ready(self) -> None:
        """Tell the runner this process is set up."""
        emit("ready")

    async def _next_command(self) -> str:
        assert self._commands is not None
        return await self._commands.get()

    async def go(self) -> None:
        """Wait for the runner's start signal (all processes are ready).

        A stop (or the runner's end of input) before it means the repetition was
        abandoned: raise rather than measure for nobody.
        """
        while (command := await self._next_command()) != "go":
            if command == "stop":
                raise RuntimeError("the runner stopped this worker before 'go'")

    async def stopped(self) -> None:
        """Wait until the runner says stop (a passive role's end)."""
        while await self._next_command() != "stop":
            pass


async def _main(spec: dict[str, Any]) -> dict[str, Any]:
    registry = discover()
    scenario = registry.scenario(spec["scenario"])
    adapter_cls = registry.adapter(spec["system"], scenario.capability)
    variant = next(
        (v for v in adapter_cls.variants() if v.name == spec.get("variant", "")),
        Variant(),
    )
    params: Params = spec["params"]
    index = int(spec.get("index", 0))
    adapter = adapter_cls(params, spec.get("env") or {}, variant, index)
    ctx = WorkerContext(
        params=params,
        adapter=adapter,
        role=spec["role"],
        index=index,
        env=spec.get("env") or {},
    )
    await ctx._start_reader()
    role = scenario.roles[spec["role"]]
    limit = float(params["timeout"])
    try:
        async with asyncio.timeout(limit) as scope:
            return await role(ctx)
    except TimeoutError as exc:
        if scope.expired():
            raise TimeoutError(
                f"role {spec['role']!r} of {scenario.name} on {spec['system']} "
                f"did not finish within {limit:.0f}s"
            ) from exc
        raise
    finally:
        if ctx._reader_task is not None:
            ctx._reader_task.cancel()


def _run(coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    """Run the role described by ``argv[0]`` (JSON); exit status 0 on success."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m benchmarks.worker SPEC_JSON\n")
        return 2
    try:
        result = _run(_main(json.loads(args[0])))
    except BaseException as exc:  # reported to the runner, whatever it was
        detail = "".join(traceback.format_exception(exc)[-6:])
        emit("error", error=f"{type(exc).__name__}: {exc}\n{detail}")
        traceback.print_exc()
        return 1
    emit("result", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
