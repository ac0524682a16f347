"""Where captures live: local paths, ``file://`` URLs and other file systems.

A capture directory is named by a path or a URL. Every read and write of
capture files goes through a :class:`pyarrow.fs.FileSystem` chosen from the
URL's scheme, so the same code reads a local disk, an object store or a
Hadoop-compatible file system:

- no scheme, or ``file:``: the local file system (``file:///data/x``,
  ``file:/data/x`` as Hadoop writes it);
- ``s3:``, ``s3a:``, ``s3n:``: pyarrow's own S3 client (``s3a`` is Hadoop's
  name for the same store: the Python data source reads files in Spark's
  Python workers, not through Hadoop's jars);
- any other scheme fsspec knows (``memory:``, ``gs:`` with gcsfs, ``abfs:``
  with adlfs, ``hdfs:`` through pyarrow ...): that fsspec file system,
  wrapped for pyarrow.

``storage_options`` (a JSON object, or a dict) are the keyword arguments of
the file system's constructor: ``endpoint_override``, ``region``,
``access_key`` ... for S3 (see ``pyarrow.fs.S3FileSystem``), the fsspec
implementation's own for the others. When they name no S3 endpoint, the
AWS SDK's variables ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` do,
which pyarrow itself does not read.

Paths may hold glob patterns (``*``, ``?``, ``[abc]``, ``{a,b}``), each
matched against one level of directory names, as Hadoop globs are.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from rvasync.errors import InvalidArgument

__all__ = ["Location", "expand", "locate", "parse_storage_options"]

_S3 = frozenset(("s3", "s3a", "s3n"))
_GLOB = re.compile(r"[*?\[{]")
_SECRET = re.compile(r"secret|key|token|password|credential|sas", re.IGNORECASE)


def parse_storage_options(value: str | Mapping[str, Any] | None, where: str) -> str:
    """Storage options as canonical JSON text (hashable, picklable); '' when none."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError as exc:
            raise InvalidArgument(f"{where} must be a JSON object: {exc}") from None
    else:
        decoded = dict(value)
    if not isinstance(decoded, dict) or not all(isinstance(k, str) for k in decoded):
        raise InvalidArgument(f"{where} must be a JSON object of keyword arguments")
    return json.dumps(decoded, sort_keys=True)


def redacted(options: str) -> str:
    """Storage options for a log line or a plan: values of secret-looking keys hidden."""
    if not options:
        return ""
    decoded = json.loads(options)
    return json.dumps({k: "***" if _SECRET.search(k) else v for k, v in decoded.items()})


@functools.lru_cache(maxsize=32)
def _filesystem(scheme: str, authority: str, options: str) -> pafs.FileSystem:
    kwargs: dict[str, Any] = json.loads(options) if options else {}
    try:
        if scheme in ("", "file"):
            return pafs.LocalFileSystem()
        if scheme in _S3:
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint and "endpoint_override" not in kwargs:
                kwargs["endpoint_override"] = endpoint
            return pafs.S3FileSystem(**kwargs)
        return _fsspec(scheme, authority, kwargs)
    except (TypeError, ValueError, OSError) as exc:
        raise InvalidArgument(
            f"cannot open the {scheme or 'local'} file system with storage options "
            f"{redacted(options) or '{}'}: {exc}"
        ) from None


def _fsspec(scheme: str, authority: str, kwargs: dict[str, Any]) -> pafs.FileSystem:
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError:
        raise InvalidArgument(
            f"paths with scheme {scheme!r} need fsspec (pip install 'rvasync[spark]') and "
            f"fsspec's implementation for {scheme!r}"
        ) from None
    try:
        fs = fsspec.filesystem(scheme, **kwargs)
    except ImportError as exc:
        raise InvalidArgument(f"scheme {scheme!r}: {exc}") from None
    except ValueError as exc:
        raise InvalidArgument(
            f"scheme {scheme!r} is not a file system fsspec knows: {exc}"
        ) from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))  # type: ignore[abstract]


