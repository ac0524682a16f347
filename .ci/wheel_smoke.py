"""Smoke test of an installed rvasync wheel (CI's wheel step and cibuildwheel's test-command).

Run it with the interpreter of a virtual environment that has the wheel installed (not editable),
from a directory outside the source tree, so that ``import rvasync`` can only find the installed
copy. It fails, naming the problem, when the package imports from the source tree, a compiled
hot path is missing from the wheel (the build fell back to the pure-Python twins), a packaged
file or entry point is missing, or a message does not make the round trip.

Run: python .ci/wheel_smoke.py   (from any directory, with the wheel's environment active)
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import sys
from pathlib import Path


def fail(problem: str) -> None:
    print(f"wheel smoke test: {problem}", file=sys.stderr)
    raise SystemExit(1)


def check_installed_copy() -> None:
    import rvasync

    where = Path(rvasync.__file__).resolve()
    if "site-packages" not in where.parts:
        fail(f"rvasync was imported from {where}, not from the installed wheel")
    if not (where.parent / "py.typed").is_file():
        fail("rvasync/py.typed is missing from the wheel")
    print(f"rvasync {rvasync.__version__} imported from {where.parent}")


def check_native() -> None:
    if os.environ.get("RVASYNC_PURE"):
        fail("RVASYNC_PURE is set: the compiled modules would not be checked")
    from rvasync import _accel

    for name in _accel.HOT_PATHS:
        module = _accel.load(name)
        origin = getattr(module, "__file__", "") or ""
        if not module.__name__.startswith("rvasync_native.") or not origin.endswith(".so"):
            fail(f"hot path {name} runs {module.__name__} ({origin}), not a compiled module")
    print(f"compiled hot paths: {', '.join(_accel.HOT_PATHS)}")


def check_metadata() -> None:
    dist = importlib.metadata.distribution("rvasync")
    plugins = [ep for ep in dist.entry_points if ep.group == "pytest11"]
    if [ep.value for ep in plugins] != ["rvasync.pytest_plugin"]:
        fail(f"the pytest11 entry point is {plugins}, expected rvasync.pytest_plugin")
    scripts = [ep for ep in dist.entry_points if ep.group == "console_scripts"]
    if [ep.name for ep in scripts] != ["rvasync"]:
        fail(f"the console scripts are {scripts}, expected rvasync")
    files = {str(f) for f in dist.files or ()}
    if "pyspark_rvasync.py" not in files:
        fail("pyspark_rvasync.py (PySpark's data source discovery module) is not in the wheel")
    print("entry points and packaged files present")


async def round_trip() -> None:
    import rvasync as rv

    transport = rv.process_transport()
    sent = rv.Message("SMOKE.WHEEL", {"n": 1, "nested": {"ok": True}})
    sent.add("price", 19.5, rv.FieldType.F32)
    async with transport.listen("SMOKE.>") as listener:
        await transport.send(sent)
        got = await asyncio.wait_for(listener.get(), timeout=5)
    again = rv.Message.from_bytes(got.to_bytes())
    if again["n"] != 1 or again["price"] != 19.5 or again["nested"]["ok"] is not True:
        fail(f"the message did not survive the round trip: {again}")
    print(f"round trip: {again.subject} {again['n']} {again['price']}")


def main() -> int:
    check_installed_copy()
    check_native()
    check_metadata()
    asyncio.run(round_trip())
    print("wheel smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
