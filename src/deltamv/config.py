"""Job configuration: load a TOML file into frozen, validated objects (docs/config.md).

Every error is a :class:`ConfigError` naming the key, raised before any input is read.
Checks that need Spark (view SQL parses and names only declared tables and columns)
live in :mod:`deltamv.views.sql` and run at job start, also before any input is read.
Each section has its own parser below; :func:`parse_config` puts them together.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from deltamv.errors import ConfigError
from deltamv.schema import TableSchema

__all__ = [
    "InvariantConfig",
    "JobConfig",
    "MaintenanceConfig",
    "SourceConfig",
    "SparkConfig",
    "TableConfig",
    "ViewConfig",
    "load_config",
    "parse_config",
    "parse_interval",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_INTERVAL = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$",
    re.I,
)

InvariantKind = Literal["constant", "always"]
Maintain = Literal["auto", "incremental", "recompute"]
SourceKind = Literal["changelog", "postgres"]


def parse_interval(text: str) -> float:
    """Seconds in ``"2 seconds"``, ``"500 ms"``, ``"1 minute"``, ``"6 hours"``, ``"7 days"``."""
    match = _INTERVAL.match(text)
    if not match:
        raise ValueError(f"{text!r} is not an interval like '2 seconds', '500 ms' or '1 minute'")
    amount, unit = float(match[1]), match[2].lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return amount / 1000
    if unit.startswith("h"):
        return amount * 3600
    if unit.startswith("d"):
        return amount * 86400
    if unit.startswith("m"):
        return amount * 60
    return amount


@dataclass(frozen=True)
class TableConfig:
    """A source table. ``schema`` and ``primary_key`` may be empty for a PostgreSQL source
    until the job reads them from its catalog (:meth:`JobConfig.with_tables`)."""

    name: str
    schema: TableSchema
    primary_key: tuple[str, ...]
    path: str | None = None  # user-visible Delta copy of the table at each watermark
    pg_table: str | None = None  # PostgreSQL source: schema.table (default public.<name>)

    def __post_init__(self) -> None:
        twice = sorted({c for c in self.primary_key if self.primary_key.count(c) > 1})
        if twice:
            raise ConfigError(
                f"tables.{self.name}.primary_key", f"names {', '.join(map(repr, twice))} twice"
            )
        for col in self.primary_key:
            if self.schema.columns and self.schema.column(col) is None:
                raise ConfigError(
                    f"tables.{self.name}.primary_key",
                    f"column {col!r} is not in the schema (columns: {', '.join(self.schema.names)})",
                )


@dataclass(frozen=True)
class ViewConfig:
    name: str
    sql: str
    path: str
    maintain: Maintain = "auto"  # "incremental" refuses a view the rules do not cover


@dataclass(frozen=True)
class InvariantConfig:
    """A query over one view that must hold at every version of it.

    ``constant``: the query's result is identical at every version.
    ``always``: the query returns one boolean column, true in every row, at every version.
    """

    name: str
    view: str
    kind: InvariantKind
    sql: str


@dataclass(frozen=True)
class MaintenanceConfig:
    """Housekeeping of the Delta tables a job writes (``[maintenance]``, see docs/guarantees.md).

    ``checkpoint_interval``: write a Delta log checkpoint every this many versions of a
    table (0: never). ``vacuum_retention``: seconds a removed data file is kept, so every
    version current within that window stays readable (None: never vacuum the views and
    published tables). ``vacuum_interval``: seconds between vacuum passes. The job's
    internal tables keep only their latest version's files.
    """

    checkpoint_interval: int = 20
    vacuum_retention: float | None = 7 * 86400
    vacuum_interval: float = 3600

    def __post_init__(self) -> None:
        if self.checkpoint_interval < 0:
            raise ConfigError("maintenance.checkpoint_interval", "must be 0 or more")
        if self.vacuum_retention is not None and self.vacuum_retention < 0:
            raise ConfigError("maintenance.vacuum_retention", "must not be negative")


@dataclass(frozen=True)
class SparkConfig:
    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceConfig:
    """Where the job reads its upstream: a change log (``[job] changelog``) or PostgreSQL."""

    kind: SourceKind = "changelog"
    dsn: str | None = None  # postgres: a libpq connection string
    slot: str | None = None  # postgres: default "deltamv_<job name>"
    publication: str | None = None  # postgres: default "deltamv_<job name>"
    max_batch_bytes: int = 64 << 20  # postgres: WAL read per micro-batch, at most
    connect_timeout: float = 60.0  # postgres: seconds of retries before a connection gives up


@dataclass(frozen=True)
class JobConfig:
    name: str
    changelog: str
    checkpoint: str
    tables: Mapping[str, TableConfig]
    views: Mapping[str, ViewConfig]
    snapshot: str | None = None
    trigger_interval: float = 2.0
    max_segments_per_batch: int = 1000
    invariants: Mapping[str, InvariantConfig] = field(default_factory=dict)
    spark: SparkConfig = field(default_factory=SparkConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    upstream: SourceConfig = field(default_factory=SourceConfig)
    origin: str = "<config>"  # the config file, for messages

    def __post_init__(self) -> None:
        if not self.views:
            raise ConfigError("views", "at least one view is required", source=self.origin)
        self._check_locations()
        for inv in self.invariants.values():
            if inv.view not in self.views:
                raise ConfigError(
                    f"invariants.{inv.name}.view",
                    f"unknown view {inv.view!r} (views: {', '.join(sorted(self.views))})",
                    source=self.origin,
                )

    def _check_locations(self) -> None:
        """Where outputs may not be. A table's vacuum deletes every file in its folder
        that no version names (another table's log, Spark's offsets, the change log), so
        no output may hold, or lie inside, another output or the checkpoint, nor hold the
        change log or the snapshot. The change log's reader takes each folder in it for a
        region unless its name starts with '.' or '_'; the snapshot's, each declared
        table's folder."""
        outputs = [(f"views.{v.name}.path", v.path) for v in self.views.values()] + [
            (f"tables.{t.name}.path", t.path) for t in self.tables.values() if t.path
        ]
        inputs = [("job.changelog", self.changelog)] if self.changelog else []
        inputs += [("job.snapshot", self.snapshot)] if self.snapshot else []
        placed: list[tuple[str, str]] = [("job.checkpoint", self.checkpoint)]
        for key, path in outputs:
            unusable = _unusable_table_path(path)
            if unusable:
                raise ConfigError(key, f"path {path!r} {unusable}", source=self.origin)
            for other, where in [*placed, *inputs]:
                problem = self._conflict(path, other, where)
                if problem:
                    raise ConfigError(key, f"path {path!r} {problem} {other}", source=self.origin)
            placed.append((key, path))
        unusable = _unusable_table_path(self.checkpoint)  # the job's own copies are in it
        if unusable:
            raise ConfigError("job.checkpoint", f"path {self.checkpoint!r} {unusable}",
                              source=self.origin)  # fmt: skip
        if self.changelog:
            problem = self._conflict(self.checkpoint, "job.changelog", self.changelog)
            if problem and problem != "holds":
                raise ConfigError(
                    "job.checkpoint",
                    f"path {self.checkpoint!r} {problem} job.changelog",
                    source=self.origin,
                )

    def _conflict(self, path: str, key: str, where: str) -> str | None:
        """How ``path`` and ``where`` (config key ``key``) overlap, if it matters: inside
        the change log or the snapshot only a folder their readers read counts."""
        problem = _overlap(path, where)
        if problem != "lies inside" or key not in ("job.changelog", "job.snapshot"):
            return problem
        first = os.path.relpath(os.path.normpath(path), os.path.normpath(where)).split(os.sep)[0]
        if key == "job.changelog":
            return None if first.startswith((".", "_")) else problem
        return problem if first in self.tables else None

    def with_tables(self, tables: Mapping[str, TableConfig]) -> JobConfig:
        """This config with its tables' schemas and keys filled in (PostgreSQL catalog)."""
        return replace(self, tables=dict(tables))


