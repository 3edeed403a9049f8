"""delta-spark reads what deltamv commits with delta-rs: rows, time travel, data skipping
over deltamv's file statistics, log checkpoints, and the watermark in DESCRIBE HISTORY."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, create_table_with_add_actions
from pyspark.sql import DataFrame

from deltamv.delta import arrow_to_spark, read_arrow, read_spark, versions, write_arrow
from deltamv.delta import spark as spark_delta
from deltamv.delta.housekeeping import checkpoint, last_checkpoint
from deltamv.delta.sink import Replace, TableSink
from deltamv.errors import DeltaMVError

from .alltypes import ALL_TYPES, all_types_rows

JOB = "conformance"


def commit_rows(path: str, batch: int, parts: list[list[dict[str, Any]]]) -> int:
    """One version holding ``parts``, committed as the job commits (a TableSink); parts of
    at most six rows with disjoint id ranges, six rows per file: each part its own file
    (so data skipping has a choice)."""
    current = versions(path)[-1].version if os.path.isdir(f"{path}/_delta_log") else None
    sink = TableSink(path, ALL_TYPES, layout=["id"], app_id=f"deltamv:{JOB}",
                     metadata={"deltamv.job": JOB}, target_file_rows=6)  # fmt: skip
    rows = [r for part in parts for r in part]
    result = sink.commit(
        batch,
        Replace(pa.Table.from_pylist(rows, schema=ALL_TYPES)),
        metadata={"deltamv.watermark": str(1000 * batch)},
        expected_version=current,
    )
    return result.version


def rs_frame(spark: Any, path: str, version: int) -> DataFrame:
    """The version as delta-rs sees it (its file list, read with pyarrow)."""
    table = read_arrow(path, version)
    return spark.createDataFrame(table.to_pylist(), arrow_to_spark(table.schema))


def history(spark: Any, path: str) -> dict[int, dict[str, str]]:
    """DESCRIBE HISTORY's userMetadata per version, parsed."""
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "userMetadata")
    return {r.version: json.loads(r.userMetadata) for r in rows.collect()}


@pytest.fixture(scope="module")
def parted(tmp_path_factory: Any) -> str:
    """Three versions, each of three files with disjoint id ranges."""
    path = str(tmp_path_factory.mktemp("spark") / "parted")
    for batch in (1, 2, 3):
        start = 100 * batch
        commit_rows(path, batch, [all_types_rows(6, start + 10 * n) for n in range(3)])
    return path


def test_every_version_reads_the_same_in_delta_spark_and_delta_rs(
    delta_spark: Any, parted: str
) -> None:
    for info in versions(parted):
        actual = spark_delta.read_version(delta_spark, parted, info.version)
        assert actual.schema == arrow_to_spark(ALL_TYPES)  # NOT NULL kept, same types
        assert_df_equality(
            actual, rs_frame(delta_spark, parted, info.version), ignore_row_order=True
        )


def test_sql_time_travel_and_the_read_helper_agree(delta_spark: Any, parted: str) -> None:
    sql = delta_spark.sql(f"SELECT * FROM delta.`{parted}` VERSION AS OF 1")
    assert_df_equality(sql, read_spark(delta_spark, parted, 1), ignore_row_order=True)
    files = read_spark(delta_spark, parted, 1, engine="files")
    assert_df_equality(sql, files, ignore_row_order=True, ignore_nullable=True)


# Each predicate is answered by delta-spark after skipping files on deltamv's statistics:
# a wrong bound would drop a file that holds a matching row.
PREDICATES = [
    "id = 305",
    "id > 322",
    "id BETWEEN 310 AND 311",
    "name = 'name-313'",
    "name IS NULL",
    "score < 460.0",
    "amount > 123456789312.99",
    "amount = 123456789322.99",
    "day = DATE'2024-11-09'",
    "day > DATE'2024-11-18'",
    "flag IS NULL",
    "flag = false",
]


@pytest.mark.parametrize("predicate", PREDICATES)
def test_filters_skip_files_on_deltamvs_statistics_without_losing_rows(
    delta_spark: Any, parted: str, predicate: str
) -> None:
    latest = versions(parted)[-1].version
    skipped = spark_delta.read_version(delta_spark, parted, latest).where(predicate)
    full = rs_frame(delta_spark, parted, latest).where(predicate)
    assert full.count() > 0, f"{predicate} matches nothing: a useless probe"
    assert_df_equality(skipped, full, ignore_row_order=True, ignore_nullable=True)


def test_the_probes_do_skip_files(delta_spark: Any, tmp_path: Path) -> None:
    # Control: a file whose statistics lie (max id 0, but it holds 1..3) is skipped, so
    # the probes above do exercise data skipping on the statistics deltamv writes.
    path = str(tmp_path / "lying")
    (good,) = write_arrow(pa.Table.from_pylist(all_types_rows(4), schema=ALL_TYPES), path,
                          schema=ALL_TYPES, prefix="x")  # fmt: skip
    stats = json.loads(good.stats)
    stats["maxValues"]["id"] = 0
    lying = dataclasses.replace(good, stats=json.dumps(stats))
    create_table_with_add_actions(
        path, DeltaSchema.from_arrow(ALL_TYPES),
        [AddAction(lying.path, lying.size, {}, int(time.time() * 1000), True, lying.stats)],
    )  # fmt: skip
    assert spark_delta.read_version(delta_spark, path, 0).where("id = 2").count() == 0
    assert spark_delta.read_version(delta_spark, path, 0).count() == 4


