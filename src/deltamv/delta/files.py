"""Data files: Parquet written straight into a table's folder, not yet part of any version.

Writing a file and committing it are separate steps. The files written here are
invisible to Delta readers until a commit adds them (:mod:`deltamv.delta.sink`); a sink
deletes the files of a commit that fails, and files left by a crash are orphans that
the vacuum removes (:mod:`deltamv.delta.housekeeping`). Every file gets a fresh name, so a retried task or a replayed batch never
overwrites a file a version refers to.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from deltamv.delta._stats import StatsCollector
from deltamv.errors import DeltaMVError, StorageError

__all__ = ["DataFile", "conform_table", "write_arrow"]

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]*")
_META_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("num_records", pa.int64()),
        ("stats", pa.string()),
    ]
)


@dataclass(frozen=True)
class DataFile:
    """One Parquet file in a table's folder, described as a Delta add action needs it.

    ``path`` is relative to the table root; ``stats`` is Delta's statistics JSON.
    """

    path: str
    size: int
    num_records: int
    stats: str
    partition_values: dict[str, str | None] = field(default_factory=dict)


def write_arrow(
    data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
    table_path: str,
    *,
    schema: pa.Schema,
    prefix: str,
    target_rows_per_file: int = 1_000_000,
) -> list[DataFile]:
    """Write Arrow data into ``table_path``; return the files written, for a commit.

    Columns are taken by name and cast to ``schema`` with safe casts (a cast that would
    lose data fails the write). Files roll over at ``target_rows_per_file`` rows and are
    named ``<prefix>-00000-<uuid>-<n>.parquet``. No rows, no file.
    """
    _check_prefix(prefix)
    _check_target(target_rows_per_file)
    if isinstance(data, pa.Table):
        batches: Iterable[pa.RecordBatch] = data.to_batches()
    elif isinstance(data, pa.RecordBatch):
        batches = [data]
    else:
        batches = data
    try:
        metas = list(
            _write_files(batches, _normalize(table_path), schema, prefix, 0, target_rows_per_file)
        )
    except OSError as e:
        raise StorageError(f"writing data files into {table_path} failed: {e}") from e
    return [
        DataFile(path=m["path"], size=m["size"], num_records=m["num_records"], stats=m["stats"])
        for batch in metas
        for m in batch.to_pylist()
    ]


def _write_files(
    batches: Iterable[pa.RecordBatch],
    table_path: str,
    schema: pa.Schema,
    prefix: str,
    partition: int,
    target_rows: int,
) -> Iterator[pa.RecordBatch]:
    fs, root = pafs.FileSystem.from_uri(table_path)
    stem = f"{prefix}-{partition:05d}-{uuid.uuid4().hex}"
    written: list[dict[str, object]] = []
    out: _OpenFile | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        batch = _conform(batch, schema)
        offset = 0
        while offset < batch.num_rows:
            if out is None:
                name = f"{stem}-{len(written):04d}.parquet"
                fs.create_dir(root, recursive=True)
                out = _OpenFile(fs, f"{root}/{name}", name, schema)
            take = min(target_rows - out.stats.num_records, batch.num_rows - offset)
            out.write(batch.slice(offset, take))
            offset += take
            if out.stats.num_records >= target_rows:
                written.append(out.close())
                out = None
    if out is not None:
        written.append(out.close())
    if written:
        yield pa.RecordBatch.from_pylist(written, schema=_META_SCHEMA)


class _OpenFile:
    def __init__(self, fs: pafs.FileSystem, full_path: str, name: str, schema: pa.Schema) -> None:
        self._fs = fs
        self._full_path = full_path
        self._name = name
        self.stats = StatsCollector(schema)
        self._writer = pq.ParquetWriter(
            full_path, schema, filesystem=fs, compression="snappy",
            write_statistics=parquet_statistics(schema),
        )  # fmt: skip

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)
        self.stats.add(batch)

    def close(self) -> dict[str, object]:
        self._writer.close()
        size = self._fs.get_file_info(self._full_path).size
        return {
            "path": self._name,
            "size": size,
            "num_records": self.stats.num_records,
            "stats": self.stats.to_json(),
        }


def parquet_statistics(schema: pa.Schema) -> list[str] | bool:
    """The columns whose Parquet statistics a file of ``schema`` carries: not
    floating-point ones, whose min and max leave NaN out, so that Spark's and DuckDB's
    Parquet readers would skip the row groups holding NaN (``f = NaN``, ``isnan(f)``);
    nor nested ones (which may hold such values, under column paths of the writer's).
    Readers of a table skip files by the Delta log's statistics instead, which bound such
    columns only where that is right (``_stats.py``)."""
    plain = [f.name for f in schema if not pa.types.is_nested(f.type)
             and not pa.types.is_floating(f.type)]  # fmt: skip
    return True if len(plain) == len(schema) else plain or False


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch``'s columns, picked by name and safely cast to ``schema``.

    Spark hands Arrow batches whose timestamps carry the session zone and whose types
    follow Spark's; the files must carry exactly the table's schema.
    """
    names = batch.schema.names
    missing = [f.name for f in schema if f.name not in names]
    if missing:
        raise DeltaMVError(
            f"the data has no column {', '.join(map(repr, missing))}; it has {names}"
        )
    arrays = []
    for f in schema:
        column = batch.column(names.index(f.name))
        if column.type != f.type:
            column = column.cast(f.type, safe=True)
        if not f.nullable and column.null_count:
            raise DeltaMVError(
                f"column {f.name!r} is NOT NULL but {column.null_count} rows are null"
            )
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def conform_table(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data``'s columns picked by name and safely cast to ``schema`` (as files are written).

    DeltaMVError for a missing column or NULLs in a NOT NULL column.
    """
    batches = [_conform(b, schema) for b in data.to_batches() if b.num_rows]
    return pa.Table.from_batches(batches, schema=schema)


def _normalize(table_path: str) -> str:
    return table_path if "://" in table_path else os.path.abspath(table_path)


def _check_prefix(prefix: str) -> None:
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"file prefix {prefix!r} must match {_PREFIX.pattern}")


def _check_target(target_rows_per_file: int) -> None:
    if target_rows_per_file < 1:
        raise ValueError(f"target_rows_per_file must be >= 1, not {target_rows_per_file}")
