"""The differential harness: views maintained from random changes, checked at every version.

:class:`Planned` is the Spark side, paid once per shape set: the job config of two source
tables and the shapes as views, and every view's optimized plan. :class:`Run` is one
change sequence: its own SQLite store (mirrors and aggregate state, in memory), the
views compiled into it, a model of the source tables in plain Python, and each view's
output kept as a multiset from its deltas. After every batch :meth:`Run.step` checks each
view's maintained output against the plan's full evaluation (``full_sql``, DuckDB) over
the model's tables, and that no delta removes a row the output does not hold.

The change feed is the job's: a snapshot loaded into the mirrors without row keys, then
batches of each key's last change (``key, op, commit_ts``, the declared columns,
``__old_id``) turned into Z-sets by :func:`deltamv.views.mirror.table_change`, the views'
deltas computed against the state before the batch, then state and mirrors written.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.config import JobConfig, parse_config
from deltamv.delta import spark_to_arrow
from deltamv.schema import change_column
from deltamv.state.keyed import KEY, KeyedTable, Mirror
from deltamv.views.ivm import (
    AggregateOp,
    Batch,
    ViewMaintainer,
    W,
    arrow_type,
    compile_view,
    schema_of,
)
from deltamv.views.mirror import apply_change, table_change
from deltamv.views.plan import Attr, ViewPlan, plan_views

Row = dict[str, Any]
Bag = Counter[tuple[Any, ...]]


def job_config(
    tables: Mapping[str, tuple[str, Sequence[str]]],
    views: Mapping[str, str],
    folder: Path,
    *,
    maintain: Mapping[str, str] | None = None,
) -> JobConfig:
    """A job config holding ``tables`` (name -> (DDL, primary key)) and ``views``."""
    raw: dict[str, Any] = {
        "job": {"name": "views-test", "changelog": "log", "checkpoint": "checkpoint"},
        "tables": {n: {"schema": ddl, "primary_key": list(pk)} for n, (ddl, pk) in tables.items()},
        "views": {n: {"sql": sql, "path": f"out/{n}"} for n, sql in views.items()},
    }
    for name, mode in (maintain or {}).items():
        raw["views"][name]["maintain"] = mode
    return parse_config(raw, base_dir=folder)


@dataclass(frozen=True)
class Planned:
    """A shape set as Spark plans it (once per test session)."""

    config: JobConfig
    plans: Mapping[str, ViewPlan]

    @classmethod
    def of(
        cls,
        spark: SparkSession,
        tables: Mapping[str, tuple[str, Sequence[str]]],
        views: Mapping[str, str],
        folder: Path,
    ) -> Planned:
        config = job_config(tables, views, folder)
        return cls(config, plan_views(spark, config))

    def arrow_schema(self, table: str) -> pa.Schema:
        return self.config.tables[table].schema.to_arrow()


def canonical(value: Any) -> Any:
    """A value as a multiset key: NaN equals NaN."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def bag_of(rows: pa.Table, attrs: Sequence[Attr], *, signed: bool = False) -> Bag:
    """The rows of a Z-set or full evaluation (columns ``c<id>``, ``__w``) as a multiset
    of tuples typed as the plan types them. Weights must be positive unless ``signed``."""
    typed = rows.select([a.col for a in attrs] + [W]).cast(schema_of(attrs))
    out: Bag = Counter()
    columns = [typed.column(a.col).to_pylist() for a in attrs]
    for i, weight in enumerate(typed.column(W).to_pylist()):
        if not signed:
            assert weight > 0, f"a full evaluation gave weight {weight}"
        key = tuple(canonical(col[i]) for col in columns)
        out[key] += weight
    return out