def test_timestamp_bounds_with_microseconds_keep_their_rows(delta_spark: Any, parted: str) -> None:
    # Delta stats hold milliseconds; a file's greatest timestamp has microseconds past it.
    latest = versions(parted)[-1].version
    rows = read_arrow(parted, latest).to_pylist()
    for at in {max(r["at"] for r in rows), min(r["at"] for r in rows)}:
        found = spark_delta.read_version(delta_spark, parted, latest).where(
            f"at = TIMESTAMP'{at.isoformat()}'"
        )
        assert found.count() == sum(r["at"] == at for r in rows) == 1


def test_history_shows_each_versions_watermark_in_user_metadata(
    delta_spark: Any, parted: str
) -> None:
    seen = history(delta_spark, parted)
    for info in versions(parted):
        assert seen[info.version] == {
            "deltamv.batch": str(info.batch_id),
            "deltamv.job": JOB,
            "deltamv.watermark": str(info.watermark),
        }
    # delta-rs still shows the keys on their own, as docs/guarantees.md promises.
    assert versions(parted)[-1].watermark == 3000


def test_the_watermark_is_one_sql_expression_away(delta_spark: Any, parted: str) -> None:
    marks = delta_spark.sql(f"DESCRIBE HISTORY delta.`{parted}`").selectExpr(
        "version",
        "CAST(get_json_object(userMetadata, '$[\\'deltamv.watermark\\']') AS BIGINT) AS w",
    )
    assert sorted(tuple(r) for r in marks.collect()) == [(0, 1000), (1, 2000), (2, 3000)]


def test_versions_behind_a_checkpoint_after_log_cleanup(delta_spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "checkpointed")
    for batch in range(1, 5):
        commit_rows(path, batch, [all_types_rows(4, 10 * batch)])
    assert checkpoint(path) == 3
    commit_rows(path, 5, [all_types_rows(4, 50)])
    # What log cleanup leaves once the retention passed: nothing before the checkpoint.
    for version in range(3):
        os.remove(f"{path}/_delta_log/{version:020d}.json")
    assert last_checkpoint(path) == 3
    assert [v.version for v in versions(path)] == [3, 4]
    for version in (3, 4):
        assert_df_equality(
            spark_delta.read_version(delta_spark, path, version),
            rs_frame(delta_spark, path, version),
            ignore_row_order=True,
        )
    assert {v: m["deltamv.watermark"] for v, m in history(delta_spark, path).items()} == {
        3: "4000",
        4: "5000",
    }
    with pytest.raises(DeltaMVError, match="version 1"):
        spark_delta.read_version(delta_spark, path, 1)


def test_a_read_stays_on_its_version_while_newer_ones_commit(
    delta_spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "moving")
    commit_rows(path, 1, [all_types_rows(3)])
    before = read_spark(delta_spark, path)  # the latest, version 0
    commit_rows(path, 2, [all_types_rows(5, 100)])
    assert sorted(r.id for r in before.collect()) == [0, 1, 2]
    assert read_spark(delta_spark, path).count() == 5


def through_delta_spark(df: DataFrame) -> bool:
    """The DataFrame scans a Delta file index (delta-spark), not a plain file list."""
    return "DeltaFileIndex" in df._jdf.queryExecution().sparkPlan().toString()


def test_read_spark_engines(spark: Any, parted: str) -> None:
    with pytest.raises(ValueError, match="engine"):
        read_spark(spark, parted, engine="parquet")  # type: ignore[arg-type]
    files = read_spark(spark, parted, 0, engine="files")
    assert files.count() == 18 and not through_delta_spark(files)
    auto = read_spark(spark, parted, 0)
    assert through_delta_spark(auto) == spark_delta.available(spark)


def test_session_conf_puts_the_fetched_jars_and_the_extension_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"):
        (jars / name).write_bytes(b"")
    monkeypatch.setenv(spark_delta.JARS_ENV, str(jars))
    monkeypatch.delenv(spark_delta.SWITCH_ENV, raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert spark_delta.session_conf({}, jvm_running=False) == {}  # no stamp: not fetched
    (jars / ".fetched").write_text("io.delta:delta-spark_4.2_2.13:4.4.0\n")
    conf = spark_delta.session_conf({"spark.jars": "/opt/mine.jar"}, jvm_running=False)
    assert conf["spark.jars"].split(",") == [
        "/opt/mine.jar",
        f"{jars}/delta-spark_4.2_2.13-4.4.0.jar",
        f"{jars}/delta-storage-4.4.0.jar",
    ]
    assert conf["spark.sql.extensions"] == spark_delta.EXTENSION
    assert conf["spark.sql.catalog.spark_catalog"] == spark_delta.CATALOG
    assert conf["spark.databricks.delta.snapshotPartitions"] == "1"


def test_session_conf_keeps_what_the_user_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".fetched").write_text("x\n")
    (tmp_path / "delta-spark.jar").write_bytes(b"")
    monkeypatch.setenv(spark_delta.JARS_ENV, str(tmp_path))
    monkeypatch.delenv(spark_delta.SWITCH_ENV, raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    mine = {
        "spark.jars.packages": "io.delta:delta-spark_4.2_2.13:4.4.0",
        "spark.sql.extensions": "com.example.Ext",
        "spark.sql.catalog.spark_catalog": "com.example.Catalog",
        "spark.databricks.delta.snapshotPartitions": "8",
    }
    # --packages brings the jar: none of ours; the user's extension stays first.
    assert spark_delta.session_conf(mine, jvm_running=False) == {
        "spark.sql.extensions": f"com.example.Ext,{spark_delta.EXTENSION}"
    }
    monkeypatch.setenv(spark_delta.SWITCH_ENV, "0")
    assert spark_delta.session_conf({}, jvm_running=False) == {}