_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _unusable_table_path(path: str) -> str | None:
    r"""Why a table cannot be kept at the local ``path``, or None: delta-rs takes a local
    path for a URL, so a percent escape in it names another directory, and ``[ ] | ^ \``
    fail; Spark, reading a table by its files, takes ``[ ] { } * ?`` for a pattern. (A
    URI, with ``://``, is the user's to encode.)"""
    if "://" in path:
        return None
    bad = sorted({c for c in path if c in "[]{}*?|^\\"})
    if bad:
        return (
            f"has {' '.join(bad)}, which delta-rs cannot open a table under, or Spark reads"
            " as a pattern"
        )
    escape = _PERCENT_ESCAPE.search(path)
    if escape:
        return f"has {escape.group()!r}, which delta-rs reads as a percent-encoded character"
    return None


def _overlap(path: str, other: str) -> str | None:
    """How ``path`` and ``other`` share a directory: "is also used by", "lies inside" or
    "holds"; None when neither is in the other."""
    a, b = os.path.normpath(path), os.path.normpath(other)
    if a == b:
        return "is also used by"
    if a.startswith(b.rstrip(os.sep) + os.sep):
        return "lies inside"
    if b.startswith(a.rstrip(os.sep) + os.sep):
        return "holds"
    return None


# -- parsing ----------------------------------------------------------------------------
_JOB_KEYS = {
    "name": True,
    "changelog": False,  # required for the change-log source
    "checkpoint": True,
    "snapshot": False,
    "trigger_interval": False,
    "max_segments_per_batch": False,
}
_TABLE_KEYS = {"schema": False, "primary_key": False, "path": False, "pg_table": False}
_VIEW_KEYS = {"sql": True, "path": True, "maintain": False}
_INVARIANT_KEYS = {"view": True, "constant": False, "always": False}
_SPARK_KEYS = {"master": False, "conf": False}
_MAINTENANCE_KEYS = {
    "checkpoint_interval": False,
    "vacuum_retention": False,
    "vacuum_interval": False,
}
_SOURCE_KEYS = {"kind": False, "dsn": False, "slot": False, "publication": False,
                "max_batch_bytes": False, "connect_timeout": False}  # fmt: skip
