"""A view's SQL as Spark plans it: the optimized logical plan, read into plain Python.

Spark analyses and optimizes each view's SQL once at job start (subqueries decorrelated
into joins, predicates pushed down, columns pruned). The plan comes over as Spark's own
JSON form of its tree (``LogicalPlan.toJSON``) and is read here into :class:`Node` and
:class:`Expr` trees that keep Spark's classes, types and attribute ids. The maintenance
classifier (:mod:`.classify`) decides from these trees how a view is kept; nothing here
judges what is supported.

Each source table is registered for the analysis as a read of an empty Parquet folder of
its declared schema: Spark cannot prove such a relation empty, so no rule folds it away,
and the folder's path tells which table a leaf reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from deltamv.config import JobConfig

__all__ = [
    "Analysed",
    "Attr",
    "Expr",
    "Node",
    "ViewPlan",
    "plan_views",
    "short_class",
]

# Optimizer rules whose rewrites only help Spark's own execution and would make the
# plan harder to maintain (they are turned off while the plans are read).
_EXCLUDED_RULES = ",".join(
    f"org.apache.spark.sql.catalyst.optimizer.{rule}"
    for rule in (
        "DecimalAggregates",
        "RewriteDistinctAggregates",
        "ConvertToLocalRelation",
        "OptimizeIn",
    )
)


# Settings while the plans are read: the rules above off, and plans rendered whole (Spark
# cuts a list of more than 25 expressions to "... N more fields" in its rendering, which
# the fingerprint and the search for try_ functions read).
_PLANNING = {
    "spark.sql.optimizer.excludedRules": _EXCLUDED_RULES,
    "spark.sql.debug.maxToStringFields": "100000",
}


# The maintenance's own version, part of every view's fingerprint: raised with a change
# to what the rules compute for the same plan (a fix), so that every view's state and
# table are rebuilt once, at the next start, instead of being changed from rows the old
# rules wrote. 2: decimal AVG and products, timestamp literals, NaN in first versions.
# 3: AVG of a DECIMAL(p <= 11) through a DOUBLE, as Spark computes it.
MAINTENANCE_RULES = 3


def short_class(name: str) -> str:
    return name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Attr:
    """An attribute (column) of a plan node, by Spark's expression id."""

    id: int
    name: str
    dtype: Any  # Spark's JSON data type: "long", "decimal(10,2)", {"type": "struct", ...}
    nullable: bool

    @property
    def col(self) -> str:
        """The column name the engine uses for this attribute."""
        return f"c{self.id}"


@dataclass(frozen=True)
class Expr:
    """One Spark expression node: its class, its non-child fields, its children."""

    kind: str
    fields: Mapping[str, Any]
    children: tuple[Expr, ...]

    @property
    def dtype(self) -> Any:
        return self.fields.get("dataType")

    def attr(self) -> Attr | None:
        if self.kind != "AttributeReference":
            return None
        return Attr(int(self.fields["exprId"]["id"]), str(self.fields["name"]),
                    self.fields.get("dataType"), bool(self.fields.get("nullable", True)))  # fmt: skip

    def walk(self) -> Iterator[Expr]:
        yield self
        for child in self.children:
            yield from child.walk()

    def references(self) -> set[int]:
        return {a.id for e in self.walk() if (a := e.attr()) is not None}


@dataclass(frozen=True)
class Node:
    """One logical plan node: its class, expression fields, children and output."""

    kind: str
    fields: Mapping[str, Any]  # expression-valued fields as Expr / tuple[Expr, ...]
    children: tuple[Node, ...]
    output: tuple[Attr, ...] = ()
    table: str | None = None  # for a leaf reading a source table

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class ViewPlan:
    view: str
    root: Node
    text: str  # Spark's own rendering, for messages and fingerprints
    tables: frozenset[str]  # every one its SQL names (also where Spark prunes it away)
    schema: StructType  # the view's columns as Spark analyses them
    # The try_ functions the SQL calls (try_divide, try_cast, ...). The optimized plan
    # keeps them as the arithmetic, cast or aggregate that fails, with a mode its JSON
    # form leaves out: they are told apart only here.
    tries: tuple[str, ...] = ()
    # The functions of the time of evaluation the SQL calls (current_timestamp(), ...).
    # Spark's optimizer puts the time the plan was made in their place: only here are
    # they seen as calls.
    clock: tuple[str, ...] = ()
    # Spark's rendering of the analyzed plan: the fingerprint's, with such calls (the
    # optimized one holds the time, another at every start)
    analyzed: str = ""

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self.schema.names)

    @property
    def fingerprint(self) -> str:
        # Attribute ids change from run to run; the rendering without them does not.
        stable = re.sub(r"#\d+L?", "", self.analyzed if self.clock else self.text)
        if self.tries:  # (the rendering shows try_divide as a division, and so on)
            stable += "\n" + " ".join(self.tries)
        return hashlib.blake2b(
            f"{MAINTENANCE_RULES}\n{stable}".encode(), digest_size=12
        ).hexdigest()


