"""Writing a run's files: segments (temp name, then rename), truth, snapshot, config."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltamv.sim.workloads import Workload

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


def write_config(out: Path, workload: type[Workload], *, snapshot: bool) -> Path:
    """The job config (CONTRACT section 4) for the workload, next to its change log."""
    lines = ["[job]", f"name = {dumps(workload.name)}", 'changelog = "changelog"']
    if snapshot:
        lines.append('snapshot = "snapshot"')
    lines += ['checkpoint = "out/_checkpoint"', 'trigger_interval = "1 second"', ""]
    for name, (ddl, pk) in workload.tables.items():
        lines += [
            f"[tables.{name}]",
            f"schema = {dumps(ddl)}",
            f"primary_key = {dumps(list(pk))}",
            "",
        ]
    for name, sql in workload.views.items():
        lines += [
            f"[views.{name}]",
            f"sql = {dumps(sql)}",
            f"path = {dumps('out/views/' + name)}",
            "",
        ]
    for name, (view, kind, sql) in workload.invariants.items():
        lines += [f"[invariants.{name}]", f"view = {dumps(view)}", f"{kind} = {dumps(sql)}", ""]
    path = out / "config.toml"
    _write_atomic(path, "\n".join(lines).encode("utf-8"))
    return path


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    _write_atomic(path, (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def write_snapshot(folder: Path, ts: int, tables: Mapping[str, pa.Table]) -> None:
    """A CONTRACT section 3 snapshot: ``_snapshot.json`` and one Parquet file per table."""
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
