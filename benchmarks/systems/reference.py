"""References that put rvasync's micro-benchmarks in context (not messaging systems)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.interfaces import Codec, Match
from benchmarks.registry import adapter


@adapter
class MsgpackCodec(Codec):
    """A dict with the same values through ``msgpack.packb`` / ``unpackb``: what the
    bare serialisation costs without field types, ids or a self-describing layout."""

    system = "msgpack"
    capability = "codec"

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import msgpack  # noqa: F401
        except ImportError:
            return "msgpack is not installed"
        return None

    def _dict(self, fields: Sequence[tuple[str, str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, tag, value in fields:
            if tag == "datetime":
                value = list(value)
            elif tag == "msg":
                value = self._dict(value)
            out[name] = value
        return out

    def build(self, fields: Sequence[tuple[str, str, Any]]) -> Any:
        import msgpack

        # Bind the functions themselves: the timed loop then calls them with no wrapper.
        self.encode = msgpack.packb  # type: ignore[method-assign, assignment]
        self.decode = msgpack.unpackb  # type: ignore[method-assign, assignment]
        return self._dict(fields)

    def encode(self, message: Any) -> bytes:
        import msgpack

        return bytes(msgpack.packb(message))

    def decode(self, data: bytes) -> Any:
        import msgpack

        return msgpack.unpackb(data)


def _matches(pattern: Sequence[str], subject: Sequence[str]) -> bool:
    for position, element in enumerate(pattern):
        if element == ">":
            return len(subject) > position
        if position >= len(subject):
            return False
        if element != "*" and element != subject[position]:
            return False
    return len(pattern) == len(subject)


@adapter
class ScanMatch(Match):
    """Every pattern tested in turn: the cost an index exists to avoid."""

    system = "scan"
    capability = "match"

    def build(self, patterns: Sequence[str]) -> None:
        self.patterns = [p.split(".") for p in patterns]

    def match(self, subject: str) -> int:
        elements = subject.split(".")
        return sum(1 for pattern in self.patterns if _matches(pattern, elements))
