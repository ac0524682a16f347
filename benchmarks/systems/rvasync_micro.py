"""rvasync's hot paths, pure twin against native build: the codec and the subject index.

Both implementations come from ``rvasync._accel.implementations(NAME)`` (pure
first, native if built) and are used directly, so one process can time either.
The native row is the headline when built; otherwise the pure row is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from benchmarks.interfaces import Codec, Match
from benchmarks.registry import Variant, adapter
from benchmarks.systems.rvasync_api import PREFIX, implementations, missing


def _native_missing(hot_path: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if len(implementations(hot_path)) < 2:
            return f"{PREFIX}: rvasync_native.{hot_path} is not built"
        return None

    return check


def _pure_missing(hot_path: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if not implementations(hot_path):
            return f"{PREFIX}: rvasync.fallback.{hot_path} does not import"
        return None

    return check


def _implementation(hot_path: str, variant: Variant) -> ModuleType:
    found = implementations(hot_path)
    return found[1] if variant.name.startswith("native") else found[0]


@adapter
class RvCodec(Codec):
    """``encode(msg)`` / ``decode(data)`` of the pure and native codec modules."""

    system = "rvasync"
    capability = "codec"

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Message", "FieldType", "DateTime")

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (
            Variant(
                name="native", label="native", headline=True, unavailable=_native_missing("codec")
            ),
            Variant(
                name="pure", label="pure Python", headline=False, unavailable=_pure_missing("codec")
            ),
        )

    def _message(self, fields: Sequence[tuple[str, str, Any]], subject: str | None) -> Any:
        import rvasync as rv

        msg = rv.Message(subject)
        for name, tag, value in fields:
            if tag == "datetime":
                value = rv.DateTime(*value)
            elif tag == "msg":
                value = self._message(value, None)
            msg.add(name, value, type=rv.FieldType[tag.upper()])
        return msg

    def build(self, fields: Sequence[tuple[str, str, Any]]) -> Any:
        impl = _implementation("codec", self.variant)
        # Bind the functions themselves: the timed loop then calls them with no wrapper.
        self.encode = impl.encode  # type: ignore[method-assign]
        self.decode = impl.decode  # type: ignore[method-assign]
        return self._message(fields, "bench.codec")

    def encode(self, message: Any) -> bytes:
        return _implementation("codec", self.variant).encode(message)

    def decode(self, data: bytes) -> Any:
        return _implementation("codec", self.variant).decode(data)


@adapter
class RvMatch(Match):
    """``SubjectIndex.match`` of the pure and native subject modules.

    With the result cache off the figure is the trie walk itself; the cached row
    shows what a repeated subject costs (the usual case in a running transport).
    """

    system = "rvasync"
    capability = "match"

    @classmethod
    def unavailable(cls) -> str | None:
        if not implementations("subjects"):
            return f"{PREFIX}: rvasync.fallback.subjects does not import"
        return None

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (
            Variant(
                name="native",
                label="native, cache off",
                headline=True,
                unavailable=_native_missing("subjects"),
            ),
            Variant(
                name="pure",
                label="pure Python, cache off",
                headline=False,
                unavailable=_pure_missing("subjects"),
            ),
            Variant(
                name="native-cached",
                label="native, result cache on",
                headline=False,
                unavailable=_native_missing("subjects"),
            ),
        )

    def build(self, patterns: Sequence[str]) -> None:
        impl = _implementation("subjects", self.variant)
        cached = self.variant.name.endswith("cached")
        self.index = impl.SubjectIndex() if cached else impl.SubjectIndex(cache_size=0)
        for number, pattern in enumerate(patterns):
            self.index.add(pattern, number)

    def match(self, subject: str) -> int:
        return len(self.index.match(subject))
