"""A job's views: how each is maintained, its state, and its changes per batch.

At start every view's SQL is planned by Spark and classified (:mod:`deltamv.views.ivm`):
``incremental`` when the maintenance rules cover it, else ``recompute: <reason>``. A
view's config may force ``maintain = "recompute"``, or demand ``"incremental"`` (then a
view the rules do not cover stops the job at start, naming the reason). The mode and the
plan's fingerprint are kept in the state: a view whose SQL (or mode) changed since the
last run has its state rebuilt from the mirrors and its table rewritten in full.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors import (
    ArithmeticException,
    ArrayIndexOutOfBoundsException,
    DateTimeException,
    NumberFormatException,
    SparkRuntimeException,
)
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.config import JobConfig, ViewConfig
from deltamv.delta import parquet_statistics, spark_to_arrow
from deltamv.errors import ConfigError, DeltaMVError
from deltamv.state.keyed import KEY, KeyedTable, Mirror
from deltamv.state.store import StateStore, ViewRecord
from deltamv.views.expr import Unsupported
from deltamv.views.ivm import AggregateOp, Attr, Batch, ViewMaintainer, W, compile_view, conform
from deltamv.views.plan import Analysed, Node, ViewPlan, plan_views

__all__ = ["MaintainedView", "ViewSet"]

ICU_CASE = "spark.sql.icu.caseMappings.enabled"
_CASE_CALL = re.compile(r"\b(?:upper|lower|initcap)\(")  # as Spark renders the call in a plan

log = logging.getLogger("deltamv.job")


@dataclass
class MaintainedView:
    config: ViewConfig
    plan: ViewPlan
    schema: pa.Schema  # the view table's columns, as Spark types them
    layout: tuple[str, ...]  # the columns its files are sorted by
    mode: str  # "incremental" or "recompute"
    reason: str  # why recompute
    maintainer: ViewMaintainer | None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def tables(self) -> frozenset[str]:
        return self.plan.tables

    @property
    def fingerprint(self) -> str:
        """What the view's state was built for: its plan (and the rules' version), and
        which of its aggregates keep MIN/MAX values or COUNT(DISTINCT)'s values in
        their state. (They recomputed every group a batch touched before they did: a
        view with such an aggregate, and only such a view, is rebuilt once by a job that
        upgrades past that.)"""
        kept = self.maintainer.kept_values() if self.maintainer is not None else ""
        if not kept:
            return self.plan.fingerprint
        return hashlib.blake2b(f"{self.plan.fingerprint}\n{kept}".encode(),
                               digest_size=12).hexdigest()  # fmt: skip

    @property
    def describe(self) -> str:
        return "incremental" if self.mode == "incremental" else f"recompute: {self.reason}"


class ViewSet:
    """Every view of a job, classified, with the state of the incremental ones."""

    def __init__(
        self,
        spark: SparkSession,
        config: JobConfig,
        store: StateStore,
        compute: Compute,
        mirrors: Mapping[str, Mirror],
        analysed: Analysed | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.compute = compute
        self.mirrors = mirrors
        self._files: MirrorFiles | None = None  # shared by full evaluations (see below)
        # upper/lower are kept with ICU's case mapping (views/casing.py), Spark's default
        self._icu_case = str(spark.conf.get(ICU_CASE, "true")).strip().lower() == "true"
        plans = plan_views(spark, config, analysed)
        self.views: dict[str, MaintainedView] = {}
        for name, view in config.views.items():
            plan = plans[name]
            schema = spark_to_arrow(plan.schema)
            self.views[name] = self._classify(view, plan, schema)

    def _state_table(
        self, name: str, schema: pa.Schema, indexes: Sequence[Sequence[str]]
    ) -> KeyedTable:
        return KeyedTable(self.store.db, f"s_{name}", schema, indexes=indexes)

    def _classify(self, view: ViewConfig, plan: ViewPlan, schema: pa.Schema) -> MaintainedView:
        layout = _layout(plan, schema, {t: c.primary_key for t, c in self.config.tables.items()})
        if view.maintain == "recompute":
            return MaintainedView(
                view, plan, schema, layout, "recompute", 'maintain = "recompute"', None
            )
        try:
            maintainer = self._compile(view, plan)
        except Unsupported as exc:
            if view.maintain == "incremental":
                raise ConfigError(
                    f"views.{view.name}.maintain",
                    f"the view cannot be maintained incrementally: {exc}",
                    source=self.config.origin,
                ) from None
            return MaintainedView(view, plan, schema, layout, "recompute", str(exc), None)
        return MaintainedView(view, plan, schema, layout, "incremental", "", maintainer)

    def _compile(self, view: ViewConfig, plan: ViewPlan) -> ViewMaintainer:
        """The view's maintainer, or Unsupported naming why it must be recomputed."""
        if plan.clock:  # (the optimized plan holds the start's time in their place)
            raise Unsupported(
                ", ".join(f"{c}()" for c in plan.clock)
                + " (the time of evaluation: a recompute takes it at each batch)"
            )
        if not self._icu_case and _CASE_CALL.search(plan.text):
            raise Unsupported(
                f"upper(), lower() or initcap() with {ICU_CASE} = false (Spark maps case by"
                " the JVM's locale then)"
            )
        if plan.tries:
            raise Unsupported(
                ", ".join(f"{t}()" for t in plan.tries)
                + " (Spark's plan does not tell the rules where it gives NULL instead of failing)"
            )
        maintainer = compile_view(view.name, plan.root, plan.output_names, self.mirrors,
                                  self._state_table)  # fmt: skip
        maintainer.root.prepare()
        return maintainer

    # -- the state of each view ---------------------------------------------------------
    def sync_state(self) -> None:
        """Compare each view with the state: a new or changed view is not ready (its state
        is rebuilt and its table rewritten, at the start or the next batch). Inside a
        transaction."""
        known = self.store.views()
        for name, view in self.views.items():
            record = known.get(name)
            fingerprint = view.fingerprint
            if (
                record is not None
                and record.fingerprint == fingerprint
                and record.mode == view.mode
            ):
                continue
            if record is not None and record.ready:
                _log_changed(view, record)
            self._drop_state(name)
            if view.maintainer is not None:
                view.maintainer.root.reset()
            self.store.set_view(ViewRecord(name, view.mode, view.reason, fingerprint, False))
        for name in known:
            if name not in self.views:
                log.info(
                    "view %s: no longer in the config: its table keeps its last version,"
                    " no longer updated", name,
                )  # fmt: skip
                self._drop_state(name)
                self.store.drop_view(name)

    def _drop_state(self, view: str) -> None:
        """Drop every state table of ``view`` (those of an earlier plan too: a COUNT
        (DISTINCT)'s value counts may be as large as its input)."""
        ours = re.compile(rf"s_{re.escape(view)}_\d+(_d\d+)?")
        for table in self.store.tables():
            if ours.fullmatch(table):
                self.store.drop_table(table)

    def ready(self, name: str) -> bool:
        record = self.store.views().get(name)
        return record is not None and record.ready

    def recomputed_tables(self) -> set[str]:
        """The source tables some recomputed view reads (Spark needs a Delta copy)."""
        return {t for v in self.views.values() if v.mode == "recompute" for t in v.tables}

    def log_modes(self) -> None:
        for view in self.views.values():
            log.info("view %s: %s", view.name, view.describe)

    # -- per batch ----------------------------------------------------------------------
    def deltas(self, b: Batch) -> dict[str, pa.Table | None]:
        """Each ready incremental view's change in the batch (None: unchanged)."""
        out: dict[str, pa.Table | None] = {}
        for name, view in self.views.items():
            if view.maintainer is not None and self.ready(name):
                with view_errors(name):
                    out[name] = view.maintainer.delta(b)
        return out

    def finish(self, b: Batch) -> None:
        """Write the batch's state changes of every incremental view."""
        for name, view in self.views.items():
            if view.maintainer is not None and self.ready(name):
                view.maintainer.root.finish(b)

    @contextlib.contextmanager
    def mirrors_written_once(self, scratch: Path) -> Iterator[None]:
        """Inside the block, full evaluations (:meth:`build`, :meth:`contents`) share one
        Parquet copy of each mirror, written at the first that reads it: a batch's
        first versions of several views read the mirrors once, not once per view. The
        mirrors must not change inside the block after the first full evaluation (a batch
        applies its changes before it builds or publishes anything)."""
        files = MirrorFiles(self.mirrors, scratch)
        self._files = files
        try:
            with files:
                yield
        finally:
            self._files = None

    @property
    def files(self) -> MirrorFiles:
        """The mirrors' files of :meth:`mirrors_written_once`'s block (inside it only)."""
        if self._files is None:
            raise RuntimeError("not inside mirrors_written_once")
        return self._files

    @contextlib.contextmanager
    def _mirror_files(self, scratch: Path) -> Iterator[MirrorFiles]:
        if self._files is not None:
            yield self._files
            return
        with MirrorFiles(self.mirrors, scratch) as files:
            yield files

    def build(self, names: Sequence[str], scratch: Path) -> None:
        """Build the state of incremental views from the mirrors (after the batch's
        changes); mark them ready. Inside the batch's transaction."""
        todo = [n for n in names if self.views[n].maintainer is not None]
        if todo:
            with self._mirror_files(scratch) as files:
                for name in todo:
                    maintainer = self.views[name].maintainer
                    assert maintainer is not None
                    with view_errors(name):
                        for op in maintainer.ops():
                            if isinstance(op, AggregateOp) and op.state is not None:
                                op.build(self.compute, op.child.full_sql(files.base), {})
        for name in names:
            view = self.views[name]
            self.store.set_view(ViewRecord(name, view.mode, view.reason, view.fingerprint, True))

    def over_empty(self, name: str, scratch: Path, *, like: pa.Table | None) -> pa.Table:
        """An incremental view's rows over empty tables (say a global aggregate's one
        row), as a Z-set: its columns by name, plus ``__w``; in ``like``'s schema if given."""
        view = self.views[name]
        maintainer = view.maintainer
        assert maintainer is not None
        with MirrorFiles(self.mirrors, scratch, empty=True) as files, view_errors(name):
            rows = self.compute.query(maintainer.full_sql(files.base))
        z = maintainer.named(conform(rows, maintainer.root.output))
        return z if like is None else z.cast(like.schema)

    def contents(self, name: str, scratch: Path) -> pa.Table:
        """The whole current content of an incremental view, from the mirrors."""
        view = self.views[name]
        assert view.maintainer is not None
        with self._mirror_files(scratch) as files, view_errors(name):
            rows = self.compute.query(view.maintainer.full_sql(files.base))
        return _expand(rows, view)