@dataclass(frozen=True)
class Location:
    """A directory on some file system, as a user named it (picklable: executors
    rebuild the file system from the scheme and options)."""

    url: str
    scheme: str
    authority: str
    root: str
    options: str = ""

    @property
    def fs(self) -> pafs.FileSystem:
        return _filesystem(self.scheme, self.authority, self.options)

    @property
    def local(self) -> bool:
        return self.scheme in ("", "file")

    def path(self, name: str) -> str:
        """The file system path of ``name`` in this directory."""
        return f"{self.root}/{name}" if self.root not in ("", "/") else f"{self.root}{name}"

    def url_of(self, name: str) -> str:
        """How messages name file ``name`` of this directory."""
        return f"{self.url.rstrip('/')}/{name}"

    def child(self, name: str) -> Location:
        return Location(
            self.url_of(name), self.scheme, self.authority, self.path(name), self.options
        )

    def __str__(self) -> str:
        return self.url


def locate(url: str | os.PathLike[str], options: str = "", *, what: str = "path") -> Location:
    """The Location a path or URL names (no globs: see :func:`expand`)."""
    text = os.fspath(url)
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"{what} must be a non-empty path or URL, got {url!r}")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if len(scheme) == 1 or not scheme:  # a Windows drive letter is no scheme
        return Location(text, "", "", os.path.abspath(text).rstrip("/") or "/", options)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument(f"{what} {text!r}: file URLs name this machine (file:///dir)")
        root = os.path.abspath(parts.path or "/").rstrip("/") or "/"
        return Location(text, "file", "", root, options)
    if scheme in _S3:
        if not parts.netloc:
            raise InvalidArgument(f"{what} {text!r} names no bucket (s3://BUCKET/PREFIX)")
        return Location(text, scheme, "", f"{parts.netloc}{parts.path}".rstrip("/"), options)
    # fsspec's implementations take the URL without its scheme as their path.
    rest = text.split("://", 1)[1] if "://" in text else text.split(":", 1)[1]
    root = rest.rstrip("/") or "/"
    return Location(text, scheme, parts.netloc, root, options)


def _braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (one level of braces at a time, as often as they occur)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [x for alt in match.group(1).split(",") for x in _braces(head + alt + tail)]


def _glob(location: Location) -> list[Location]:
    """Directories matching the glob in ``location.root``, sorted by URL."""
    fs = location.fs
    found: list[Location] = []
    for pattern in _braces(location.root):
        parts = pattern.split("/")
        first = next((i for i, part in enumerate(parts) if _GLOB.search(part)), len(parts))
        bases = ["/".join(parts[:first]) or ("/" if pattern.startswith("/") else "")]
        if first == len(parts) and fs.get_file_info(pattern).type != pafs.FileType.Directory:
            bases = []
        for part in parts[first:]:
            bases = [
                info.path.rstrip("/")
                for base in bases
                for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
                if info.type == pafs.FileType.Directory
                and fnmatch.fnmatchcase(info.base_name, part)
            ]
        prefix = location.url[: len(location.url) - len(location.root)]
        found.extend(
            Location(prefix + path, location.scheme, location.authority, path, location.options)
            for path in bases
        )
    unique = {loc.root: loc for loc in found}
    return sorted(unique.values(), key=lambda loc: loc.url)


def expand(paths: str | Sequence[str] | Iterable[str], options: str = "") -> list[Location]:
    """The capture directories ``paths`` name: one path or URL, or several, each
    possibly a glob; a glob that matches no directory is an error."""
    if isinstance(paths, str):
        paths = [paths]
    locations: list[Location] = []
    for path in paths:
        location = locate(path, options)
        if not _GLOB.search(location.root):
            locations.append(location)
            continue
        matched = _glob(location)
        if not matched:
            raise InvalidArgument(f"path {path!r} matches no directory")
        locations.extend(matched)
    if not locations:
        raise InvalidArgument("no capture directory given: use load(DIR) or load([DIR, ...])")
    seen: set[tuple[str, str]] = set()
    for location in locations:
        key = ("" if location.local else location.scheme, location.root)
        if key in seen:
            raise InvalidArgument(f"capture directory {location.url!r} is named twice")
        seen.add(key)
    return locations
