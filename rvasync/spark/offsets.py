"""Streaming offsets over captures: which files of which capture a stream has read.

An offset names, for every capture directory the stream reads, the
capture's identity and how many of its files are read:

``{"captures": [{"path": "s3://bucket/orders", "id": "9f0c...", "file": 12}, ...]}``

Spark writes each micro-batch's end offset to the checkpoint before the
batch runs, so a restarted query knows exactly which files it had. The
identity is what makes that safe when a directory is replaced: a new
capture in the same place starts at file 1 again, and a checkpoint that
recorded only "file 12" would resume at file 13 and never read files 1..12
of the new capture. Here the capture named by the checkpoint must be the one
in the directory, or the query fails (:class:`~rvasync.spark.capture.CaptureError`)
telling the user to start it with a fresh checkpoint. Offsets written by
rvasync before 0.13 (``{"file": N}``, no identity) are read as the capture
now in the (single) directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rvasync.errors import InvalidArgument
from rvasync.spark import capture
from rvasync.spark.capture import CaptureError, CommittedFile, Marker
from rvasync.spark.storage import Location

__all__ = ["Position", "Stream", "decode", "encode"]


@dataclass(frozen=True)
class Position:
    """Files 1..``file`` of capture ``capture`` at ``path`` are read (capture None:
    not known, for a directory with no recorder yet or an offset from before 0.13)."""

    path: str
    capture: str | None
    file: int


def encode(positions: Sequence[Position]) -> dict[str, Any]:
    return {"captures": [{"path": p.path, "id": p.capture, "file": p.file} for p in positions]}


def _position(item: Any, what: str) -> Position:
    if isinstance(item, dict):
        path, ident, file = item.get("path"), item.get("id"), item.get("file")
        if (
            isinstance(path, str)
            and (ident is None or isinstance(ident, str))
            and isinstance(file, int)
            and file >= 0
        ):
            return Position(path, ident, file)
    raise InvalidArgument(f"{what} offset entry {item!r} is not an rvasync capture position")


def decode(value: Any, what: str, paths: Sequence[str]) -> list[Position]:
    """The positions of an offset; a legacy ``{"file": N}`` belongs to the one path read."""
    if isinstance(value, dict) and isinstance(value.get("captures"), list):
        return [_position(item, what) for item in value["captures"]]
    if isinstance(value, dict) and isinstance(value.get("file"), int) and value["file"] >= 0:
        if len(paths) != 1:
            raise InvalidArgument(
                f"{what} offset {value!r} names no capture, and the stream reads several: "
                f"start the query with a fresh checkpoint"
            )
        return [Position(paths[0], None, value["file"])]
    raise InvalidArgument(f"{what} offset {value!r} is not an rvasync capture offset")


class Stream:
    """The captures one streaming read follows (a path, a list, or globs re-matched at
    every trigger, so a directory that appears later is read from its first file)."""

    def __init__(self, locations: Any) -> None:
        self._locations = locations  # a callable giving the current Locations

    def markers(self) -> list[tuple[Location, Marker]]:
        found = []
        for location in self._locations():
            marker = capture.read_marker(location)
            capture.warn_uncommitted(location, marker.committed)
            found.append((location, marker))
        return found

    def initial(self, latest: bool) -> list[Position]:
        return [
            Position(loc.url, marker.capture, marker.committed if latest else 0)
            for loc, marker in self.markers()
        ]

    def latest(
        self, start: list[Position] | None, max_files: int | None, cap: dict[str, int] | None
    ) -> list[Position]:
        """Where the next batch ends: every committed file (up to ``cap``, the files
        committed when an availableNow query started), at most ``max_files`` past
        ``start`` in all; a replaced capture is a CaptureError."""
        begun = {p.path: p for p in start or ()}
        budget = max_files
        result: dict[str, Position] = dict(begun)
        for location, marker in self.markers():
            committed = marker.committed
            if cap is not None:
                committed = min(committed, cap.get(location.url, 0))
            was = begun.get(location.url, Position(location.url, marker.capture, 0))
            check_same(was, location, marker)
            end = committed
            if budget is not None:
                end = min(end, was.file + budget)
                budget -= end - was.file
            result[location.url] = Position(location.url, marker.capture or was.capture, end)
        return sorted(result.values(), key=lambda p: p.path)

    def files(
        self, start: list[Position], end: list[Position], locations: dict[str, Location]
    ) -> list[CommittedFile]:
        """The committed files between two offsets, in offset order."""
        begun = {p.path: p for p in start}
        found: list[CommittedFile] = []
        for stop in end:
            first = begun.get(stop.path, Position(stop.path, stop.capture, 0)).file
            if stop.file <= first:
                continue
            location = locations.get(stop.path)
            if location is None:
                raise CaptureError(
                    f"the query's offsets name capture directory {stop.path!r}, which the "
                    f"stream's paths no longer match"
                )
            marker = capture.read_marker(location)
            check_same(stop, location, marker)
            found.extend(capture.snapshot(location, first, stop.file, warn=False, marker=marker))
        return found


def check_same(position: Position, location: Location, marker: Marker) -> None:
    """The capture the checkpoint names must be the one in the directory, with at least
    the files it has read."""
    if position.capture is not None and marker.capture not in (None, position.capture):
        raise CaptureError(
            f"the query's checkpoint read files 1..{position.file} of capture "
            f"{position.capture} at {location.url!r}, but that directory now holds capture "
            f"{marker.capture} (the directory was replaced): reading on would skip the new "
            f"capture's first files; start the query with a fresh checkpoint (it then reads "
            f"the new capture from its first file)"
        )
    if position.file > marker.committed:
        raise CaptureError(
            f"the query's checkpoint is at file {position.file} but {location.url!r} has "
            f"only {marker.committed} committed files: the capture directory was replaced or "
            f"rolled back; start the query with a fresh checkpoint"
        )
