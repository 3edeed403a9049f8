"""Job configuration (CONTRACT section 4): load a TOML file into frozen, validated objects.

Every error is a :class:`ConfigError` naming the key, raised before any input is read.
Checks that need Spark (view SQL parses and names only declared tables and columns)
live in :mod:`deltamv.views.sql` and run at job start, also before any input is read.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deltamv.errors import ConfigError
from deltamv.schema import TableSchema

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_INTERVAL = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$",
    re.I,
)

InvariantKind = Literal["constant", "always"]


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
    name: str
    schema: TableSchema
    primary_key: tuple[str, ...]
    path: str | None = None  # user-visible Delta copy of the table at each watermark

    def __post_init__(self) -> None:
        for col in self.primary_key:
            if self.schema.column(col) is None:
                raise ConfigError(
                    f"tables.{self.name}.primary_key",
                    f"column {col!r} is not in the schema (columns: {', '.join(self.schema.names)})",
                )


@dataclass(frozen=True)
class ViewConfig:
    name: str
    sql: str
    path: str


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
    internal mirror tables keep only their latest version's files.
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
    source: str = "<config>"

    def __post_init__(self) -> None:
        if not self.views:
            raise ConfigError("views", "at least one view is required", source=self.source)
        seen: dict[str, str] = {}
        owners = [(f"views.{v.name}.path", v.path) for v in self.views.values()] + [
            (f"tables.{t.name}.path", t.path) for t in self.tables.values() if t.path
        ]
        for key, path in owners:
            norm = os.path.normpath(path)
            if norm in seen:
                raise ConfigError(
                    key, f"path {path!r} is also used by {seen[norm]}", source=self.source
                )
            seen[norm] = key
            inside = os.path.normpath(self.checkpoint)
            if norm == inside or norm.startswith(inside + os.sep):
                raise ConfigError(
                    key, f"path {path!r} lies inside job.checkpoint", source=self.source
                )
        for inv in self.invariants.values():
            if inv.view not in self.views:
                raise ConfigError(
                    f"invariants.{inv.name}.view",
                    f"unknown view {inv.view!r} (views: {', '.join(sorted(self.views))})",
                    source=self.source,
                )

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.checkpoint)


_JOB_KEYS = {
    "name": True,
    "changelog": True,
    "checkpoint": True,
    "snapshot": False,
    "trigger_interval": False,
    "max_segments_per_batch": False,
}
_TABLE_KEYS = {"schema": True, "primary_key": True, "path": False}
_VIEW_KEYS = {"sql": True, "path": True}
_INVARIANT_KEYS = {"view": True, "constant": False, "always": False}
_SPARK_KEYS = {"master": False, "conf": False}
_MAINTENANCE_KEYS = {
    "checkpoint_interval": False,
    "vacuum_retention": False,
    "vacuum_interval": False,
}
_TOP_KEYS = {
    "job": True,
    "tables": True,
    "views": True,
    "invariants": False,
    "spark": False,
    "maintenance": False,
}


def load_config(path: str | os.PathLike[str]) -> JobConfig:
    """Read and validate a job config. Relative paths resolve against the file's folder."""
    cfg_path = Path(path)
    source = str(cfg_path)
    try:
        raw = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("<file>", f"config file {source} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<file>", f"not valid TOML: {exc}", source=source) from None
    return parse_config(raw, base_dir=cfg_path.resolve().parent, source=source)


