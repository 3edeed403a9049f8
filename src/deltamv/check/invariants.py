"""``deltamv check``: every version of every view against its invariants and the truth.

For each view, every version the Delta log holds is checked (time travel):

- it carries a ``deltamv.watermark`` and the watermarks never decrease;
- each of the view's invariants from the config holds: a ``constant`` query returns
  the same rows at every version as at the first one checked, an ``always`` query
  returns one boolean column that is true in every row;
- with a ground truth (the simulator's ``truth/``), its rows are exactly the view's SQL
  over the truth at its watermark.

Nothing is written. The invariant and view SQL runs in Spark over each version's rows;
the truth comparison groups the views by watermark, so the truth is replayed once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from deltamv import delta
from deltamv.check.oracle import TruthSource, expected_rows
from deltamv.config import InvariantConfig, JobConfig
from deltamv.errors import DeltaMVError, first_line
from deltamv.views.sql import analyse_invariant

__all__ = ["CheckReport", "ViewCheck", "Violation", "check_job", "views_to_check"]


@dataclass(frozen=True)
class Violation:
    """One broken promise: what, at which version and watermark."""

    view: str
    check: str  # an invariant's name, "watermark" or "truth"
    version: int | None
    watermark: int | None
    detail: str

    def __str__(self) -> str:
        where = f"version {self.version}" if self.version is not None else "table"
        if self.watermark is not None:
            where += f" (watermark {self.watermark})"
        return f"{self.view}: {self.check} violated at {where}: {self.detail}"


@dataclass
class ViewCheck:
    """What was checked for one view and what failed."""

    view: str
    versions: int = 0
    invariants: list[str] = field(default_factory=list)
    violated: set[str] = field(default_factory=set)
    truth_checked: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def invariants_held(self) -> int:
        return len([i for i in self.invariants if i not in self.violated])

    @property
    def ok(self) -> bool:
        return not self.violations

    def fail(self, violation: Violation) -> None:
        self.violations.append(violation)
        self.violated.add(violation.check)


@dataclass(frozen=True)
class CheckReport:
    views: tuple[ViewCheck, ...]
    with_truth: bool

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.views)

    @property
    def violations(self) -> list[Violation]:
        return [x for v in self.views for x in v.violations]


def views_to_check(config: JobConfig, views: Sequence[str] | None = None) -> list[str]:
    """The names of the views to check (all of the config's without ``views``).

    Raises DeltaMVError for an unknown name, and when none of them has a version yet
    (saying what to run): cheap, so the command line asks before it starts Spark.
    """
    names = list(views) if views else list(config.views)
    for name in names:
        if name not in config.views:
            raise DeltaMVError(f"unknown view {name!r} (views: {', '.join(sorted(config.views))})")
    if all(delta.table_version(config.views[n].path) is None for n in names):
        raise DeltaMVError(
            f"no view of job {config.name!r} has a version yet, so there is nothing to check:"
            f" run `deltamv run {config.origin} --once` first"
        )
    return names


def check_job(
    spark: SparkSession,
    config: JobConfig,
    *,
    truth: TruthSource | None = None,
    views: Sequence[str] | None = None,
    max_violations: int = 20,
) -> CheckReport:
    """Check every version of the config's views (or ``views``); see the module doc.

    At most ``max_violations`` violations are recorded per view (the first ones, in
    version order). Raises DeltaMVError for an unknown view name.
    """
    names = views_to_check(config, views)
    outputs = {name: (config.views[name].path, config.views[name].sql) for name in names}
    if views is None:  # and the published tables, each its table's rows
        outputs.update(_published_tables(config))
    _analyse_invariants(spark, config, names)
    checks = {name: ViewCheck(name) for name in outputs}
    histories: dict[str, list[delta.VersionInfo]] = {}
    for name, (path, _) in outputs.items():
        result = checks[name]
        result.invariants = [i.name for i in config.invariants.values() if i.view == name]
        if delta.table_version(path) is None:
            result.fail(Violation(name, "table", None, None,
                                  f"no version yet at {path} (the job has not committed this view)"))  # fmt: skip
            continue
        history = delta.versions(path)
        histories[name] = history
        result.versions = len(history)
        _check_watermarks(result, history, max_violations)
        invariants = [i for i in config.invariants.values() if i.view == name]
        if invariants:
            _check_invariants(spark, result, path, history, invariants, max_violations)
    if truth is not None:
        _check_truth(spark, config, truth, checks, outputs, histories, max_violations)
    return CheckReport(tuple(checks.values()), truth is not None)


def _analyse_invariants(spark: SparkSession, config: JobConfig, names: Sequence[str]) -> None:
    """Each invariant of the views checked, analysed once over an empty table of its
    view's latest schema, as the job does at start (:func:`analyse_invariant`): SQL that
    cannot run over the view raises ConfigError naming the invariant's key, instead of a
    violation at every version."""
    for name, inv in config.invariants.items():
        path = config.views[inv.view].path
        if inv.view not in names or delta.table_version(path) is None:
            continue
        schema = delta.arrow_to_spark(delta.arrow_schema(path))
        spark.createDataFrame([], schema).createOrReplaceTempView(inv.view)
        try:
            analyse_invariant(spark, config, name)
        finally:
            spark.catalog.dropTempView(inv.view)


def _published_tables(config: JobConfig) -> dict[str, tuple[str, str]]:
    """``tables.<name>``: the path and SQL of each table the job publishes."""
    out = {}
    for name, table in config.tables.items():
        if table.path:
            columns = ", ".join(f"`{c}`" for c in table.schema.names)
            out[f"tables.{name}"] = (table.path, f"SELECT {columns} FROM `{name}`")
    return out


def _check_watermarks(result: ViewCheck, history: list[delta.VersionInfo], limit: int) -> None:
    previous: delta.VersionInfo | None = None
    for info in history:
        if len(result.violations) >= limit:
            return
        if info.watermark is None:
            result.fail(
                Violation(
                    result.view, "watermark", info.version, None,
                    f"no deltamv.watermark in the commit info (operation {info.operation or '?'}):"
                    " not a deltamv commit",
                )
            )  # fmt: skip
            continue
        if previous is not None and info.watermark < (previous.watermark or 0):
            result.fail(
                Violation(
                    result.view, "watermark", info.version, info.watermark,
                    f"decreased from {previous.watermark} at version {previous.version}",
                )
            )  # fmt: skip
        previous = info


def _check_invariants(
    spark: SparkSession,
    result: ViewCheck,
    path: str,
    history: list[delta.VersionInfo],
    invariants: list[InvariantConfig],
    limit: int,
) -> None:
    first: dict[str, tuple[int, list[tuple[Any, ...]]]] = {}
    for info in history:
        if info.watermark is None:
            continue
        rows = delta.read_arrow(path, info.version)
        schema = delta.arrow_to_spark(rows.schema)
        data = (
            spark.createDataFrame(rows, schema)
            if rows.num_rows
            else spark.createDataFrame([], schema)
        )
        data.createOrReplaceTempView(result.view)
        for inv in invariants:
            if len(result.violations) >= limit:
                return
            try:
                frame = spark.sql(inv.sql)
                out = [tuple(r) for r in frame.collect()]
            except PySparkException as exc:  # a query error is a finding, with its version
                result.fail(
                    Violation(
                        result.view, inv.name, info.version, info.watermark,
                        f"the query failed: {first_line(exc)}",
                    )
                )  # fmt: skip
                continue
            detail = _violates(inv, frame.schema.fields, out, first.get(inv.name))
            if detail is not None:
                result.fail(Violation(result.view, inv.name, info.version, info.watermark, detail))
            elif inv.name not in first:
                first[inv.name] = (info.version, out)


def _violates(
    inv: InvariantConfig,
    fields: Sequence[Any],
    rows: list[tuple[Any, ...]],
    reference: tuple[int, list[tuple[Any, ...]]] | None,
) -> str | None:
    if inv.kind == "always":
        if len(fields) != 1 or fields[0].dataType.typeName() != "boolean":
            return f"an 'always' query must return one boolean column, got {len(fields)} column(s)"
        false = [r[0] for r in rows if r[0] is not True]
        if false:
            return f"{len(false)} of {len(rows)} row(s) not true ({inv.sql})"
        return None
    if reference is None:
        return None
    version, expected = reference
    if _canonical(rows) != _canonical(expected):
        return f"{_show(rows)} != {_show(expected)} at version {version} ({inv.sql})"
    return None


def _check_truth(
    spark: SparkSession,
    config: JobConfig,
    truth: TruthSource,
    checks: Mapping[str, ViewCheck],
    outputs: Mapping[str, tuple[str, str]],
    histories: Mapping[str, list[delta.VersionInfo]],
    limit: int,
) -> None:
    by_watermark: dict[int, list[tuple[str, delta.VersionInfo]]] = {}
    for name, history in histories.items():
        for info in history:
            if info.watermark is not None:
                by_watermark.setdefault(info.watermark, []).append((name, info))
    # Increasing watermarks: the truth replays forward without starting over.
    for watermark in sorted(by_watermark):
        todo = [(n, i) for n, i in by_watermark[watermark] if len(checks[n].violations) < limit]
        if not todo:
            continue
        tables = truth.tables_at(watermark)
        for name, info in todo:
            path, sql = outputs[name]
            expected = expected_rows(spark, config, sql, tables).toArrow()
            actual = delta.read_arrow(path, info.version)
            checks[name].truth_checked += 1
            detail = _table_difference(actual, expected)
            if detail is not None:
                checks[name].fail(Violation(name, "truth", info.version, watermark, detail))


def _table_difference(actual: pa.Table, expected: pa.Table) -> str | None:
    missing = [c for c in expected.column_names if c not in actual.column_names]
    if missing:
        return f"column(s) {', '.join(missing)} missing from the version"
    got = Counter(_canonical(actual.select(expected.column_names).to_pylist()))
    want = Counter(_canonical(expected.to_pylist()))
    if got == want:
        return None
    extra, lost = got - want, want - got
    sample = next(iter(extra or lost))
    return (
        f"{sum(extra.values())} row(s) only in the version, {sum(lost.values())} only in the "
        f"view SQL over the truth (e.g. {'extra' if extra else 'missing'} {_show([sample])})"
    )


def _canonical(rows: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Rows as sortable tuples (dicts by value order; None sorts first)."""
    out = [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]
    return sorted(out, key=lambda t: tuple((v is not None, repr(v)) for v in t))


def _show(rows: Sequence[tuple[Any, ...]], limit: int = 3) -> str:
    shown = ", ".join("(" + ", ".join(repr(v) for v in r) + ")" for r in list(rows)[:limit])
    more = f", ... {len(rows) - limit} more" if len(rows) > limit else ""
    return f"[{shown}{more}]"
