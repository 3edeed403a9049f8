"""Writing a run's files: segments (temp name, then rename), truth, snapshot, config."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltamv.sim.workloads import WORKLOAD_CLASSES, Workload

_PARQUET_SCHEMA = pa.schema(
    [
        pa.field("region", pa.int64()),
        pa.field("type", pa.string()),
        pa.field("start_ts", pa.int64()),
        pa.field("commit_ts", pa.int64()),
        pa.field("ts", pa.int64()),
        pa.field("table", pa.string()),
        pa.field("key", pa.string()),
        pa.field("op", pa.string()),
        pa.field("value", pa.string()),  # the row as JSON object text
        pa.field("old_value", pa.string()),
        pa.field("start_key", pa.string()),
        pa.field("end_key", pa.string()),
        pa.field("parents", pa.list_(pa.int64())),
        pa.field("primary", pa.string()),
        pa.field("large", pa.bool_()),
    ]
)
_JSON_FIELDS = ("value", "old_value")


def dumps(obj: Any) -> str:
    """Compact JSON, keys in insertion order: the byte format of every file we write."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class SegmentWriter:
    """Publishes region streams as ``region-<id>/<seq>.<fmt>`` segment files.

    Each file is written under a hidden name and renamed into place, so a reader never
    sees a partial segment. ``fmt`` "mixed" picks JSONL or Parquet per segment.
    """

    def __init__(self, changelog: Path, fmt: str, seed: int) -> None:
        self.root = changelog
        self.fmt = fmt
        self.rng = random.Random(seed * 7919 + 17)
        self.seq: dict[int, int] = {}
        self.segments = 0
        changelog.mkdir(parents=True, exist_ok=True)

    def publish(self, region: int, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        seq = self.seq.get(region, 0)
        self.seq[region] = seq + 1
        fmt = self.fmt if self.fmt != "mixed" else self.rng.choice(("jsonl", "parquet"))
        folder = self.root / f"region-{region}"
        folder.mkdir(exist_ok=True)
        target = folder / f"{seq:08d}.{fmt}"
        if fmt == "jsonl":
            data = ("\n".join(dumps(e) for e in events) + "\n").encode("utf-8")
            _write_atomic(target, data)
        else:
            columns: dict[str, list[Any]] = {f.name: [] for f in _PARQUET_SCHEMA}
            for e in events:
                for name, values in columns.items():
                    v = e.get(name)
                    values.append(dumps(v) if name in _JSON_FIELDS and v is not None else v)
            table = pa.Table.from_pydict(columns, schema=_PARQUET_SCHEMA)
            tmp = target.with_name("." + target.name + ".tmp")
            pq.write_table(table, tmp)
            os.replace(tmp, target)
        self.segments += 1


def job_toml(
    *,
    name: str,
    changelog: str,
    checkpoint: str,
    tables: Mapping[str, tuple[str, Sequence[str]]],
    views: Mapping[str, str],
    view_dir: str,
    invariants: Mapping[str, tuple[str, str, str]] | None = None,
    snapshot: str | None = None,
    trigger_interval: str | None = None,
    spark_master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    comment: str | None = None,
) -> str:
    """A job config (docs/config.md) as TOML text.

    ``tables``: name -> (DDL, primary key); ``views``: name -> SQL, each written to
    ``<view_dir>/<name>``; ``invariants``: name -> (view, kind, SQL) with kind
    ``constant`` or ``always``. Paths are written as given (relative ones resolve against
    the config file's folder).
    """
    lines = [f"# {line}" for line in (comment or "").splitlines()]
    lines += ["[job]", f"name = {dumps(name)}", f"changelog = {dumps(changelog)}"]
    if snapshot is not None:
        lines.append(f"snapshot = {dumps(snapshot)}")
    lines.append(f"checkpoint = {dumps(checkpoint)}")
    if trigger_interval is not None:
        lines.append(f"trigger_interval = {dumps(trigger_interval)}")
    lines.append("")
    for table, (ddl, pk) in tables.items():
        lines += [f"[tables.{table}]", f"schema = {dumps(ddl)}",
                  f"primary_key = {dumps(list(pk))}", ""]  # fmt: skip
    for view, sql in views.items():
        lines += [f"[views.{view}]", f"sql = {dumps(sql)}",
                  f"path = {dumps(f'{view_dir}/{view}')}", ""]  # fmt: skip
    for inv, (view, kind, sql) in (invariants or {}).items():
        lines += [f"[invariants.{inv}]", f"view = {dumps(view)}", f"{kind} = {dumps(sql)}", ""]
    if spark_master is not None or spark_conf:
        lines.append("[spark]")
        if spark_master is not None:
            lines.append(f"master = {dumps(spark_master)}")
        if spark_conf:
            conf = ", ".join(f"{dumps(k)} = {dumps(v)}" for k, v in spark_conf.items())
            lines.append(f"conf = {{ {conf} }}")
        lines.append("")
    return "\n".join(lines)


def workload_toml(workload: str | type[Workload], **options: Any) -> str:
    """:func:`job_toml` for a workload (by name or class): its tables, views and
    invariants, and ``options`` (``changelog``, ``checkpoint``, ``view_dir``, ...; ``name``
    defaults to the workload's)."""
    if isinstance(workload, str):
        workload = WORKLOAD_CLASSES[workload]
    options.setdefault("name", workload.name)
    return job_toml(
        tables=workload.tables, views=workload.views, invariants=workload.invariants, **options
    )


def write_config(out: Path, workload: type[Workload], *, snapshot: bool) -> Path:
    """The job config for a simulated run, next to its change log (``out/config.toml``)."""
    text = workload_toml(
        workload, changelog="changelog", snapshot="snapshot" if snapshot else None,
        checkpoint="out/_checkpoint", trigger_interval="1 second", view_dir="out/views",
    )  # fmt: skip
    path = out / "config.toml"
    _write_atomic(path, text.encode("utf-8"))
    return path


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    _write_atomic(path, (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def write_snapshot(folder: Path, ts: int, tables: Mapping[str, pa.Table]) -> None:
    """A snapshot (docs/changelog-format.md): ``_snapshot.json`` and one Parquet file per
    table."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        (folder / name).mkdir(exist_ok=True)
        tmp = folder / name / ".part-00000.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, folder / name / "part-00000.parquet")
    write_json(folder / "_snapshot.json", {"ts": ts})


RUN_PARTS = ("changelog", "snapshot", "truth", "config.toml")


def clear_run(out: Path) -> None:
    """Remove a previous run's own files (never anything else in the folder)."""
    for part in RUN_PARTS:
        path = out / part
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