def parse_config(raw: Mapping[str, Any], *, base_dir: Path, source: str = "<config>") -> JobConfig:
    """Validate an already-parsed TOML document (see :func:`load_config`)."""

    def err(key: str, reason: str) -> ConfigError:
        return ConfigError(key, reason, source=source)

    def keys(table: Any, prefix: str, allowed: Mapping[str, bool]) -> Mapping[str, Any]:
        if not isinstance(table, Mapping):
            raise err(prefix or "<top>", "must be a table")
        for key in table:
            if key not in allowed:
                where = f"{prefix}.{key}" if prefix else key
                raise err(where, f"unknown key (valid: {', '.join(sorted(allowed))})")
        for key, required in allowed.items():
            if required and key not in table:
                raise err(f"{prefix}.{key}" if prefix else key, "missing required key")
        return table

    def string(value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise err(key, f"must be a non-empty string, got {value!r}")
        return value

    def resolve(value: Any, key: str) -> str:
        text = os.path.expanduser(string(value, key))
        if "://" in text:
            return text
        return str((base_dir / text).resolve()) if not os.path.isabs(text) else text

    top = keys(raw, "", _TOP_KEYS)
    job = keys(top["job"], "job", _JOB_KEYS)
    name = string(job["name"], "job.name")
    if not _JOB_NAME.match(name):
        raise err("job.name", f"{name!r} may hold only letters, digits, '_', '.', '-'")
    interval = 2.0
    if "trigger_interval" in job:
        try:
            interval = parse_interval(string(job["trigger_interval"], "job.trigger_interval"))
        except ValueError as exc:
            raise err("job.trigger_interval", str(exc)) from None
    max_segments = job.get("max_segments_per_batch", 1000)
    if not isinstance(max_segments, int) or isinstance(max_segments, bool) or max_segments < 1:
        raise err("job.max_segments_per_batch", f"must be a positive integer, got {max_segments!r}")

    tables: dict[str, TableConfig] = {}
    raw_tables = top["tables"]
    if not isinstance(raw_tables, Mapping) or not raw_tables:
        raise err("tables", "at least one table is required")
    for tname, traw in raw_tables.items():
        prefix = f"tables.{tname}"
        if not _NAME.match(tname):
            raise err(prefix, "a table name must be a SQL identifier")
        t = keys(traw, prefix, _TABLE_KEYS)
        try:
            schema = TableSchema.from_ddl(string(t["schema"], f"{prefix}.schema"))
        except ValueError as exc:
            raise err(f"{prefix}.schema", str(exc)) from None
        pk = t["primary_key"]
        if isinstance(pk, str):
            pk = [pk]
        if not isinstance(pk, list) or not pk or not all(isinstance(c, str) for c in pk):
            raise err(f"{prefix}.primary_key", "must be a non-empty list of column names")
        try:
            tables[tname] = TableConfig(
                tname,
                schema,
                tuple(pk),
                resolve(t["path"], f"{prefix}.path") if "path" in t else None,
            )
        except ConfigError as exc:
            raise err(exc.key, exc.reason) from None

    views: dict[str, ViewConfig] = {}
    raw_views = top["views"]
    if not isinstance(raw_views, Mapping):
        raise err("views", "must be a table of views")
    for vname, vraw in raw_views.items():
        prefix = f"views.{vname}"
        if not _NAME.match(vname):
            raise err(prefix, "a view name must be a SQL identifier")
        if vname in tables:
            raise err(prefix, f"a view may not share its name with table {vname!r}")
        v = keys(vraw, prefix, _VIEW_KEYS)
        views[vname] = ViewConfig(
            vname, string(v["sql"], f"{prefix}.sql"), resolve(v["path"], f"{prefix}.path")
        )

    invariants: dict[str, InvariantConfig] = {}
    raw_inv = top.get("invariants", {})
    if not isinstance(raw_inv, Mapping):
        raise err("invariants", "must be a table of invariants")
    for iname, iraw in raw_inv.items():
        prefix = f"invariants.{iname}"
        i = keys(iraw, prefix, _INVARIANT_KEYS)
        kinds = [k for k in ("constant", "always") if k in i]
        if len(kinds) != 1:
            raise err(prefix, "give exactly one of 'constant' or 'always'")
        kind: InvariantKind = "constant" if kinds[0] == "constant" else "always"
        invariants[iname] = InvariantConfig(
            iname, string(i["view"], f"{prefix}.view"), kind, string(i[kind], f"{prefix}.{kind}")
        )

    spark = SparkConfig()
    if "spark" in top:
        s = keys(top["spark"], "spark", _SPARK_KEYS)
        conf = s.get("conf", {})
        if not isinstance(conf, Mapping):
            raise err("spark.conf", "must be a table of Spark settings")
        spark = SparkConfig(
            string(s["master"], "spark.master") if "master" in s else None,
            {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()},
        )

    maintenance = MaintenanceConfig()
    if "maintenance" in top:
        m = keys(top["maintenance"], "maintenance", _MAINTENANCE_KEYS)

        def duration(key: str, default: float) -> float:
            if key not in m:
                return default
            try:
                return parse_interval(string(m[key], f"maintenance.{key}"))
            except ValueError as exc:
                raise err(f"maintenance.{key}", str(exc)) from None

        every = m.get("checkpoint_interval", maintenance.checkpoint_interval)
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise err("maintenance.checkpoint_interval", f"must be 0 or more, got {every!r}")
        retention: float | None = maintenance.vacuum_retention
        if m.get("vacuum_retention") == "off":
            retention = None
        elif "vacuum_retention" in m:
            retention = duration("vacuum_retention", 0)
        maintenance = MaintenanceConfig(
            every, retention, duration("vacuum_interval", maintenance.vacuum_interval)
        )

    return JobConfig(
        name=name,
        changelog=resolve(job["changelog"], "job.changelog"),
        checkpoint=resolve(job["checkpoint"], "job.checkpoint"),
        snapshot=resolve(job["snapshot"], "job.snapshot") if "snapshot" in job else None,
        trigger_interval=interval,
        max_segments_per_batch=max_segments,
        tables=tables,
        views=views,
        invariants=invariants,
        spark=spark,
        maintenance=maintenance,
        source=source,
    )
