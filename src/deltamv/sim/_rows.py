"""Rows as JSON objects, turned into Arrow tables typed by a table's DDL schema."""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from deltamv.schema import Column, TableSchema


def _convert(col: Column, value: Any) -> Any:
    if value is None:
        return None
    kind = col.kind
    if kind == "decimal":
        return decimal.Decimal(str(value)).quantize(decimal.Decimal(1).scaleb(-col.scale))
    if kind == "date" and isinstance(value, str):
        return _dt.date.fromisoformat(value)
    if kind == "timestamp" and isinstance(value, str):
        when = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)
    if kind in ("float", "double"):
        return float(value)
    return value


def rows_to_arrow(rows: Iterable[Mapping[str, Any]], schema: TableSchema) -> pa.Table:
    """An Arrow table of ``rows`` (column name to JSON value), typed per ``schema``.

    Rows keep the order given; callers sort them (by key) for comparable results.
    """
    arrow_schema = schema.to_arrow()
    columns: dict[str, list[Any]] = {c.name: [] for c in schema.columns}
    for row in rows:
        for col in schema.columns:
            columns[col.name].append(_convert(col, row.get(col.name)))
    arrays = [pa.array(columns[f.name], type=f.type) for f in arrow_schema]
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def state_to_tables(
    state: Mapping[str, tuple[str, Mapping[str, Any]]], schemas: Mapping[str, TableSchema]
) -> dict[str, pa.Table]:
    """Every table of ``schemas`` from ``state`` (key -> (table, row)), rows ordered by key."""
    per_table: dict[str, list[Mapping[str, Any]]] = {name: [] for name in schemas}
    for key in sorted(state):
        table, row = state[key]
        per_table[table].append(row)
    return {name: rows_to_arrow(per_table[name], schemas[name]) for name in sorted(schemas)}