class Run:
    """One change sequence through some views of a :class:`Planned` shape set."""

    def __init__(self, planned: Planned, views: Iterable[str], compute: Compute) -> None:
        self.planned = planned
        self.compute = compute
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        config = planned.config
        self.mirrors = {
            name: Mirror(self.db, name, t.schema.to_arrow(), t.primary_key)
            for name, t in config.tables.items()
        }
        self.views: dict[str, ViewMaintainer] = {}
        for name in views:
            plan = planned.plans[name]
            maintainer = compile_view(
                name, plan.root, plan.output_names, self.mirrors, self._state_table
            )
            maintainer.root.prepare()
            self.views[name] = maintainer
        self.model: dict[str, dict[int, Row]] = {name: {} for name in config.tables}
        self.outputs: dict[str, Bag] = {name: Counter() for name in self.views}
        self.versions = 0
        # (the tables' rows, each view's maintained rows) at every version, for the oracle
        self.history: list[tuple[dict[str, list[Row]], dict[str, Bag]]] = []

    def _record(self) -> None:
        tables = {t: [dict(r) for r in rows.values()] for t, rows in self.model.items()}
        self.history.append((tables, {n: Counter(bag) for n, bag in self.outputs.items()}))

    def _state_table(
        self, name: str, schema: pa.Schema, indexes: Sequence[Sequence[str]]
    ) -> KeyedTable:
        return KeyedTable(self.db, f"s_{name}", schema, indexes=indexes)

    def close(self) -> None:
        self.db.close()

    # -- the model's tables --------------------------------------------------------------
    def table(self, name: str) -> pa.Table:
        schema = self.planned.arrow_schema(name)
        return pa.Table.from_pylist(list(self.model[name].values()), schema=schema)

    def tables(self) -> dict[str, pa.Table]:
        return {f"t_{name}": self.table(name) for name in self.model}

    @staticmethod
    def base(table: str, attrs: Sequence[Attr]) -> str:
        cols = ", ".join(f'"{a.name}" AS "{a.col}"' for a in attrs)
        return f'SELECT {cols}, CAST(1 AS BIGINT) AS "{W}" FROM "t_{table}"'

    def full(self, name: str, tables: Mapping[str, pa.Table] | None = None) -> Bag:
        """The view's rows by its full evaluation over the model's tables."""
        maintainer = self.views[name]
        rows = self.compute.query(maintainer.full_sql(self.base), **(tables or self.tables()))
        return bag_of(rows, maintainer.root.output)

    # -- the sequence --------------------------------------------------------------------
    def load(self, rows: Mapping[str, Sequence[Row]]) -> None:
        """The snapshot: rows without a change-log key, then every view built from it (as
        the job's bootstrap does) and checked."""
        for name, table_rows in rows.items():
            for row in table_rows:
                self.model[name][row["id"]] = dict(row)
            mirror = self.mirrors[name]
            loaded = self.table(name)
            loaded = loaded.add_column(0, KEY, pa.nulls(loaded.num_rows, pa.string()))
            mirror.insert(loaded.cast(mirror.schema))
        tables = self.tables()
        for name, maintainer in self.views.items():
            for op in maintainer.ops():
                if isinstance(op, AggregateOp) and op.state is not None:
                    op.build(self.compute, op.child.full_sql(self.base), tables)
            self.outputs[name] = self.full(name, tables)
        self._record()

    def step(self, changes: Sequence[tuple[str, int, Row | None]]) -> None:
        """One batch: ``(table, id, row or None for a delete)`` in order; each key's last
        change counts, as the pipeline releases it. Checks every view afterwards."""
        last: dict[str, dict[int, Row | None]] = {}
        for table, key, row in changes:
            last.setdefault(table, {})[key] = row
        table_changes = {}
        for table, by_key in last.items():
            rows = []
            for key, row in by_key.items():
                if row is None:
                    rows.append({"key": f"{table}/{key}", "op": "DELETE", "__old_id": key})
                    self.model[table].pop(key, None)
                else:
                    rows.append({"key": f"{table}/{key}", "op": "PUT", **row})
                    self.model[table][key] = dict(row)
            table_changes[table] = table_change(
                self.compute, self.mirrors[table], self._change_rows(table, rows)
            )
        deltas = {t: c.delta for t, c in table_changes.items() if c.delta.num_rows}
        batch = Batch(self.compute, self.mirrors, deltas)
        found = {name: m.delta(batch) for name, m in self.views.items()}
        for maintainer in self.views.values():
            maintainer.root.finish(batch)
        for table, change in table_changes.items():
            apply_change(self.mirrors[table], change)
        self.versions += 1
        tables = self.tables()
        for name, delta in found.items():
            output = self.outputs[name]
            if delta is not None:
                attrs = self.views[name].root.output
                renamed = delta.rename_columns([a.col for a in attrs] + [W])
                for row, weight in bag_of(renamed, attrs, signed=True).items():
                    output[row] += weight
                    assert output[row] >= 0, (
                        f"view {name}, version {self.versions}: the delta removes {row}"
                        f" {-output[row]} more time(s) than the view holds it"
                    )
                    if output[row] == 0:
                        del output[row]
            want = self.full(name, tables)
            assert output == want, _difference(name, self.versions, output, want)
        for table in self.model:
            assert self.mirrors[table].count() == len(self.model[table])
        self._record()

    def _change_rows(self, table: str, rows: list[Row]) -> pa.Table:
        """Released changes as the pipeline gives them: the table's columns named by
        ``change_column`` (``region`` is ``#region``) beside the change's own fields."""
        declared = self.planned.arrow_schema(table)
        schema = pa.schema(
            [("key", pa.string()), ("op", pa.string()), ("commit_ts", pa.int64()),
             *(f.with_name(change_column(f.name)) for f in declared), ("__old_id", pa.int64())]
        )  # fmt: skip
        fields = {"key", "op", "__old_id"}
        return pa.Table.from_pylist(
            [{"commit_ts": 1, **{k if k in fields else change_column(k): v for k, v in r.items()}}
             for r in rows],
            schema=schema,
        )  # fmt: skip


