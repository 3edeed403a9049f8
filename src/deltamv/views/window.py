"""Window functions over partitions: the partitions a batch touched, evaluated again.

A ``Window`` step of a view's plan (``row_number() OVER (PARTITION BY owner ORDER BY
balance DESC, id)``, ``SUM(x) OVER (PARTITION BY k)``, ...) changes only in the
partitions that hold a changed input row. Its change in a batch is, for those
partitions, the window's rows over their input after the batch minus the same before:
their input rows are looked up by the partition key (through the mirrors' indexes, as an
aggregate's touched groups are), so a batch reads the rows of the partitions it touched,
never the whole input.

Maintained: ``row_number``, ``rank``, ``dense_rank``, ``percent_rank``, ``cume_dist``,
``ntile``, ``lag`` and ``lead`` (constant offset and default; NULLs ignored or not), and
``COUNT``, ``SUM`` (of exact numbers), ``AVG`` (of integers and decimals), ``MIN``,
``MAX``, ``first_value`` and ``last_value`` (NULLs ignored or not) over the whole
partition, a running frame from its start, or a frame of rows or of order values (an
integer or an interval of time away) around the current one, partitioned by columns of
the input and ordered by exact values. Each is checked to give one answer whatever the
order of the input's rows: ``row_number``, ``lag``, ``lead``, ``ntile``,
``first_value``, ``last_value`` and a frame of rows bounded by the current row or an
offset from it tell tied rows apart, so their partition and order columns must hold a
unique key of the input (a source table's primary key, or a group's columns, through the
operators above: ``Op.unique_keys``) or all of its columns. Anything else raises
``Unsupported``: Spark recomputes the view.

Spark's optimizer puts a ``WindowGroupLimit`` under a rank-like window filtered to its
first ranks (``WHERE rn <= 3``); it only drops rows early that the filter above drops,
so it is read as its input (``compile_view``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltamv.state.keyed import ROWID, descending
from deltamv.views.expr import Unsupported, decimal_of, duck_type, result_type, sql
from deltamv.views.ivm import (
    Batch,
    Op,
    ProjectOp,
    ScanOp,
    W,
    col_ref,
    concat,
    conform,
    consolidate,
    decimal_avg_sql,
    empty,
    key_attr,
    match_sql,
    negate,
)
from deltamv.views.plan import Attr, Expr, short_class

__all__ = ["WindowOp"]

_RANKS = {"RowNumber": "row_number()", "Rank": "rank()", "DenseRank": "dense_rank()"}
_DISTRIBUTIONS = {"PercentRank": "percent_rank()", "CumeDist": "cume_dist()"}
_OFFSETS = {"Lag": "lag", "Lead": "lead"}
_AGGREGATES = {"Count": "count", "Sum": "sum", "Min": "min", "Max": "max", "Average": "avg"}
_VALUES = {"First": "first_value", "Last": "last_value"}  # a row's value: any type
_BOUNDS = {
    "UnboundedPreceding": "UNBOUNDED PRECEDING",
    "CurrentRow": "CURRENT ROW",
    "UnboundedFollowing": "UNBOUNDED FOLLOWING",
}
# Types ordered and grouped alike by Spark and DuckDB, and by SQLite as the state stores
# them (integers, strings as UTF-8 text), besides decimals (stored as text) and
# char/varchar; not floating-point values (Spark orders NaN above infinity and -0.0 as
# 0.0).
_ORDERED = {"boolean", "byte", "short", "integer", "long", "string", "date", "timestamp",
            "timestamp_ntz"}  # fmt: skip


def _object(value: object) -> str:
    """The short name of a Scala object field (``{"object": "...Descending$"}``)."""
    name = value.get("object", "") if isinstance(value, dict) else str(value)
    return short_class(str(name)).rstrip("$")


def _count(e: Expr, what: str, *, least: int) -> int:
    """A window function's constant count (``ntile(4)``, ``lag(x, 2)``), at least
    ``least``; ``what``: the function and the count, named for the reason."""
    value = e.fields.get("value") if e.kind == "Literal" else None
    if value is None or not str(value).lstrip("-").isdigit() or int(str(value)) < least:
        raise Unsupported(f"the window function {what} that is not a constant of at least {least}")
    return int(str(value))


_DATE_OFFSET_MAX = 1_000_000  # days, about 2,700 years


def _range_offset(bound: Expr, order_type: object) -> str:
    """A ``RANGE`` frame's bound a number of values, or an interval of time, before
    (negative) or after the current row's order value (of ``order_type``)."""
    value, t = str(bound.fields.get("value")), str(result_type(bound))
    if not value.lstrip("-").isdigit():
        raise Unsupported(f"a RANGE window frame with an offset of type {t}")
    n = value.lstrip("-")
    if int(n) == 0:  # (the current row's peers: where they start or end)
        return "CURRENT ROW"
    if order_type == "date" and int(n) > _DATE_OFFSET_MAX:
        # (DuckDB fails on a date beyond its range, where Spark's date_add wraps)
        raise Unsupported(f"a RANGE window frame of dates with an offset over {_DATE_OFFSET_MAX}")
    if t.startswith("interval") and ("year" in t or "month" in t):
        n = f"to_months({n})"
    elif t.startswith("interval"):  # (a day-time interval is held in microseconds)
        n = f"to_microseconds({n})"
    elif t not in ("byte", "short", "integer", "long"):
        raise Unsupported(f"a RANGE window frame with an offset of type {t}")
    return f"{n} {'PRECEDING' if value.startswith('-') else 'FOLLOWING'}"


