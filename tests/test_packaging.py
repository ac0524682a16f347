"""The packaging checks can fail: setup.py's RVASYNC_REQUIRE_NATIVE and the wheel smoke test.

The wheel itself is built, installed into a clean environment and smoke-tested by
``bash .ci/wheel`` (a step of CI, docs/installing.md); these tests prove that the two
guards it relies on refuse what they must, cheaply: a compiler that fails (``CC=false``)
and a package imported from the source tree instead of an installed wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / ".ci" / "wheel_smoke.py"


def build_codec_with_failing_compiler(
    tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """``setup.py build_ext`` of the codec alone, into tmp_path, with a compiler that fails."""
    if not (ROOT / "rvasync_native" / "codec.pyx").is_file():
        pytest.skip("no Cython sources in this checkout")
    pytest.importorskip("Cython")
    environ = {k: v for k, v in os.environ.items() if k != "RVASYNC_REQUIRE_NATIVE"}
    environ.update(CC="false", LDSHARED="false", RVASYNC_NATIVE_ONLY="codec", **env)
    return subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(tmp_path / "lib"),
            "--build-temp",
            str(tmp_path / "temp"),
        ],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_failed_compile_falls_back_to_the_twins_by_default(tmp_path: Path) -> None:
    result = build_codec_with_failing_compiler(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "could not build rvasync_native.codec" in result.stderr
    assert not list((tmp_path / "lib").rglob("*.so"))


def test_require_native_makes_a_failed_compile_fail_the_build(tmp_path: Path) -> None:
    result = build_codec_with_failing_compiler(tmp_path, RVASYNC_REQUIRE_NATIVE="1")
    assert result.returncode != 0
    assert "could not build" not in result.stderr  # no quiet fallback
    assert "error" in result.stderr.lower()


def test_the_wheel_smoke_test_refuses_the_source_tree(tmp_path: Path) -> None:
    """Run against the checkout (not an installed wheel), the smoke test fails and says why."""
    result = subprocess.run(
        [sys.executable, str(SMOKE)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "not from the installed wheel" in result.stderr
