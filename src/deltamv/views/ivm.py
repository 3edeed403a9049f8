"""Incremental view maintenance: a view's change per batch from its inputs' changes.

A view's optimized Spark plan (:mod:`.plan`) is compiled into operators that each know
how their output changes when their inputs change. Changes travel as Z-sets: Arrow
tables of rows with an integer weight ``__w`` (+n: n copies added, -n: removed), as in
DBSP/Materialize. Columns are named ``c<id>`` after Spark's attribute ids.

The rules, with ``X`` an input's state before the batch, ``X'`` after, ``dX`` its change:

- filter and project apply to the changed rows, inside the query of the operator that
  reads them where it can (an aggregate's, a join's or the view's consolidation of its
  input: :meth:`Op.stream`);
- an equi-join changes by ``dL join R + L' join dR``: each side's changed rows probe the
  other side's state by the join key (through the mirrors' indexes), never a scan; an
  outer join also recomputes, for the keys the batch touched, which rows are padded
  with NULLs (a row gains its padding when its last match leaves and loses it when the
  first arrives); a semi or anti join likewise recomputes membership for touched keys,
  and an existence join (an EXISTS beside another condition) flags every row by it;
- a cross join of single-row inputs (global aggregates) recomputes its one row;
- an aggregate of COUNT, SUM and AVG over exact numbers keeps per group the row count and
  exact sums (state in SQLite), so a group whose last row leaves disappears (its count,
  not its sum, is zero), a SUM over only NULLs stays NULL, and a global aggregate keeps
  its one row over empty input; COUNT(DISTINCT) keeps how many rows hold each (group,
  value); a MIN or MAX keeps each group's extreme and how many rows hold it, and reads
  the group's input rows again only when a batch takes the last of them, or, where
  they cannot be looked up (a global one, a computed group key), keeps every value's
  count in order and reads the next values from there (floating-point values kept as
  Spark compares them: -0.0 as 0.0, NaN as one value above infinity);
- any other aggregate (the FIRST of Spark's rewrite of several DISTINCT aggregates
  through an Expand, MIN or MAX of binary values) is recomputed
  for the groups the batch touched, from the input rows of those groups (looked up by
  the group key);
- a window function is recomputed for the partitions the batch touched, likewise
  (:mod:`.window`);
- anything else is not maintained here: :class:`~deltamv.views.expr.Unsupported` names
  the reason and the view is recomputed by Spark.

Within a batch every operator sees its inputs' states before the batch (from the
mirrors and state tables, unchanged until the batch's end) and after it (before plus
the batch's change, patched in memory), so any number of views and joins see one
consistent pair of database states.
"""

from __future__ import annotations

import abc
import decimal
import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.compute import Compute
from deltamv.state.codec import normalise_floats
from deltamv.state.keyed import ROWID, KeyedTable, Mirror
from deltamv.views.expr import (
    Unsupported,
    decimal_of,
    duck_type,
    result_type,
    sql,
)
from deltamv.views.plan import Attr, Expr, Node, short_class

__all__ = ["Batch", "Op", "ViewMaintainer", "W", "arrow_type", "compile_view", "consolidate"]

W = "__w"
_STALE = "__stale"  # + i: a group whose MIN or MAX i the batch removed


# -- types and Z-set helpers ------------------------------------------------------------
def arrow_type(dtype: Any) -> pa.DataType:
    simple = {
        "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
        "double": pa.float64(), "float": pa.float32(), "string": pa.string(),
        "boolean": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"), "binary": pa.binary(),
    }  # fmt: skip
    if isinstance(dtype, str) and dtype in simple:
        return simple[dtype]
    dec = decimal_of(dtype)
    if dec is not None:
        return pa.decimal128(*dec)
    raise Unsupported(f"values of type {dtype}")


def schema_of(attrs: Sequence[Attr], *, weight: bool = True) -> pa.Schema:
    fields = [pa.field(a.col, arrow_type(a.dtype)) for a in attrs]
    if weight:
        fields.append(pa.field(W, pa.int64()))
    return pa.schema(fields)


def empty(attrs: Sequence[Attr]) -> pa.Table:
    return schema_of(attrs).empty_table()


def conform(table: pa.Table, attrs: Sequence[Attr]) -> pa.Table:
    """``table``'s columns of ``attrs`` (and the weight) in order, cast to their types."""
    schema = schema_of(attrs)
    return table.select(schema.names).cast(schema)


def concat(parts: Iterable[pa.Table | None], attrs: Sequence[Attr]) -> pa.Table | None:
    found = [conform(p, attrs) for p in parts if p is not None and p.num_rows]
    if not found:
        return None
    return pa.concat_tables(found) if len(found) > 1 else found[0]


def negate(z: pa.Table) -> pa.Table:
    return z.set_column(z.schema.get_field_index(W), W, pc.negate(z.column(W)))


def _consolidating_sql(select: str, source: str, floats: Sequence[str] = ()) -> str:
    """SQL of ``source``'s rows as ``select`` (no weight; may be empty), equal rows'
    weights summed, rows whose weight sums to zero dropped. Rows are equal as rows of a
    table are the same: ``floats`` (their columns of floating-point values) tell -0.0
    from 0.0, which SQL's equality does not, so changing one into the other is a change
    (extra columns ``_sign<i>`` in the result)."""
    signs = "".join(f', signbit({c}) AS "_sign{i}"' for i, c in enumerate(floats))
    head = f"{select}{signs}, " if select else ""
    return (f'SELECT {head}CAST(sum("{W}") AS BIGINT) AS "{W}" FROM {source}'
            f' GROUP BY ALL HAVING sum("{W}") <> 0')  # fmt: skip


def consolidate(compute: Compute, z: pa.Table | None) -> pa.Table | None:
    """Sum the weights of equal rows and drop rows whose weight is zero."""
    if z is None or z.num_rows == 0:
        return None
    names = ", ".join(f'"{c}"' for c in z.column_names if c != W)
    out = compute.query(_consolidating_sql(names, "z", _floats(z.schema)), z=z)
    return out.select(z.column_names).cast(z.schema) if out.num_rows else None


def _floats(schema: pa.Schema) -> list[str]:
    """The quoted names of ``schema``'s floating-point columns."""
    return [f'"{f.name}"' for f in schema if pa.types.is_floating(f.type)]


def consolidated_change(b: Batch, op: Op) -> pa.Table | None:
    """``op``'s change in ``b``, consolidated; the filters and projections on top of the
    operator that made it run inside the consolidating query (:meth:`Op.stream`)."""
    if op.consolidated:
        return op.delta(b)
    rows, relation = op.stream(b)
    if rows is None or rows.num_rows == 0:
        return None
    if relation == "d":
        return consolidate(b.compute, rows)
    out = b.compute.query(
        _consolidating_sql(_cols(op.output), relation, _floats(schema_of(op.output))), d=rows
    )
    return conform(out, op.output) if out.num_rows else None


def col_ref(i: int) -> str:
    return f'"c{i}"'


def _same(left: str, right: str, columns: Sequence[str]) -> str:
    """SQL matching rows of ``left`` and ``right`` whose ``columns`` are equal, NULL to
    NULL (TRUE where there are none: a global aggregate's one row)."""
    return (
        " AND ".join(f'{left}."{c}" IS NOT DISTINCT FROM {right}."{c}"' for c in columns) or "TRUE"
    )