_TOP_KEYS = {
    "job": True,
    "source": False,
    "tables": True,
    "views": True,
    "invariants": False,
    "spark": False,
    "maintenance": False,
}


@dataclass(frozen=True)
class _Reader:
    """Shared helpers of the section parsers: errors name the key and the file."""

    origin: str
    base_dir: Path

    def err(self, key: str, reason: str) -> ConfigError:
        return ConfigError(key, reason, source=self.origin)

    def keys(self, table: Any, prefix: str, allowed: Mapping[str, bool]) -> Mapping[str, Any]:
        if not isinstance(table, Mapping):
            raise self.err(prefix or "<top>", "must be a table")
        for key in table:
            if key not in allowed:
                where = f"{prefix}.{key}" if prefix else key
                raise self.err(where, f"unknown key (valid: {', '.join(sorted(allowed))})")
        for key, required in allowed.items():
            if required and key not in table:
                raise self.err(f"{prefix}.{key}" if prefix else key, "missing required key")
        return table

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.err(key, f"must be a non-empty string, got {value!r}")
        return value

    def path(self, value: Any, key: str) -> str:
        text = os.path.expanduser(self.string(value, key))
        if "://" in text:
            return text
        return str((self.base_dir / text).resolve()) if not os.path.isabs(text) else text

    def interval(self, value: Any, key: str) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise self.err(
                key, f"{value!r} has no unit: write it as a string, like '{value} seconds'"
            )
        try:
            return parse_interval(self.string(value, key))
        except ValueError as exc:
            raise self.err(key, str(exc)) from None

    def count(self, value: Any, key: str, *, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            word = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.err(key, f"must be {word}, got {value!r}")
        return value


def load_config(path: str | os.PathLike[str]) -> JobConfig:
    """Read and validate a job config. Relative paths resolve against the file's folder."""
    cfg_path = Path(path)
    origin = str(cfg_path)
    try:
        raw = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("", f"config file {origin} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                          source=origin) from None  # fmt: skip
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {origin}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"not valid TOML: {exc}", source=origin) from None
    return parse_config(raw, base_dir=cfg_path.resolve().parent, source=origin)


def parse_config(raw: Mapping[str, Any], *, base_dir: Path, source: str = "<config>") -> JobConfig:
    """Validate an already-parsed TOML document (see :func:`load_config`)."""
    r = _Reader(source, base_dir)
    top = r.keys(raw, "", _TOP_KEYS)
    upstream = _source(r, top.get("source", {}))
    job = _job(r, top["job"], upstream)
    tables = _tables(r, top["tables"], upstream)
    views = _views(r, top["views"], tables)
    return JobConfig(
        tables=tables,
        views=views,
        invariants=_invariants(r, top.get("invariants", {})),
        spark=_spark(r, top["spark"]) if "spark" in top else SparkConfig(),
        maintenance=_maintenance(r, top["maintenance"])
        if "maintenance" in top
        else MaintenanceConfig(),
        upstream=upstream,
        origin=source,
        **job,
    )


def _job(r: _Reader, raw: Any, upstream: SourceConfig) -> dict[str, Any]:
    job = r.keys(raw, "job", _JOB_KEYS)
    name = r.string(job["name"], "job.name")
    if not _JOB_NAME.match(name):
        raise r.err("job.name", f"{name!r} may hold only letters, digits, '_', '.', '-'")
    if upstream.kind == "changelog" and "changelog" not in job:
        raise r.err("job.changelog", 'missing required key (or set [source] kind = "postgres")')
    if upstream.kind == "postgres":
        for key in ("changelog", "snapshot"):
            if key in job:
                raise r.err(f"job.{key}", 'not used with [source] kind = "postgres"')
    return {
        "name": name,
        "changelog": r.path(job["changelog"], "job.changelog") if "changelog" in job else "",
        "checkpoint": r.path(job["checkpoint"], "job.checkpoint"),
        "snapshot": r.path(job["snapshot"], "job.snapshot") if "snapshot" in job else None,
        "trigger_interval": (
            r.interval(job["trigger_interval"], "job.trigger_interval")
            if "trigger_interval" in job else 2.0
        ),
        "max_segments_per_batch": r.count(
            job.get("max_segments_per_batch", 1000), "job.max_segments_per_batch", minimum=1
        ),
    }  # fmt: skip


def _source(r: _Reader, raw: Any) -> SourceConfig:
    src = r.keys(raw, "source", _SOURCE_KEYS)
    kind = src.get("kind", "changelog")
    if kind not in ("changelog", "postgres"):
        raise r.err("source.kind", f"{kind!r} is not a source (valid: changelog, postgres)")
    if kind == "changelog":
        extra = [k for k in src if k != "kind"]
        if extra:
            raise r.err(f"source.{extra[0]}", 'only used with kind = "postgres"')
        return SourceConfig()
    if "dsn" not in src:
        raise r.err("source.dsn", "missing required key (a libpq connection string)")
    return SourceConfig(
        kind="postgres",
        dsn=r.string(src["dsn"], "source.dsn"),
        slot=_identifier(r, src["slot"], "source.slot") if "slot" in src else None,
        publication=(
            _identifier(r, src["publication"], "source.publication") if "publication" in src else None
        ),
        max_batch_bytes=r.count(src.get("max_batch_bytes", 64 << 20), "source.max_batch_bytes",
                                minimum=1),
        connect_timeout=(
            r.interval(src["connect_timeout"], "source.connect_timeout")
            if "connect_timeout" in src else 60.0
        ),
    )  # fmt: skip


def _identifier(r: _Reader, value: Any, key: str) -> str:
    text = r.string(value, key)
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", text):
        raise r.err(key, f"{text!r} must be a lower-case PostgreSQL name (a-z, 0-9, _)")
    return text


def _tables(r: _Reader, raw: Any, upstream: SourceConfig) -> dict[str, TableConfig]:
    if not isinstance(raw, Mapping) or not raw:
        raise r.err("tables", "at least one table is required")
    tables: dict[str, TableConfig] = {}
    for tname, traw in raw.items():
        prefix = f"tables.{tname}"
        if not _NAME.match(tname):
            raise r.err(prefix, "a table name must be a SQL identifier")
        t = r.keys(traw, prefix, _TABLE_KEYS)
        postgres = upstream.kind == "postgres"
        if not postgres:
            for key in ("schema", "primary_key"):
                if key not in t:
                    raise r.err(f"{prefix}.{key}", "missing required key")
            if "pg_table" in t:
                raise r.err(f"{prefix}.pg_table", 'only used with [source] kind = "postgres"')
        schema = TableSchema(())
        if "schema" in t:
            try:
                schema = TableSchema.from_ddl(r.string(t["schema"], f"{prefix}.schema"))
            except ValueError as exc:
                raise r.err(f"{prefix}.schema", str(exc)) from None
        pk: Any = t.get("primary_key", [])
        if isinstance(pk, str):
            pk = [pk]
        if "primary_key" in t and (
            not isinstance(pk, list) or not pk or not all(isinstance(c, str) for c in pk)
        ):
            raise r.err(f"{prefix}.primary_key", "must be a non-empty list of column names")
        pg_table = r.string(t["pg_table"], f"{prefix}.pg_table") if "pg_table" in t else None
        try:
            tables[tname] = TableConfig(
                tname, schema, tuple(pk),
                r.path(t["path"], f"{prefix}.path") if "path" in t else None, pg_table,
            )  # fmt: skip
        except ConfigError as exc:
            raise r.err(exc.key, exc.reason) from None
    return tables


def _views(r: _Reader, raw: Any, tables: Mapping[str, TableConfig]) -> dict[str, ViewConfig]:
    if not isinstance(raw, Mapping):
        raise r.err("views", "must be a table of views")
    views: dict[str, ViewConfig] = {}
    for vname, vraw in raw.items():
        prefix = f"views.{vname}"
        if not _NAME.match(vname):
            raise r.err(prefix, "a view name must be a SQL identifier")
        if vname in tables:
            raise r.err(prefix, f"a view may not share its name with table {vname!r}")
        v = r.keys(vraw, prefix, _VIEW_KEYS)
        maintain = v.get("maintain", "auto")
        if maintain not in ("auto", "incremental", "recompute"):
            raise r.err(
                f"{prefix}.maintain",
                f"{maintain!r} is not a mode (valid: auto, incremental, recompute)",
            )
        views[vname] = ViewConfig(
            vname, r.string(v["sql"], f"{prefix}.sql"), r.path(v["path"], f"{prefix}.path"),
            maintain,
        )  # fmt: skip
    return views


def _invariants(r: _Reader, raw: Any) -> dict[str, InvariantConfig]:
    if not isinstance(raw, Mapping):
        raise r.err("invariants", "must be a table of invariants")
    invariants: dict[str, InvariantConfig] = {}
    for iname, iraw in raw.items():
        prefix = f"invariants.{iname}"
        i = r.keys(iraw, prefix, _INVARIANT_KEYS)
        kinds = [k for k in ("constant", "always") if k in i]
        if len(kinds) != 1:
            raise r.err(prefix, "give exactly one of 'constant' or 'always'")
        kind: InvariantKind = "constant" if kinds[0] == "constant" else "always"
        invariants[iname] = InvariantConfig(
            iname,
            r.string(i["view"], f"{prefix}.view"),
            kind,
            r.string(i[kind], f"{prefix}.{kind}"),
        )
    return invariants


def _spark(r: _Reader, raw: Any) -> SparkConfig:
    s = r.keys(raw, "spark", _SPARK_KEYS)
    conf = s.get("conf", {})
    if not isinstance(conf, Mapping):
        raise r.err("spark.conf", "must be a table of Spark settings")
    settings = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()}
    zone = settings.get(TIME_ZONE)
    if zone is not None and not is_utc(zone):
        raise r.err(
            f"spark.conf.{TIME_ZONE}",
            f"deltamv evaluates every view in UTC, maintained or recomputed alike; {zone!r} is"
            " not supported (convert in the view's SQL: from_utc_timestamp(ts, 'Europe/Paris'))",
        )
    ansi = settings.get(ANSI)
    if ansi is not None and ansi.strip().lower() != "true":
        raise r.err(
            f"spark.conf.{ANSI}",
            f"deltamv evaluates every view in Spark's ANSI mode, maintained or recomputed"
            f" alike; {ansi!r} is not supported (where a row may fail, say so in the view's"
            " SQL: try_divide, try_cast, try_add)",
        )
    memory = settings.get("spark.driver.memory")
    if memory is not None and not _MEMORY.fullmatch(memory.strip()):
        raise r.err(
            "spark.conf.spark.driver.memory",
            f"{memory!r} is not an amount of memory (like '2g' or '512m')",
        )
    master = r.string(s["master"], "spark.master") if "master" in s else None
    if master is not None and not (master == "yarn" or master.startswith(_MASTERS)):
        raise r.err(
            "spark.master",
            f"{master!r} is not a Spark master (local[N], local-cluster[...], spark://...,"
            " k8s://..., yarn)",
        )
    return SparkConfig(master, settings)


