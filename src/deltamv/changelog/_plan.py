"""The declared tables as the fast path parses them: one JSON schema for every table.

pyarrow's JSON reader takes one schema for all lines, so ``value`` and ``old_value``
are read as a struct of the union of every table's columns, each in its parse type
(``_typed.parse_type``). Two tables may share a column name when the parse types agree
(a DECIMAL is read at the larger scale); when they do not, the fast path is off and
every segment goes to the reference path.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltamv.changelog._typed import parse_type
from deltamv.changelog.format import table_validators
from deltamv.schema import Column, TableSchema, change_column

__all__ = ["OLD_PREFIX", "Plan", "TablePlan", "plan_for"]

OLD_PREFIX = "__old_"


@dataclass(frozen=True)
class TablePlan:
    name: str
    schema: TableSchema
    nullable: TableSchema  # every column nullable: how values leave
    primary_key: tuple[Column, ...]
    others: tuple[str, ...]  # columns other tables declare and this one does not
    values_schema: pa.Schema


@dataclass(frozen=True)
class Plan:
    tables: dict[str, TablePlan]
    names: pa.Array  # table names, for index_in
    union: dict[str, pa.DataType]  # every declared column name -> its parse type
    fast: bool  # False when two tables' columns of one name have different parse types
    decimals: bool
    foreign: bool  # some table lacks a column another declares (see _fast._present_null)
    json_schema: pa.Schema
    validators: Mapping[str, Any]

    @classmethod
    def of(
        cls, tables: Mapping[str, TableSchema], primary_keys: Mapping[str, Sequence[str]]
    ) -> Plan:
        union: dict[str, pa.DataType] = {}
        scales: dict[str, int] = {}
        fast = bool(tables)
        for schema in tables.values():
            for col in schema.columns:
                if col.kind == "decimal":
                    scales[col.name] = max(scales.get(col.name, 0), col.scale)
        for schema in tables.values():
            for col in schema.columns:
                t = parse_type(col, scales.get(col.name))
                if union.setdefault(col.name, t) != t:
                    fast = False  # the reference path handles such clashes, slowly
        plans = {}
        for name, schema in tables.items():
            pk = []
            for c in primary_keys.get(name, ()):
                key = schema.column(c)
                if key is None:
                    raise ValueError(f"table {name!r}: primary-key column {c!r} is not declared")
                pk.append(dataclasses.replace(key, nullable=True))
            nullable = TableSchema(
                tuple(dataclasses.replace(c, nullable=True) for c in schema.columns)
            )
            values_schema = pa.schema(
                [
                    pa.field("row", pa.int64(), nullable=False),
                    *(f.with_name(change_column(f.name)) for f in nullable.to_arrow()),
                    *(pa.field(OLD_PREFIX + c.name, c.arrow_type()) for c in pk),
                ]
            )
            others = tuple(c for c in union if schema.column(c) is None)
            plans[name] = TablePlan(name, schema, nullable, tuple(pk), others, values_schema)
        row = pa.struct([pa.field(c, t) for c, t in union.items()])
        json_schema = pa.schema(
            [
                ("region", pa.int64()),
                ("type", pa.string()),
                ("start_ts", pa.int64()),
                ("commit_ts", pa.int64()),
                ("ts", pa.int64()),
                ("table", pa.string()),
                ("key", pa.string()),
                ("op", pa.string()),
                ("value", row),
                ("old_value", row),
                ("start_key", pa.string()),
                ("end_key", pa.string()),
                ("parents", pa.list_(pa.int64())),
                ("primary", pa.string()),
                ("large", pa.bool_()),
            ]
        )
        return cls(
            plans,
            pa.array(list(tables), pa.string()),
            union,
            fast,
            bool(scales),
            any(p.others for p in plans.values()),
            json_schema,
            table_validators(tables),
        )


@functools.lru_cache(maxsize=8)
def plan_for(
    tables: tuple[tuple[str, TableSchema], ...],
    primary_keys: tuple[tuple[str, tuple[str, ...]], ...],
) -> Plan:
    return Plan.of(dict(tables), dict(primary_keys))