def _cols(attrs: Sequence[Attr], prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{a.col}"' for a in attrs)


# -- the batch context ------------------------------------------------------------------
@dataclass
class Batch:
    """What the operators of all views see in one batch.

    ``changes``: per source table, its Z-set over the declared columns (by name).
    """

    compute: Compute
    mirrors: Mapping[str, Mirror]
    changes: Mapping[str, pa.Table]
    cache: dict[Any, Any] = field(default_factory=dict)

    def changed(self, tables: Iterable[str]) -> bool:
        return any(t in self.changes and self.changes[t].num_rows for t in tables)


_I = "__i"  # a row's position, where a query's answer must follow its input's order


def _indexed(keys: pa.Table) -> pa.Table:
    return keys.append_column(_I, pa.array(np.arange(keys.num_rows, dtype=np.int64)))


def match_sql(keys: pa.Table, cols: Sequence[str], null_safe: Sequence[bool], alias: str) -> str:
    """SQL: the columns ``cols`` of the rows aliased ``alias`` equal the key row ``k``'s
    columns, in order (``=``, or ``<=>`` where ``null_safe``)."""
    return " AND ".join(
        f'{alias}."{c}" {"IS NOT DISTINCT FROM" if ns else "="} k."{name}"'
        for c, name, ns in zip(cols, keys.column_names, null_safe, strict=True)
    )


def _sums(b: Batch, keys: pa.Table, rows: pa.Table | None, column: str, cols: Sequence[str],
          null_safe: Sequence[bool]) -> pa.Array:  # fmt: skip
    """For each row of ``keys``, the sum of ``column`` over the rows of ``rows`` that have
    it in ``cols`` (0 for none)."""
    if rows is None or keys.num_rows == 0 or rows.num_rows == 0:
        return pa.array(np.zeros(keys.num_rows, dtype=np.int64))
    query = (f'SELECT CAST(COALESCE((SELECT SUM(r."{column}") FROM r WHERE'
             f" {match_sql(keys, cols, null_safe, 'r')}), 0) AS BIGINT) AS n"
             f' FROM k ORDER BY k."{_I}"')  # fmt: skip
    return b.compute.query(query, k=_indexed(keys), r=rows).column("n").combine_chunks()


class Op(abc.ABC):
    """One operator of a maintained view (see the module doc)."""

    output: tuple[Attr, ...]
    tables: frozenset[str]
    small: bool = False  # always exactly one row (a global aggregate), or built from such
    consolidated: bool = False  # its change never holds equal rows or zero weights

    @abc.abstractmethod
    def delta(self, b: Batch) -> pa.Table | None:
        """The operator's change in batch ``b`` (a Z-set), or None for no change."""

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        """Whether :meth:`lookup` can find rows by ``attrs`` (asking for the indexes it
        needs). ``strict``: only ever by values that match no NULL (``null_safe`` all
        false), as a join by ``=`` looks up, which an outer join's side padded with
        NULLs can answer: its padded rows match none."""
        return False

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        """Rows of this operator's output (old or new state) whose ``attrs`` equal a row of
        ``keys`` (columns named by the attrs). A bag: weights are multiplicities."""
        raise Unsupported("a lookup into this part of the plan")

    def presence(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table,
                 null_safe: Sequence[bool]) -> tuple[pa.Array, pa.Array]:  # fmt: skip
        """For each row of ``keys`` (as for :meth:`lookup`), whether this operator's output
        has a row whose ``attrs`` equal it, before the batch and after. Here from the rows
        a lookup finds before and this operator's change (the state after is the state
        before plus the change); a scan answers from its index alone."""
        cols = [a.col for a in attrs]
        rows = self.lookup(b, attrs, keys, new=False, null_safe=null_safe)
        old = _sums(b, keys, rows, W, cols, null_safe)
        net = _sums(b, keys, self.delta(b), W, cols, null_safe)
        return pc.greater(old, 0), pc.greater(pc.add(old, net), 0)

    def stream(self, b: Batch) -> tuple[pa.Table | None, str]:
        """The change in batch ``b`` as ``(rows, relation)``: the rows of the nearest
        operator below that is not a filter or a projection, and a SQL relation over
        them (registered as ``d``) that is this operator's change. A parent that reads
        its input with SQL runs the filters and projections inside its own query instead
        of one query each. ``rows`` None: no change."""
        return self.delta(b), "d"

    def unique_keys(self) -> list[frozenset[int]]:
        """Sets of output attribute ids known to hold different values in any two rows
        (a source table's primary key, carried up), each one such key."""
        return []

    def whole(self, b: Batch, *, new: bool) -> pa.Table:
        """The whole output (only for small operators)."""
        raise Unsupported("a full evaluation of this part of the plan")

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        """SQL for the whole output (columns ``c<id>`` and ``__w``) over the source tables,
        ``base(table, attrs)`` naming a relation with a table's rows as those attrs."""
        raise Unsupported("a full evaluation of this part of the plan")

    def children(self) -> tuple[Op, ...]:
        return ()

    def prepare(self) -> None:
        """Create indexes and state tables this operator needs."""
        for child in self.children():
            child.prepare()

    def finish(self, b: Batch) -> None:
        """Write this batch's state changes (called once, after every view's delta)."""
        for child in self.children():
            child.finish(b)

    def reset(self) -> None:
        """Forget any state (the view is rebuilt)."""
        for child in self.children():
            child.reset()


# -- scans ------------------------------------------------------------------------------
class ScanOp(Op):
    def __init__(self, table: str, output: Sequence[Attr], mirror: Mirror) -> None:
        self.table = table
        self.output = tuple(output)
        self.tables = frozenset({table})
        self.mirror = mirror
        self.indexes: set[tuple[str, ...]] = set()

    def rows_as_attrs(self, rows: pa.Table) -> pa.Table:
        """A table's rows (declared column names) as this scan's attribute columns."""
        cols = {a.col: rows.column(a.name) for a in self.output}
        weight = rows.column(W) if W in rows.column_names else pa.array(
            [1] * rows.num_rows, pa.int64())  # fmt: skip
        return pa.table({**cols, W: weight})

    def delta(self, b: Batch) -> pa.Table | None:
        change = b.changes.get(self.table)
        if change is None or change.num_rows == 0:
            return None
        return conform(self.rows_as_attrs(change), self.output)

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        ids = {a.id for a in self.output}
        if not all(a.id in ids for a in attrs):
            return False
        self.indexes.add(tuple(a.name for a in attrs))
        return True

    def prepare(self) -> None:
        for names in self.indexes:
            # (an index that begins with these columns serves lookups by them as well)
            if names and not any(len(o) > len(names) and o[: len(names)] == names
                                 for o in self.indexes):  # fmt: skip
                self.mirror.ensure_index(list(names))

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        names = [a.name for a in attrs]
        by_name = keys.rename_columns(names).select(names) if names else keys
        if not names:
            raise Unsupported("a scan of a whole table")
        found = self.mirror.lookup(names, by_name, null_safe=list(null_safe)).drop_columns([ROWID])
        rows = self.rows_as_attrs(found)
        if not new:
            return conform(rows, self.output)
        change = self.delta(b)
        if change is None:
            return conform(rows, self.output)
        on = match_sql(keys, [a.col for a in attrs], null_safe, "d")
        hit = b.compute.query(f"SELECT d.* FROM d WHERE EXISTS (SELECT 1 FROM k WHERE {on})",
                              d=change, k=keys)  # fmt: skip
        return consolidate(b.compute, concat([rows, hit], self.output)) or empty(self.output)

    def presence(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table,
                 null_safe: Sequence[bool]) -> tuple[pa.Array, pa.Array]:  # fmt: skip
        """From the mirror's index and the batch's change: a key's new count is its old
        one plus the change's weights of it. So the index is read for at most one entry
        a key, or one more than the change takes from it."""
        names, cols = [a.name for a in attrs], [a.col for a in attrs]
        net = _sums(b, keys, self.delta(b), W, cols, null_safe)  # the change's weights a key
        upto = 1 + max(0, -(pc.min(net).as_py() or 0))
        stored = self.mirror.counts(names, keys.rename_columns(names),
                                    null_safe=list(null_safe), upto=upto)  # fmt: skip
        old = _sums(b, keys, stored.rename_columns([*cols, W]), W, cols, null_safe)
        # below ``upto`` a count is exact; from it on, more than the change can take
        return pc.greater(old, 0), pc.greater(pc.add(old, net), 0)

    def unique_keys(self) -> list[frozenset[int]]:
        ids = {a.name: a.id for a in self.output}
        key = self.mirror.primary_key
        return [frozenset(ids[c] for c in key)] if key and all(c in ids for c in key) else []

    def whole(self, b: Batch, *, new: bool) -> pa.Table:
        raise Unsupported(f"a scan of the whole table {self.table}")

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        return base(self.table, self.output)


# -- filter and project -----------------------------------------------------------------
class FilterOp(Op):
    def __init__(self, child: Op, condition: Expr) -> None:
        self.child = child
        self.output = child.output
        self.tables = child.tables
        self.small = child.small
        self.cond = sql(condition, col_ref)
        # a condition of only "x IS NOT NULL" (Spark's, on the keys of a join above)
        tests = [c.children[0].attr() if c.kind == "IsNotNull" else None
                 for c in _conjuncts(condition)]  # fmt: skip
        self.not_null = None if None in tests else {a.id for a in tests if a is not None}

    def children(self) -> tuple[Op, ...]:
        return (self.child,)

    def apply(self, b: Batch, rows: pa.Table | None) -> pa.Table | None:
        if rows is None or rows.num_rows == 0:
            return rows
        return b.compute.query(f"SELECT * FROM d WHERE {self.cond}", d=rows)

    def presence(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table,
                 null_safe: Sequence[bool]) -> tuple[pa.Array, pa.Array]:  # fmt: skip
        strict = {a.id for a, ns in zip(attrs, null_safe, strict=True) if not ns}
        if self.not_null is not None and self.not_null <= strict:  # a match implies it
            return self.child.presence(b, attrs, keys, null_safe)
        return super().presence(b, attrs, keys, null_safe)

    def delta(self, b: Batch) -> pa.Table | None:
        return self.apply(b, self.child.delta(b))

    def stream(self, b: Batch) -> tuple[pa.Table | None, str]:
        rows, relation = self.child.stream(b)
        return rows, f"(SELECT * FROM {relation} WHERE {self.cond})"

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        return self.child.can_lookup(attrs, strict=strict)

    def unique_keys(self) -> list[frozenset[int]]:
        return self.child.unique_keys()

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        rows = self.child.lookup(b, attrs, keys, new=new, null_safe=null_safe)
        return self.apply(b, rows) or empty(self.output)

    def whole(self, b: Batch, *, new: bool) -> pa.Table:
        return self.apply(b, self.child.whole(b, new=new)) or empty(self.output)

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        return f"SELECT * FROM ({self.child.full_sql(base)}) WHERE {self.cond}"


class ProjectOp(Op):
    def __init__(self, child: Op, items: Sequence[tuple[Attr, Expr]]) -> None:
        self.child = child
        self.items = tuple(items)
        self.output = tuple(a for a, _ in items)
        self.tables = child.tables
        self.small = child.small
        parts = []
        for attr, e in items:
            t = duck_type(attr.dtype)
            parts.append(f'CAST({sql(e, col_ref)} AS {t}) AS "{attr.col}"')
        self.select = ", ".join([*parts, f'"{W}"'])
        # Output attributes that are plain references to a child attribute.
        self.passthrough: dict[int, Attr] = {}
        for attr, e in items:
            inner = e.children[0] if e.kind == "Alias" else e
            ref = inner.attr()
            if ref is not None:
                self.passthrough[attr.id] = next((c for c in child.output if c.id == ref.id), ref)

    def children(self) -> tuple[Op, ...]:
        return (self.child,)

    def apply(self, b: Batch, rows: pa.Table | None) -> pa.Table | None:
        if rows is None:
            return None
        if rows.num_rows == 0:
            return empty(self.output)
        return conform(b.compute.query(f"SELECT {self.select} FROM d", d=rows), self.output)

    def delta(self, b: Batch) -> pa.Table | None:
        return self.apply(b, self.child.delta(b))

    def stream(self, b: Batch) -> tuple[pa.Table | None, str]:
        rows, relation = self.child.stream(b)
        return rows, f"(SELECT {self.select} FROM {relation})"

    def inner_attrs(self, attrs: Sequence[Attr]) -> list[Attr] | None:
        found = [self.passthrough.get(a.id) for a in attrs]
        return None if any(f is None for f in found) else [f for f in found if f is not None]

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        inner = self.inner_attrs(attrs)
        return inner is not None and self.child.can_lookup(inner, strict=strict)

    def unique_keys(self) -> list[frozenset[int]]:
        out: dict[int, list[int]] = {}
        for attr_id, inner in self.passthrough.items():
            out.setdefault(inner.id, []).append(attr_id)
        # a column passed on under several names: the key by any of them
        return [frozenset(names) for key in self.child.unique_keys() if all(i in out for i in key)
                for names in itertools.islice(itertools.product(*(out[i] for i in key)), 16)]  # fmt: skip

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        inner = self.inner_attrs(attrs)
        if inner is None:
            raise Unsupported("a lookup by a computed column")
        renamed = keys.rename_columns([a.col for a in inner])
        rows = self.child.lookup(b, inner, renamed, new=new, null_safe=null_safe)
        return self.apply(b, rows) or empty(self.output)

    def presence(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table,
                 null_safe: Sequence[bool]) -> tuple[pa.Array, pa.Array]:  # fmt: skip
        inner = self.inner_attrs(attrs)  # a projection keeps every row: its child's answer
        if inner is None:
            raise Unsupported("a lookup by a computed column")
        renamed = keys.rename_columns([a.col for a in inner])
        return self.child.presence(b, inner, renamed, null_safe)

    def whole(self, b: Batch, *, new: bool) -> pa.Table:
        return self.apply(b, self.child.whole(b, new=new)) or empty(self.output)

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        return f"SELECT {self.select} FROM ({self.child.full_sql(base)})"


class ExpandOp(Op):
    """Spark's Expand (from its rewrite of several DISTINCT aggregates): each input row
    gives one output row per projection. Linear, so its change is its input's, expanded."""

    def __init__(
        self, child: Op, projections: Sequence[Sequence[Expr]], output: Sequence[Attr]
    ) -> None:
        self.child = child
        self.output = tuple(output)
        self.tables = child.tables
        selects = []
        for proj in projections:
            parts = [
                f'CAST({sql(e, col_ref)} AS {duck_type(a.dtype)}) AS "{a.col}"'
                for a, e in zip(self.output, proj, strict=True)
            ]
            selects.append(", ".join([*parts, f'"{W}"']))
        self.selects = selects
        self.passthrough: dict[int, Attr] = {}
        for i, attr in enumerate(self.output):
            refs = {p[i].attr().id if p[i].attr() else None for p in projections}  # type: ignore[union-attr]
            if len(refs) == 1 and None not in refs:
                ref = refs.pop()
                self.passthrough[attr.id] = next(c for c in child.output if c.id == ref)

    def children(self) -> tuple[Op, ...]:
        return (self.child,)

    def apply(self, b: Batch, rows: pa.Table | None) -> pa.Table | None:
        if rows is None:
            return None
        query = " UNION ALL ".join(f"SELECT {s} FROM d" for s in self.selects)
        return conform(b.compute.query(query, d=rows), self.output)

    def delta(self, b: Batch) -> pa.Table | None:
        return self.apply(b, self.child.delta(b))

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        inner = [self.passthrough.get(a.id) for a in attrs]
        return all(i is not None for i in inner) and self.child.can_lookup(
            [i for i in inner if i is not None], strict=strict)  # fmt: skip

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        inner = [self.passthrough[a.id] for a in attrs]
        rows = self.child.lookup(b, inner, keys.rename_columns([a.col for a in inner]),
                                 new=new, null_safe=null_safe)  # fmt: skip
        return self.apply(b, rows) or empty(self.output)

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        child = self.child.full_sql(base)
        return " UNION ALL ".join(f"SELECT {s} FROM ({child})" for s in self.selects)


class UnionOp(Op):
    """``UNION ALL`` (``UNION`` is Spark's aggregate over it): the rows of every input,
    matched to the output's columns by position. Linear: its change is its inputs'
    changes, each renamed; a lookup is each input's lookup, renamed."""

    def __init__(self, inputs: Sequence[Op], output: Sequence[Attr]) -> None:
        self.inputs = tuple(inputs)
        self.output = tuple(output)
        self.tables = frozenset().union(*(i.tables for i in self.inputs))
        # per input, a SELECT of its columns as the output's
        self.selects = [
            ", ".join([*(f'CAST("{a.col}" AS {duck_type(o.dtype)}) AS "{o.col}"'
                         for a, o in zip(i.output, self.output, strict=True)), f'"{W}"'])
            for i in self.inputs
        ]  # fmt: skip

    def children(self) -> tuple[Op, ...]:
        return self.inputs

    def _renamed(self, index: int, rows: pa.Table | None) -> pa.Table | None:
        """An input's rows under the output's column names and types (Arrow alone: the
        analyzer widened each input's columns to the output's types already)."""
        if rows is None:
            return None
        names = [a.col for a in self.inputs[index].output]
        renamed = rows.select([*names, W]).rename_columns([*(o.col for o in self.output), W])
        return conform(renamed, self.output)

    def delta(self, b: Batch) -> pa.Table | None:
        return concat((self._renamed(i, op.delta(b)) for i, op in enumerate(self.inputs)),
                      self.output)  # fmt: skip

    def _inner(self, index: int, attrs: Sequence[Attr]) -> list[Attr]:
        position = {o.id: k for k, o in enumerate(self.output)}
        return [self.inputs[index].output[position[a.id]] for a in attrs]

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        ids = {o.id for o in self.output}
        if not attrs or not all(a.id in ids for a in attrs):
            return False
        # (each input asked, so that each prepares the index it needs)
        found = [op.can_lookup(self._inner(i, attrs), strict=strict)
                 for i, op in enumerate(self.inputs)]  # fmt: skip
        return all(found)

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        parts = []
        for i, op in enumerate(self.inputs):
            inner = self._inner(i, attrs)
            rows = op.lookup(b, inner, keys.rename_columns([a.col for a in inner]), new=new,
                             null_safe=null_safe)  # fmt: skip
            parts.append(self._renamed(i, rows))
        return concat(parts, self.output) or empty(self.output)

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        return " UNION ALL ".join(
            f"SELECT {select} FROM ({op.full_sql(base)})"
            for select, op in zip(self.selects, self.inputs, strict=True)
        )


# -- joins --------------------------------------------------------------------------------
_JOIN_KINDS = {
    "Inner$": "inner", "Cross$": "inner", "LeftOuter$": "left", "RightOuter$": "right",
    "FullOuter$": "full", "LeftSemi$": "semi", "LeftAnti$": "anti",
}  # fmt: skip


def _conjuncts(e: Expr | None) -> list[Expr]:
    if e is None:
        return []
    if e.kind == "And":
        return _conjuncts(e.children[0]) + _conjuncts(e.children[1])
    return [e]


def _null_aware(e: Expr) -> bool:
    """Spark's condition for ``x NOT IN (subquery)``: ``x = y OR isnull(x = y)``."""
    return e.kind == "Or" and any(c.kind == "IsNull" for c in e.children)


def key_attr(e: Expr, side: Sequence[Attr]) -> Attr | None:
    """The side's attribute a join key expression is, if it is one."""
    inner = e
    while inner.kind in ("KnownFloatingPointNormalized", "NormalizeNaNAndZero", "KnownNotNull"):
        inner = inner.children[0]
    ref = inner.attr()
    if ref is None:
        return None
    return next((a for a in side if a.id == ref.id), None)


class JoinOp(Op):
    def __init__(self, left: Op, right: Op, kind: str, condition: Expr | None,
                 flag: Attr | None = None) -> None:  # fmt: skip
        """``kind``: inner, left, right, full, semi, anti, or exists (Spark's existence
        join, of an EXISTS or IN beside another condition: every left row, with ``flag``
        true where it has a match)."""
        self.left, self.right, self.kind = left, right, kind
        self.tables = left.tables | right.tables
        left_ids = {a.id for a in left.output}
        right_ids = {a.id for a in right.output}
        self.lkeys: list[Expr] = []
        self.rkeys: list[Expr] = []
        self.null_safe: list[bool] = []
        residual: list[Expr] = []
        for c in _conjuncts(condition):
            if c.kind in ("EqualTo", "EqualNullSafe"):
                a, z = c.children
                ra, rz = a.references(), z.references()
                if ra and rz and ra <= left_ids and rz <= right_ids:
                    self._key(a, z, c.kind)
                    continue
                if ra and rz and ra <= right_ids and rz <= left_ids:
                    self._key(z, a, c.kind)
                    continue
            residual.append(c)
        self.residual = [sql(r, col_ref) for r in residual]
        if kind in ("semi", "anti"):
            self.output = left.output
        elif kind == "exists":
            assert flag is not None
            self.flag = flag
            self.output = (*left.output, flag)
        else:
            self.output = left.output + right.output
        self.small = left.small and right.small and kind == "inner"
        if not self.lkeys and not self.small:
            if kind == "anti" and any(_null_aware(c) for c in residual):
                raise Unsupported(
                    "NOT IN over values that may be NULL (its NULL rule: one NULL in the"
                    " subquery keeps no row; NOT EXISTS has no such rule and is incremental)"
                )
            raise Unsupported(f"{kind} join without an equality between the two sides")
        if self.lkeys:
            self.lattrs = [key_attr(k, left.output) for k in self.lkeys]
            self.rattrs = [key_attr(k, right.output) for k in self.rkeys]
            if any(a is None for a in self.lattrs) or any(a is None for a in self.rattrs):
                raise Unsupported("a join on computed keys")
            strict = not any(self.null_safe)  # (a key of NULL: no match, no lookup)
            lattrs = [a for a in self.lattrs if a is not None]
            rattrs = [a for a in self.rattrs if a is not None]
            if not (left.can_lookup(lattrs, strict=strict)
                    and right.can_lookup(rattrs, strict=strict)):  # fmt: skip
                raise Unsupported("a join whose inputs cannot be looked up by the join key")

    def _key(self, left: Expr, right: Expr, kind: str) -> None:
        self.lkeys.append(left)
        self.rkeys.append(right)
        self.null_safe.append(kind == "EqualNullSafe")

    def children(self) -> tuple[Op, ...]:
        return (self.left, self.right)

    # SQL pieces over tables aliased l and r
    def _on(self) -> str:
        parts = []
        for lk, rk, ns in zip(self.lkeys, self.rkeys, self.null_safe, strict=True):
            op = "IS NOT DISTINCT FROM" if ns else "="
            parts.append(
                f"({sql(lk, lambda i: f'l.{col_ref(i)}')} {op} {sql(rk, lambda i: f'r.{col_ref(i)}')})"
            )
        parts += [self._qualified(c) for c in self.residual]
        return " AND ".join(parts) if parts else "TRUE"

    def _qualified(self, condition: str) -> str:
        out = condition
        for a in self.left.output:
            out = out.replace(f'"{a.col}"', f'l."{a.col}"')
        for a in self.right.output:
            out = out.replace(f'"{a.col}"', f'r."{a.col}"')
        return out.replace('l.l."', 'l."').replace('r.r."', 'r."')

    def _pairs(self, b: Batch, left: pa.Table, right: pa.Table) -> pa.Table | None:
        """Matched pairs of two bags/Z-sets, weights multiplied."""
        if left.num_rows == 0 or right.num_rows == 0:
            return None
        query = (
            f"SELECT {_cols(self.left.output, 'l.')}, {_cols(self.right.output, 'r.')},"
            f' CAST(l."{W}" * r."{W}" AS BIGINT) AS "{W}" FROM l JOIN r ON {self._on()}'
        )
        out = b.compute.query(query, l=left, r=right)
        return conform(out, self.left.output + self.right.output) if out.num_rows else None

    def _keys_of(
        self, b: Batch, rows: pa.Table, keys: Sequence[Expr], attrs: Sequence[Attr]
    ) -> pa.Table:
        cols = ", ".join(
            f'{sql(k, col_ref)} AS "{a.col}"' for k, a in zip(keys, attrs, strict=True)
        )
        return b.compute.query(f"SELECT DISTINCT {cols} FROM d", d=rows)

    def _probe_right(self, b: Batch, left_rows: pa.Table, *, new: bool) -> pa.Table:
        keys = self._keys_of(b, left_rows, self.lkeys, self.rattrs)  # type: ignore[arg-type]
        return self.right.lookup(b, self.rattrs, keys, new=new, null_safe=self.null_safe)  # type: ignore[arg-type]

    def _probe_left(self, b: Batch, right_rows: pa.Table, *, new: bool) -> pa.Table:
        keys = self._keys_of(b, right_rows, self.rkeys, self.lattrs)  # type: ignore[arg-type]
        return self.left.lookup(b, self.lattrs, keys, new=new, null_safe=self.null_safe)  # type: ignore[arg-type]

    def _inner_delta(self, b: Batch, dl: pa.Table | None, dr: pa.Table | None) -> pa.Table | None:
        parts = []
        if dl is not None:
            parts.append(self._pairs(b, dl, self._probe_right(b, dl, new=False)))
        if dr is not None:
            parts.append(self._pairs(b, self._probe_left(b, dr, new=True), dr))
        return concat(parts, self.left.output + self.right.output)

    def _unmatched(self, b: Batch, rows: pa.Table, other: pa.Table, *, rows_left: bool) -> pa.Table:
        """The rows of ``rows`` with no match in ``other``."""
        if rows.num_rows == 0:
            return rows
        if other.num_rows == 0:
            return rows
        if rows_left:
            query = f"SELECT l.* FROM l WHERE NOT EXISTS (SELECT 1 FROM r WHERE {self._on()})"
            return b.compute.query(query, l=rows, r=other)
        query = f"SELECT r.* FROM r WHERE NOT EXISTS (SELECT 1 FROM l WHERE {self._on()})"
        return b.compute.query(query, l=other, r=rows)

    def _matched(self, b: Batch, rows: pa.Table, other: pa.Table) -> pa.Table:
        if rows.num_rows == 0 or other.num_rows == 0:
            return rows.slice(0, 0)
        query = f"SELECT l.* FROM l WHERE EXISTS (SELECT 1 FROM r WHERE {self._on()})"
        return b.compute.query(query, l=rows, r=other)

    def _pad(self, rows: pa.Table, side: str) -> pa.Table:
        """Rows of one side with NULLs for the other side's columns."""
        cols: dict[str, Any] = {}
        n = rows.num_rows
        for a in self.left.output:
            cols[a.col] = rows.column(a.col) if side == "left" else pa.nulls(n, arrow_type(a.dtype))
        for a in self.right.output:
            cols[a.col] = (
                rows.column(a.col) if side == "right" else pa.nulls(n, arrow_type(a.dtype))
            )
        cols[W] = rows.column(W)
        return pa.table(cols)

    def _side_delta(self, b: Batch, side: str, dl: pa.Table | None, dr: pa.Table | None,
                    *, keep: str) -> pa.Table | None:  # fmt: skip
        """Change of the rows of ``side`` kept for having no match (keep="unmatched", for
        outer and anti joins) or a match (keep="matched", semi joins).

        Only the other side's change can move a row of ``side`` between matched and
        unmatched, and only rows of the keys it touched. Without a condition beyond the
        keys, only the keys that gained their first partner or lost their last: all
        their rows move, and whether a key has partners, before and after, comes from
        the other side's index (:meth:`Op.presence`), not from its rows. With one, the
        rows of every touched key and their partners are compared whole, before and
        after. A row of another key is matched before and after alike, so of those only
        the rows ``side``'s own change added or removed count, kept by their partners:
        a row of ``side`` that changed, or a partner that changed but did not come or
        go, is not a reason to read the other rows of its key, nor, without a
        condition, the partners of any key (the fact rows of a dimension key, say)."""
        rows_left = side == "left"
        changed, decider = (dl, dr) if rows_left else (dr, dl)
        if changed is None and decider is None:
            return None
        mine, other = (self.left, self.right) if rows_left else (self.right, self.left)
        mine_keys, other_keys = (self.lkeys, self.rkeys) if rows_left else (self.rkeys, self.lkeys)
        mine_attrs = self.lattrs if rows_left else self.rattrs
        other_attrs = self.rattrs if rows_left else self.lattrs

        def kept(rows: pa.Table, partners: pa.Table) -> pa.Table:
            if keep == "matched":  # (semi joins: rows of the left side)
                return self._matched(b, rows, partners)
            return self._unmatched(b, rows, partners, rows_left=rows_left)

        def lookup(op: Op, attrs: Sequence[Attr | None], keys: pa.Table, *, new: bool) -> pa.Table:
            return op.lookup(b, attrs, keys, new=new, null_safe=self.null_safe)  # type: ignore[arg-type]

        def presence(keys: pa.Table) -> tuple[pa.Array, pa.Array]:
            return other.presence(b, other_attrs, keys, self.null_safe)  # type: ignore[arg-type]

        parts: list[pa.Table | None] = []
        touched = None
        if decider is not None:
            touched = self._keys_of(b, decider, other_keys, other_attrs)  # type: ignore[arg-type]
            if self.residual:
                old_o = lookup(other, other_attrs, touched, new=False)
                new_o = lookup(other, other_attrs, touched, new=True)
                as_mine = touched.rename_columns([a.col for a in mine_attrs])  # type: ignore[union-attr]
                before = kept(lookup(mine, mine_attrs, as_mine, new=False), old_o)
                after = kept(lookup(mine, mine_attrs, as_mine, new=True), new_o)
                parts += [after, negate(before)]
            else:  # only whether a key has partners, before and after, from the index
                had, has = presence(touched)
                came = touched.filter(pc.and_(has, pc.invert(had)))
                went = touched.filter(pc.and_(had, pc.invert(has)))
                gained, lost = (went, came) if keep == "unmatched" else (came, went)
                rename = [a.col for a in mine_attrs]  # type: ignore[union-attr]
                if gained.num_rows:
                    parts.append(lookup(mine, mine_attrs, gained.rename_columns(rename), new=True))
                if lost.num_rows:
                    lost_rows = lookup(mine, mine_attrs, lost.rename_columns(rename), new=False)
                    parts.append(negate(lost_rows))
                touched = pa.concat_tables([came, went])
        if changed is not None:
            own = changed
            if touched is not None and touched.num_rows:
                own = self._with_keys(b, changed, mine_keys, touched, among=False)
            if own.num_rows:
                keys = self._keys_of(b, own, mine_keys, other_attrs)  # type: ignore[arg-type]
                if self.residual:
                    parts.append(kept(own, lookup(other, other_attrs, keys, new=True)))
                else:
                    partnered = keys.filter(presence(keys)[1])
                    among = keep == "matched"
                    parts.append(self._with_keys(b, own, mine_keys, partnered, among=among))
        attrs = self.left.output if rows_left else self.right.output
        return consolidate(b.compute, concat(parts, attrs))

    def _with_keys(self, b: Batch, rows: pa.Table, keys: Sequence[Expr], touched: pa.Table,
                   *, among: bool) -> pa.Table:  # fmt: skip
        """The rows of ``rows`` whose key (``keys`` over them) is one of ``touched``'s rows
        (``among``) or is none of them, matched as the join matches keys (a NULL in a
        strict key matches none)."""
        if touched.num_rows == 0:
            return rows if not among else rows.slice(0, 0)
        same = self._key_is(keys, "d", touched)
        query = f"SELECT d.* FROM d WHERE {'' if among else 'NOT '}EXISTS (SELECT 1 FROM k WHERE {same})"
        return b.compute.query(query, d=rows, k=touched)

    def _key_is(self, exprs: Sequence[Expr], alias: str, keys: pa.Table) -> str:
        """SQL: ``exprs`` over the rows aliased ``alias`` equal the columns of ``keys``
        (aliased ``k``), key by key as the join matches them (``=``, or ``<=>`` where the
        key is null-safe)."""
        tests = []
        for e, name, ns in zip(exprs, keys.column_names, self.null_safe, strict=True):
            op = "IS NOT DISTINCT FROM" if ns else "="
            tests.append(f'({sql(e, lambda i: f"{alias}.{col_ref(i)}")}) {op} k."{name}"')
        return " AND ".join(tests)

    def delta(self, b: Batch) -> pa.Table | None:
        # Consolidated first: an update whose changed columns the plan pruned before the
        # join is a -old/+new pair of equal rows, which would otherwise probe the other
        # side twice for nothing (a join is linear in each input, so this is exact).
        dl = consolidated_change(b, self.left)
        dr = consolidated_change(b, self.right)
        if dl is None and dr is None:
            return None
        if not self.lkeys:  # a product of single-row inputs
            before = self._product(b, new=False)
            after = self._product(b, new=True)
            return consolidate(b.compute, concat([after, negate(before)], self.output))
        if self.kind in ("semi", "anti"):
            return self._side_delta(
                b, "left", dl, dr, keep="matched" if self.kind == "semi" else "unmatched"
            )
        if self.kind == "exists":  # the semi join's change flagged true, the anti's false
            matched = self._side_delta(b, "left", dl, dr, keep="matched")
            # (every left row is matched or not: the unmatched ones change by the left
            # side's change less the matched ones', without reading the keys again)
            less = None if matched is None else negate(matched)
            unmatched = consolidate(b.compute, concat([dl, less], self.left.output))
            return concat([self._flagged(matched, True), self._flagged(unmatched, False)],
                          self.output)  # fmt: skip
        parts = [self._inner_delta(b, dl, dr)]
        if self.kind in ("left", "full"):
            pad = self._side_delta(b, "left", dl, dr, keep="unmatched")
            parts.append(None if pad is None else self._pad(pad, "left"))
        if self.kind in ("right", "full"):
            pad = self._side_delta(b, "right", dl, dr, keep="unmatched")
            parts.append(None if pad is None else self._pad(pad, "right"))
        return concat(parts, self.output)

    def _flagged(self, rows: pa.Table | None, value: bool) -> pa.Table | None:
        """Left rows with an existence join's flag set to ``value``."""
        if rows is None:
            return None
        columns = {a.col: rows.column(a.col) for a in self.left.output}
        columns[self.flag.col] = pa.array([value] * rows.num_rows, pa.bool_())
        columns[W] = rows.column(W)
        return pa.table(columns)

    def _product(self, b: Batch, *, new: bool) -> pa.Table:
        left, right = self.left.whole(b, new=new), self.right.whole(b, new=new)
        cond = " AND ".join(self._qualified(c) for c in self.residual) or "TRUE"
        query = (f'SELECT {_cols(self.left.output, "l.")}, {_cols(self.right.output, "r.")},'
                 f' CAST(l."{W}" * r."{W}" AS BIGINT) AS "{W}" FROM l, r WHERE {cond}')  # fmt: skip
        return conform(b.compute.query(query, l=left, r=right), self.output)

    def whole(self, b: Batch, *, new: bool) -> pa.Table:
        if not self.small:
            raise Unsupported("a full evaluation of a join")
        return self._product(b, new=new)

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        # By one side's columns: that side's rows and their matches (or padding). Where
        # the other side is preserved, its padded rows hold NULLs there: a strict
        # lookup finds none of them, a null-safe one would need them all.
        if not attrs or not self.lkeys:
            return False
        left_ids = {a.id for a in self.left.output}
        if all(a.id in left_ids for a in attrs) and (self.kind in (
            "inner", "left", "semi", "anti", "exists"
        ) or (strict and self.kind in ("right", "full"))):  # fmt: skip
            return self.left.can_lookup(attrs, strict=strict)
        right_ids = {a.id for a in self.right.output}
        if all(a.id in right_ids for a in attrs) and (
            self.kind in ("inner", "right") or (strict and self.kind in ("left", "full"))
        ):
            return self.right.can_lookup(attrs, strict=strict)
        return False

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        left_ids = {a.id for a in self.left.output}
        if all(a.id in left_ids for a in attrs):
            rows = self.left.lookup(b, attrs, keys, new=new, null_safe=null_safe)
            if rows.num_rows == 0:
                return empty(self.output)
            other = self._probe_right(b, rows, new=new)
            if self.kind == "semi":
                return conform(self._matched(b, rows, other), self.output)
            if self.kind == "anti":
                return conform(self._unmatched(b, rows, other, rows_left=True), self.output)
            if self.kind == "exists":
                flagged = [self._flagged(self._matched(b, rows, other), True),
                           self._flagged(self._unmatched(b, rows, other, rows_left=True), False)]  # fmt: skip
                return concat(flagged, self.output) or empty(self.output)
            parts = [self._pairs(b, rows, other)]
            if self.kind in ("left", "full"):
                parts.append(self._pad(self._unmatched(b, rows, other, rows_left=True), "left"))
            return concat(parts, self.output) or empty(self.output)
        rows = self.right.lookup(b, attrs, keys, new=new, null_safe=null_safe)
        if rows.num_rows == 0:
            return empty(self.output)
        other = self._probe_left(b, rows, new=new)
        parts = [self._pairs(b, other, rows)]
        if self.kind in ("right", "full"):
            parts.append(self._pad(self._unmatched(b, rows, other, rows_left=False), "right"))
        return concat(parts, self.output) or empty(self.output)

    def unique_keys(self) -> list[frozenset[int]]:
        left = self.left.unique_keys()
        if self.kind in ("semi", "anti", "exists"):
            return left  # (each left row once; an existence join adds only its flag)
        right = self.right.unique_keys()
        # a pair of rows (or a row padded with NULLs) holds both sides' keys
        keys = [lk | rk for lk in left for rk in right]
        if self.lkeys:  # a side's row meets at most one row of the other by its key
            lids = {a.id for a in self.lattrs if a is not None}
            rids = {a.id for a in self.rattrs if a is not None}
            if self.kind in ("inner", "left") and any(k <= rids for k in right):
                keys += left
            if self.kind in ("inner", "right") and any(k <= lids for k in left):
                keys += right
        return keys

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        left, right = self.left.full_sql(base), self.right.full_sql(base)
        on = self._on()
        if self.kind in ("semi", "anti"):
            exists = "EXISTS" if self.kind == "semi" else "NOT EXISTS"
            return (
                f"SELECT l.* FROM ({left}) l WHERE {exists} (SELECT 1 FROM ({right}) r WHERE {on})"
            )
        if self.kind == "exists":
            return (f'SELECT {_cols(self.left.output, "l.")}, EXISTS (SELECT 1 FROM ({right}) r'
                    f' WHERE {on}) AS "{self.flag.col}", l."{W}" AS "{W}" FROM ({left}) l')  # fmt: skip
        join = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN"}[
            self.kind
        ]
        weight = f'CAST(coalesce(l."{W}", 1) * coalesce(r."{W}", 1) AS BIGINT)'
        return (f'SELECT {_cols(self.left.output, "l.")}, {_cols(self.right.output, "r.")},'
                f' {weight} AS "{W}" FROM ({left}) l {join} ({right}) r ON {on}')  # fmt: skip