_SPARK_DATA_ERRORS = (
    ArithmeticException,  # division by zero, overflow
    NumberFormatException,  # a cast of a string that is not a number
    DateTimeException,
    ArrayIndexOutOfBoundsException,
    SparkRuntimeException,  # raise_error(), and other failures on a row's values
)


_NOT_THE_DATA = (duckdb.IOException, duckdb.OutOfMemoryException, duckdb.InterruptException)
# Spark's advice, which a job's config refuses (deltamv evaluates views in ANSI mode)
_ANSI_OFF_HINT = re.compile(r'If necessary set "?spark\.sql\.ansi\.enabled"? to "?false"?[^.]*\.')


@contextlib.contextmanager
def view_errors(view: str) -> Iterator[None]:
    """A view's SQL failing on the data (an overflow, a division by zero, a cast that
    cannot be made: Spark's ANSI mode fails there, and so does the incremental engine,
    in DuckDB) as one line naming the view. Its first line says what failed; the rest
    (the SQL with a caret, Spark's JVM trace) is left out."""
    try:
        yield
    except _NOT_THE_DATA:
        raise  # a full disk, memory, an interruption: not the view's SQL
    except (duckdb.Error, ArithmeticError, *_SPARK_DATA_ERRORS) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        text = " ".join(_ANSI_OFF_HINT.sub("", first).split())
        raise DeltaMVError(
            f"view {view}: its SQL fails on the data: {text[:300]} (the batch is tried again"
            " at the next start: change the view's SQL, or remove the view)"
        ) from None


