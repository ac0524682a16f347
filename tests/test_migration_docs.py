"""docs/migrating-from-rendezvous.md names only what exists, and the events example of
docs/queues.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rvasync as rv

DOCS = Path(__file__).resolve().parent.parent / "docs"
GUIDE = (DOCS / "migrating-from-rendezvous.md").read_text(encoding="utf-8")

#: The variable names the guide uses, and the class each stands for.
OWNERS = {
    "msg": rv.Message,
    "t": rv.Transport,
    "cm": rv.CmTransport,
    "q": rv.Queue,
    "group": rv.QueueGroup,
    "timer": rv.Timer,
    "io_event": rv.IOEvent,
    "event": rv.TimerEvent,
    "member": rv.FtMember,
    "listener": rv.CmListener,
    "vc": rv.VcTransport,
    "daemon": rv.Daemon,
}


def test_every_rv_name_in_the_guide_exists() -> None:
    names = set(re.findall(r"\brv\.([A-Za-z_]\w*)", GUIDE))
    assert names, "the guide names rv.* calls"
    missing = sorted(name for name in names if not hasattr(rv, name))
    assert not missing


def test_every_method_in_the_guide_exists() -> None:
    checked = 0
    for owner, attribute in re.findall(r"`(?:await )?([a-z_]+)\.([a-z_]\w*)", GUIDE):
        cls = OWNERS.get(owner)
        if cls is None:
            continue
        assert hasattr(cls, attribute), f"{owner}.{attribute} ({cls.__name__})"
        checked += 1
    assert checked >= 30


def test_every_tool_in_the_guide_has_a_command() -> None:
    from rvasync.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    commands = set(sub.choices)
    for command in re.findall(r"`rvasync ([a-z]+)", GUIDE):
        assert command in commands, command


def test_the_events_example_of_queues_md_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "queues.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "IOEvent" in b)
    exec(compile(block, "docs/queues.md", "exec"), {"__name__": "__docs__"})
    out = capsys.readouterr().out
    assert "read b'hello'" in out and "[1, 2]" in out
    ticks = int(re.search(r"message 1 after (\d+) ticks", out).group(1))
    assert ticks >= 2  # the timer queue's priority put every tick before the message
