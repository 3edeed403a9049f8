"""Typed Arrow columns in and out of SQLite, and Arrow tables as blobs.

SQLite stores what the pipeline keeps by key (mirrors, aggregate state) column by
column, so that it can be looked up through indexes. Each Arrow type gets a storage form
that round-trips exactly and compares the way the key lookups need:

- integers, booleans, dates (days) and timestamps (microseconds): INTEGER;
- strings: TEXT; binary: BLOB;
- decimals: TEXT in the column's fixed scale (``"12.50"``), so equal values are equal texts;
- floats: the IEEE bits as INTEGER. SQLite turns a NaN into NULL, which would lose data;
  bits keep every value, -0.0 and NaN included. A keyed lookup matches by SQL equality
  all the same (``KeyedTable.lookup`` probes both zeros and both standard NaNs); tables
  that group by a float (aggregate states) store it normalised (``normalise_floats``).

Tables that travel whole (pending rows, buffered rows, outbox entries) are stored as
Arrow IPC blobs (LZ4), typed and without per-row work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "from_blob",
    "from_rows",
    "normalise_floats",
    "sql_type",
    "to_blob",
    "to_rows",
]

_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def to_blob(table: pa.Table) -> bytes:
    """An Arrow table as one IPC stream (LZ4-compressed buffers)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_blob(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def sql_type(t: pa.DataType) -> str:
    """The SQLite column type of an Arrow type (see the module docstring)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_decimal(t):
        return "TEXT"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BLOB"
    if (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_floating(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
    ):
        return "INTEGER"
    raise TypeError(f"no SQLite storage for Arrow type {t}")


def _storage(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    t = column.type
    if pa.types.is_decimal(t):
        return column.cast(pa.string())
    if pa.types.is_float32(t):
        return _float_bits(column.cast(pa.float64()))
    if pa.types.is_float64(t):
        return _float_bits(column)
    if pa.types.is_date32(t):
        return column.cast(pa.int32())
    if pa.types.is_timestamp(t):
        return column.cast(pa.int64())
    if pa.types.is_large_string(t):
        return column.cast(pa.string())
    return column


def _float_bits(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    bits = array.view(pa.int64()) if array.null_count == 0 else _masked_bits(array)
    return bits


def _masked_bits(array: pa.Array) -> pa.Array:
    filled = pc.fill_null(array, 0.0)
    return pc.if_else(pc.is_null(array), pa.scalar(None, pa.int64()), filled.view(pa.int64()))


def to_rows(table: pa.Table, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """The rows of ``table`` (or of its ``columns``) as tuples of SQLite values."""
    names = list(columns) if columns is not None else table.column_names
    if table.num_rows == 0:
        return []
    lists = [_storage(table.column(n)).to_pylist() for n in names]
    return list(zip(*lists, strict=True))


def from_rows(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """Rows read from SQLite (columns in ``schema``'s order) back as a typed Arrow table."""
    columns: Iterable[list[Any]] = (
        (list(c) for c in zip(*rows, strict=True)) if rows else ([] for _ in schema)
    )
    arrays = [_from_storage(values, f.type) for values, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _from_storage(values: list[Any], t: pa.DataType) -> pa.Array:
    if pa.types.is_decimal(t):
        return pa.array(values, pa.string()).cast(t)
    if pa.types.is_floating(t):
        bits = pa.array(values, pa.int64())
        doubles = _bits_to_float(bits)
        return doubles if pa.types.is_float64(t) else doubles.cast(t)
    if pa.types.is_date32(t):
        return pa.array(values, pa.int32()).cast(t)
    if pa.types.is_timestamp(t):
        return pa.array(values, pa.int64()).cast(t)
    if pa.types.is_boolean(t):
        return pa.array([None if v is None else bool(v) for v in values], t)
    return pa.array(values, t)


def _bits_to_float(bits: pa.Array) -> pa.Array:
    if bits.null_count == 0:
        return bits.view(pa.float64())
    filled = pc.fill_null(bits, 0).view(pa.float64())
    return pc.if_else(pc.is_null(bits), pa.scalar(None, pa.float64()), filled)


def normalise_floats(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``table`` with -0.0 turned into 0.0 and every NaN into one NaN in ``columns``: the
    equality Spark uses for grouping and join keys, so equal keys have equal bits."""
    for name in columns:
        column = table.column(name)
        if not pa.types.is_floating(column.type):
            continue
        zero = pa.scalar(0.0, column.type)
        nan = pa.scalar(float("nan"), column.type)
        fixed = pc.if_else(pc.equal(column, zero), zero, column)
        fixed = pc.if_else(pc.is_nan(fixed), nan, fixed)
        table = table.set_column(table.schema.get_field_index(name), name, fixed)
    return table
