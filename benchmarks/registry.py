"""The registry joining scenarios to systems.

Three kinds of entries, each registered by the module that owns it:

- a :class:`Scenario` says what is measured: which *capability* it needs, which
  processes (roles) it starts, the code each role runs, and how the roles'
  reports combine into metrics. Scenario code is written once against the
  capability interface (:mod:`benchmarks.interfaces`), so every system is
  measured by the same loop, with the same payloads and the same layout.
- a :class:`System` is a contender (rvasync, a peer, the floor, a reference).
- an adapter class implements one capability for one system
  (:func:`adapter` decorator). A system without an adapter for a capability is
  "n/a" for scenarios needing it, with the reason the system declared.

Modules under ``benchmarks.scenarios`` and ``benchmarks.systems`` are imported by
:func:`discover`; adding a capability means adding modules there, never editing the runner.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from benchmarks.interfaces import Adapter
    from benchmarks.worker import WorkerContext

Params = Mapping[str, Any]
RoleFn = Callable[["WorkerContext"], Awaitable[dict[str, Any]]]
CombineFn = Callable[[Mapping[str, Sequence[Mapping[str, Any]]], Params], dict[str, float]]

#: Row statuses. "unavailable": the needed API or package is not importable here
#: (for rvasync: "not available in this rvasync build"); "n/a": the system cannot
#: do this by design, with a reason. Neither is a failure.
Status = Literal["ok", "failed", "unavailable", "n/a"]

SYSTEM_KINDS = ("rvasync", "peer", "floor", "reference")


@dataclass(frozen=True)
class Metric:
    """One number a scenario reports; ``key`` indexes the combined measurement."""

    key: str
    label: str
    unit: str
    better: Literal["higher", "lower"]


@dataclass(frozen=True)
class RoleGroup:
    """``count`` worker processes running role ``role``.

    Groups start in layout order, each group fully ready before the next starts.
    A passive group (a replier, say) runs until the runner tells it to stop,
    which happens once every active group has reported.
    """

    role: str
    count: int = 1
    passive: bool = False


@dataclass(frozen=True)
class Scenario:
    """A measurement, defined once for every system that has its capability."""

    name: str
    title: str
    description: str
    capability: str
    primary: Metric
    roles: Mapping[str, RoleFn]
    layout: Callable[[Params], Sequence[RoleGroup]]
    combine: CombineFn
    params: Mapping[str, Any]
    quick: Mapping[str, Any] = field(default_factory=dict)
    extras: tuple[Metric, ...] = ()
    #: Metric keys drawn side by side in the chart (default: the primary alone).
    chart: tuple[str, ...] = ()
    #: Seconds one repetition may take (all its processes together), before scaling.
    timeout: float = 120.0
    quick_timeout: float = 60.0
    order: int = 0

    def resolved_params(self, quick: bool) -> dict[str, Any]:
        """Full-run parameters, with the quick overrides applied when ``quick``."""
        merged = dict(self.params)
        if quick:
            merged.update(self.quick)
        merged["timeout"] = self.quick_timeout if quick else self.timeout
        merged["quick"] = quick
        return merged

    @property
    def metrics(self) -> tuple[Metric, ...]:
        """The primary metric first, then the extras."""
        return (self.primary, *self.extras)


@dataclass(frozen=True)
class System:
    """A contender. ``kind`` decides how it is shown: rvasync rows are the numerators
    of the ratios, every other kind a denominator."""

    name: str
    label: str
    kind: Literal["rvasync", "peer", "floor", "reference"]
    description: str = ""
    #: capability -> why this system has no adapter for it (shown as "n/a").
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    order: int = 0


@dataclass(frozen=True)
class Variant:
    """One row of a system in a scenario (e.g. rvasync's pure and native codecs).

    ``env`` is added to the worker processes' environment. ``headline`` marks the
    rvasync variant the ratios are computed from (the first such row that ran).
    """

    name: str = ""
    label: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    headline: bool = True
    #: Returns None when usable here, else why not (an "unavailable" row).
    unavailable: Callable[[], str | None] = field(default=lambda: None, compare=False)


@dataclass(frozen=True)
class Plan:
    """What the runner will do for one (scenario, system, variant) row."""

    scenario: Scenario
    system: System
    variant: Variant
    adapter: type[Adapter] | None
    status: Status
    reason: str | None = None

    @property
    def label(self) -> str:
        """Row label: the system's label plus the variant's, if any."""
        return (
            f"{self.system.label} ({self.variant.label})"
            if self.variant.label
            else (self.system.label)
        )


class Registry:
    """Holds scenarios, systems and adapters; one module-level instance, :data:`REGISTRY`."""

    def __init__(self) -> None:
        self.scenarios: dict[str, Scenario] = {}
        self.systems: dict[str, System] = {}
        self.adapters: dict[tuple[str, str], type[Adapter]] = {}

    def add_scenario(self, scenario: Scenario) -> Scenario:
        """Register ``scenario``; names are unique."""
        if scenario.name in self.scenarios:
            raise ValueError(f"scenario {scenario.name!r} is registered twice")
        for group_role in scenario.layout(scenario.resolved_params(quick=False)):
            if group_role.role not in scenario.roles:
                raise ValueError(
                    f"scenario {scenario.name!r}: layout names role {group_role.role!r} "
                    f"but roles are {sorted(scenario.roles)}"
                )
        self.scenarios[scenario.name] = scenario
        return scenario

    def add_system(self, system: System) -> System:
        """Register ``system``; names are unique."""
        if system.name in self.systems:
            raise ValueError(f"system {system.name!r} is registered twice")
        if system.kind not in SYSTEM_KINDS:
            raise ValueError(f"system {system.name!r}: kind {system.kind!r} not in {SYSTEM_KINDS}")
        self.systems[system.name] = system
        return system

    def add_adapter(self, cls: type[Adapter]) -> type[Adapter]:
        """Register ``cls`` as ``cls.system``'s implementation of ``cls.capability``."""
        key = (cls.system, cls.capability)
        if key in self.adapters:
            raise ValueError(
                f"two adapters for system {cls.system!r}, capability {cls.capability!r}: "
                f"{self.adapters[key].__qualname__} and {cls.__qualname__}"
            )
        self.adapters[key] = cls
        return cls

    def scenario(self, name: str) -> Scenario:
        """The scenario called ``name``; KeyError names the known ones."""
        try:
            return self.scenarios[name]
        except KeyError:
            raise KeyError(
                f"unknown scenario {name!r}; known: {', '.join(self.scenarios)}"
            ) from None

    def adapter(self, system: str, capability: str) -> type[Adapter]:
        """The adapter of ``system`` for ``capability``."""
        try:
            return self.adapters[(system, capability)]
        except KeyError:
            raise KeyError(f"system {system!r} has no adapter for {capability!r}") from None

    def ordered_scenarios(self) -> list[Scenario]:
        """Scenarios in presentation order."""
        return sorted(self.scenarios.values(), key=lambda s: (s.order, s.name))

    def ordered_systems(self) -> list[System]:
        """Systems in presentation order: rvasync, peers, floor, references."""
        return sorted(
            self.systems.values(),
            key=lambda s: (SYSTEM_KINDS.index(s.kind), s.order, s.name),
        )

    def select_scenarios(self, patterns: Sequence[str] | None) -> list[Scenario]:
        """Scenarios named by ``patterns`` (all if None): a pattern that is a scenario's
        exact name selects that one, any other selects the names starting with it.

        A pattern matching nothing is an error, so a typo does not silently run nothing.
        """
        every = self.ordered_scenarios()
        if not patterns:
            return every
        chosen: list[Scenario] = []
        for pattern in patterns:
            hits = [s for s in every if s.name == pattern] or [
                s for s in every if s.name.startswith(pattern)
            ]
            if not hits:
                raise KeyError(
                    f"--only {pattern!r} matches no scenario; known: "
                    + ", ".join(s.name for s in every)
                )
            chosen.extend(h for h in hits if h not in chosen)
        return [s for s in every if s in chosen]

    def select_systems(self, names: Sequence[str] | None) -> list[System]:
        """Systems named in ``names`` (all if None); unknown names are an error."""
        every = self.ordered_systems()
        if not names:
            return every
        unknown = [n for n in names if n not in self.systems]
        if unknown:
            raise KeyError(
                f"unknown system(s) {', '.join(unknown)}; known: "
                + ", ".join(s.name for s in every)
            )
        return [s for s in every if s.name in names]

    def plans(self, scenario: Scenario, system: System, params: Params) -> list[Plan]:
        """The rows ``system`` contributes to ``scenario``, each with its status."""
        cls = self.adapters.get((system.name, scenario.capability))
        if cls is None and system.kind == "reference":
            return []  # a reference appears only where it is the reference
        if cls is None:
            reason = system.not_applicable.get(
                scenario.capability,
                f"{system.label} has no {scenario.capability!r} adapter",
            )
            return [Plan(scenario, system, Variant(), None, "n/a", reason)]
        missing = cls.unavailable()
        if missing is not None:
            return [Plan(scenario, system, Variant(), cls, "unavailable", missing)]
        rows = []
        for variant in cls.variants():
            reason = cls.not_applicable(scenario, params, variant)
            if reason is not None:
                rows.append(Plan(scenario, system, variant, cls, "n/a", reason))
                continue
            reason = variant.unavailable()
            status: Status = "ok" if reason is None else "unavailable"
            rows.append(Plan(scenario, system, variant, cls, status, reason))
        return rows


REGISTRY = Registry()

_DISCOVERED = False


def discover() -> Registry:
    """Import every scenario and system module once, filling :data:`REGISTRY`."""
    global _DISCOVERED
    if not _DISCOVERED:
        _DISCOVERED = True
        for package_name in ("benchmarks.systems", "benchmarks.scenarios"):
            package = importlib.import_module(package_name)
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
                importlib.import_module(f"{package_name}.{info.name}")
    return REGISTRY


def scenario(s: Scenario) -> Scenario:
    """Register a scenario in :data:`REGISTRY` (call at module level)."""
    return REGISTRY.add_scenario(s)


def system(s: System) -> System:
    """Register a system in :data:`REGISTRY` (call at module level)."""
    return REGISTRY.add_system(s)


def adapter(cls: type[Adapter]) -> type[Adapter]:
    """Class decorator registering an adapter in :data:`REGISTRY`."""
    return REGISTRY.add_adapter(cls)
