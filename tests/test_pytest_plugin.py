"""rvasync's pytest plugin under pytest-asyncio's strict and auto modes (docs/testing.md).

Each test runs pytest in a subprocess (pytester), so the plugin is loaded as a
user's suite loads it, through its entry point, with the mode and options
given on the command line:

* the plugin's own suite (tests/plugin_suite, strict by its ini file) in
  strict mode, in auto mode, and with the session loop scope as default;
* every Python example of docs/testing.md, written out as a test file, in
  both modes;
* without pytest-asyncio: the synchronous fixtures work, the asynchronous ones
  fail saying what they need.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

HERE = Path(__file__).resolve().parent
SUITE = HERE / "plugin_suite"
DOC = HERE.parent / "docs" / "testing.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
#: Seconds one inner pytest run may take (it starts daemons, routers, a TLS daemon).
RUN_TIMEOUT = 300

#: run -> (options, the suite's files it runs).
SUITE_RUNS = {
    "strict": ([], ["check_fixtures.py", "check_loop_scopes.py"]),
    "auto": (["-o", "asyncio_mode=auto"], ["check_fixtures.py", "check_loop_scopes.py"]),
    "session-loop-default": (
        ["-o", "asyncio_default_test_loop_scope=session"],
        ["check_loop_scopes.py"],
    ),
}


def _tests_in(files: list[str]) -> int:
    text = "".join((SUITE / name).read_text() for name in files)
    # Each parametrized test counts twice (n in [1, 2]).
    return len(re.findall(r"^\s*async def test_", text, re.M)) + text.count("[1, 2]")


@pytest.mark.parametrize(("options", "files"), SUITE_RUNS.values(), ids=SUITE_RUNS.keys())
def test_the_plugin_suite_passes(
    pytester: pytest.Pytester, options: list[str], files: list[str]
) -> None:
    result = pytester.runpytest_subprocess(
        "-c", str(SUITE / "pytest.ini"), "-p", "no:randomly", "-p", "no:cacheprovider",
        *options, *(str(SUITE / name) for name in files), timeout=RUN_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=_tests_in(files))


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_the_docs_examples_pass_as_written(pytester: pytest.Pytester, mode: str) -> None:
    assert len(EXAMPLES) >= 5
    for i, example in enumerate(EXAMPLES):
        pytester.makepyfile(**{f"test_doc_example_{i}": example})
    pytester.makeini(
        f"[pytest]\nasyncio_mode = {mode}\nasyncio_default_fixture_loop_scope = function\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", timeout=RUN_TIMEOUT)
    result.assert_outcomes(passed=len(EXAMPLES))


def test_without_pytest_asyncio_the_async_fixtures_say_what_they_need(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pytest_asyncio that cannot be imported, and pytest-asyncio's own plugin kept out.
    blocker = pytester.mkdir("no_pytest_asyncio")
    (blocker / "pytest_asyncio.py").write_text("raise ImportError('not installed (test)')\n")
    monkeypatch.setenv("PYTHONPATH", f"{blocker}:{Path(__file__).resolve().parents[1]}")
    pytester.makepyfile(
        test_sync="""
        def test_sync_fixtures(rv_service, rv_daemon):
            assert rv_service[1] == "127.0.0.1" and rv_daemon.startswith("127.0.0.1:")

        def test_async_fixture(rv_transport):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:asyncio", "-p", "no:randomly", timeout=120)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the rv_transport fixture needs pytest-asyncio*"])
