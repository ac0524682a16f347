"""The rvasync command."""

import json
import subprocess
import sys

import pytest

from rvasync.cli import build_parser, main
from rvasync.cli._args import ArgumentParser
from rvasync.message import Message


def test_info_json(capsys):
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["modules"]) >= {"codec", "subjects"}
    assert isinstance(report["native_enabled"], bool)


def test_subject_validation(capsys):
    assert main(["subject", "A.B", "News.Sports"]) == 0
    assert main(["subject", "A..B"]) == 1
    assert "invalid" in capsys.readouterr().out


def test_subject_match(capsys):
    assert main(["subject", "--match", "RUN.*", "RUN.AWAY"]) == 0
    assert main(["subject", "--match", "RUN.*", "RUN.A.B"]) == 1
    assert main(["subject", "--match", "A.>.B", "A.C"]) == 2
    out, err = capsys.readouterr()
    assert "matches  RUN.AWAY" in out and "no match RUN.A.B" in out
    assert "rvasync subject:" in err


def test_decode(tmp_path, capsys):
    path = tmp_path / "m.bin"
    path.write_bytes(Message("A.B", {"n": 7}).to_bytes())
    assert main(["decode", str(path)]) == 0
    form = json.loads(capsys.readouterr().out)
    assert form["subject"] == "A.B"
    assert form["fields"][0]["value"] == 7


def test_decode_garbage_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\xc1\x00garbage")
    assert main(["decode", str(path)]) == 2
    assert "rvasync decode:" in capsys.readouterr().err
    assert main(["decode", str(tmp_path / "missing.bin")]) == 2


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "rvasync", "info"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "hot paths" in out.stdout


def test_no_command_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "rvasync: error: the following arguments are required: COMMAND "
        "(rvasync --help shows the usage)"
    ]


def test_an_argument_error_is_one_line_in_every_subcommand_and_tool(capsys):
    """Subcommands and their own subcommands (``rvasync cm send``) inherit the one-line error."""
    info = build_parser().parse_args(["info"]).command_parser
    assert isinstance(info, ArgumentParser)
    tools = info.add_subparsers(dest="tool")
    tool = tools.add_parser("deep")
    tool.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(["--n", "x"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "rvasync info deep: error: argument --n: invalid int value: 'x' "
        "(rvasync info deep --help shows the usage)"
    ]


def test_info_says_why_a_native_module_did_not_import(monkeypatch, capsys):
    """A compiled module that fails to import (a wheel for another Python, a missing
    library) falls back to its twin, and ``rvasync info`` shows the reason."""
    import importlib

    from rvasync import _accel

    real_import = importlib.import_module

    def failing(name, *args):
        if name == "rvasync_native.codec":
            raise ImportError("undefined symbol: PyFake_Thing")
        return real_import(name, *args)

    monkeypatch.setattr(_accel.importlib, "import_module", failing)
    monkeypatch.setattr(_accel, "_loaded", {})
    monkeypatch.setattr(_accel, "_native_used", {})
    monkeypatch.setattr(_accel, "_import_errors", {})
    monkeypatch.delenv("RVASYNC_PURE", raising=False)
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["modules"]["codec"] == "rvasync.fallback.codec"
    assert report["native_errors"]["codec"] == "ImportError: undefined symbol: PyFake_Thing"
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "native not used: ImportError: undefined symbol: PyFake_Thing" in out


def test_info_names_an_unbuilt_native_module(monkeypatch):
    from rvasync import _accel

    monkeypatch.setattr(_accel, "_import_errors", {})
    assert _accel.native_module("no_such_hot_path") is None
    assert _accel.native_import_error("no_such_hot_path").startswith("not built")