# -- aggregates -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AggCall:
    """One aggregate function call of an Aggregate node."""

    result_id: int
    function: str  # Count, Sum, Average, Min, Max, ...
    args: tuple[Expr, ...]
    distinct: bool
    filter: Expr | None
    dtype: Any  # Spark's result type

    @property
    def linear(self) -> bool:
        """Maintained by per-group sums (exact types only)."""
        if self.distinct:
            return False
        if self.function == "Count":
            return True
        if self.function in ("Sum", "Average"):
            t = result_type(self.args[0])
            return t in ("long", "integer", "short", "byte") or decimal_of(t) is not None
        return False

    @property
    def extreme(self) -> bool:
        """MIN or MAX kept per group as its current value and how many rows hold it."""
        return self.function in ("Min", "Max") and _kept_type(self.args[0])

    @property
    def distinct_count(self) -> bool:
        """COUNT(DISTINCT x) of one argument: kept per group as the count of rows holding
        each value."""
        return (self.function == "Count" and self.distinct and len(self.args) == 1
                and _kept_type(self.args[0]))  # fmt: skip


def _kept_type(arg: Expr) -> bool:
    """Values whose equal ones are identical and ordered alike by Spark and DuckDB, or
    floating-point ones, kept normalised as Spark compares them (-0.0 as 0.0, one NaN,
    above infinity: ``normalise_floats``). Of a float MIN over -0.0 and 0.0 Spark gives
    whichever its rows hold first; kept, it is 0.0."""
    t = result_type(arg)
    return t in _EXACT_ORDER or t in ("float", "double") or decimal_of(t) is not None


