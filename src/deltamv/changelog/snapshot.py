"""Reading an upstream snapshot (docs/changelog-format.md, "Snapshot").

``<snapshot>/_snapshot.json`` holds ``{"ts": <int>}``; ``<snapshot>/<table>/`` holds the
table's rows at ``ts`` as ``*.parquet`` or ``*.jsonl`` files (names starting with ``.``
or ``_`` are ignored). Rows are checked against the declared schema like change-log
values: a row that does not fit raises BadRecordError naming the file and line
(JSONL) or the file and column (Parquet).

A declared table without a folder in the snapshot is read as **empty**: the snapshot
says the upstream table had no rows (or did not exist) at ``ts``. Folders of tables
the job does not declare are ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from deltamv.changelog._fast import table_rows
from deltamv.changelog.format import (
    RowValueError,
    read_json_lines,
    rows_to_arrow,
    table_validators,
)
from deltamv.errors import BadRecordError, ConfigError, wire
from deltamv.schema import TableSchema

__all__ = [
    "SNAPSHOT_SOURCE_NAME",
    "SnapshotDataSource",
    "iter_snapshot",
    "read_snapshot_file",
    "read_snapshot_ts",
    "snapshot_arrow",
    "snapshot_files",
    "snapshot_tables",
]

SNAPSHOT_SOURCE_NAME = "deltamv-snapshot"
_INT64_MAX = 2**63 - 1


def read_snapshot_ts(snapshot_dir: str) -> int:
    """The snapshot's ``ts`` from ``_snapshot.json``.

    Raises ConfigError (naming ``job.snapshot``) when the folder or the file is missing,
    BadRecordError when it is malformed.
    """
    path = os.path.join(snapshot_dir, "_snapshot.json")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        if not os.path.exists(snapshot_dir):
            raise ConfigError("job.snapshot", f"snapshot {snapshot_dir} does not exist") from None
        if not os.path.isdir(snapshot_dir):
            raise ConfigError("job.snapshot", f"snapshot {snapshot_dir} is not a folder") from None
        raise ConfigError(
            "job.snapshot", f"snapshot {snapshot_dir} has no _snapshot.json"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadRecordError(path, None, f"cannot read: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise BadRecordError(path, None, f"not JSON: {e}") from None
    ts = doc.get("ts") if isinstance(doc, dict) else None
    if type(ts) is not int or not 0 <= ts <= _INT64_MAX:
        raise BadRecordError(
            path, None, f'expected {{"ts": <non-negative int>}}, got {text.strip()[:80]}'
        )
    return ts


def snapshot_files(snapshot_dir: str, table: str) -> list[str]:
    """The data files of one table in the snapshot, sorted; [] if it has no folder."""
    folder = os.path.join(snapshot_dir, table)
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = []
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue
        if not entry.name.endswith((".parquet", ".jsonl")) or not entry.is_file():
            raise BadRecordError(
                entry.path, None, "not a snapshot file: expected *.parquet or *.jsonl"
            )
        files.append(entry.path)
    return sorted(files)


def read_snapshot_file(path: str, schema: TableSchema) -> pa.Table:
    """One snapshot file as a table of ``schema.to_arrow()``, validated."""
    if path.endswith(".jsonl"):
        return _read_jsonl(path, schema)
    return _read_parquet(path, schema)


def _read_jsonl(path: str, schema: TableSchema) -> pa.Table:
    validator = table_validators({"": schema})[""]
    decimals = any(c.kind == "decimal" for c in schema.columns)
    rows: list[Any] = []
    for lineno, row in read_json_lines(path, decimals=decimals):
        try:
            rows.append(validator.normalise(row))
        except RowValueError as e:
            raise BadRecordError(path, lineno, str(e)) from None
    return rows_to_arrow(rows, schema)


def _read_parquet(path: str, schema: TableSchema) -> pa.Table:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise BadRecordError(
            path, None, f"not a readable Parquet file: {' '.join(str(e).split())[:200]}"
        ) from None
    target = schema.to_arrow()
    unknown = [n for n in table.column_names if target.get_field_index(n) < 0]
    if unknown:
        raise BadRecordError(
            path, None, f"unknown column {unknown[0]!r} (declared: {', '.join(schema.names)})"
        )
    arrays = []
    for field in target:
        if field.name not in table.column_names:
            if not field.nullable:
                raise BadRecordError(path, None, f"column {field.name!r} is NOT NULL but missing")
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        try:
            column = column.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise BadRecordError(
                path,
                None,
                f"column {field.name!r} of type {column.type} does not fit {field.type}: "
                f"{' '.join(str(e).split())[:120]}",
            ) from None
        if not field.nullable and column.null_count:
            first = pc.index(pc.is_null(column), True).as_py()
            raise BadRecordError(path, first + 1, f"column {field.name!r} is NOT NULL but null")
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=target)


def iter_snapshot(
    snapshot_dir: str, table: str, schema: TableSchema, *, batch_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """Every row of one table in the snapshot, as record batches of ``schema.to_arrow()``.

    Files in :func:`snapshot_files` order, rows in file order: the same rows, and the
    same BadRecordError, as :func:`read_snapshot_file` over each file; nothing needs
    Spark. Memory is bounded by ``batch_rows`` rows (Parquet) or a few MB of text
    (JSON lines), except for a JSON-lines file the fast path cannot vouch for, which is
    read whole by the reference path, as :func:`read_snapshot_file` does. On an error,
    batches of the same file may already have been yielded: discard them.
    """
    for path in snapshot_files(snapshot_dir, table):
        if path.endswith(".jsonl"):
            yield from _iter_jsonl(path, schema, batch_rows)
        else:
            yield from _iter_parquet(path, schema, batch_rows)


_CHUNK_BYTES = 4 << 20


def _iter_jsonl(path: str, schema: TableSchema, batch_rows: int) -> Iterator[pa.RecordBatch]:

    done = 0  # rows yielded so far
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, also on the way out of the generator
    except OSError:
        yield from _rest(read_snapshot_file(path, schema), done, batch_rows)  # raises
        return
    with f:
        carry = b""
        while True:
            block = f.read(_CHUNK_BYTES)
            data = bytearray(carry + block)
            if block:
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = bytes(data)
                    continue
                carry = bytes(data[cut:])
                del data[cut:]
            elif data and not data.endswith(b"\n"):
                data += b"\n"
            if data:
                rows = table_rows(data, schema)
                if rows is None:
                    # The reference path decides, over the whole file (and raises if bad).
                    yield from _rest(read_snapshot_file(path, schema), done, batch_rows)
                    return
                yield from rows.to_batches(max_chunksize=batch_rows)
                done += rows.num_rows
            if not block:
                return


def _iter_parquet(path: str, schema: TableSchema, batch_rows: int) -> Iterator[pa.RecordBatch]:
    target = schema.to_arrow()
    done = 0
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        if any(target.get_field_index(n) < 0 for n in names) or any(
            not f.nullable and f.name not in names for f in target
        ):
            raise ValueError("unknown or missing column")
        for batch in parquet.iter_batches(batch_size=batch_rows):
            arrays = []
            for field in target:
                if field.name not in batch.schema.names:
                    arrays.append(pa.nulls(batch.num_rows, field.type))
                    continue
                column = batch.column(field.name).cast(field.type, safe=True)
                if not field.nullable and column.null_count:
                    raise ValueError("null in a NOT NULL column")
                arrays.append(column)
            yield pa.RecordBatch.from_arrays(arrays, schema=target)
            done += batch.num_rows
    except (OSError, ValueError, pa.ArrowException):
        # read_snapshot_file says what is wrong, with the message it always gave.
        yield from _rest(read_snapshot_file(path, schema), done, batch_rows)


def _rest(table: pa.Table, done: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The batches of ``table`` after its first ``done`` rows (already yielded)."""
    yield from table.slice(done).to_batches(max_chunksize=batch_rows)


