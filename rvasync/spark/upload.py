"""Copying a local capture to where the cluster reads it (an object store, HDFS ...).

The recorder writes a local directory, where a commit can be made durable
and atomic (fsync, rename, a lock). Object stores have no rename and no
lock, so instead of writing there directly the recorder *uploads* what it
commits: each committed file, then the marker. An object appears whole
when its upload completes, and the marker goes last, so a reader of the
remote copy sees a marker whose files are all there (a file the upload
left half-done, or not yet named by the remote marker, lies past the
committed offset, as a crashed recorder's files do locally). The remote
marker carries the capture's identity; an upload into a place that holds
another capture, or more files than the local one, is refused.

Uploads run on their own thread, so a slow store never holds up recording;
a failed upload is logged and retried at the next commit, and a restarted
recorder catches up with what its predecessor had not uploaded.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from rvasync._logging import stderr_logger
from rvasync.errors import RvError
from rvasync.spark.capture import (
    MARKER_NAME,
    CaptureError,
    Marker,
    file_name,
    marker_bytes,
    read_marker,
)
from rvasync.spark.storage import Location, locate

__all__ = ["Mirror", "upload"]


def _remote_marker(target: Location) -> Marker:
    info = target.fs.get_file_info(target.path(MARKER_NAME))
    return Marker() if info.type == pafs.FileType.NotFound else read_marker(target)


def _check(local: Marker, remote: Marker, source: Path, target: Location) -> None:
    if remote.capture is not None and remote.capture != local.capture:
        raise CaptureError(
            f"{target.url!r} holds capture {remote.capture}, not {local.capture} of "
            f"{str(source)!r}: upload each capture to a place of its own"
        )
    if remote.committed > local.committed:
        raise CaptureError(
            f"{target.url!r} holds {remote.committed} committed files, more than the "
            f"{local.committed} of {str(source)!r}: it is not a copy of this capture"
        )


def upload(directory: str | os.PathLike[str], target: Location | str) -> int:
    """Bring the copy of local capture ``directory`` at ``target`` up to date: upload
    the committed files it lacks, then the marker. Returns how many files it uploaded."""
    source = Path(directory)
    where = target if isinstance(target, Location) else locate(target)
    local = read_marker(source)
    fs = where.fs
    fs.create_dir(where.root, recursive=True)
    remote = _remote_marker(where)
    _check(local, remote, source, where)
    if remote == local:
        return 0
    for index in range(remote.committed + 1, local.committed + 1):
        name = file_name(index)
        pafs.copy_files(
            str(source / name),
            where.path(name),
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=fs,
        )
    staged = where.path(f".{MARKER_NAME}.tmp")
    with fs.open_output_stream(staged) as stream:
        stream.write(marker_bytes(local))
    fs.move(staged, where.path(MARKER_NAME))
    return local.committed - remote.committed


class Mirror:
    """Keeps the upload target of a recorder's directory up to date, on a thread of its
    own: :meth:`kick` after each commit asks for a sync (syncs never overlap, and kicks
    during one make one more); :meth:`finish` makes the last one and raises its error."""

    def __init__(self, directory: str | os.PathLike[str], target: Location) -> None:
        self.directory = Path(directory)
        self.target = target
        self.uploaded = 0
        self.errors = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rvasync-upload")
        self._lock = threading.Lock()
        self._busy = False
        self._again = False

    def kick(self) -> None:
        with self._lock:
            if self._busy:
                self._again = True
                return
            self._busy = True
        self._executor.submit(self._run)

    def _run(self) -> None:
        while True:
            try:
                self.uploaded += upload(self.directory, self.target)
            except (OSError, RvError, ValueError, pa.ArrowException) as exc:
                self.errors += 1
                stderr_logger().warning(
                    "capture upload failed; retried at the next commit",
                    directory=str(self.directory),
                    to=self.target.url,
                    error=str(exc),
                )
            with self._lock:
                if not self._again:
                    self._busy = False
                    return
                self._again = False

    def finish(self) -> None:
        """Wait for the sync under way, then sync once more (blocking; raises its error)."""
        self._executor.shutdown(wait=True)
        try:
            self.uploaded += upload(self.directory, self.target)
        except (OSError, RvError, ValueError, pa.ArrowException) as exc:
            raise RvError(
                f"the capture is committed in {str(self.directory)!r}, but uploading it to "
                f"{self.target.url!r} failed: {exc}; a recorder started again with the same "
                f"upload target catches up, as does rvasync.spark.upload.upload(DIR, URL)"
            ) from exc