# Types whose values are equal only when identical, and ordered alike by Spark and
# DuckDB (strings by their UTF-8 bytes; a collated string has another type name).
_EXACT_ORDER = frozenset(("long", "integer", "short", "byte", "string", "date", "timestamp",
                          "timestamp_ntz", "boolean"))  # fmt: skip


def _float_order(values: pa.ChunkedArray) -> pa.Array:
    """Per float, an integer that SQLite orders as Spark orders the values (-0.0 as 0.0,
    every NaN as one value above infinity): the IEEE bits of the normalised value, with
    those of negative values (below zero as integers, but in reverse) turned."""
    bits = normalise_floats(pa.table({"v": values.cast(pa.float64())}), ["v"])["v"]
    whole = bits.combine_chunks()
    raw = pc.fill_null(whole, 0.0).view(pa.int64()).to_numpy()
    turned = np.where(raw < 0, ~(raw & np.int64(0x7FFFFFFFFFFFFFFF)), raw)
    return pa.array(turned, pa.int64(), mask=pc.is_null(whole).to_numpy(zero_copy_only=False))


def _with_order(compute: Compute, pairs: pa.Table, table: KeyedTable) -> pa.Table:
    """``pairs`` with ``table``'s order column ``o``, if it has one: of decimal values,
    text that sorts as the numbers; of floats, an integer (:func:`_float_order`)."""
    if "o" not in table.schema.names:
        return pairs
    if table.schema.field("o").type == pa.string():
        return compute.query(f'SELECT *, {_order_key("v")} AS "o" FROM p', p=pairs)
    return pairs.append_column("o", _float_order(pairs.column("v")))