def _over(call: str) -> Callable[[str], str]:
    """A window function's SQL given its window."""
    return lambda window: f"{call} OVER ({window})"


def _check_ordered(e: Expr, what: str) -> None:
    t = result_type(e)
    if not (t in _ORDERED or decimal_of(t) is not None or str(t).startswith(("char(", "varchar("))):
        raise Unsupported(f"a window {what} values of type {t}")


@dataclass(frozen=True)
class _Prefix:
    """Where a step that keeps only its first ranks reads its partitions' first rows: a
    table's mirror, by the partition's columns there, in the window's order."""

    scan: ScanOp
    projections: list[ProjectOp]  # from the scan up
    partition: list[str]  # the mirror's columns
    order: list[tuple[str, bool, bool]]  # (column, descending, nulls first)

    @property
    def index(self) -> tuple[str, ...]:
        """The mirror's index in the window's order: a partition's first rows are its
        first entries."""
        return (*self.partition, *(descending(c) if desc else c for c, desc, _ in self.order))


class WindowOp(Op):
    """One ``Window`` step: its functions share one partitioning and order (the module
    doc)."""

    consolidated = True

    def __init__(self, child: Op, items: Sequence[tuple[Attr, Expr]],
                 partition: Sequence[Expr], order: Sequence[Expr],
                 limit: tuple[str, int] | None = None) -> None:  # fmt: skip
        """``limit``: Spark's ``WindowGroupLimit`` below the step, ``(function, n)``:
        only rows whose ``row_number``, ``rank`` or ``dense_rank`` is at most ``n``
        matter (a filter above drops the others)."""
        self.child = child
        self.items = tuple(items)
        self.output = (*child.output, *(a for a, _ in items))
        self.tables = child.tables
        if not partition:
            raise Unsupported("a window function without PARTITION BY")
        refs = [key_attr(p, child.output) for p in partition]
        if any(r is None for r in refs):
            raise Unsupported("a window partitioned by a computed value")
        self.refs: list[Attr] = [r for r in refs if r is not None]
        for p in partition:
            _check_ordered(p, "partitioned by")
        keys = []
        for o in order:
            if o.kind != "SortOrder":
                raise Unsupported(f"a window ordered by {o.kind}")
            _check_ordered(o.children[0], "ordered by")
            direction = "DESC" if _object(o.fields.get("direction")) == "Descending" else "ASC"
            nulls = "FIRST" if _object(o.fields.get("nullOrdering")) == "NullsFirst" else "LAST"
            keys.append(f"{sql(o.children[0], col_ref)} {direction} NULLS {nulls}")
        over = f"PARTITION BY {', '.join(col_ref(r.id) for r in self.refs)}"
        over += f" ORDER BY {', '.join(keys)}" if keys else ""
        self.limit = limit if limit is not None and limit[0] in _RANKS else None
        self.qualify = (f" QUALIFY {_RANKS[self.limit[0]]} OVER ({over}) <= {self.limit[1]}"
                        if self.limit is not None else "")  # fmt: skip
        self.prefix = self._prefix_plan(order)
        # Whether rows tied in partition and order are told apart by the functions.
        order_type = result_type(order[0].children[0]) if len(order) == 1 else None
        spanned = {r.id for r in self.refs} | {
            a.id for o in order if (a := o.children[0].attr()) is not None
        }
        unique = any(key <= spanned for key in child.unique_keys()) or all(
            a.id in spanned for a in child.output
        )
        self.columns = []
        for attr, e in items:
            inner = e.children[0] if e.kind == "Alias" else e
            if inner.kind != "WindowExpression":
                raise Unsupported(f"a window of {inner.kind}")
            function, spec = inner.children[0], inner.children[1]
            render, by_row = self._function(function, attr.dtype)
            frame, by_frame = self._frame(function, spec, order_type)
            if (by_row or by_frame) and not unique:
                raise Unsupported(
                    "a window function that tells tied rows apart (row_number, lag, lead,"
                    " ntile, first_value, last_value, a frame of ROWS) over an order that"
                    " does not hold a unique key of its input"
                )
            self.columns.append(f'CAST({render(over + frame)} AS {duck_type(attr.dtype)})'
                                f' AS "{attr.col}"')  # fmt: skip
        if not child.can_lookup(self.refs):  # (and asks for the index on them)
            raise Unsupported("a window whose partitions cannot be looked up in its input")
        if self.prefix is not None:
            self.prefix.scan.indexes.add(self.prefix.index)

    def _prefix_plan(self, order: Sequence[Expr]) -> _Prefix | None:
        """How to read only each touched partition's first rows, where the step keeps
        only its first ranks (``limit``: ``row_number`` or ``rank``) and its input is a
        table's rows through projections of plain columns, ordered by columns stored in
        their order; else None (whole partitions are read)."""
        if self.limit is None or self.limit[0] == "DenseRank" or not order:
            return None  # (a dense rank's first ranks may hold any number of rows)
        projections: list[ProjectOp] = []
        op = self.child
        while isinstance(op, ProjectOp):
            projections.append(op)
            op = op.child
        if not isinstance(op, ScanOp):
            return None
        attrs = [*self.refs, *(o.children[0].attr() for o in order)]
        if any(a is None for a in attrs):
            return None
        inner: list[Attr] | None = [a for a in attrs if a is not None]
        for projection in projections:
            inner = projection.inner_attrs(inner) if inner is not None else None
        if inner is None:
            return None
        if any(decimal_of(result_type(o.children[0])) is not None for o in order):
            return None  # (stored as text: not in their order)
        names = [a.name for a in inner]
        spec = [(name, _object(o.fields.get("direction")) == "Descending",
                 _object(o.fields.get("nullOrdering")) == "NullsFirst")
                for name, o in zip(names[len(self.refs):], order, strict=True)]  # fmt: skip
        return _Prefix(op, list(reversed(projections)), names[: len(self.refs)], spec)

    @staticmethod
    def _function(function: Expr, dtype: object) -> tuple[Callable[[str], str], bool]:
        """The function's SQL given its window (what goes in ``OVER (...)``), and whether
        it tells tied rows apart (an aggregate's frame may: ``_frame``); ``dtype``: its
        result's type."""
        kind = function.kind
        if kind in _RANKS:
            return _over(_RANKS[kind]), kind == "RowNumber"
        if kind in _DISTRIBUTIONS:  # (computed from ranks and partition sizes)
            return _over(_DISTRIBUTIONS[kind]), False
        if kind == "NTile":
            buckets = _count(function.children[0], "NTile with a bucket count", least=1)
            return _over(f"ntile({buckets})"), True
        if kind in _OFFSETS:
            source, offset, default = function.children
            if default.kind != "Literal":
                raise Unsupported(
                    f"the window function {kind} with a default that is not a constant"
                )
            fallback = "NULL" if default.fields.get("value") is None else sql(default, col_ref)
            steps = _count(offset, f"{kind} with an offset", least=0)
            # (ignoring NULLs: the offset counts the rows with a value)
            nulls = " IGNORE NULLS" if function.fields.get("ignoreNulls") is True else ""
            return _over(
                f"{_OFFSETS[kind]}({sql(source, col_ref)}, {steps}, {fallback}{nulls})"
            ), True
        if kind != "AggregateExpression":
            raise Unsupported(f"the window function {kind}")
        if function.fields.get("isDistinct"):
            raise Unsupported("a DISTINCT aggregate in a window")
        call = function.children[0]
        if call.kind not in _AGGREGATES and call.kind not in _VALUES:
            raise Unsupported(f"the window function {call.kind}")
        if len(function.children) > 1:
            raise Unsupported("an aggregate with a FILTER in a window")
        if call.kind in _VALUES:
            # (which row is first or last in the frame: one row of tied ones)
            nulls = " IGNORE NULLS" if call.fields.get("ignoreNulls") is True else ""
            return _over(f"{_VALUES[call.kind]}({sql(call.children[0], col_ref)}{nulls})"), True
        args = [sql(a, col_ref) for a in call.children]
        if call.kind == "Count":
            if len(args) != 1:
                present = " AND ".join(f"({a}) IS NOT NULL" for a in args)
                args = [f"CASE WHEN {present} THEN 1 END"]
        else:
            t = result_type(call.children[0])
            if t in ("float", "double"):
                raise Unsupported(f"{call.kind.upper()} of {t} values in a window")
            dec = decimal_of(t)
            if call.kind == "Average" and dec is not None:
                # (Spark rounds a decimal's average half up at a scale 4 more: the
                # aggregates' exact arithmetic, its sum and count over the frame)
                return (lambda window: decimal_avg_sql(args[0], dec, dtype,
                                                       over=f" OVER ({window})")), False  # fmt: skip
        return _over(f"{_AGGREGATES[call.kind]}({args[0]})"), False

    @staticmethod
    def _frame(function: Expr, spec: Expr, order_type: object) -> tuple[str, bool]:
        """An aggregate's frame clause, and whether it tells tied rows apart: a frame
        of rows that ends (or starts) at the current row or some rows off it."""
        if function.kind != "AggregateExpression":
            return "", False  # (ranks, distributions and offsets have no frame of their own)
        frame = spec.children[-1]
        if frame.kind != "SpecifiedWindowFrame":
            raise Unsupported(f"a window frame {frame.kind}")
        rows = _object(frame.fields.get("frameType")) == "RowFrame"
        bounds: list[str] = []
        for b in frame.children:
            if b.kind == "Literal" and rows:  # rows before (negative) or after the current
                n = int(str(b.fields.get("value")))
                bounds.append("CURRENT ROW" if n == 0 else
                              f"{-n} PRECEDING" if n < 0 else f"{n} FOLLOWING")  # fmt: skip
            elif b.kind == "Literal":  # values before (negative) or after the current one
                bounds.append(_range_offset(b, order_type))
            elif (bound := _BOUNDS.get(short_class(b.kind).rstrip("$"))) is not None:
                bounds.append(bound)
            else:
                raise Unsupported(f"a window frame bounded by {b.kind}")
        if len(bounds) != 2 or bounds[0] == "UNBOUNDED FOLLOWING":
            raise Unsupported(f"a window frame between {' and '.join(bounds)}")
        # (Spark lets a frame start after the current row and end at it or before it, an
        # empty frame; DuckDB refuses to read such a frame)
        if (bounds[0].endswith("FOLLOWING") and not bounds[1].endswith("FOLLOWING")) or (
            bounds[0] == "CURRENT ROW" and bounds[1].endswith("PRECEDING")
        ):
            raise Unsupported("a window frame that starts after the current row and ends at"
                              " it or before it, or starts at it and ends before it")  # fmt: skip
        by_row = rows and any(not b.startswith("UNBOUNDED") for b in bounds)
        return f" {'ROWS' if rows else 'RANGE'} BETWEEN {bounds[0]} AND {bounds[1]}", by_row

    def children(self) -> tuple[Op, ...]:
        return (self.child,)

    def _sql(self, source: str) -> str:
        """The window over ``source``'s rows, a row each for each copy (weights expanded)."""
        expanded = f'(SELECT d.* FROM {source} d, generate_series(1, d."{W}") AS _r(_i))'
        head = ", ".join(f'"{a.col}"' for a in self.child.output)
        return (f"SELECT {head}, {', '.join(self.columns)}, CAST(1 AS BIGINT) AS \"{W}\""
                f" FROM {expanded}{self.qualify}")  # fmt: skip

    def _evaluate(self, b: Batch, rows: pa.Table) -> pa.Table:
        if rows.num_rows == 0:
            return empty(self.output)
        return conform(b.compute.query(self._sql("d"), d=rows), self.output)

    def delta(self, b: Batch) -> pa.Table | None:
        key = (id(self), "delta")
        if key not in b.cache:
            b.cache[key] = None
            rows, relation = self.child.stream(b)
            if rows is not None and rows.num_rows:
                if self.prefix is not None:
                    change = b.compute.query(f"SELECT * FROM {relation}", d=rows)
                    before, after = self._prefixes(b, conform(change, self.child.output))
                else:
                    keys = b.compute.query(
                        f"SELECT DISTINCT {', '.join(col_ref(r.id) for r in self.refs)}"
                        f" FROM {relation}", d=rows)  # fmt: skip
                    flags = [True] * len(self.refs)
                    before = self.child.lookup(b, self.refs, keys, new=False, null_safe=flags)
                    after = self.child.lookup(b, self.refs, keys, new=True, null_safe=flags)
                b.cache[key] = consolidate(b.compute, concat(
                    [self._evaluate(b, after), negate(self._evaluate(b, before))], self.output))  # fmt: skip
        return b.cache[key]

    def _prefixes(self, b: Batch, change: pa.Table) -> tuple[pa.Table, pa.Table]:
        """The input rows of the partitions ``change`` (the input's change) touched that
        can hold the first ranks, before and after the batch. Before: per partition, the
        first ``n + d`` rows in the window's order and every row tied with the last
        (``n`` the limit, ``d`` the rows the batch takes from the partition), so each row
        comes with all rows ordered before it and its rank is exact. After: those plus
        the change; a row taken away from beyond them is no row of theirs, and a row
        added beyond them ranks after at least ``n`` of them, so past the limit."""
        assert self.prefix is not None and self.limit is not None
        prefix = self.prefix
        refs = [r.col for r in self.refs]
        touched = b.compute.query(
            f"SELECT {', '.join(col_ref(r.id) for r in self.refs)},"
            f" CAST({self.limit[1]} + sum(CASE WHEN \"{W}\" < 0 THEN -\"{W}\" ELSE 0 END)"
            f" AS BIGINT) AS \"_n\" FROM d GROUP BY ALL", d=change)  # fmt: skip
        # (row_number's order holds a unique key, or tied rows are equal: no ties to add)
        found = prefix.scan.mirror.top(
            prefix.partition, touched.select(refs).rename_columns(prefix.partition),
            touched.column("_n").to_pylist(), prefix.order, ties=self.limit[0] == "Rank")  # fmt: skip
        before = conform(prefix.scan.rows_as_attrs(found.drop_columns([ROWID])),
                         prefix.scan.output)  # fmt: skip
        for projection in prefix.projections:
            before = projection.apply(b, before) or empty(projection.output)
        after = consolidate(b.compute, concat([before, change], self.child.output))
        if after is None:
            return before, empty(self.child.output)
        return before, after.filter(pc.greater(after.column(W), 0))

    def _partition_attrs(self, attrs: Sequence[Attr]) -> list[Attr]:
        """The attributes among ``attrs`` that partition this window."""
        ids = {r.id for r in self.refs}
        return [a for a in attrs if a.id in ids]

    def can_lookup(self, attrs: Sequence[Attr], *, strict: bool = False) -> bool:
        # rows looked up by partition columns are whole partitions; other columns of
        # the key (a window partitioned by fewer, below another) filter them after
        inner = self._partition_attrs(attrs)
        if inner:
            return self.child.can_lookup(inner, strict=strict)
        # by none of them (a window below another of other partitions): the input rows
        # holding the values name the partitions to read whole
        ids = {a.id for a in self.child.output}
        return (bool(attrs) and all(a.id in ids for a in attrs)
                and self.child.can_lookup(attrs, strict=strict)
                and self.child.can_lookup(self.refs))  # fmt: skip

    def lookup(self, b: Batch, attrs: Sequence[Attr], keys: pa.Table, *, new: bool,
               null_safe: Sequence[bool]) -> pa.Table:  # fmt: skip
        inner = self._partition_attrs(attrs)
        if len(inner) == len(attrs):
            rows = self.child.lookup(b, attrs, keys, new=new, null_safe=null_safe)
            return self._evaluate(b, rows)
        if inner:
            ids = {a.id for a in inner}
            flags = [ns for a, ns in zip(attrs, null_safe, strict=True) if a.id in ids]
            names = [keys.column_names[i] for i, a in enumerate(attrs) if a.id in ids]
            wanted = keys.select(names).group_by(names).aggregate([])
            rows = self.child.lookup(b, inner, wanted, new=new, null_safe=flags)
        else:
            holding = self.child.lookup(b, attrs, keys, new=new, null_safe=null_safe)
            refs = [r.col for r in self.refs]
            wanted = holding.select(refs).group_by(refs).aggregate([])
            rows = self.child.lookup(b, self.refs, wanted, new=new,
                                     null_safe=[True] * len(self.refs))  # fmt: skip
        rows = self._evaluate(b, rows)
        on = match_sql(keys, [a.col for a in attrs], null_safe, "d")
        return conform(b.compute.query(
            f"SELECT d.* FROM d WHERE EXISTS (SELECT 1 FROM k WHERE {on})", d=rows, k=keys),
            self.output)  # fmt: skip

    def unique_keys(self) -> list[frozenset[int]]:
        return self.child.unique_keys()

    def full_sql(self, base: Callable[[str, Sequence[Attr]], str]) -> str:
        return self._sql(f"({self.child.full_sql(base)})")
