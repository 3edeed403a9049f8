"""Which views are maintained incrementally, as the job's ViewSet decides at start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.errors import ConfigError
from deltamv.job.views import ICU_CASE, ViewSet
from deltamv.state.keyed import Mirror
from deltamv.state.store import StateStore

from .harness import job_config
from .shapes import RECOMPUTE, SHAPES, TABLES


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_differential_shapes_are_incremental(viewset: ViewSet, shape: str) -> None:
    view = viewset.views[shape]
    assert view.describe == "incremental"
    assert view.maintainer is not None


@pytest.mark.parametrize("shape", sorted(RECOMPUTE))
def test_shapes_outside_the_rules_are_recomputed(viewset: ViewSet, shape: str) -> None:
    view = viewset.views[shape]
    reason = RECOMPUTE[shape][1]
    assert view.mode == "recompute"
    assert view.maintainer is None
    assert view.describe.startswith("recompute: ")
    assert reason in view.reason, view.describe


def _open(spark: SparkSession, compute: Compute, folder: Path, views: dict[str, str],
          maintain: dict[str, str] | None = None) -> tuple[StateStore, ViewSet]:  # fmt: skip
    """A job's state (in ``folder``) and its views, as the job opens them; the caller
    closes the store."""
    config = job_config(TABLES, views, folder, maintain=maintain)
    store = StateStore(folder / "state.db", job=config.name, start_ts=0)
    mirrors = {
        name: Mirror(store.db, name, t.schema.to_arrow(), t.primary_key)
        for name, t in config.tables.items()
    }
    try:
        return store, ViewSet(spark, config, store, compute, mirrors)
    except BaseException:
        store.close()
        raise


def _viewset(spark: SparkSession, compute: Compute, folder: Path, sql: str, mode: str) -> ViewSet:
    store, views = _open(spark, compute, folder, {"v": sql}, {"v": mode})
    store.close()
    return views


def test_maintain_recompute_forces_recompute(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    views = _viewset(spark, compute, tmp_path, SHAPES["by_owner"], "recompute")
    assert views.views["v"].describe == 'recompute: maintain = "recompute"'


def test_maintain_incremental_refuses_a_view_outside_the_rules(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"views\.v\.maintain.*window function"):
        _viewset(spark, compute, tmp_path, RECOMPUTE["window"][0], "incremental")


def test_maintain_incremental_accepts_a_view_inside_the_rules(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    views = _viewset(spark, compute, tmp_path, SHAPES["join_agg"], "incremental")
    assert views.views["v"].describe == "incremental"


def test_case_mappings_are_recomputed_where_spark_maps_case_by_the_jvms_locale(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    sql = "SELECT id, lower(owner) AS o FROM accounts"
    assert _viewset(spark, compute, tmp_path / "icu", sql, "auto").views["v"].mode == (
        "incremental"
    )
    spark.conf.set(ICU_CASE, "false")
    try:
        views = _viewset(spark, compute, tmp_path / "jvm", sql, "auto")
    finally:
        spark.conf.unset(ICU_CASE)
    assert views.views["v"].describe == (
        f"recompute: upper(), lower() or initcap() with {ICU_CASE} = false (Spark maps case"
        " by the JVM's locale then)"
    )


def test_a_change_past_the_25th_column_changes_the_fingerprint(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    # Spark renders at most 25 expressions of a list by default ("... N more fields"):
    # the view's state was kept for a changed column past those
    columns = ", ".join(f"id + {i} AS c{i}" for i in range(30))
    one = _viewset(spark, compute, tmp_path / "one", f"SELECT {columns}, balance FROM accounts",
                   "auto").views["v"]  # fmt: skip
    two = _viewset(spark, compute, tmp_path / "two", f"SELECT {columns}, region FROM accounts",
                   "auto").views["v"]  # fmt: skip
    assert one.plan.fingerprint != two.plan.fingerprint
    assert "more fields" not in one.plan.text


def test_a_new_version_of_the_maintenance_rules_rebuilds_every_view(
    spark: SparkSession, compute: Compute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix to what the rules compute for an unchanged plan rebuilds each view once
    (views.plan.MAINTENANCE_RULES is part of the fingerprint): its state and table are
    not changed from rows the old rules wrote."""
    from deltamv.state.store import ViewRecord
    from deltamv.views import plan

    store, views = _open(spark, compute, tmp_path, {"v": SHAPES["by_owner"]})
    try:
        view = views.views["v"]
        with store.transaction():
            store.set_view(ViewRecord("v", view.mode, "", view.plan.fingerprint, True))
            views.sync_state()
        assert store.views()["v"].ready  # same rules, same plan: kept
        monkeypatch.setattr(plan, "MAINTENANCE_RULES", plan.MAINTENANCE_RULES + 1)
        with store.transaction():
            views.sync_state()
        assert not store.views()["v"].ready  # rebuilt at the next batch
    finally:
        store.close()