def _order_key(value: str) -> str:
    """SQL over a decimal ``value`` (a column's SQL) of a text that SQLite orders as
    the numbers (it stores decimals as text, see :mod:`deltamv.state.codec`): the sign,
    then the unscaled digits at a fixed width, in nines' complement below zero. Other
    exact values are stored as integers, or as text compared by its UTF-8 bytes: in
    order already."""
    digits = f"""lpad(replace(replace(CAST({value} AS VARCHAR), '-', ''), '.', ''), 40, '0')"""
    return (f"""CASE WHEN {value} < 0 THEN '0' || translate({digits}, '0123456789', '9876543210')"""
            f" ELSE '1' || {digits} END")  # fmt: skip


def _global_reason(calls: Sequence[AggCall]) -> str:
    """Why a global aggregate keeps no state (one of its ``calls`` cannot)."""
    call = next(c for c in calls if not (c.linear or c.extreme or c.distinct_count))
    if call.function == "First":  # Spark's rewrite of several DISTINCT aggregates
        return ("a global aggregate of several DISTINCT aggregates beside other functions,"
                " or of one with a FILTER (Spark's rewrite takes their values with FIRST)")  # fmt: skip
    return ("a global aggregate other than COUNT, SUM, AVG, MIN, MAX and COUNT(DISTINCT) of"
            " numbers, strings, dates, timestamps and booleans:"
            f" {call.function.upper()} of {result_type(call.args[0])}"
            if call.args else f"a global aggregate of {call.function}")  # fmt: skip


def _agg_calls(items: Sequence[tuple[Attr, Expr]]) -> list[AggCall]:
    calls: dict[int, AggCall] = {}
    for _, e in items:
        for node in e.walk():
            if node.kind != "AggregateExpression":
                continue
            fn = node.children[0]
            rid = int(node.fields["resultId"]["id"])
            filt = node.children[1] if len(node.children) > 1 else None
            calls[rid] = AggCall(rid, fn.kind, fn.children, bool(node.fields.get("isDistinct")),
                                 filt, _agg_type(fn))  # fmt: skip
    return list(calls.values())


def _agg_type(fn: Expr) -> Any:
    kind = fn.kind
    if kind == "Count":
        return "long"
    arg = result_type(fn.children[0]) if fn.children else None
    if kind == "Sum":
        dec = decimal_of(arg)
        if dec:
            return f"decimal({min(38, dec[0] + 10)},{dec[1]})"
        if arg in ("float", "double"):
            return "double"
        return "long"
    if kind == "Average":
        dec = decimal_of(arg)
        if dec:
            # DecimalType.bounded: precision and scale each capped at 38 (not the
            # precision-loss adjustment of arithmetic, which would cut the scale)
            return f"decimal({min(38, dec[0] + 4)},{min(38, dec[1] + 4)})"
        return "double"
    if kind in ("Min", "Max"):
        return arg
    if kind == "First" and _ignores_nulls(fn):
        return arg
    raise Unsupported(f"aggregate function {kind}")


def _ignores_nulls(fn: Expr) -> bool:
    """FIRST(x) IGNORE NULLS, as Spark's rewrite of several DISTINCT aggregates uses it to
    pick each group's one row of regular aggregates (any other FIRST depends on order)."""
    return fn.fields.get("ignoreNulls") is True


def _replace_aggs(
    e: Expr, cols: Mapping[int, str], col: Callable[[int], str], groups: Sequence[Expr] = ()
) -> str:
    """SQL of an output expression with each aggregate call replaced by its value column
    and, given ``groups``, each grouping expression by its group column ``g<i>``."""

    def resolve(i: int) -> str:
        if i < 0 and groups:
            return f'"g{-i - 1}"'
        return cols.get(i) or col(i)

    def rewrite(x: Expr) -> Expr:
        for i, g in enumerate(groups):
            if x == g:
                return Expr("AttributeReference", {"exprId": {"id": -(i + 1)}, "name": f"g{i}",
                                                   "dataType": result_type(g), "nullable": True}, ())  # fmt: skip
        if x.kind == "AggregateExpression":
            rid = int(x.fields["resultId"]["id"])
            return Expr("AttributeReference", {"exprId": {"id": rid}, "name": f"agg{rid}",
                                               "dataType": _agg_type(x.children[0]),
                                               "nullable": True}, ())  # fmt: skip
        return Expr(x.kind, x.fields, tuple(rewrite(c) for c in x.children))

    return sql(rewrite(e), resolve)


