"""Mirrors: each source table kept as a Delta table at the watermark.

A mirror holds the table's columns plus ``_key``, the change log's row key, which is
the row's identity (a DELETE names only its key). Rows loaded from a snapshot carry
``_key`` when the snapshot has that column, and are otherwise matched by primary key:
a PUT replaces the row with its primary key, a DELETE with ``old_value`` removes the
row with the old primary key.

Each batch, the released changes are staged by the driver as two small Parquet files
per table (puts, typed; removals, the keys and primary keys they replace), and Spark
rewrites the mirror from the previous version: previous rows minus removals, plus
puts. That costs a pass over the table per batch in which it changed; the cost the
incremental-maintenance work will remove.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from deltamv.changelog.format import values_to_arrow
from deltamv.config import JobConfig, TableConfig
from deltamv.pipeline.state import PipelineState
from deltamv.schema import TableSchema

KEY = "_key"
_CHUNK = 50_000


def mirror_schema(table: TableConfig) -> pa.Schema:
    return pa.schema([pa.field(KEY, pa.string()), *table.schema.to_arrow()])


@dataclass(frozen=True)
class StagedChanges:
    table: str
    puts: str | None  # Parquet file: _key + table columns
    removals: str | None  # Parquet file: _key + primary-key columns (null where unknown)
    count: int


def stage_changes(
    state: PipelineState, config: JobConfig, batch: int, staging: Path
) -> dict[str, StagedChanges]:
    """Write the final change per key released by ``batch`` as Parquet, table by table.

    Streams from the state in chunks, so memory stays bounded by the chunk size
    whatever the size of the batch.
    """
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    writers: dict[tuple[str, str], pq.ParquetWriter] = {}
    counts: dict[str, int] = {}

    def write(table: TableConfig, kind: str, data: pa.Table) -> None:
        key = (table.name, kind)
        if key not in writers:
            path = staging / f"{table.name}.{kind}.parquet"
            writers[key] = pq.ParquetWriter(path, data.schema)
        writers[key].write_table(data)

    for tname, rows in _chunks_by_table(state, batch):
        table = config.tables[tname]
        counts[tname] = counts.get(tname, 0) + len(rows)
        keys = pa.array([r[0] for r in rows], pa.string())
        # The primary key each change replaces: the new row's for a PUT, the old row's
        # for a DELETE that carries old_value, unknown otherwise (matched by _key only).
        replaced = [r[2] if r[1] == "PUT" else r[3] for r in rows]
        pk_source = [v if v is not None else "{}" for v in replaced]
        pks = values_to_arrow(pk_source, _nullable(table.schema)).select(list(table.primary_key))
        write(
            table,
            "removals",
            pa.Table.from_arrays([keys, *pks.columns], names=[KEY, *pks.column_names]),
        )
        put_rows = [r for r in rows if r[1] == "PUT"]
        if put_rows:
            values = values_to_arrow([r[2] for r in put_rows], table.schema)
            put_keys = pa.array([r[0] for r in put_rows], pa.string())
            data = pa.Table.from_arrays([put_keys, *values.columns], schema=mirror_schema(table))
            write(table, "puts", data)
    for w in writers.values():
        w.close()
    return {
        t: StagedChanges(
            t,
            str(staging / f"{t}.puts.parquet") if (t, "puts") in writers else None,
            str(staging / f"{t}.removals.parquet") if (t, "removals") in writers else None,
            n,
        )
        for t, n in counts.items()
    }


def _nullable(schema: TableSchema) -> TableSchema:
    return TableSchema(tuple(dataclasses.replace(c, nullable=True) for c in schema.columns))


def _chunks_by_table(
    state: PipelineState, batch: int
) -> Iterator[tuple[str, list[tuple[str, str, str | None, str | None]]]]:
    current: str | None = None
    rows: list[tuple[str, str, str | None, str | None]] = []
    for tbl, key, op, value, old_value, _ in state.released_rows(batch):
        if (tbl != current or len(rows) >= _CHUNK) and rows:
            assert current is not None
            yield current, rows
            rows = []
        current = tbl
        rows.append((key, op, value, old_value))
    if rows and current is not None:
        yield current, rows


def updated_mirror(
    spark: SparkSession, table: TableConfig, previous: DataFrame, changes: StagedChanges
) -> DataFrame:
    """The mirror after ``changes``: previous rows minus the replaced ones, plus the puts."""
    result = previous
    if changes.removals:
        removals = spark.read.parquet(changes.removals)
        result = result.join(removals.select(KEY), KEY, "left_anti")
        # Rows without a key (from a keyless snapshot) are matched by primary key. A null
        # primary key never matches in a join, so unknown ones remove nothing here.
        pk = list(table.primary_key)
        result = result.join(removals.select(*pk).dropna(), pk, "left_anti")
    if changes.puts:
        result = result.unionByName(spark.read.parquet(changes.puts))
    return result


def describe(changes: dict[str, StagedChanges]) -> str:
    return json.dumps({t: c.count for t, c in sorted(changes.items())})
