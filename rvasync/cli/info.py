"""``rvasync info``: version, Python, and which hot paths run compiled."""

from __future__ import annotations

import argparse
import json
import platform

from rvasync import _accel

HOT_PATHS = _accel.HOT_PATHS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("info", help="show version and whether the native (Cython) modules are used")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import rvasync

    modules = {name: _accel.load(name).__name__ for name in HOT_PATHS}
    errors = {
        name: error for name in HOT_PATHS if (error := _accel.native_import_error(name)) is not None
    }
    report = {
        "rvasync": rvasync.__version__,
        "python": platform.python_version(),
        "native_enabled": rvasync.native_enabled(),
        "pure_forced": _accel.pure_forced(),
        "modules": modules,
        # Why a compiled module is not in use although RVASYNC_PURE did not ask for it.
        "native_errors": errors,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"rvasync {report['rvasync']} on Python {report['python']}")
    state = "native (Cython)" if report["native_enabled"] else "pure Python"
    if report["pure_forced"]:
        state += " (forced by RVASYNC_PURE)"
    print(f"hot paths: {state}")
    for name, module in modules.items():
        why = f"  (native not used: {errors[name]})" if name in errors else ""
        print(f"  {name:<10} {module}{why}")
    return 0
