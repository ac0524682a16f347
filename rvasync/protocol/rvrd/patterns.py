"""Whether two subject patterns can match a common subject.

A router advertises a listen subject of its network only where it overlaps the
network's import patterns, and listens on a network only to remote interest
that overlaps the network's export patterns. Both need the same question
answered: is there a subject that both ``a`` and ``b`` match? ``*`` matches
exactly one element and a final ``>`` one or more.
"""

from __future__ import annotations

__all__ = ["intersects", "overlapping"]


def intersects(a: str, b: str) -> bool:
    """True if some subject matches both patterns ``a`` and ``b``."""
    ta = a.split(".")
    tb = b.split(".")
    for i in range(max(len(ta), len(tb))):
        ea = ta[i] if i < len(ta) else None
        eb = tb[i] if i < len(tb) else None
        if ea == ">" or eb == ">":
            # ">" takes one or more elements: the other side must still have one here.
            return ea is not None and eb is not None
        if ea is None or eb is None:
            return False
        if ea != eb and ea != "*" and eb != "*":
            return False
    return True


def overlapping(subject: str, patterns: tuple[str, ...]) -> bool:
    """True if ``subject`` intersects at least one of ``patterns``."""
    return any(intersects(subject, p) for p in patterns)