def snapshot_arrow(snapshot_dir: str, tables: Mapping[str, TableSchema]) -> dict[str, pa.Table]:
    """Every declared table's snapshot rows as one Arrow table (in the driver's memory)."""
    out = {}
    for name, schema in tables.items():
        batches = list(iter_snapshot(snapshot_dir, name, schema))
        out[name] = pa.Table.from_batches(batches, schema=schema.to_arrow())
    return out


def snapshot_tables(
    spark: Any, snapshot_dir: str, tables: Mapping[str, TableSchema]
) -> dict[str, Any]:
    """Every declared table's snapshot rows as a DataFrame, read on the executors.

    One Spark partition per file; the schema is the declared one (all columns
    nullable in Spark; NOT NULL is enforced while reading).
    """
    return {
        name: spark.read.format(SNAPSHOT_SOURCE_NAME)
        .option("path", os.fspath(snapshot_dir))
        .option("table", name)
        .option("schema", schema.to_ddl())
        .load()
        for name, schema in tables.items()
    }


class _FilePartition(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class _SnapshotReader(DataSourceReader):
    def __init__(self, snapshot_dir: str, table: str, schema: TableSchema) -> None:
        self.snapshot_dir, self.table, self.table_schema = snapshot_dir, table, schema

    def partitions(self) -> Sequence[InputPartition]:
        return [_FilePartition(p) for p in snapshot_files(self.snapshot_dir, self.table)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _FilePartition):
            return  # Spark reads one empty InputPartition when partitions() is empty
        nullable = pa.schema([f.with_nullable(True) for f in self.table_schema.to_arrow()])
        try:
            table = read_snapshot_file(partition.path, self.table_schema)
        except BadRecordError as e:
            raise wire(e) from None
        yield from table.cast(nullable).to_batches(max_chunksize=65536)


class SnapshotDataSource(DataSource):
    """``spark.read.format("deltamv-snapshot")``: options ``path``, ``table``, ``schema`` (DDL)."""

    @classmethod
    def name(cls) -> str:
        return SNAPSHOT_SOURCE_NAME

    def _schema(self) -> TableSchema:
        ddl = self.options.get("schema")
        if not ddl:
            raise ConfigError("schema", f"the {SNAPSHOT_SOURCE_NAME} source needs the table DDL")
        try:
            return TableSchema.from_ddl(ddl)
        except ValueError as e:
            raise ConfigError("schema", str(e)) from None

    def schema(self) -> str:
        return ", ".join(f"`{c.name}` {c.ddl_type}" for c in self._schema().columns)

    def reader(self, schema: Any) -> DataSourceReader:
        path, table = self.options.get("path"), self.options.get("table")
        if not path or not table:
            raise ConfigError(
                "path" if not path else "table", f"required by {SNAPSHOT_SOURCE_NAME}"
            )
        return _SnapshotReader(path, table, self._schema())