class AggregateOp(Op):
    """GROUP BY (or a global aggregate); see the module doc for the two strategies."""

    consolidated = True

    def __init__(self, child: Op, groups: Sequence[Expr], items: Sequence[tuple[Attr, Expr]],
                 state: Callable[[str, pa.Schema, Sequence[Sequence[str]]], KeyedTable],
                 name: str) -> None:  # fmt: skip
        self.child = child
        self.items = tuple(items)
        self.output = tuple(a for a, _ in items)
        self.tables = child.tables
        self.groups = tuple(groups)
        self.calls = _agg_calls(items)
        self.small = not self.groups
        self.name = name
        for call in self.calls:
            if call.function not in ("Count", "Sum", "Average", "Min", "Max", "First"):
                raise Unsupported(f"aggregate function {call.function}")
            for arg in call.args:
                sql(arg, col_ref)
            _agg_sql(call)  # the full evaluation (and touched-group recompute) needs it
        self.group_attrs = [
            Attr(-(i + 1), f"g{i}", result_type(g), True) for i, g in enumerate(self.groups)
        ]
        self.group_sql = [sql(g, col_ref) for g in self.groups]
        self.group_names = [a.name for a in self.group_attrs]  # g<i>, in state and changes
        # State kept per group (exact sums, each MIN/MAX with the rows holding it, each
        # COUNT(DISTINCT)'s value counts), or else every touched group recomputed.
        self.kept = all(c.linear or c.extreme or c.distinct_count for c in self.calls)
        self.extremes = [(i, c) for i, c in enumerate(self.calls) if c.extreme]
        self.distincts = [(i, c) for i, c in enumerate(self.calls) if c.distinct_count]
        # The child attributes behind each group expression (for lookups by group).
        self.group_refs = [key_attr(g, child.output) for g in self.groups]
        # Output attributes that are a group expression: output attr id -> group index.
        self.out_group: dict[int, int] = {}
        for attr, e in items:
            inner = e.children[0] if e.kind == "Alias" else e
            for i, g in enumerate(self.groups):
                if inner == g:
                    self.out_group[attr.id] = i
        # A MIN/MAX whose groups can be looked up reads a group's input rows again when
        # its extreme leaves; else (global, or a computed group key) it keeps every
        # value's count, in order (``ordered``), and reads the next value from there.
        self.ordered = False
        if (not self.kept or self.extremes) and (
                not self.groups or any(r is None for r in self.group_refs)
                or not child.can_lookup(self.group_refs)):  # type: ignore[arg-type]  # fmt: skip
            if not self.kept:
                if self.groups:
                    raise Unsupported("an aggregate whose groups cannot be looked up in its input")
                raise Unsupported(_global_reason(self.calls))
            self.ordered = True
        self.state: KeyedTable | None = None
        # Per COUNT(DISTINCT) of kept state: how many input rows hold each (group, value);
        # the function is the number of values with a count.
        self.value_counts: dict[int, KeyedTable] = {}
        if self.kept:
            fields = [
                pa.field(f"g{i}", arrow_type(a.dtype)) for i, a in enumerate(self.group_attrs)
            ]
            fields.append(pa.field("n", pa.int64()))
            # the columns a batch adds its change to: n, s<i>, n<i>
            self.sum_cols = ["n"]
            for i, call in enumerate(self.calls):
                if call.extreme:  # the extreme and how many rows hold it
                    fields.append(pa.field(f"m{i}", arrow_type(call.dtype)))
                    fields.append(pa.field(f"k{i}", pa.int64()))
                elif call.function != "Count":
                    fields.append(pa.field(f"s{i}", pa.decimal128(38, self._sum_scale(call))))
                    self.sum_cols.append(f"s{i}")
                fields.append(pa.field(f"n{i}", pa.int64()))
                self.sum_cols.append(f"n{i}")
            self.state_schema = pa.schema(fields)
            index = [[f"g{i}" for i in range(len(self.groups))]] if self.groups else []
            self.state = state(name, self.state_schema, index)
            for i, call in self.distincts:
                schema = pa.schema([*fields[: len(self.groups)],
                                    pa.field("v", arrow_type(result_type(call.args[0]))),
                                    pa.field("c", pa.int64())])  # fmt: skip
                self.value_counts[i] = state(f"{name}_d{i}", schema, [schema.names[:-1]])
            by_value: dict[str, KeyedTable] = {}  # MIN(x) and MAX(x) share one table
            for i, call in self.extremes if self.ordered else ():
                value = _filtered(call, sql(call.args[0], col_ref))
                if value not in by_value:
                    value_type = arrow_type(result_type(call.args[0]))
                    order = ([pa.field("o", pa.string())] if pa.types.is_decimal(value_type)
                             else [pa.field("o", pa.int64())]
                             if pa.types.is_floating(value_type) else [])  # fmt: skip
                    schema = pa.schema([*fields[: len(self.groups)], pa.field("v", value_type),
                                        *order, pa.field("c", pa.int64())])  # fmt: skip
                    keys = [[*self.group_names, "v"]]
                    keys += [[*self.group_names, "o"]] if order else []
                    by_value[value] = state(f"{name}_d{i}", schema, keys)
                self.value_counts[i] = by_value[value]
        self.items_sql = {
            attr.id: _replace_aggs(
                e, {c.result_id: f'"v{c.result_id}"' for c in self.calls}, col_ref, self.groups
            )
            for attr, e in items
        }

    @staticmethod
    def _sum_scale(call: AggCall) -> int:
        dec = decimal_of(result_type(call.args[0])) if call.args else None
        return dec[1] if dec else 0

    def children(self) -> tuple[Op, ...]:
        return (self.child,)

    def reset(self) -> None:
        if self.state is not None:
            self.state.recreate()  # its columns may have other types than the last plan's
            for table in self.value_counts.values():
                table.recreate()
        super().reset()

    # -- shared: finishing state rows into output rows ---------------------------------
    def _values(self, states: pa.Table) -> pa.Table:
        """Per state row of kept state: its groups (``g<i>``) and the value of each
        aggregate call (``v<result id>``), as Spark computes it."""
        cols = {f"g{i}": states.column(f"g{i}") for i in range(len(self.groups))}
        for i, call in enumerate(self.calls):
            if call.extreme:  # NULL where no value is left (kept so by the merge)
                cols[f"v{call.result_id}"] = states.column(f"m{i}")
                continue
            n = states.column(f"n{i}")
            cols[f"v{call.result_id}"] = _final_value(call, None if call.function == "Count" else
                                                      states.column(f"s{i}"), n)  # fmt: skip
        return pa.table(cols) if cols else pa.table({"_": pa.nulls(states.num_rows)})

    def _select(self) -> str:
        return ", ".join(
            f'CAST({self.items_sql[a.id]} AS {duck_type(a.dtype)}) AS "{a.col}"'
            for a in self.output
        )

    def _finalize(self, b: Batch, states: pa.Table, weight: int) -> pa.Table:
        """Output rows (with ``weight``) for rows of kept state."""
        if states.num_rows == 0:
            return empty(self.output)
        out = b.compute.query(f'SELECT {self._select()}, CAST({weight} AS BIGINT) AS "{W}" FROM t',
                              t=self._values(states))  # fmt: skip
        return conform(out, self.output)

    def _output_change(self, b: Batch, old: pa.Table, new: pa.Table) -> pa.Table | None:
        """The output's change from the ``old`` to the ``new`` rows of kept state,
        consolidated: one query finishes both and cancels the rows that stay."""
        states = pa.concat_tables([old.cast(new.schema), new])
        if states.num_rows == 0:
            return None
        weights = pa.array([-1] * old.num_rows + [1] * new.num_rows, pa.int64())
        finished = f'(SELECT {self._select()}, "{W}" FROM t)'
        out = b.compute.query(
            _consolidating_sql(_cols(self.output), finished, _floats(schema_of(self.output))),
            t=self._values(states).append_column(W, weights),
        )
        return conform(out, self.output) if out.num_rows else None

    def _zero_state(self) -> pa.Table:
        row: dict[str, Any] = {"n": [0]}
        for i, call in enumerate(self.calls):
            if call.extreme:
                row[f"m{i}"] = [None]
                row[f"k{i}"] = [0]
            elif call.function != "Count":
                row[f"s{i}"] = [decimal.Decimal(0)]
            row[f"n{i}"] = [0]
        return pa.table(row).cast(self.state_schema)

    # -- kept state ---------------------------------------------------------------------
    def _group_columns(self) -> list[str]:
        """SQL of each group expression as its column ``g<i>``."""
        return [f'CAST({g} AS {duck_type(a.dtype)}) AS "{a.name}"'
                for g, a in zip(self.group_sql, self.group_attrs, strict=True)]  # fmt: skip

    def _group_sums_sql(self, source: str) -> str:
        """SQL of the per-group change of the row count and of each sum, over ``source``."""
        groups = self._group_columns()
        sums = [f'CAST(sum("{W}") AS BIGINT) AS "n"']
        for i, call in enumerate(self.calls):
            if call.distinct_count:  # from the values' counts (:meth:`_distinct_changes`)
                sums.append(f'CAST(0 AS BIGINT) AS "n{i}"')
                continue
            args = [_filtered(call, sql(a, col_ref)) for a in call.args]  # NULL where filtered
            present = " AND ".join(f"({a}) IS NOT NULL" for a in args) or "TRUE"
            sums.append(f'CAST(coalesce(sum(CASE WHEN {present} THEN "{W}" END), 0) AS BIGINT)'
                        f' AS "n{i}"')  # fmt: skip
            if call.function not in ("Count", "Min", "Max"):
                scale = self._sum_scale(call)
                sums.append(
                    f"CAST(coalesce(sum(CAST({args[0]} AS DECIMAL(38,{scale}))"
                    f' * "{W}"), 0) AS DECIMAL(38,{scale})) AS "s{i}"'
                )
        by = f" GROUP BY {', '.join(f'{i + 1}' for i in range(len(groups)))}" if groups else ""
        return f"SELECT {', '.join([*groups, *sums])} FROM {source}{by}"

    def _group_sums(self, b: Batch, rows: pa.Table, relation: str) -> pa.Table:
        """Per group of the changed rows (``relation`` over ``rows``, see
        :meth:`Op.stream`): the change of the row count and of each sum, for the groups
        it changes at all."""
        out = b.compute.query(self._group_sums_sql(relation), d=rows)
        out = normalise_floats(out, self.group_names)
        if self.distincts or self.extremes:  # each value's change of count, per group
            counts = self._value_counts([c for _, c in [*self.distincts, *self.extremes]],
                                        lambda q: b.compute.query(q, d=rows), relation)  # fmt: skip
            b.cache[(id(self), "counts")] = counts
        if self.distincts:
            out = self._distinct_changes(b, out, counts)
        if self.extremes:
            out = self._extreme_changes(b, out, counts)
        for i, call in self.extremes if self.ordered else ():
            self._pair_counts(b, self.value_counts[i], counts[call.result_id])
        moved = [pc.not_equal(out.column(c), pa.scalar(0, out.schema.field(c).type))
                 for c in self.sum_cols]  # fmt: skip
        moved += [pc.is_valid(out.column(f"a{i}")) for i, _ in self.extremes]
        return out.filter(functools.reduce(pc.or_, moved))  # n is always there

    def _value_counts(self, calls: Sequence[AggCall], run: Callable[[str], pa.Table],
                      source: str) -> dict[int, pa.Table]:  # fmt: skip
        """Per call (by result id), each (group, value)'s count of rows (or its change:
        ``source`` is a batch's change) for COUNT(DISTINCT) or MIN/MAX; ``run`` runs a
        query. Calls of one argument and filter (MIN(x) and MAX(x)) share one query."""
        by_sql: dict[str, pa.Table] = {}
        out = {}
        for call in calls:
            arg = _filtered(call, sql(call.args[0], col_ref))
            value = f'CAST({arg} AS {duck_type(result_type(call.args[0]))}) AS "v"'
            query = (f'SELECT {", ".join([*self._group_columns(), value])},'
                     f' CAST(sum("{W}") AS BIGINT) AS "c" FROM {source}'
                     f' WHERE ({arg}) IS NOT NULL GROUP BY ALL HAVING sum("{W}") <> 0')  # fmt: skip
            if query not in by_sql:  # (DuckDB groups -0.0 with 0.0 and NaN with NaN)
                by_sql[query] = normalise_floats(run(query), [*self.group_names, "v"])
            out[call.result_id] = by_sql[query]
        return out

    def _extremes_sql(self, call: AggCall, counts: str, *, extreme: str, count: str) -> str:
        """SQL of each group's least (MIN) or greatest (MAX) value among those with a
        count above 0 in ``counts`` (a relation of :meth:`_value_counts`), and its count."""
        names = ", ".join(f'"{g}"' for g in self.group_names)
        fn = call.function.lower()
        return (f'SELECT {names + ", " if names else ""}{fn}("v") FILTER (WHERE "c" > 0)'
                f' AS "{extreme}", arg_{fn}("c", "v") FILTER (WHERE "c" > 0) AS "{count}"'
                f" FROM {counts}{' GROUP BY ' + names if names else ''}")  # fmt: skip

    def _extreme_changes(self, b: Batch, change: pa.Table, counts: Mapping[int, pa.Table]
                         ) -> pa.Table:  # fmt: skip
        """``change`` (per group) with, per MIN/MAX ``i``, the extreme of the values the
        batch added (``a<i>``: net, so a value removed and added again is no change) and
        how many rows it added with it (``w<i>``), from the change of each value's count
        (``counts``, which :meth:`_merge` reads too)."""
        by = _same("x", "t", self.group_names)
        for i, call in self.extremes:
            added = self._extremes_sql(call, "p", extreme=f"a{i}", count=f"w{i}")
            change = b.compute.query(
                f'SELECT x.*, t."a{i}", t."w{i}" FROM x LEFT JOIN ({added}) t ON {by}',
                x=change, p=counts[call.result_id],
            )  # fmt: skip
        return change

    def _distinct_changes(self, b: Batch, change: pa.Table, counts: Mapping[int, pa.Table]
                          ) -> pa.Table:  # fmt: skip
        """``change`` (per group) with each COUNT(DISTINCT)'s change: +1 per value whose
        count of rows the batch raised from 0, -1 per value it brought to 0 (``counts``:
        the change of each value's count). The values' new counts are kept for
        :meth:`finish`."""
        names = self.group_names
        by = _same("x", "t", names)
        for i, call in self.distincts:
            pairs = self._pair_counts(b, self.value_counts[i], counts[call.result_id])
            head = ", ".join(f'"{g}"' for g in names)
            moved = (f'SELECT {head + ", " if head else ""}CAST(sum(CASE WHEN "old" = 0'
                     f' THEN 1 WHEN "c" = 0 THEN -1 ELSE 0 END) AS BIGINT) AS "n{i}"'
                     f' FROM t WHERE ("old" = 0) <> ("c" = 0)'
                     + (f" GROUP BY {head}" if head else ""))  # fmt: skip
            change = b.compute.query(
                f'SELECT x.* REPLACE (x."n{i}" + coalesce(t."n{i}", 0) AS "n{i}")'
                f" FROM x LEFT JOIN ({moved}) t ON {by}",
                x=change, t=pairs,
            ).cast(change.schema)  # fmt: skip
        return change

    def _pair_counts(self, b: Batch, table: KeyedTable, change: pa.Table) -> pa.Table:
        """The (group, value) pairs of ``change`` (the change of their counts of rows)
        with their new count ``c``, the ``old`` one and the ``table`` row holding it,
        once per batch and table; :meth:`finish` writes them."""
        key = (id(self), "values", table.name)
        if key not in b.cache:
            names = [*self.group_names, "v"]
            old = table.lookup(names, change.select(names), null_safe=True)
            pairs = b.compute.query(
                f'SELECT p.* REPLACE (coalesce(o."c", 0) + p."c" AS "c"),'
                f' coalesce(o."c", 0) AS "old", o."{ROWID}" AS "{ROWID}"'
                f' FROM p LEFT JOIN o ON {_same("p", "o", names)}',
                p=change, o=old,
            )  # fmt: skip
            b.cache[key] = _with_order(b.compute, pairs, table)
        return b.cache[key]

    def _old_states(self, b: Batch, groups: pa.Table) -> pa.Table:
        assert self.state is not None
        if not self.groups:
            rows = list(self.state.scan(with_rowid=True))
            if not rows:
                return self.state_schema.empty_table().append_column(
                    ROWID, pa.array([], pa.int64())
                )
            found = pa.concat_tables(rows)
            return found.select([*self.state_schema.names, ROWID])
        return self.state.lookup(self.group_names, groups.select(self.group_names),
                                 null_safe=True)  # fmt: skip

    def _merge(self, b: Batch, old: pa.Table, change: pa.Table) -> pa.Table:
        names = self.group_names
        on = _same("o", "c", names)
        keys = ", ".join(f'coalesce(c."{g}", o."{g}") AS "{g}"' for g in names)
        vals = [f'coalesce(o."{v}", 0) + coalesce(c."{v}", 0) AS "{v}"' for v in self.sum_cols]
        stale = []
        joins = ""
        tables = {"c": change, "o": old}
        for i, call in self.extremes:
            # A value added beyond the extreme (below a MIN) is the new one; else the
            # extreme stays while rows hold it; else (its last row gone, nothing added
            # beyond it) the next one is not known: the group is read again (_refresh).
            beyond = "<" if call.function == "Min" else ">"
            left = f'coalesce(o."n{i}", 0) + coalesce(c."n{i}", 0) > 0'
            new = f'(c."a{i}" IS NOT NULL AND coalesce(c."a{i}" {beyond} o."m{i}", TRUE))'
            held = f'coalesce(o."k{i}", 0) + coalesce(p{i}."c", 0)'
            stale.append(f'({left} AND NOT {new} AND {held} <= 0) AS "{_STALE}{i}"')
            vals.append(f'CASE WHEN NOT {left} THEN NULL WHEN {new} THEN c."a{i}"'
                        f' WHEN {held} > 0 THEN o."m{i}" END AS "m{i}"')  # fmt: skip
            vals.append(f'CASE WHEN NOT {left} THEN 0 WHEN {new} THEN c."w{i}"'
                        f' WHEN {held} > 0 THEN {held} ELSE 0 END AS "k{i}"')  # fmt: skip
            joins += f' LEFT JOIN p{i} ON {_same(f"p{i}", "o", names)} AND p{i}."v" = o."m{i}"'
            tables[f"p{i}"] = b.cache[(id(self), "counts")][call.result_id]
        vals += stale
        head = f"{keys}, " if keys else ""
        merged = b.compute.query(
            f'SELECT {head}{", ".join(vals)}, o."{ROWID}" AS "{ROWID}"'
            f" FROM c FULL JOIN o ON {on}{joins}",
            **tables,
        )
        states = merged.select([*self.state_schema.names, ROWID]).cast(
            pa.schema([*self.state_schema, pa.field(ROWID, pa.int64())]))  # fmt: skip
        flags = {i: merged.column(f"{_STALE}{i}") for i, _ in self.extremes}
        if not any(pc.any(f).as_py() for f in flags.values()):
            return states
        if self.ordered:
            return self._next_values(b, states, flags)
        return self._refresh(b, states, flags)

    def _refresh(self, b: Batch, states: pa.Table, stale: Mapping[int, pa.ChunkedArray]
                 ) -> pa.Table:  # fmt: skip
        """``states`` with each MIN/MAX ``i`` of its ``stale[i]`` groups (a batch removed
        their extreme) taken again from those groups' input rows after the batch."""
        refs = [r for r in self.group_refs if r is not None]
        anyone = functools.reduce(pc.or_, stale.values())
        keys = states.filter(anyone).select(self.group_names).rename_columns([r.col for r in refs])
        rows = self.child.lookup(b, refs, keys, new=True, null_safe=[True] * len(refs))
        on = _same("s", "f", self.group_names)
        for i, flag in stale.items():
            states = states.append_column(f"{_STALE}{i}", flag)
        counts = self._value_counts([c for _, c in self.extremes],
                                    lambda q: b.compute.query(q, d=rows), "d")  # fmt: skip
        for i, call in self.extremes:
            fresh = self._extremes_sql(call, "p", extreme=f"m{i}", count=f"k{i}")
            states = b.compute.query(
                f"SELECT s.* REPLACE ({self._patched(i)}) FROM s LEFT JOIN ({fresh}) f ON {on}",
                s=states, p=counts[call.result_id],
            ).cast(states.schema)  # fmt: skip
        return states.drop_columns([f"{_STALE}{i}" for i in stale])

    @staticmethod
    def _patched(i: int) -> str:
        """SQL of MIN/MAX ``i``'s state columns: from ``f`` (the extremes taken again)
        in the groups flagged stale, else from ``s`` (the merged states)."""
        return ", ".join(f'CASE WHEN s."{_STALE}{i}" THEN coalesce(f."{x}{i}", {none})'
                         f' ELSE s."{x}{i}" END AS "{x}{i}"'
                         for x, none in (("m", "NULL"), ("k", "0")))  # fmt: skip

    def _next_values(self, b: Batch, states: pa.Table, stale: Mapping[int, pa.ChunkedArray]
                     ) -> pa.Table:  # fmt: skip
        """``states`` with each MIN/MAX ``i`` of its ``stale[i]`` groups taken from the
        values' counts: the least (MIN) values stored before the batch, as many as the
        batch took the last row of, plus one, with the counts the batch changed applied.
        The new extreme is among them, or among the values the batch added."""
        names = self.group_names
        on = _same("s", "f", names)
        # the flags travel with their groups: a join below may give its rows in any order
        for i, flag in stale.items():
            states = states.append_column(f"{_STALE}{i}", flag)
        for i, call in self.extremes:
            flag = states.column(f"{_STALE}{i}")
            if not pc.any(flag).as_py():
                continue
            groups = states.filter(flag).select(names)
            table = self.value_counts[i]
            pairs = b.cache[(id(self), "values", table.name)]
            gone = b.compute.query(
                f'SELECT g.*, CAST(count(p."v") AS BIGINT) AS "gone" FROM g LEFT JOIN p'
                f' ON {_same("g", "p", names)} AND p."old" > 0 AND p."c" = 0 GROUP BY ALL',
                g=groups, p=pairs,
            ) if names else b.compute.query(
                'SELECT CAST(count(*) AS BIGINT) AS "gone" FROM p WHERE "old" > 0 AND "c" = 0',
                p=pairs,
            )  # fmt: skip
            order = "o" if "o" in table.schema.names else "v"
            first = [table.first(names, gone.slice(r, 1), order, limit=gone["gone"][r].as_py() + 1,
                                 descending=call.function == "Max")
                     for r in range(gone.num_rows)]  # fmt: skip
            stored = pa.concat_tables(first).select([*names, "v", "c"])
            both = ", ".join(f'coalesce(p."{c}", w."{c}") AS "{c}"' for c in [*names, "v", "c"])
            now = f"SELECT {both} FROM w FULL JOIN p ON {_same('w', 'p', [*names, 'v'])}"
            fresh = self._extremes_sql(call, f"({now})", extreme=f"m{i}", count=f"k{i}")
            states = b.compute.query(
                f"SELECT s.* REPLACE ({self._patched(i)}) FROM s LEFT JOIN ({fresh}) f ON {on}",
                s=states, w=stored, p=pairs.select([*names, "v", "c"]),
            ).cast(states.schema)  # fmt: skip
        return states.drop_columns([f"{_STALE}{i}" for i in stale])

    def _kept_delta(self, b: Batch, rows: pa.Table, relation: str) -> pa.Table | None:
        change = self._group_sums(b, rows, relation)
        if change.num_rows == 0:  # e.g. a filter below kept none of the changed rows
            return None
        old = self._old_states(b, change)
        if not self.groups and old.num_rows == 0:
            old = self._zero_state().append_column(ROWID, pa.array([None], pa.int64()))
        new = self._merge(b, old, change)
        b.cache[(id(self), "new")] = new
        b.cache[(id(self), "old")] = old
        live_old = old if not self.groups else old.filter(pc.greater(old.column("n"), 0))
        live_new = new if not self.groups else new.filter(pc.greater(new.column("n"), 0))
        return self._output_change(
            b, live_old.drop_columns([ROWID]), live_new.drop_columns([ROWID])
        )

    def finish(self, b: Batch) -> None:
        new = b.cache.pop((id(self), "new"), None)
        b.cache.pop((id(self), "old"), None)
        b.cache.pop((id(self), "delta"), None)
        if new is not None and self.state is not None:
            gone = [r for r in new.column(ROWID).to_pylist() if r is not None]
            self.state.delete(gone)
            keep = new if not self.groups else new.filter(pc.greater(new.column("n"), 0))
            self.state.insert(keep.drop_columns([ROWID]))
        b.cache.pop((id(self), "counts"), None)
        for table in {t.name: t for t in self.value_counts.values()}.values():
            counts = b.cache.pop((id(self), "values", table.name), None)
            if counts is not None:  # counts set in place: their row's indexes stay as they are
                stored = pc.is_valid(counts.column(ROWID))
                held = pc.greater(counts.column("c"), 0)
                table.delete(counts.filter(pc.and_not(stored, held)).column(ROWID).to_pylist())
                table.update(counts.filter(pc.and_(stored, held)).select([ROWID, "c"]))
                added = counts.filter(pc.and_not(held, stored))
                table.insert(added.select(table.schema.names).cast(table.schema))
        super().finish(b)

    def build(self, compute: Compute, child_sql: str, tables: Mapping[str, pa.Table]) -> None:
        """Fill the state from the full input (``child_sql``, the child's whole output):
        building the view from scratch."""
        assert self.state is not None
        self.state.clear()
        for table in self.value_counts.values():
            table.clear()
        sums = compute.query(self._group_sums_sql(f"({child_sql})"), **tables)
        sums = normalise_floats(sums, self.group_names)
        if self.groups:
            sums = sums.filter(pc.greater(sums.column("n"), 0))
        elif sums.num_rows == 0:
            return
        names = self.group_names
        on = _same("s", "t", names)
        counts = self._value_counts([c for _, c in [*self.distincts, *self.extremes]],
                                    lambda q: compute.query(q, **tables), f"({child_sql})")  # fmt: skip
        for i, call in self.extremes:
            found = self._extremes_sql(call, "p", extreme=f"m{i}", count=f"k{i}")
            sums = compute.query(
                f'SELECT s.*, t."m{i}", coalesce(t."k{i}", 0) AS "k{i}" FROM s LEFT JOIN ({found}) t'
                f" ON {on}",
                s=sums, p=counts[call.result_id],
            )  # fmt: skip
        stored = set()
        for i, call in [*self.distincts, *(self.extremes if self.ordered else ())]:
            table = self.value_counts[i]
            pairs = counts[call.result_id]
            if table.name not in stored:
                pairs = _with_order(compute, pairs, table)
                table.insert(pairs.select(table.schema.names).cast(table.schema))
                stored.add(table.name)
            if not call.distinct_count:
                continue
            head = ", ".join(f'"{g}"' for g in names)
            per_group = (f'SELECT {head + ", " if head else ""}count(*) AS "n{i}" FROM t'
                         + (f" GROUP BY {head}" if head else ""))  # fmt: skip
            sums = compute.query(
                f'SELECT s.* REPLACE (coalesce(t."n{i}", 0) AS "n{i}") FROM s'
                f" LEFT JOIN ({per_group}) t ON {on}",
                s=sums, t=pairs,
            ).cast(sums.schema)  # fmt: skip
        self.state.insert(sums.select(self.state_schema.names).cast(self.state_schema))

    # -- the recompute-touched-groups strategy -------------------------------------------
    def _eval_groups(self, b: Batch, rows: pa.Table) -> pa.Table:
        """The aggregate's output over input rows (a bag), by SQL."""
        query = self._eval_sql("d")
        expanded = b.compute.query(
            f'SELECT d.* FROM d, generate_series(1, d."{W}") AS _r(_i)', d=rows
        ) if rows.num_rows and pc.max(rows.column(W)).as_py() != 1 else rows  # fmt: skip
        out = b.compute.query(query, d=expanded)
        return conform(out, self.output)

    def _eval_sql(self, source: str) -> str:
        aggs = {c.result_id: _agg_sql(c) for c in self.calls}
        select = ", ".join(
            f'CAST({_replace_aggs(e, aggs, col_ref)} AS {duck_type(a.dtype)}) AS "{a.col}"'
            for a, e in self.items
        )
        # One row when global, also with no aggregate in it (SELECT 0.0 AS x FROM t GROUP BY ())
        by = f" GROUP BY {', '.join(self.group_sql) if self.groups else '()'}"
        return f'SELECT {select}, CAST(1 AS BIGINT) AS "{W}" FROM {source}{by}'

    def _recompute_delta(self, b: Batch, rows: pa.Table, relation: str) -> pa.Table | None:
        refs = [r for r in self.group_refs if r is not None]
        keys = b.compute.query(
            f"SELECT DISTINCT {', '.join(f'{g} AS {col_ref(r.id)}' for g, r in zip(self.group_sql, refs, strict=True))} FROM {relation}",
            d=rows,
        )
        if keys.num_rows == 0:  # a filter below kept none of the changed rows
            return None
        flags = [True] * len(refs)
        before = self._eval_groups(b, self.child.lookup(b, refs, keys, new=False, null_safe=flags))
        after = self._eval_groups(b, self.child.lookup(b, refs, keys, new=True, null_safe=flags))
        return consolidate(b.compute, concat([after, negate(before)], self.output))

    def delta(self, b: Batch) -> pa.Table | None:
        key = (id(self), "delta")
        if key not in b.cache:
            rows, relation = self.child.stream(b)
            if rows is None or rows.num_rows == 0:
                b.cache[key] = None
            elif self.kept:
                b.cache[key] = self._kept_delta(b, rows, relation)
            else:
                b.cache[key] = self._recompute_delta(b, rows, relation)
        return b.cache[key]

    def whole(self, b: Batch, *, new: bool) -> pa.Table:
        if self.groups:
            raise Unsupported("a full evaluation of a grouped aggregate")
        self.delta(b)
        states = b.cache.get((id(self), "new" if new else "old"))
        if states is None:  # the input did not change: old and new are the stored state
            states = self._old_states(b, pa.table({"_": [1]}))
            if states.num_rows == 0:
                states = self._zero_state().append_column(ROWID, pa.array([None], pa.int64()))
        return self._finalize(b, states.drop_columns([ROWID]), 1)

    def unique_keys(self) -> list[frozenset[int]]:
        # a row a group: its values, where every group expression is in the output (none
        # for a global aggregate, whose one row is unique)
        first: dict[int, int] = {}
        for attr_id, i in self.out_group.items():
            first.setdefault(i, attr_id)
        return [frozenset(first.values())] if len(first) == len(self.groups) else []

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        if not attrs or not all(a.id in self.out_group for a in attrs):
            return False
        if self.kept:
            if self.state is not None:
                self.state.ensure_index([f"g{self.out_group[a.id]}" for a in attrs])
            return True
        refs = [self.group_refs[self.out_group[a.id]] for a in attrs]
        return all(r is not None for r in refs) and self.child.can_lookup(refs, strict=strict)  # type: ignore[arg-type]

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        names = [f"g{self.out_group[a.id]}" for a in attrs]
        if not self.kept:
            refs = [r for a in attrs if (r := self.group_refs[self.out_group[a.id]]) is not None]
            rows = self.child.lookup(b, refs, keys.rename_columns([r.col for r in refs]),
                                     new=new, null_safe=[True] * len(refs))  # fmt: skip
            return self._eval_groups(b, rows)
        assert self.state is not None
        wanted = keys.rename_columns(names)  # (the lookup and DuckDB match floats as SQL does)
        stored = self.state.lookup(names, wanted, null_safe=list(null_safe))
        if new:
            self.delta(b)
            fresh = b.cache.get((id(self), "new"))
            if fresh is not None and fresh.num_rows:
                # Replace the touched groups by their new state.
                touched = {r for r in fresh.column(ROWID).to_pylist() if r is not None}
                if touched:
                    stored = stored.filter(
                        pc.invert(
                            pc.is_in(stored.column(ROWID), pa.array(list(touched), pa.int64()))
                        )
                    )
                on = " AND ".join(
                    f'f."{n}" {"IS NOT DISTINCT FROM" if ns else "="} k."{n}"'
                    for n, ns in zip(names, null_safe, strict=True)
                )
                hit = b.compute.query(f"SELECT f.* FROM f WHERE EXISTS (SELECT 1 FROM k WHERE {on})",
                                      f=fresh, k=wanted)  # fmt: skip
                stored = pa.concat_tables([stored.select(hit.column_names).cast(hit.schema), hit])
        stored = stored.filter(pc.greater(stored.column("n"), 0))
        return self._finalize(b, stored.drop_columns([ROWID]), 1)

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        child = self.child.full_sql(base)
        source = f'(SELECT d.* FROM ({child}) d, generate_series(1, d."{W}") AS _r(_i))'
        return self._eval_sql(source)


