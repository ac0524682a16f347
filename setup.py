"""Build rvasync_native's Cython modules; without them the package installs pure-Python.

RVASYNC_NATIVE_ONLY=codec,subjects limits the build to those modules (handy while developing one).
RVASYNC_NO_NATIVE=1 skips the native build entirely.
RVASYNC_REQUIRE_NATIVE=1 makes a failed native build fail the build instead (release wheels, CI's
wheel check, cibuildwheel): a wheel that silently fell back to the twins is a packaging mistake.
"""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def native_required():
    return os.environ.get("RVASYNC_REQUIRE_NATIVE", "") not in ("", "0")


class OptionalBuildExt(build_ext):
    """A failed compile leaves the pure-Python twins in charge instead of failing the install."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # compiler missing, Cython error ...
            if native_required():
                raise
            print(
                f"rvasync: native build skipped ({exc}); using pure-Python twins", file=sys.stderr
            )

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            if native_required():
                raise
            print(
                f"rvasync: could not build {ext.name} ({exc}); its pure-Python twin is used",
                file=sys.stderr,
            )


def native_extensions():
    if os.environ.get("RVASYNC_NO_NATIVE"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if native_required():
            raise
        print("rvasync: Cython not available; installing pure-Python only", file=sys.stderr)
        return []
    only = {n for n in os.environ.get("RVASYNC_NATIVE_ONLY", "").split(",") if n}
    exts = []
    for path in sorted(glob.glob(os.path.join("rvasync_native", "*.pyx"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if only and name not in only:
            continue
        # rmframe calls zlib's crc32 directly (the zlib1g-dev headers; Python's own zlib).
        libraries = ["z"] if name == "rmframe" else []
        exts.append(
            Extension(
                f"rvasync_native.{name}", [path], extra_compile_args=["-O2"], libraries=libraries
            )
        )
    if not exts:
        return []
    return cythonize(
        exts,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
        },
        quiet=True,
    )


setup(ext_modules=native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