# -- reading Spark's JSON ---------------------------------------------------------------
def _read_expr(nodes: list[dict[str, Any]], pos: int) -> tuple[Expr, int]:
    """The expression at ``pos`` of a pre-order node list, and the position after it."""
    node = nodes[pos]
    count = int(node.get("num-children", 0))
    children = []
    nxt = pos + 1
    for _ in range(count):
        child, nxt = _read_expr(nodes, nxt)
        children.append(child)
    fields = {k: v for k, v in node.items() if k not in ("class", "num-children")}
    return Expr(short_class(node["class"]), fields, tuple(children)), nxt


def _expr(value: Any) -> Expr:
    expr, _ = _read_expr(value, 0)
    return expr


def _node_fields(node: dict[str, Any]) -> dict[str, Any]:
    """A plan node's fields, expression lists read into Expr trees."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("class", "num-children"):
            continue
        if _is_expr_list(value):
            out[key] = _expr(value)
        elif isinstance(value, list) and value and all(_is_expr_list(v) for v in value):
            out[key] = tuple(_expr(v) for v in value)
        elif (
            isinstance(value, list)
            and value
            and all(isinstance(v, list) and v and all(_is_expr_list(w) for w in v) for v in value)
        ):
            out[key] = tuple(tuple(_expr(w) for w in v) for v in value)  # Expand's projections
        else:
            out[key] = value
    return out


def _is_expr_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and isinstance(value[0], dict)
        and "class" in value[0]
        and "num-children" in value[0]
        and ".expressions." in str(value[0]["class"])
    )


def _read_plan(
    nodes: list[dict[str, Any]], pos: int, leaves: Iterator[str | None]
) -> tuple[Node, int]:
    raw = nodes[pos]
    count = int(raw.get("num-children", 0))
    children = []
    nxt = pos + 1
    table = next(leaves) if count == 0 else None
    for _ in range(count):
        child, nxt = _read_plan(nodes, nxt, leaves)
        children.append(child)
    fields = _node_fields(raw)
    kind = short_class(raw["class"])
    return Node(kind, fields, tuple(children), table=table), nxt


def _with_output(node: Node, output: Sequence[Attr]) -> Node:
    return Node(node.kind, node.fields, node.children, tuple(output), node.table)


def _attach_outputs(node: Node, jvm_plan: Any) -> Node:
    """Fill in each node's output attributes from the JVM plan (same shape, same order)."""
    children = tuple(
        _attach_outputs(child, jvm_plan.children().apply(i))
        for i, child in enumerate(node.children)
    )
    attrs = []
    output = jvm_plan.output()
    for i in range(output.size()):
        a = output.apply(i)
        attrs.append(Attr(int(a.exprId().id()), str(a.name()), json.loads(a.dataType().json()),
                          bool(a.nullable())))  # fmt: skip
    fields = node.fields
    if node.kind == "Expand" and not fields.get("projections"):
        fields = {**fields, "projections": _projections(jvm_plan)}
    return Node(node.kind, fields, children, tuple(attrs), node.table)


def _projections(jvm_expand: Any) -> tuple[tuple[Expr, ...], ...]:
    """An Expand's projections, expression by expression: the plan's JSON form gives null
    for them in some plans (several DISTINCT aggregates grouped by a computed key)."""
    rows = jvm_expand.projections()
    out = []
    for i in range(rows.size()):
        row = rows.apply(i)
        out.append(tuple(_expr(json.loads(row.apply(j).toJSON())) for j in range(row.size())))
    return tuple(out)


# -- registering the tables and planning --------------------------------------------------
class _Leaves:
    """An empty Parquet folder per source table, in a temporary folder of the driver."""

    def __init__(self, spark: SparkSession, config: JobConfig) -> None:
        self.root = tempfile.mkdtemp(prefix="deltamv-plan-")
        self.by_path: dict[str, str] = {}
        for name, table in config.tables.items():
            folder = os.path.join(self.root, name)
            os.makedirs(folder)
            # Written by pyarrow, not Spark: an empty file costs no Spark job.
            pq.write_table(
                table.schema.to_arrow().empty_table(), os.path.join(folder, "empty.parquet")
            )
            spark.read.schema(table.schema.to_ddl()).parquet(folder).createOrReplaceTempView(name)
            self.by_path[os.path.realpath(folder)] = name

    def table_of(self, leaf: Any) -> str | None:
        try:
            paths = leaf.relation().location().rootPaths()
            path = str(paths.head().toUri().getPath())
        except Exception:
            return None
        return self.by_path.get(os.path.realpath(path))


