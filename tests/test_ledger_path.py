"""check_ledger_path: the ledger argument of a CM transport, validated with a message that fits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rvasync as rv
from rvasync.cmdriver.ledgerfile import check_ledger_path


class _BytesPath:
    """An os.PathLike whose __fspath__ gives bytes."""

    def __fspath__(self) -> bytes:
        return b"/tmp/joe.ledger"


def test_str_and_pathlike_paths_are_strings(tmp_path: Path) -> None:
    assert check_ledger_path(str(tmp_path / "a")) == str(tmp_path / "a")
    assert check_ledger_path(tmp_path / "b") == os.fspath(tmp_path / "b")


@pytest.mark.parametrize(
    ("ledger", "match"),
    [
        (b"/tmp/joe.ledger", "not bytes"),
        (42, "not int"),
        ("", "must not be empty"),
        # This one used to be reported as an empty path.
        (_BytesPath(), "not _BytesPath of bytes"),
    ],
)
def test_bad_ledgers_are_named(ledger: object, match: str) -> None:
    with pytest.raises(rv.InvalidArgument, match=match):
        check_ledger_path(ledger)


async def test_a_ledger_in_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    """Issue #24 item 5: not a raw FileNotFoundError from deep inside the driver."""
    from rvasync.cmdriver import CmTransport

    async with rv.Transport() as t:
        with pytest.raises(rv.InvalidArgument, match="does not exist; create it first"):
            await CmTransport(t, "JOE", ledger=tmp_path / "missing" / "joe.ledger").open()
