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
        return when if when.tzinfo else when.replace(tzinfo=_dt.UTC)
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


def _canonical(names: list[str]) -> Any:
    def order(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            (row.get(n) is None, row.get(n) if row.get(n) is not None else 0) for n in names
        )

    return order


def state_to_tables(
    state: Mapping[Any, tuple[str, Mapping[str, Any]]], schemas: Mapping[str, TableSchema]
) -> dict[str, pa.Table]:
    """Every table of ``schemas`` from ``state`` (any key -> (table, row)).

    Rows come out in a canonical order (by their column values, in declared column
    order), so two states with the same rows give equal tables.
    """
    per_table: dict[str, list[Mapping[str, Any]]] = {name: [] for name in schemas}
    for table, row in state.values():
        per_table[table].append(row)
    return {
        name: rows_to_arrow(
            sorted(per_table[name], key=_canonical(schemas[name].names)), schemas[name]
        )
        for name in sorted(schemas)
    }