class Analysed:
    """Every view's SQL analysed over empty tables of the declared schemas, kept for
    planning (:func:`plan_views`): the job checks the SQL before it opens anything, and
    plans it once it has opened, without analysing it twice.

    Each source table is registered as a temporary view of its name over an empty Parquet
    folder of its schema (replacing temporary views of the same names in this session)
    until :meth:`close` (or the end of a ``with`` block) drops the views and the folders.
    """

    def __init__(self, spark: SparkSession, config: JobConfig) -> None:
        self.spark = spark
        self.config = config
        self.leaves = _Leaves(spark, config)
        self._frames: dict[str, DataFrame] = {}
        self._closed = False

    def frame(self, name: str) -> DataFrame:
        """View ``name``'s SQL, analysed; raises Spark's error when it cannot be."""
        df = self._frames.get(name)
        if df is None:
            df = self.spark.sql(self.config.views[name].sql)
            df.schema  # noqa: B018 - forces the analysis
            self._frames[name] = df
        return df

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in self.config.tables:
            self.spark.catalog.dropTempView(name)
        shutil.rmtree(self.leaves.root, ignore_errors=True)

    def __enter__(self) -> Analysed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plan_views(
    spark: SparkSession, config: JobConfig, analysed: Analysed | None = None
) -> dict[str, ViewPlan]:
    """Every view's optimized plan, with its leaves mapped to source tables.

    Plans the views ``analysed`` holds (closing it), else analyses them first; either
    way the tables' temporary views and folders are gone when it returns.
    """
    analysed = analysed or Analysed(spark, config)
    conf = spark.conf
    previous = {key: conf.get(key, None) for key in _PLANNING}
    for key, setting in _PLANNING.items():
        conf.set(key, setting)
    try:
        return {
            name: _plan_one(name, analysed.frame(name), analysed.leaves) for name in config.views
        }
    finally:
        for key, value in previous.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)
        analysed.close()


def _plan_one(name: str, df: DataFrame, leaves: _Leaves) -> ViewPlan:
    jvm = df._jdf.queryExecution().optimizedPlan()
    found = jvm.collectLeaves()
    tables = [leaves.table_of(found.apply(i)) for i in range(found.size())]
    nodes = json.loads(jvm.toJSON())
    root, _ = _read_plan(nodes, 0, iter(tables))
    root = _attach_outputs(root, jvm)
    analysed_plan = df._jdf.queryExecution().analyzed()
    analyzed = str(analysed_plan.toString())
    tries = tuple(sorted({m.lower() for m in _TRY_CALL.findall(analyzed)}))
    clock = tuple(sorted({m.lower() for m in _CLOCK_CALL.findall(analyzed)}))
    named = _tables_named(analysed_plan, leaves)
    return ViewPlan(
        name, root, str(jvm.toString()),
        frozenset(t for t in [*tables, *named] if t is not None), df.schema, tries, clock,
        analyzed,
    )  # fmt: skip


def _tables_named(plan: Any, leaves: _Leaves) -> set[str]:
    """The source tables an analysed plan reads, in its subqueries too. The optimized
    plan may read fewer (none, where Spark folds ``WHERE 1 = 0`` away), but Spark
    evaluates the view's SQL, which needs every table it names."""
    found, todo = set(), [plan]
    while todo:
        node = todo.pop()
        children, subqueries = node.children(), node.subqueries()
        if children.isEmpty():
            table = leaves.table_of(node)
            if table is not None:
                found.add(table)
        todo += [children.apply(i) for i in range(children.size())]
        todo += [subqueries.apply(i) for i in range(subqueries.size())]
    return found


# A try_ function as the analyzed plan renders its call (a string literal that looks like
# one is taken for one too: the view is then recomputed, which is always right).
_TRY_CALL = re.compile(r"\b(try_[a-z0-9_]+)\(", re.IGNORECASE)

# A function of the time of evaluation, as the analyzed plan renders its call (now() and
# unix_timestamp() without arguments render as, or around, current_timestamp()).
_CLOCK_CALL = re.compile(
    r"\b(current_timestamp|current_date|current_time|localtimestamp|now)\(", re.IGNORECASE
)
