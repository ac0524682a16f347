"""``DateTime``: the Rendezvous wire datetime (40-bit seconds, microseconds).

Python's ``datetime`` covers years 1..9999 only, while the wire format spans
about 17,432 years on each side of 1970. Keeping the wire value as its own
small immutable type means every value received can be held, compared and
re-sent unchanged; conversion to ``datetime`` happens only when asked for and
fails loudly where Python cannot represent the instant.
"""

from __future__ import annotations

import datetime as _dt
import time

from rvasync._wire import DATETIME_MAX_SECONDS, DATETIME_MIN_SECONDS
from rvasync.errors import ConversionError, InvalidArgument

__all__ = ["DateTime"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_US_MAX = 999_999
_new = object.__new__


def _check_int(value: object, what: str) -> int:
    if value.__class__ is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConversionError(f"DateTime {what} must be an int, got {type(value).__name__}")
    return int(value)


class DateTime:
    """An instant as the wire carries it: signed seconds since the UNIX epoch plus microseconds.

    ``seconds`` is 40-bit signed (-(2**39) .. 2**39-1), ``microseconds`` is
    0..999999. Values are immutable, hashable and totally ordered.
    """

    __slots__ = ("_microseconds", "_seconds")

    def __init__(self, seconds: int, microseconds: int = 0) -> None:
        seconds = _check_int(seconds, "seconds")
        microseconds = _check_int(microseconds, "microseconds")
        if not DATETIME_MIN_SECONDS <= seconds <= DATETIME_MAX_SECONDS:
            raise InvalidArgument(
                f"DateTime seconds {seconds} outside the 40-bit signed range "
                f"{DATETIME_MIN_SECONDS}..{DATETIME_MAX_SECONDS}"
            )
        if not 0 <= microseconds <= _US_MAX:
            raise InvalidArgument(f"DateTime microseconds {microseconds} outside 0..{_US_MAX}")
        self._seconds = seconds
        self._microseconds = microseconds

    @property
    def seconds(self) -> int:
        """Whole seconds since 1970-01-01T00:00:00Z (negative before it)."""
        return self._seconds

    @property
    def microseconds(self) -> int:
        """Microseconds after :attr:`seconds`, 0..999999."""
        return self._microseconds

    # -- conversions -------------------------------------------------------

    @classmethod
    def from_datetime(cls, dt: _dt.datetime) -> DateTime:
        """The instant of ``dt``; a naive datetime is taken as UTC."""
        if not isinstance(dt, _dt.datetime):
            raise ConversionError(
                f"DateTime.from_datetime needs a datetime.datetime, got {type(dt).__name__}"
            )
        if dt.tzinfo is None or dt.utcoffset() is None:
            dt = dt.replace(tzinfo=_dt.UTC)
        delta = dt - _EPOCH
        obj = _new(cls)
        obj._seconds = delta.days * 86_400 + delta.seconds
        obj._microseconds = delta.microseconds
        return obj

    def to_datetime(self) -> _dt.datetime:
        """This instant as an aware UTC ``datetime``.

        Raises ConversionError when the instant lies outside the years
        ``datetime`` can hold (1..9999).
        """
        try:
            return _EPOCH + _dt.timedelta(seconds=self._seconds, microseconds=self._microseconds)
        except OverflowError:
            raise ConversionError(
                f"{self!r} is outside the range of datetime.datetime (years 1..9999)"
            ) from None

    @classmethod
    def now(cls) -> DateTime:
        """The current time, to the microsecond."""
        seconds, microseconds = divmod(time.time_ns() // 1000, 1_000_000)
        obj = _new(cls)
        obj._seconds = seconds
        obj._microseconds = microseconds
        return obj

    @classmethod
    def from_timestamp(cls, timestamp: float) -> DateTime:
        """The instant of a POSIX timestamp (float seconds), rounded to the microsecond."""
        try:
            total = round(timestamp * 1_000_000)
        except (TypeError, ValueError, OverflowError):
            raise ConversionError(f"cannot make a DateTime from timestamp {timestamp!r}") from None
        seconds, microseconds = divmod(total, 1_000_000)
        return cls(seconds, microseconds)

    def timestamp(self) -> float:
        """POSIX timestamp as a float (may lose sub-microsecond precision far from 1970)."""
        return self._seconds + self._microseconds / 1_000_000

    # -- wire form (used by the codecs) -------------------------------------

    def _wire(self) -> int:
        """The 64-bit wire value: seconds in the high 40 bits, microseconds in the low 24."""
        return (self._seconds << 24) | self._microseconds

    @classmethod
    def _from_wire(cls, value: int) -> DateTime:
        """Inverse of :meth:`_wire`; the caller has checked ``value`` fits in int64
        and that its low 24 bits are at most 999999."""
        obj = _new(cls)
        obj._seconds = value >> 24
        obj._microseconds = value & 0xFFFFFF
        return obj

    # -- value semantics ----------------------------------------------------

    def _key(self) -> tuple[int, int]:
        return (self._seconds, self._microseconds)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not DateTime and not isinstance(other, DateTime):
            return NotImplemented
        return self._seconds == other._seconds and self._microseconds == other._microseconds

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, DateTime):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, DateTime):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, DateTime):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, DateTime):
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash((DateTime, self._seconds, self._microseconds))

    def __repr__(self) -> str:
        if self._microseconds:
            return f"DateTime({self._seconds}, {self._microseconds})"
        return f"DateTime({self._seconds})"

    def __str__(self) -> str:
        try:
            return self.to_datetime().isoformat()
        except ConversionError:
            return repr(self)

    def __reduce__(self) -> tuple[type[DateTime], tuple[int, int]]:
        return (DateTime, (self._seconds, self._microseconds))