def _agg_sql(call: AggCall) -> str:
    """The SQL aggregate computing ``call`` over plain rows (for recomputed groups).
    Each argument is evaluated only on the rows its FILTER keeps, as Spark does (DuckDB's
    FILTER evaluates them on every row, and one may fail where the filter rules it out)."""
    args = [_filtered(call, sql(a, col_ref)) for a in call.args]
    distinct = "DISTINCT " if call.distinct else ""
    fn = call.function
    if fn == "Count":
        if len(args) == 1:
            return f"count({distinct}{args[0]})"
        present = " AND ".join(f"({a}) IS NOT NULL" for a in args)
        if call.distinct:
            raise Unsupported("COUNT(DISTINCT) of several columns")
        return f"count(CASE WHEN {present} THEN 1 END)"
    if fn in ("Min", "Max"):
        return f"{fn.lower()}({distinct}{args[0]})"
    if fn == "First":  # IGNORE NULLS (checked by _agg_type); DuckDB's any_value skips NULLs
        return f"any_value({args[0]})"
    if fn == "Sum":
        t = result_type(call.args[0])
        if t in ("float", "double"):
            raise Unsupported("SUM of floating-point values (Spark's result depends on row order)")
        return f"CAST(sum({distinct}{args[0]}) AS {duck_type(call.dtype)})"
    if fn == "Average":
        t = result_type(call.args[0])
        if t in ("float", "double"):
            raise Unsupported(f"AVG of {t} values (Spark's result depends on row order)")
        dec = decimal_of(t)
        if dec is not None:
            if call.distinct:
                raise Unsupported(f"AVG(DISTINCT) of {t} values")
            return decimal_avg_sql(args[0], dec, call.dtype)
        return f"CAST(avg({distinct}{args[0]}) AS DOUBLE)"
    raise Unsupported(f"aggregate function {fn}")