def _layout(
    plan: ViewPlan, schema: pa.Schema, primary_keys: Mapping[str, Sequence[str]]
) -> tuple[str, ...]:
    """Sort a view's files by its group columns when it is an aggregate, else by all,
    those that carry a source table's primary key first. The first column ranges the
    files (delta/layout.py): a change rewrites the files whose range holds its rows, so
    a column of few values there (``SELECT status, id ...``, a union's tag) would give
    every file the same range and a change would rewrite them all."""
    root = plan.root
    while root.kind in ("Project", "Filter") and root.children:
        root = root.children[0]
    named = list(zip(plan.output_names, plan.root.output, strict=False))
    if root.kind == "Aggregate":
        groups = root.fields.get("groupingExpressions") or ()
        group_ids = {g.attr().id for g in groups if g.attr() is not None}
        chosen = [name for name, attr in named if attr.id in group_ids]
        if chosen:
            return tuple(chosen)
    keys = _key_attrs(plan.root, primary_keys)
    first = [name for name, attr in named if attr.id in keys]
    return (*first, *(n for n in schema.names if n not in first))


def _key_attrs(node: Node, primary_keys: Mapping[str, Sequence[str]]) -> set[int]:
    """The ids of ``node``'s output attributes that are a source table's primary key
    column, passed on unchanged (or renamed) through projections, filters, joins and
    unions (a union's column where one of its inputs' is)."""
    if node.table is not None:
        pk = set(primary_keys.get(node.table, ()))
        return {a.id for a in node.output if a.name in pk}
    below = set().union(*(_key_attrs(c, primary_keys) for c in node.children))
    if node.kind == "Project":
        out = set()
        for attr, expr in zip(node.output, node.fields.get("projectList") or (), strict=False):
            inner = expr.children[0] if expr.kind == "Alias" and expr.children else expr
            if (a := inner.attr()) is not None and a.id in below:
                out.add(attr.id)
        return out
    if node.kind == "Union":
        out = set()
        for i, attr in enumerate(node.output):
            if any(i < len(c.output) and c.output[i].id in below for c in node.children):
                out.add(attr.id)
        return out
    return {a.id for a in node.output if a.id in below}


