"""A small file system that fills up, for the full-disk tests (root only).

``small_filesystem(parent, size)`` mounts a tmpfs of ``size`` (``"2m"``) on a
new directory under ``parent`` and unmounts it when the block ends; the
test is skipped when it cannot mount (not root, no tmpfs). ``fill(directory)``
takes the room that is left, and ``free(directory)`` gives it back, so a
test decides exactly when the disk is full.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

_FILLER = "filler.bin"


@contextlib.contextmanager
def small_filesystem(parent: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``parent/smallfs`` for the duration of the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system for the full-disk test needs root")
    mount = parent / "smallfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def fill(directory: Path, keep: int = 0) -> int:
    """Take every free byte of ``directory``'s file system but ``keep``; bytes taken."""
    path = directory / _FILLER
    taken = path.stat().st_size if path.exists() else 0
    with open(path, "ab") as out:
        block = bytes(4096)
        while True:
            stats = os.statvfs(directory)
            free = stats.f_bavail * stats.f_frsize
            if free <= keep:
                break
            try:
                out.write(block[: max(1, min(len(block), free - keep))])
                out.flush()
            except OSError:
                break
    return path.stat().st_size - taken


def free(directory: Path) -> None:
    """Give back what :func:`fill` took."""
    with contextlib.suppress(FileNotFoundError):
        (directory / _FILLER).unlink()
