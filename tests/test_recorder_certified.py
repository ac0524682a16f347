"""Certified recording: ``rvasync record --certified`` killed with SIGKILL loses nothing.

A persistent certified sender in this process (ledger file, in-process
daemon on a loopback service) sends numbered orders while the recorder, a
process of its own with its own ledger, is killed -9 mid-stream and started
again. The recorder confirms a message only after the file holding it is
committed, so whatever the kill interrupted was unconfirmed and the sender
redelivers it: every sequence number ends up in a committed file (some
perhaps twice: capture is at-least-once, (sender, sequence) identifies a
message).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import pytest

pytest.importorskip("pyarrow", reason="rvasync record needs pyarrow (pip install 'rvasync[spark]')")

from rvasync.message import Message
from rvasync.spark import capture
from rvasync.testing import free_port

SUBJECT = "ORDERS.CERTIFIED"
TOTAL = 300
TIMEOUT = 60


class RecorderProcess:
    def __init__(self, *args: str) -> None:
        self.args = args
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rvasync", "record", *self.args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stderr is not None
        async with asyncio.timeout(TIMEOUT):
            line = await self.proc.stderr.readline()
        assert b"recording" in line, line

    async def stderr_so_far(self) -> bytes:
        """What the recorder wrote on stderr until now (for a failure's message)."""
        assert self.proc is not None and self.proc.stderr is not None
        chunks = []
        with contextlib.suppress(TimeoutError):
            while chunk := await asyncio.wait_for(self.proc.stderr.read(65536), 0.5):
                chunks.append(chunk)
        return b"".join(chunks)

    async def signal(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        async with asyncio.timeout(TIMEOUT):
            await self.proc.communicate()
        return self.proc.returncode


def recorded(directory) -> list[tuple[str | None, int | None]]:
    labels = []
    for path in capture.committed_files(directory, warn=False):
        table = capture.open_committed(path).read(columns=["sender", "sequence"])
        labels.extend(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))
    return labels


async def test_certified_recording_survives_kill_9(tmp_path):
    import rvasync as rv
    from rvasync.cmdriver import CmTransport

    service = str(free_port())
    directory = tmp_path / "capture"
    recorder = RecorderProcess(
        SUBJECT, "--to", str(directory), "--service", service, "--roll-interval", "0.3",
        "--certified", "CAPTURE.REC", "--ledger", str(tmp_path / "recorder.ledger"),
    )  # fmt: skip
    await recorder.start()
    async with (
        rv.Transport(service) as transport,
        CmTransport(transport, "ORDER.DESK", ledger=str(tmp_path / "sender.ledger")) as cm,
    ):
        # The recorder is certified from the first order on, even while it is down.
        await cm.add_listener("CAPTURE.REC", SUBJECT)
        for number in range(1, TOTAL + 1):
            await cm.send(Message(SUBJECT, {"number": number}))
            await asyncio.sleep(0.002)
            if number == TOTAL // 3:
                assert await recorder.signal(signal.SIGKILL) == -signal.SIGKILL
            if number == TOTAL // 2:
                await recorder.start()  # same name and ledger: the sender redelivers
        try:
            async with asyncio.timeout(TIMEOUT):
                while {seq for _, seq in recorded(directory)} != set(range(1, TOTAL + 1)):
                    await asyncio.sleep(0.2)
        except TimeoutError:
            seen = {seq for _, seq in recorded(directory)}
            missing = sorted(set(range(1, TOTAL + 1)) - seen)
            reviews = [(r.subject, r.listeners) for r in cm.review_ledger(SUBJECT)]
            stderr = await recorder.stderr_so_far()
            raise AssertionError(
                f"not recorded after {TIMEOUT} s: {missing[:40]} ({len(missing)} missing; "
                f"uncertified copies: {None in seen}); sender's ledger: {reviews}; "
                f"recorder's stderr: {stderr[-2000:]!r}"
            ) from None
        assert await recorder.signal(signal.SIGTERM) == 0
    labels = recorded(directory)
    assert {sender for sender, _ in labels} == {"ORDER.DESK"}
    assert sorted(set(seq for _, seq in labels)) == list(range(1, TOTAL + 1))
    # Duplicates are at most what the kill left unconfirmed.
    assert len(labels) - TOTAL < TOTAL // 3


async def test_messages_are_confirmed_only_once_committed(tmp_path):
    import rvasync as rv
    from rvasync.cmdriver import CmTransport
    from rvasync.spark.recorder import Recorder

    service = str(free_port())

    def confirmed(cm) -> int:
        (review,) = cm.review_ledger(SUBJECT)
        (listener,) = review.listeners
        return listener.last_confirmed

    async with (
        rv.Transport(service) as sending,
        rv.Transport(service) as receiving,
        CmTransport(sending, "ORDER.DESK") as cm,
        CmTransport(
            receiving, "CAPTURE.REC", ledger=str(tmp_path / "rec.ledger"), require_old=True
        ) as rec,
    ):
        await cm.add_listener("CAPTURE.REC", SUBJECT)
        async with Recorder(rec, SUBJECT, tmp_path / "capture", roll_interval=3600) as recorder:
            assert recorder.certified
            for number in range(1, 21):
                await cm.send(Message(SUBJECT, {"number": number}))
            async with asyncio.timeout(TIMEOUT):
                while recorder.stats.received < 20:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # time enough for a confirmation to travel, if one were sent
            assert confirmed(cm) == 0  # received, written, but not committed: not confirmed
            await recorder.flush()
            async with asyncio.timeout(TIMEOUT):
                while confirmed(cm) != 20:
                    await asyncio.sleep(0.05)
    assert [seq for _, seq in recorded(tmp_path / "capture")] == list(range(1, 21))