def test_views_keeping_min_max_are_rebuilt_once_from_state_that_did_not_keep_them(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    """MIN/MAX keep their values in the aggregate's state (over floats too, since
    2026-11-27); a job's state from before they did has none (it recorded the plan's
    fingerprint alone). Such a view is rebuilt once; a view of sums keeps its state."""
    from deltamv.state.store import ViewRecord

    sqls = {"sums": SHAPES["by_owner"], "extremes": SHAPES["minmax"],
            "floats": "SELECT owner, MIN(rate) AS r FROM accounts GROUP BY owner"}  # fmt: skip
    store, views = _open(spark, compute, tmp_path, sqls)
    try:
        with store.transaction():
            for name, view in views.views.items():  # as the job recorded them before
                store.set_view(ViewRecord(name, view.mode, "", view.plan.fingerprint, True))
            views.sync_state()
        ready = {name: record.ready for name, record in store.views().items()}
        # (MIN of a double was recomputed per touched group, with no state of its own)
        assert ready == {"sums": True, "extremes": False, "floats": False}
        with store.transaction():
            views.build(["extremes", "floats"], tmp_path / "scratch")
            views.sync_state()
        assert store.views()["extremes"].ready  # built: kept from now on
        assert store.views()["floats"].ready
    finally:
        store.close()


def test_state_tables_go_with_their_view(
    spark: SparkSession, compute: Compute, tmp_path: Path
) -> None:
    """A view taken out of the config drops its state tables (a COUNT(DISTINCT)'s value
    counts may be as large as its input); one whose SQL changed drops those of its old
    plan; the other views' tables stay (a view named like another's prefix included)."""
    from deltamv.state.store import ViewRecord

    two_aggregates = "SELECT n, COUNT(*) AS g FROM (SELECT owner, COUNT(*) AS n FROM accounts GROUP BY owner) GROUP BY n"  # fmt: skip
    store, views = _open(
        spark, compute, tmp_path, {"v": SHAPES["distinct_kept"], "v_0": two_aggregates}
    )
    try:
        with store.transaction():
            views.sync_state()
            for name, view in views.views.items():
                store.set_view(ViewRecord(name, view.mode, "", view.fingerprint, True))
        before = {t for t in store.tables() if t.startswith("s_")}
        counts = {t for t in before if re.fullmatch(r"s_v_0_d\d", t)}  # COUNT(DISTINCT)'s
        assert len(counts) == 1
        assert before == {"s_v_0", *counts, "s_v_0_0", "s_v_0_1"}, before
    finally:
        store.close()
    store, views = _open(
        spark, compute, tmp_path, {"v_0": SHAPES["by_owner"]}
    )  # v gone, v_0 changed
    try:
        with store.transaction():
            views.sync_state()
        assert {t for t in store.tables() if t.startswith("s_")} == {"s_v_0_0"}
        assert set(store.views()) == {"v_0"}
    finally:
        store.close()


@pytest.mark.parametrize(
    ("sql", "layout"),
    [
        # a column of few values first: the primary key's column ranges the files instead
        ("SELECT region, owner, id, balance FROM accounts WHERE balance > 0",
         ("id", "region", "owner", "balance")),
        # renamed, and a union's tag column before it
        ("SELECT 'account' AS kind, id AS ref, balance AS amount FROM accounts"
         " UNION ALL SELECT 'transfer', id, amount FROM transfers",
         ("ref", "kind", "amount")),
        # both tables' keys through a join, in the view's order
        ("SELECT t.amount, a.owner, t.id AS transfer, a.id AS account FROM transfers t"
         " JOIN accounts a ON t.src = a.id", ("transfer", "account", "amount", "owner")),
        # no key among the columns: all of them, as they come
        ("SELECT owner, balance + 1 AS b FROM accounts", ("owner", "b")),
        # an aggregate: its group columns
        ("SELECT owner, COUNT(*) AS n FROM accounts GROUP BY owner", ("owner",)),
    ],
)  # fmt: skip
def test_a_view_s_files_are_ranged_by_a_column_holding_a_source_table_s_key(
    spark: SparkSession, compute: Compute, tmp_path: Path, sql: str, layout: tuple[str, ...]
) -> None:
    assert _viewset(spark, compute, tmp_path, sql, "recompute").views["v"].layout == layout