def _filtered(call: AggCall, arg: str) -> str:
    """``arg`` where ``call``'s FILTER keeps the row, else NULL (which no aggregate here
    counts), evaluated only there."""
    if call.filter is None:
        return arg
    return f"(CASE WHEN {sql(call.filter, col_ref)} THEN {arg} END)"


def decimal_avg_sql(arg: str, dec: tuple[int, int], dtype: Any, *, over: str = "") -> str:
    """Spark's AVG of a DECIMAL(p,s) column, exactly, in integer arithmetic (DuckDB divides
    decimals in DOUBLE). Spark divides the sum by the count and rounds the quotient half
    up to the result type, DECIMAL(min(38, p+4), min(38, s+4)); this spells that out on
    the sum's unscaled value, as a quotient and a remainder (overflow, of a sum past
    HUGEINT, is an error in DuckDB, never a wrong value). ``over``: a window clause
    (`` OVER (...)``) for the sum and count, to average over a window's frame."""
    _, s = dec
    result = decimal_of(dtype)
    assert result is not None
    rp, rs = result
    scale = 10 ** (rs - s)
    present = f"({arg}) IS NOT NULL"
    # each value's unscaled integer from its digits (multiplying by 10^s in DECIMAL(38)
    # would overflow for values Spark holds, as 123.5 in a DECIMAL(38,18))
    unscaled_value = (
        f"CAST(replace(CAST(CAST(({arg}) AS DECIMAL(38,{s})) AS VARCHAR), '.', '') AS HUGEINT)"
    )
    total = f"sum(CASE WHEN {present} THEN {unscaled_value} END){over}"
    n = f"CAST(count(CASE WHEN {present} THEN 1 END){over} AS HUGEINT)"
    if rp <= _DOUBLE_AVG_PRECISION:  # as _double_avg: DuckDB's VARCHAR of a DOUBLE is its
        # shortest form, and its cast of text to DECIMAL rounds half up
        value = f"(CAST({total} AS DOUBLE) / CAST({n} AS DOUBLE)) / CAST({10**s} AS DOUBLE)"
        return (
            f"CASE WHEN {n} = 0 THEN NULL ELSE CAST(CAST({value} AS VARCHAR) AS DECIMAL({rp},{rs}))"
            " END"
        )
    # |total| / n at the result's scale, rounded half up (away from zero)
    whole = f"((abs({total}) // {n}) * {scale})"
    part = f"(((abs({total}) % {n}) * {scale * 2} + {n}) // (2 * {n}))"
    unscaled = f"(CAST(sign({total}) AS HUGEINT) * ({whole} + {part}))"
    return (
        f"CASE WHEN {n} = 0 THEN NULL ELSE CAST(CAST({unscaled} AS DECIMAL(38,0))"
        f" * CAST('{decimal.Decimal(1).scaleb(-rs)}' AS DECIMAL({min(38, rs + 1)},{rs}))"
        f" AS DECIMAL({rp},{rs})) END"
    )


def _final_value(call: AggCall, sums: pa.ChunkedArray | None, counts: pa.ChunkedArray) -> pa.Array:
    """A linear aggregate's value from its exact state, as Spark computes it."""
    if call.function == "Count":
        return counts.combine_chunks() if isinstance(counts, pa.ChunkedArray) else counts
    assert sums is not None
    ns = counts.to_pylist()
    ss = sums.to_pylist()
    target = arrow_type(call.dtype)
    out: list[Any] = []
    if call.function == "Sum":
        dec = decimal_of(call.dtype)
        for s, n in zip(ss, ns, strict=True):
            if not n:
                out.append(None)
                continue
            if dec is None:
                if not -(2**63) <= int(s) < 2**63:
                    raise ArithmeticError(f"[ARITHMETIC_OVERFLOW] SUM overflows BIGINT: {s}")
                out.append(int(s))
            else:
                if len(s.as_tuple().digits) - (-s.as_tuple().exponent) > dec[0] - dec[1]:
                    raise ArithmeticError(f"[ARITHMETIC_OVERFLOW] SUM overflows DECIMAL{dec}: {s}")
                out.append(s)
        return pa.array(out, target)
    # Average
    dec = decimal_of(call.dtype)
    if dec is None:
        for s, n in zip(ss, ns, strict=True):
            out.append(None if not n else float(s) / n)
        return pa.array(out, pa.float64())
    # Spark divides the sum by the count and rounds the quotient half up to the result
    # type DECIMAL(min(38, p+4), min(38, s+4)) ...
    ctx = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)
    unit = decimal.Decimal(1).scaleb(-dec[1])
    for s, n in zip(ss, ns, strict=True):
        if not n:
            out.append(None)
        elif dec[0] <= _DOUBLE_AVG_PRECISION:
            out.append(_double_avg(int(decimal.Decimal(s).scaleb(dec[1] - 4)), n, dec[1] - 4))
        else:
            out.append(
                ctx.divide(decimal.Decimal(s), decimal.Decimal(n)).quantize(unit, context=ctx)
            )
    return pa.array(out, target)


# ... but for p+4 <= 15, Spark's DecimalAggregates rule has it computed in DOUBLE:
# CAST((AVG of the unscaled values) / 10^s AS DECIMAL(p+4, s+4)), the double taken at its
# shortest decimal form and rounded half up (0.07 and 159 zeros: 0.000437, not 0.000438).
_DOUBLE_AVG_PRECISION = 15


def _double_avg(unscaled_sum: int, n: int, scale: int) -> decimal.Decimal:
    value = (float(unscaled_sum) / n) / float(10**scale)
    unit = decimal.Decimal(1).scaleb(-(scale + 4))
    return decimal.Decimal(repr(value)).quantize(unit, rounding=decimal.ROUND_HALF_UP)


# -- compiling a plan ---------------------------------------------------------------------
class ViewMaintainer:
    """One view, compiled: its operators, output columns and the tables it reads."""

    def __init__(self, view: str, root: Op, output_names: Sequence[str]) -> None:
        self.view = view
        self.root = root
        self.output_names = tuple(output_names)
        self.tables = root.tables

    def ops(self) -> list[Op]:
        found: list[Op] = []

        def walk(op: Op) -> None:
            found.append(op)
            for child in op.children():
                walk(child)

        walk(self.root)
        return found

    def kept_values(self) -> str:
        """The aggregates keeping values in their state: MIN/MAX (``:extremes``), the
        values' counts of COUNT(DISTINCT) (``:distinct``), or ""."""
        kinds = []
        for op in self.ops():
            if isinstance(op, AggregateOp) and op.kept:
                kinds += [f"{op.name}:{'ordered-' * op.ordered}extremes"] * bool(op.extremes)
                kinds += [f"{op.name}:distinct"] * bool(op.distincts)
        return " ".join(kinds)

    def delta(self, b: Batch) -> pa.Table | None:
        """The view's change in this batch: its columns by name, plus ``__w``."""
        if not b.changed(self.tables):
            return None
        z = consolidated_change(b, self.root)
        if z is None:
            return None
        return self.named(z)

    def named(self, z: pa.Table) -> pa.Table:
        """Rows of the root's output (columns ``c<id>`` and ``__w``) by the view's names."""
        cols = [z.column(a.col) for a in self.root.output]
        return pa.table([*cols, z.column(W)], names=[*self.output_names, W])

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        return self.root.full_sql(base)


def compile_view(
    view: str,
    root: Node,
    output_names: Sequence[str],
    mirrors: Mapping[str, Mirror],
    state: Callable[[str, pa.Schema, Sequence[Sequence[str]]], KeyedTable],
) -> ViewMaintainer:
    """The maintainer of a view, or Unsupported naming why it must be recomputed."""
    counter = itertools.count()

    def build(node: Node) -> Op:
        kind = node.kind
        f = node.fields
        if kind == "LogicalRelation":
            if node.table is None:
                raise Unsupported("a relation that is not one of the job's tables")
            return ScanOp(node.table, node.output, mirrors[node.table])
        if kind == "Filter":
            return FilterOp(build(node.children[0]), f["condition"])
        if kind == "Project":
            child = build(node.children[0])
            exprs = f.get("projectList") or ()
            return ProjectOp(child, list(zip(node.output, exprs, strict=True)))
        if kind == "Join":
            # (an object, as Inner$; or a class with fields, as ExistenceJoin: an EXISTS
            # beside another condition, its row's flag)
            of = f.get("joinType") or {}
            join_type = short_class(str(of.get("object") or of.get("product-class") or "?"))
            if join_type == "ExistenceJoin":  # (its flag: the join's last column)
                return JoinOp(build(node.children[0]), build(node.children[1]), "exists",
                              f.get("condition"), flag=node.output[-1])  # fmt: skip
            mode = _JOIN_KINDS.get(join_type)
            if mode is None:
                raise Unsupported(f"a join of kind {join_type.rstrip('$')}")
            return JoinOp(
                build(node.children[0]), build(node.children[1]), mode, f.get("condition")
            )
        if kind == "Aggregate":
            child = build(node.children[0])
            groups = f.get("groupingExpressions") or ()
            items = f.get("aggregateExpressions") or ()
            return AggregateOp(child, groups, list(zip(node.output, items, strict=True)), state,
                               f"{view}_{next(counter)}")  # fmt: skip
        if kind == "Union":  # (by position: the analyzer resolves UNION BY NAME to it)
            return UnionOp([build(c) for c in node.children], node.output)
        if kind == "Window":
            from deltamv.views.window import WindowOp  # (window.py builds on this module)

            items = f.get("windowExpressions") or ()
            below = node.children[0]
            limit = None
            if below.kind == "WindowGroupLimit" and (
                below.fields.get("partitionSpec") == f.get("partitionSpec")
                and below.fields.get("orderSpec") == f.get("orderSpec")
            ):
                rank = below.fields.get("rankLikeFunction")
                if isinstance(rank, Expr) and isinstance(below.fields.get("limit"), int):
                    limit = (rank.kind, int(below.fields["limit"]))
            child = build(below)
            return WindowOp(child, list(zip(node.output[len(child.output):], items, strict=True)),
                            f.get("partitionSpec") or (), f.get("orderSpec") or (), limit)  # fmt: skip
        if kind == "WindowGroupLimit":  # only drops rows early that a filter above drops
            return build(node.children[0])
        if kind == "Expand":
            child = build(node.children[0])
            if not f.get("projections"):
                raise Unsupported("an Expand without its projections in Spark's plan")
            return ExpandOp(child, f["projections"], node.output)
        raise Unsupported(_describe(kind))

    root_op = build(root)
    return ViewMaintainer(view, root_op, output_names)


def _describe(kind: str) -> str:
    return {
        "Window": "a window function",
        "Sort": "ORDER BY",
        "GlobalLimit": "LIMIT",
        "LocalLimit": "LIMIT",
        "Distinct": "DISTINCT",
        "Deduplicate": "DISTINCT",
        "Generate": "a generator (explode)",
        "LocalRelation": "a constant relation",
        "Range": "range()",
        "Intersect": "INTERSECT",
        "Except": "EXCEPT",
        "Sample": "TABLESAMPLE",
    }.get(kind, f"the plan step {kind}")