def _difference(name: str, version: int, got: Bag, want: Bag) -> str:
    extra = got - want
    missing = want - got
    return (
        f"view {name}, version {version}: maintained != full evaluation\n"
        f"  only maintained: {sorted(extra.items(), key=repr)[:8]!a}\n"
        f"  only full:       {sorted(missing.items(), key=repr)[:8]!a}"
    )


# -- the Spark oracle -----------------------------------------------------------------------
_TABLE_NAME = re.compile(r"\b(accounts|transfers)\b")


def spark_check(spark: SparkSession, run: Run, sql: Mapping[str, str]) -> int:
    """Every recorded version of every view of ``run`` against the view's SQL evaluated by
    Spark over that version's tables: the same schema (names and types) and the same rows
    (a multiset). One Spark query per view covers all versions (a UNION ALL of the view's
    SQL over each version's tables). Returns the number of (view, version) pairs checked."""
    config = run.planned.config
    versions = len(run.history)
    for table in config.tables:
        schema = run.planned.arrow_schema(table).append(pa.field("__v", pa.int32()))
        rows = [{**r, "__v": v} for v, (tables, _) in enumerate(run.history) for r in tables[table]]
        frame = spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema))
        for v in range(versions):
            frame.where(frame["__v"] == v).drop("__v").createOrReplaceTempView(f"{table}_v{v}")
    checked = 0
    for name, maintainer in run.views.items():
        union = " UNION ALL ".join(
            f"SELECT CAST({v} AS INT) AS __v, * FROM"
            f" ({_TABLE_NAME.sub(lambda m, v=v: f'{m.group(1)}_v{v}', sql[name])}) q{v}"
            for v in range(versions)
        )
        found = spark.sql(union)
        attrs = maintainer.root.output
        mine = pa.schema(
            [pa.field(n, arrow_type(a.dtype)) for n, a in zip(maintainer.output_names, attrs,
                                                                  strict=True)]
        )  # fmt: skip
        theirs = spark_to_arrow(found.schema).remove(0)
        assert [(f.name, f.type) for f in mine] == [(f.name, f.type) for f in theirs], (
            f"view {name}: maintained schema {mine} != Spark's {theirs}"
        )
        table = found.toArrow()
        by_version = table.column("__v").to_pylist()
        rows = table.drop_columns(["__v"]).rename_columns([a.col for a in attrs])
        rows = rows.append_column(W, pa.array([1] * rows.num_rows, pa.int64()))
        for v, (_, outputs) in enumerate(run.history):
            picked = rows.filter(pa.array([x == v for x in by_version], pa.bool_()))
            want = bag_of(picked, attrs)
            assert outputs[name] == want, _difference(name, v, outputs[name], want)
            checked += 1
    return checked
