"""State both halves of a correspondent share: identity, ledger, outputs, timing.

The sender half and the listener half of one CM transport write to the same
ledger, emit into the same output list and must agree on where each peer
lives (so a correspondent that moved is announced once, whichever half
noticed). This module holds that shared part and the write-ahead rule.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from rvasync.errors import InvalidArgument
from rvasync.protocol.cm import advisories as adv
from rvasync.protocol.cm.ledger import LedgerRecord, LedgerState
from rvasync.protocol.cm.names import is_any_instance_address
from rvasync.protocol.cm.outputs import AppendLedger, Deliver, Output, Transmit
from rvasync.protocol.cm.records import Record

__all__ = ["CmTiming", "Context"]


@dataclass(frozen=True, slots=True)
class CmTiming:
    """The protocol's intervals (seconds) and limits; defaults suit a LAN.

    * ``confirm_request_interval``: a sender that has heard no confirmation
      from a listener holding unconfirmed messages for this long asks it to
      confirm (and presents DELIVERY.NO_RESPONSE), and again every interval.
    * ``register_retry_interval`` / ``register_attempts``: a listener repeats
      an unanswered registration request this often, this many times in all,
      then presents REGISTRATION.NO_RESPONSE and stops asking.
    * ``retransmit_interval``: a listener missing messages repeats its
      retransmission request this often until they arrive or are reported
      unavailable.
    * ``sequence_reserve``: how many sequence numbers a sender first reserves
      in one ledger record, half a block ahead of use; the block doubles (to
      8,192 at most) while sends outrun the ledger. After a crash at most one
      block of numbers is skipped and reported unavailable to listeners.
    * ``duplicate_window``: how many recent uncertified sequence numbers a
      listener remembers per sender and subject to drop duplicates.
    """

    confirm_request_interval: float = 2.0
    register_retry_interval: float = 1.0
    register_attempts: int = 5
    retransmit_interval: float = 1.0
    sequence_reserve: int = 64
    duplicate_window: int = 1024

    def __post_init__(self) -> None:
        for name in ("confirm_request_interval", "register_retry_interval", "retransmit_interval"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise InvalidArgument(
                    f"CmTiming.{name} must be a number of seconds > 0, got {value!r}"
                )
        for name in ("register_attempts", "sequence_reserve", "duplicate_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"CmTiming.{name} must be an int >= 1, got {value!r}")


class Context:
    """Identity, ledger, output list and write-ahead gate of one correspondent."""

    def __init__(
        self, name: str, address: str, ledger: LedgerState, file_ledger: bool, timing: CmTiming
    ) -> None:
        self.name = name
        self.address = address
        self.ledger = ledger
        self.file_ledger = file_ledger
        self.timing = timing
        self.outputs: list[Output] = []
        self.lsn = 0
        self.durable_lsn = 0
        self._held: deque[tuple[int, Transmit]] = deque()
        self.peers: dict[str, str] = {}
        """Last known address of every correspondent we deal with, for MOVED."""
        self.info_filter: Callable[[str, str], bool] | None = None
        """Driver's ``filter(condition, tail)``: False skips a per-message INFO advisory."""
        self.standby = False
        """Another live instance holds the name: transmit nothing but the probes for it."""
        self.ledger_writable = True
        """False while the driver cannot write the ledger file: make no new agreements."""

    def wants_info(self, condition: str, tail: str) -> bool:
        """Whether to make a per-message INFO advisory (DELIVERY.CONFIRM, DELIVERY.COMPLETE).

        Two of them per message and listener are most of a sender's work when
        nobody listens to them; the driver's filter says whether anyone would.
        """
        info_filter = self.info_filter
        return info_filter is None or info_filter(condition, tail)

    def record(self, record: LedgerRecord) -> None:
        """Change persistent state: apply ``record`` and, for a file ledger, ask to append it."""
        self.ledger.apply(record)
        if self.file_ledger:
            self.lsn += 1
            self.outputs.append(AppendLedger(self.lsn, record))

    def transmit(
        self, destination: str, record: Record, point_to_point: bool, *, probe: bool = False
    ) -> None:
        """Send a record, after every ledger record made so far is durable (write-ahead).

        While standing by only ``probe`` records leave (the rest are dropped:
        peers must hear the name from one instance only).
        """
        if self.standby and not probe:
            return
        out = Transmit(destination, record, point_to_point)
        if self._held or self.lsn > self.durable_lsn:
            self._held.append((self.lsn, out))
        else:
            self.outputs.append(out)

    def send_to(self, address: str, record: Record, *, probe: bool = False) -> None:
        """Point-to-point transmit to a correspondent instance's address."""
        self.transmit(address, record, True, probe=probe)

    def durable(self, lsn: int) -> None:
        """The driver wrote (and, for sync ledgers, synced) every append up to ``lsn``."""
        if lsn > self.durable_lsn:
            self.durable_lsn = min(lsn, self.lsn)
        while self._held and self._held[0][0] <= self.durable_lsn:
            self.outputs.append(self._held.popleft()[1])

    @property
    def held_count(self) -> int:
        """Transmissions waiting for the ledger to become durable."""
        return len(self._held)

    def advise(self, advisory: adv.Advisory) -> None:
        self.outputs.append(advisory)

    def deliver(self, delivery: Deliver) -> None:
        self.outputs.append(delivery)

    def note_peer(self, name: str, address: str) -> bool:
        """Remember where ``name`` speaks from; True (and MOVED presented) if that changed.

        A provisional any-instance address says nothing about where the peer
        is, so it is neither remembered nor compared.
        """
        peers = self.peers
        known = peers.get(name)
        if known == address or is_any_instance_address(address):
            return False  # the usual case (once per message received): nothing new
        peers[name] = address
        if known is not None and known != address:
            self.advise(adv.registration_moved(name))
            return True
        return False