# What Spark's launcher takes; anything else stops its JVM before it starts.
_MASTERS = ("local", "spark://", "k8s://")
_MEMORY = re.compile(r"\d+([kmgtp]b?|b)?", re.IGNORECASE)


TIME_ZONE = "spark.sql.session.timeZone"
ANSI = "spark.sql.ansi.enabled"
_UTC_NAMES = {
    *(f"{p}{n}" for p in ("", "ETC/") for n in ("UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0",
                                              "UNIVERSAL", "ZULU", "GREENWICH")),
    "Z", "+00:00", "-00:00", "UTC+00:00", "GMT+00:00",
}  # fmt: skip


def is_utc(zone: str) -> bool:
    """Whether a Spark session time zone is UTC by one of its names."""
    return zone.strip().upper() in _UTC_NAMES


def _maintenance(r: _Reader, raw: Any) -> MaintenanceConfig:
    m = r.keys(raw, "maintenance", _MAINTENANCE_KEYS)
    default = MaintenanceConfig()
    duration: Callable[[str, float], float] = lambda key, fallback: (  # noqa: E731
        r.interval(m[key], f"maintenance.{key}") if key in m else fallback
    )
    every = m.get("checkpoint_interval", default.checkpoint_interval)
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise r.err("maintenance.checkpoint_interval", f"must be 0 or more, got {every!r}")
    retention: float | None = default.vacuum_retention
    if m.get("vacuum_retention") == "off":
        retention = None
    elif "vacuum_retention" in m:
        retention = duration("vacuum_retention", 0)
    return MaintenanceConfig(every, retention, duration("vacuum_interval", default.vacuum_interval))
