"""Options of the ``rvasync`` data source: parsed and checked once, with errors naming the option.

Spark hands options over as a case-insensitive mapping of strings (keys
arrive lower-cased). Each mode accepts its own set; anything else is an
error rather than silently ignored, because a misspelt option (``subjet``)
would otherwise publish to the wrong place or read the wrong columns.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rvasync.errors import DaemonUnavailable, InvalidArgument
from rvasync.fieldtypes import FieldType
from rvasync.spark.storage import Location, expand, parse_storage_options, redacted
from rvasync.spark.typemap import parse_field_type
from rvasync.subjects import check_send_subject

__all__ = ["FieldSpec", "ReadOptions", "WriteOptions", "parse_daemon"]

#: Default rows per read partition (``rowsPerPartition``): every Spark task costs tens of
#: milliseconds of CPU on the JVM and in the Python worker, so partitions are large and
#: may span files (docs/spark.md, "Partitions and pushdown").
ROWS_PER_PARTITION = 1048576
#: What a read does with a bad record (rvasync.spark.project), Spark's names for it.
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

# Spark adds these itself: the load() path (or paths, for a list), the streaming
# sink's checkpoint.
_READ_KEYS = {
    "path",
    "paths",
    "fields",
    "samplerows",
    "startingoffsets",
    "maxfilespertrigger",
    "pushdown",
    "rowsperpartition",
    "columns",
    "storageoptions",
    "mode",
    "columnnameofcorruptrecord",
    "stricttypes",
}
#: Options only a streaming read takes: a batch read refuses them.
STREAM_KEYS = {"startingoffsets": "startingOffsets", "maxfilespertrigger": "maxFilesPerTrigger"}
_WRITE_KEYS = {
    "cm_listeners",
    "cm_timeout",
    "daemon",
    "service",
    "network",
    "subject",
    "fieldtypes",
    "cm_name",
    "rowidfield",
    "path",
    "checkpointlocation",
}
_READ_NAMES = (
    "path (the load() argument), fields, columns, sampleRows, rowsPerPartition, pushdown, "
    "storageOptions, mode, columnNameOfCorruptRecord, strictTypes, and for streams "
    "startingOffsets, maxFilesPerTrigger"
)
_WRITE_NAMES = (
    "daemon, service, network, subject, fieldTypes, rowIdField, cm_name, cm_listeners, cm_timeout"
)
#: The field every published message gets, naming its row (option rowIdField).
ROW_ID_FIELD = "rvasync_row"


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): value for key, value in options.items()}


def _check_known(options: Mapping[str, str], known: set[str], names: str, mode: str) -> None:
    unknown = sorted(key for key in options if key.lower() not in known)
    if unknown:
        raise InvalidArgument(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"for {mode} with format('rvasync'); known: {names}"
        )


def _positive_int(
    options: Mapping[str, str], key: str, label: str, default: int | None
) -> int | None:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgument(f"option {label} must be a positive integer, got {text!r}")
    return value


@dataclass(frozen=True)
class FieldSpec:
    """One projected field: message field ``name`` of ``type`` as column ``column``
    (``type`` None until inferred from the capture)."""

    name: str
    type: FieldType | None
    column: str


_ENTRY = re.compile(r"^(?P<name>[^\s:]+)(?::(?P<type>\S*))?(?:\s+(?i:as)\s+(?P<column>\S+))?$")


def parse_fields(text: str) -> list[FieldSpec]:
    """``"price, qty:U16, subject:STRING as subject_field"`` -> FieldSpecs.

    An entry is ``name``, ``name:TYPE``, and either followed by ``as column``;
    anything else (``amount as``, ``a b``) is refused rather than read as a
    field name with spaces.
    """
    specs: list[FieldSpec] = []
    for part in text.split(","):
        entry = part.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise InvalidArgument(
                f"option fields: entry {entry!r} is not name, name:TYPE or name[:TYPE] as "
                f"column (field names with spaces or commas are read from the fields column)"
            )
        name, type_text, column = match.group("name", "type", "column")
        if type_text == "":
            raise InvalidArgument(f"option fields: entry {entry!r} has ':' but no type")
        ftype = parse_field_type(type_text, f"option fields, field {name!r}") if type_text else None
        specs.append(FieldSpec(name, ftype, column or name))
    if not specs:
        raise InvalidArgument("option fields is empty; name at least one field (name[:TYPE])")
    columns = [spec.column for spec in specs]
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise InvalidArgument(f"option fields names column(s) {', '.join(duplicates)} twice")
    return specs


#: The capture columns a read can have, in capture order (scan.BASE_SCHEMA's names).
CAPTURE_COLUMN_NAMES = (
    "subject",
    "reply_subject",
    "sender",
    "sequence",
    "received_at",
    "data",
    "fields",
)


def parse_columns(text: str) -> tuple[str, ...]:
    """``"received_at, data"`` -> the capture columns a read keeps, in the order given."""
    names = tuple(part.strip() for part in str(text).split(",") if part.strip())
    if not names:
        raise InvalidArgument(
            f"option columns is empty; name at least one of {', '.join(CAPTURE_COLUMN_NAMES)}"
        )
    unknown = [name for name in names if name not in CAPTURE_COLUMN_NAMES]
    if unknown:
        raise InvalidArgument(
            f"option columns: {', '.join(map(repr, unknown))} is not a capture column "
            f"(the capture columns are {', '.join(CAPTURE_COLUMN_NAMES)}; message fields "
            f"are read with option fields)"
        )
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidArgument(f"option columns names {', '.join(duplicates)} twice")
    return names


def _paths(options: Mapping[str, str]) -> tuple[str, ...]:
    """The load() argument: ``path`` for one path, ``paths`` (JSON) for a list."""
    paths = [options["path"]] if options.get("path") else []
    if options.get("paths"):
        try:
            listed = json.loads(options["paths"])
        except ValueError:
            listed = None
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise InvalidArgument(f"the load() paths {options['paths']!r} are not a list of paths")
        paths.extend(listed)
    if not paths or not all(str(p).strip() for p in paths):
        raise InvalidArgument(
            "no capture directory given: use spark.read.format('rvasync').load(DIR), or "
            "load([DIR, ...]); DIR may be a path, a URL or a glob"
        )
    return tuple(str(p) for p in paths)


def _choice(options: Mapping[str, str], key: str, label: str, allowed: Sequence[str]) -> str:
    value = str(options.get(key, allowed[0])).strip()
    for choice in allowed:
        if value.lower() == choice.lower():
            return choice
    raise InvalidArgument(
        f"option {label} must be {', '.join(map(repr, allowed[:-1]))} or {allowed[-1]!r}, "
        f"got {value!r}"
    )


def _corrupt_column(options: Mapping[str, str], taken: Sequence[str]) -> str | None:
    name = options.get("columnnameofcorruptrecord")
    if name is None:
        return None
    name = str(name).strip()
    if not name:
        raise InvalidArgument("option columnNameOfCorruptRecord is empty; name the column")
    if name in taken:
        raise InvalidArgument(
            f"option columnNameOfCorruptRecord: {name!r} is already a column of the read"
        )
    return name


@dataclass(frozen=True)
class ReadOptions:
    paths: tuple[str, ...]
    fields: tuple[FieldSpec, ...] = ()
    sample_rows: int = 1000
    starting_offsets: str = "earliest"
    max_files_per_trigger: int | None = None
    pushdown: bool = False
    rows_per_partition: int = ROWS_PER_PARTITION
    #: The capture columns kept (all of them, in capture order, by default).
    columns: tuple[str, ...] = CAPTURE_COLUMN_NAMES
    #: Keyword arguments of the file system, as canonical JSON ('' for none).
    storage_options: str = ""
    mode: str = "PERMISSIVE"
    corrupt_column: str | None = None
    strict_types: bool = False
    #: The streaming-only options the user gave (a batch read refuses them).
    stream_only: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """The load() argument as the user wrote it (for messages)."""
        return self.paths[0] if len(self.paths) == 1 else json.dumps(list(self.paths))

    def locations(self) -> list[Location]:
        """The capture directories the paths name (globs expanded now)."""
        return expand(self.paths, self.storage_options)

    def refuse_streaming_options(self) -> None:
        if self.stream_only:
            raise InvalidArgument(
                f"option{'s' if len(self.stream_only) > 1 else ''} "
                f"{', '.join(self.stream_only)} only apply to streaming reads "
                f"(spark.readStream); a batch read reads every committed file"
            )

    def summary(self) -> dict[str, Any]:
        """The options as a log line shows them (storage secrets hidden)."""
        return {
            "paths": list(self.paths),
            "columns": list(self.columns),
            "fields": [
                f"{s.name}:{s.type.name if s.type else '?'} as {s.column}" for s in self.fields
            ],
            "mode": self.mode,
            "strictTypes": self.strict_types,
            "columnNameOfCorruptRecord": self.corrupt_column,
            "rowsPerPartition": self.rows_per_partition,
            "pushdown": self.pushdown,
            "storageOptions": redacted(self.storage_options),
        }

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        options = _lower(options)
        _check_known(options, _READ_KEYS, _READ_NAMES, "reading")
        fields = tuple(parse_fields(options["fields"])) if options.get("fields") is not None else ()
        starting = str(options.get("startingoffsets", "earliest")).strip().lower()
        if starting not in ("earliest", "latest"):
            raise InvalidArgument(
                f"option startingOffsets must be 'earliest' or 'latest', got {starting!r}"
            )
        sample = _positive_int(options, "samplerows", "sampleRows", 1000)
        assert sample is not None
        per_part = _positive_int(
            options, "rowsperpartition", "rowsPerPartition", ROWS_PER_PARTITION
        )
        assert per_part is not None
        pushdown = _choice(options, "pushdown", "pushdown", ("false", "true"))
        strict = _choice(options, "stricttypes", "strictTypes", ("false", "true"))
        columns = (
            parse_columns(options["columns"])
            if options.get("columns") is not None
            else CAPTURE_COLUMN_NAMES
        )
        return cls(
            paths=_paths(options),
            fields=fields,
            sample_rows=sample,
            starting_offsets=starting,
            max_files_per_trigger=_positive_int(
                options, "maxfilespertrigger", "maxFilesPerTrigger", None
            ),
            pushdown=pushdown == "true",
            rows_per_partition=per_part,
            columns=columns,
            storage_options=parse_storage_options(
                options.get("storageoptions"), "option storageOptions"
            ),
            mode=_choice(options, "mode", "mode", MODES),
            corrupt_column=_corrupt_column(options, (*columns, *(f.column for f in fields))),
            strict_types=strict == "true",
            stream_only=tuple(label for key, label in STREAM_KEYS.items() if key in options),
        )


def parse_daemon(text: str) -> tuple[str, int]:
    """``"host:port"`` or ``"port"`` -> (host, port); errors name the daemon option."""
    host, sep, port_text = str(text).strip().rpartition(":")
    if not sep:
        host = "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536 or (sep and not host):
        raise InvalidArgument(f"option daemon must be 'host:port' or 'port', got {text!r}")
    return host, port


def _certified_options(options: Mapping[str, str]) -> tuple[str | None, tuple[str, ...], float]:
    from rvasync.protocol.cm.names import check_correspondent_name

    name = options.get("cm_name")
    if name is None:
        for key in ("cm_listeners", "cm_timeout"):
            if options.get(key) is not None:
                raise InvalidArgument(f"option {key} needs option cm_name (certified writing)")
        return None, (), 60.0
    try:
        check_correspondent_name(f"{name}.task", what="option cm_name")
    except Exception as exc:
        raise InvalidArgument(str(exc)) from None
    listeners = tuple(
        n.strip() for n in str(options.get("cm_listeners") or "").split(",") if n.strip()
    )
    for listener in listeners:
        try:
            check_correspondent_name(listener, what="option cm_listeners: listener name")
        except Exception as exc:
            raise InvalidArgument(str(exc)) from None
    text = options.get("cm_timeout", "60")
    try:
        timeout = float(text)
    except ValueError:
        timeout = 0.0
    if not timeout > 0:
        raise InvalidArgument(f"option cm_timeout must be positive seconds, got {text!r}")
    return str(name), listeners, timeout


@dataclass(frozen=True)
class WriteOptions:
    daemon: str
    service: str | None = None
    network: str | None = None
    subject: str | None = None
    field_types: dict[str, FieldType] = field(default_factory=dict)
    cm_name: str | None = None
    cm_listeners: tuple[str, ...] = ()
    cm_timeout: float = 60.0
    #: The field naming each message's row ('' for none).
    row_id_field: str = ROW_ID_FIELD

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        options = _lower(options)
        _check_known(options, _WRITE_KEYS, _WRITE_NAMES, "writing")
        if options.get("path"):
            raise InvalidArgument(
                "the rvasync sink publishes messages and takes no path; use "
                "option('daemon', 'host:port') with save() and no argument"
            )
        daemon = options.get("daemon")
        if not daemon:
            raise InvalidArgument(
                "option daemon is required for writing: the 'host:port' of a standalone "
                "rvasync daemon every executor can reach"
            )
        parse_daemon(daemon)
        subject = options.get("subject")
        if subject is not None:
            try:
                check_send_subject(subject)
            except Exception as exc:
                raise InvalidArgument(f"option subject: {exc}") from None
        types: dict[str, FieldType] = {}
        for part in str(options.get("fieldtypes") or "").split(","):
            if not part.strip():
                continue
            column, sep, type_text = part.partition(":")
            if not sep or not column.strip():
                raise InvalidArgument(
                    f"option fieldTypes: entry {part.strip()!r} is not column:TYPE"
                )
            types[column.strip()] = parse_field_type(
                type_text, f"option fieldTypes, column {column.strip()!r}"
            )
        cm_name, listeners, timeout = _certified_options(options)
        row_id = str(options.get("rowidfield", ROW_ID_FIELD)).strip()
        if row_id.startswith("_"):
            raise InvalidArgument(
                f"option rowIdField {row_id!r}: field names starting with '_' are reserved"
            )
        return cls(
            daemon=str(daemon),
            service=options.get("service"),
            network=options.get("network"),
            subject=subject,
            field_types=types,
            cm_name=cm_name,
            cm_listeners=listeners,
            cm_timeout=timeout,
            row_id_field=row_id,
        )

    def check_reachable(self, timeout: float = 3.0) -> None:
        """Fail at job start, on the driver, when no daemon listens at ``daemon``."""
        host, port = parse_daemon(self.daemon)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as exc:
            raise DaemonUnavailable(
                f"option daemon: no rvasync daemon reachable at {host}:{port} "
                f"({exc.strerror or exc}); start one with 'rvasync daemon' first"
            ) from None
