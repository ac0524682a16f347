"""The code examples in docs/messages.md run and their asserts hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rvasync
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Field, Message
from rvasync.rvdatetime import DateTime

DOC = Path(__file__).resolve().parent.parent / "docs" / "messages.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


@pytest.fixture(autouse=True)
def message_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples use ``rv.Message`` etc.; provide them if the package does not export them."""
    for name, value in {
        "CmLabel": CmLabel,
        "DateTime": DateTime,
        "Field": Field,
        "FieldType": FieldType,
        "Message": Message,
    }.items():
        if not hasattr(rvasync, name):
            monkeypatch.setattr(rvasync, name, value, raising=False)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_example_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, str(DOC), "exec"), {"__name__": "__docs__"})
    printed = capsys.readouterr().out
    for comment in re.findall(r"print\(exc\)\s+# (.+)", code):
        expected = comment.split("...")[0].strip()
        assert expected in printed, (expected, printed)
