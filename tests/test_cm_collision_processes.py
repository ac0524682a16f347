"""A deploy overlap: two live processes with one persistent name, each with its own ledger.

Issue 44 item 2. The old instance A of JOE_PER is sending to SUE_PER when
the new instance B starts (its own ledger file). Both present
REGISTRATION.COLLISION; the older keeps the name and the younger stands by:
it sends nothing (its sends raise NotPermitted) until the older one closes,
then takes the name over. Held to (tests/cmpeer.py processes on a loopback
service, the listener logging every delivery with the sending instance's
tag and every REGISTRATION.MOVED):

* the listener's REGISTRATION.MOVED advisories stop (the collision settles;
  before the fix they bounced thousands of times a second with no traffic);
* every number either instance's send returned reached the listener from
  that instance, and nothing either ledger records as confirmed by the
  listener was not delivered to it from that instance;
* once A closes, B sends and its messages are certified.
"""

from __future__ import annotations

import asyncio
import collections
import signal
from pathlib import Path

import pytest
from test_cm_driver_processes import SUBJECT, Peer, handed_out, wait_for

from rvasync.protocol.cm import decode_ledger


class Talker(Peer):
    """A peer whose later stdout lines the test reads (``standby``, ``active``)."""

    async def line(self, expected: bytes, timeout: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                line = await self.proc.stdout.readline()
                assert line, f"{self.role} exited before printing {expected!r}"
                if line.strip() == expected:
                    return


def deliveries(out: Path) -> list[tuple[int, str]]:
    found = []
    for line in out.read_text().splitlines():
        head, _, tag = line.partition(" ")
        if head.isdigit():
            found.append((int(head), tag))
    return found


def moved(out: Path) -> int:
    return out.read_text().splitlines().count("moved")


def confirmed_by_sue(ledger: Path) -> int:
    state = decode_ledger(ledger.read_bytes(), expected_name="JOE_PER").state
    entry = state.subjects.get(SUBJECT) if state else None
    reg = entry.registrations.get("SUE_PER") if entry else None
    return reg.confirmed if reg else 0


@pytest.mark.timeout(120)
async def test_two_live_instances_of_one_name_settle_and_confirm_only_what_was_delivered(
    rv_service, tmp_path
):
    service, network = rv_service
    out = tmp_path / "deliveries.txt"
    common = ["--service", service, "--network", network, "--subject", SUBJECT]
    listener = Peer(
        "listener",
        [*common, "--name", "SUE_PER", "--ledger", str(tmp_path / "sue.ledger"), "--out", str(out)],
    )

    def sender(tag: str) -> Talker:
        return Talker(
            "sender",
            [
                *common,
                "--name",
                "JOE_PER",
                "--ledger",
                str(tmp_path / f"joe-{tag}.ledger"),
                "--log",
                str(tmp_path / f"sent-{tag}.txt"),
                "--tag",
                tag,
                "--target",
                "1000000",
                "--pace",
                "0.01",
                "--standby-ok",
            ],
        )

    old, new = sender("A"), sender("B")
    try:
        await listener.start()
        await old.start()
        await wait_for(lambda: any(tag == "A" for _, tag in deliveries(out)), 20, "A delivers")
        await new.start()
        await new.line(b"standby", 20)  # the younger instance stands by
        await asyncio.sleep(2.0)  # the overlap: A goes on sending
        settled = moved(out)
        await asyncio.sleep(2.0)
        assert moved(out) == settled, "REGISTRATION.MOVED goes on: the collision never settles"
        assert settled <= 4, f"{settled} REGISTRATION.MOVED advisories for one collision"
        assert old.proc is not None
        old.proc.send_signal(signal.SIGTERM)  # the old version is stopped: clean close
        assert await asyncio.wait_for(old.proc.wait(), 20) == 0
        await new.line(b"active", 30)  # the younger one took the name over
        await wait_for(lambda: any(tag == "B" for _, tag in deliveries(out)), 20, "B delivers")
        await asyncio.sleep(1.0)
    finally:
        for peer in (new, old, listener):
            if peer.proc and peer.proc.returncode is None:
                await peer.stop()
    got = deliveries(out)
    by_tag: dict[str, list[int]] = collections.defaultdict(list)
    for seq, tag in got:
        by_tag[tag].append(seq)
    assert set(by_tag) == {"A", "B"}, f"deliveries from unknown senders: {set(by_tag)}"
    for tag in ("A", "B"):
        numbers = by_tag[tag]
        assert numbers == sorted(set(numbers)), f"{tag}'s messages out of order or twice"
        handed = handed_out(tmp_path / f"sent-{tag}.txt")
        first = min(numbers)
        lost = sorted(set(n for n in handed if n >= first) - set(numbers))
        assert not lost, f"{tag}'s messages lost: {lost[:20]}"
        confirmed = confirmed_by_sue(tmp_path / f"joe-{tag}.ledger")
        phantom = sorted(n for n in handed if first <= n <= confirmed and n not in numbers)
        assert not phantom, f"{tag}'s ledger records as confirmed what SUE never got: {phantom}"
        assert confirmed <= max(numbers)