def _expand(rows: pa.Table, view: MaintainedView) -> pa.Table:
    """Full-evaluation rows (weights are multiplicities) as the view's table rows."""
    maintainer = view.maintainer
    assert maintainer is not None
    attrs: Sequence[Attr] = maintainer.root.output
    weights = rows.column(W).to_pylist()
    if any(w != 1 for w in weights):
        index = [i for i, w in enumerate(weights) for _ in range(max(w, 0))]
        rows = rows.take(pa.array(index, pa.int64()))
    cols = [rows.column(a.col) for a in attrs]
    table = pa.table(cols, names=list(maintainer.output_names))
    return table.cast(view.schema)


class MirrorFiles:
    """The mirrors written out as Parquet files for a full evaluation in DuckDB (bounded
    memory: DuckDB reads them and spills); removed afterwards. ``empty``: files with the
    mirrors' columns and no rows (a full evaluation over empty tables)."""

    def __init__(
        self, mirrors: Mapping[str, Mirror], scratch: Path, *, empty: bool = False
    ) -> None:
        self.mirrors = mirrors
        self.empty = empty
        self.folder = scratch / f"mirrors-{uuid.uuid4().hex[:8]}"
        self._paths: dict[str, str] = {}
        self._loading: dict[str, pq.ParquetWriter] = {}

    def __enter__(self) -> MirrorFiles:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        for writer in self._loading.values():
            writer.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def path(self, table: str) -> str:
        if table in self._loading:
            raise RuntimeError(f"mirror {table} is still loading")
        if table not in self._paths:
            with self._writer(table) as writer:
                for chunk in () if self.empty else self.mirrors[table].scan():
                    writer.write_table(chunk.select(writer.schema.names).cast(writer.schema))
            self._paths[table] = self._target(table)
        return self._paths[table]

    def load(self, table: str, rows: pa.Table) -> None:
        """Rows the mirror of ``table`` took, empty before (a snapshot's, in parts),
        written to its file as they come: the first full evaluation does not read the
        rows back out of the mirror (at 1M rows, a third of a start). :meth:`loaded`
        ends the loads."""
        writer = self._loading.get(table)
        if writer is None:
            writer = self._loading[table] = self._writer(table)
        writer.write_table(rows.select(writer.schema.names).cast(writer.schema))

    def loaded(self) -> None:
        """The mirrors given rows with :meth:`load` hold no others: their files are whole."""
        for table, writer in self._loading.items():
            writer.close()
            self._paths[table] = self._target(table)
        self._loading.clear()

    def _writer(self, table: str) -> pq.ParquetWriter:
        schema = pa.schema([f for f in self.mirrors[table].schema if f.name != KEY])
        statistics = parquet_statistics(schema)  # (none that would skip NaN rows)
        return pq.ParquetWriter(self._target(table), schema, write_statistics=statistics)

    def _target(self, table: str) -> str:
        return str(self.folder / f"{table}.parquet")

    def base(self, table: str, attrs: Sequence[Attr]) -> str:
        cols = ", ".join(f'"{a.name}" AS "{a.col}"' for a in attrs)
        return (f"SELECT {cols}, CAST(1 AS BIGINT) AS \"{W}\""
                f" FROM read_parquet('{_sql_text(self.path(table))}')")  # fmt: skip


def _sql_text(path: str) -> str:
    return os.path.abspath(path).replace("'", "''")


def _log_changed(view: MaintainedView, record: ViewRecord) -> None:
    """Say why a view an earlier run built is built again."""
    if record.mode != view.mode:
        was = "incremental" if record.mode == "incremental" else f"recompute: {record.reason}"
        why = f"now {view.describe} (was {was})"
    else:
        why = "its plan changed since the last run (its SQL, or the rules of this deltamv)"
    log.info("view %s: %s: its state is built again, and its table rewritten in full", view.name,
             why)  # fmt: skip
