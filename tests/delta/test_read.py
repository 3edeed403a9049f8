from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from deltamv.delta import (
    Replace,
    TableSink,
    arrow_schema,
    arrow_to_spark,
    file_uris,
    read_arrow,
    read_spark,
    version_at_watermark,
    versions,
)
from deltamv.errors import DeltaMVError
from deltamv.session import delta_spark_available

from .alltypes import ALL_TYPES, ALL_TYPES_DDL, all_types_rows

JOB = "all_types"


@pytest.fixture(scope="module")
def history_table(tmp_path_factory) -> tuple[str, list[list[dict]]]:
    """A table with four versions committed as the job commits them; returns it and each
    version's rows."""
    path = str(tmp_path_factory.mktemp("read") / "all_types")
    contents = [all_types_rows(20), all_types_rows(5, start=100), [], all_types_rows(8, start=7)]
    sink = TableSink(path, ALL_TYPES, layout=["id"], app_id=f"deltamv-{JOB}",
                     metadata={"deltamv.job": JOB}, target_file_rows=12)  # fmt: skip
    for batch, rows in enumerate(contents, start=1):
        sink.commit(
            batch,
            Replace(pa.Table.from_pylist(rows, schema=ALL_TYPES)),
            metadata={"deltamv.watermark": str(1000 * batch)},
            expected_version=batch - 2 if batch > 1 else None,
        )
    return path, contents


def test_versions_carry_the_commit_metadata(history_table) -> None:
    path, _ = history_table
    infos = versions(path)
    assert [v.version for v in infos] == [0, 1, 2, 3]
    assert [v.watermark for v in infos] == [1000, 2000, 3000, 4000]
    assert [v.batch_id for v in infos] == [1, 2, 3, 4]
    assert {v.job for v in infos} == {JOB}
    assert infos[0].operation == "CREATE TABLE" and infos[1].operation == "WRITE"
    assert all(a.timestamp_ms <= b.timestamp_ms for a, b in itertools.pairwise(infos))


def test_a_commit_landing_while_the_history_is_read_shifts_no_watermark(
    tmp_path, monkeypatch
) -> None:
    """Each version carries its own commit's watermark, also when versions land while the
    log is read (delta-rs' history() numbers the commits it reads down from the version
    the table was opened at: one committed meanwhile gave each version the next one's)."""
    from deltamv.delta import NoChange
    from deltamv.delta import _table as table_module

    path = str(tmp_path / "t")
    schema = pa.schema([("k", pa.int64())])
    sink = TableSink(path, schema, layout=["k"], app_id="a", metadata={})

    def commit(batch: int) -> None:
        sink.commit(batch, NoChange(), metadata={"deltamv.watermark": str(10 * batch)},
                    expected_version=batch - 2 if batch > 1 else None)  # fmt: skip

    for batch in (1, 2, 3):
        commit(batch)
    commit(4)
    real = table_module._commit_info
    landed: list[int] = []

    def read_while_committing(text: str):  # type: ignore[no-untyped-def]
        if len(landed) < 2:
            landed.append(5 + len(landed))
            commit(landed[-1])
        return real(text)

    monkeypatch.setattr(table_module, "_commit_info", read_while_committing)
    found = [(v.version, v.watermark) for v in versions(path)]
    assert found[:4] == [(0, 10), (1, 20), (2, 30), (3, 40)]
    assert all(w == 10 * (v + 1) for v, w in found)


def test_version_at_watermark_picks_the_latest_version_at_or_below(history_table) -> None:
    path, _ = history_table
    assert version_at_watermark(path, 999) is None
    assert version_at_watermark(path, 1000).version == 0
    assert version_at_watermark(path, 2999).version == 1
    assert version_at_watermark(path, 10**18).version == 3


ENGINES = ["files", "delta-spark"]


def engine_in(spark: SparkSession, engine: str) -> str:
    if engine == "delta-spark" and not delta_spark_available(spark):
        pytest.skip("no delta-spark in the session: `make setup` fetches its jars")
    return engine


@pytest.mark.parametrize("engine", ENGINES)
def test_every_version_reads_back_exactly_through_spark(
    spark: SparkSession, history_table, engine
) -> None:
    path, contents = history_table
    engine = engine_in(spark, engine)
    for version, rows in enumerate(contents):
        expected = spark.createDataFrame(rows, ALL_TYPES_DDL)
        actual = read_spark(spark, path, version=version, engine=engine)
        assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(
        read_spark(spark, path, engine=engine),
        spark.createDataFrame(contents[-1], ALL_TYPES_DDL),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_every_version_reads_back_exactly_through_arrow(history_table) -> None:
    path, contents = history_table
    for version, rows in enumerate(contents):
        table = read_arrow(path, version=version)
        assert table.schema == arrow_schema(path, version)
        assert table.sort_by("id").to_pylist() == sorted(rows, key=lambda r: r["id"])


def test_the_table_schema_is_the_written_one(history_table) -> None:
    path, _ = history_table
    written = arrow_schema(path)
    # Delta records NOT NULL; Arrow from delta-rs spells the types the same way.
    assert [(f.name, f.type, f.nullable) for f in written] == [
        (f.name, f.type, f.nullable) for f in ALL_TYPES
    ]
    assert arrow_to_spark(written).simpleString() == (
        "struct<id:bigint,name:string,score:double,amount:decimal(18,2),day:date,"
        "at:timestamp,flag:boolean>"
    )


def test_delta_rs_file_list_read_with_pyarrow_equals_read_arrow(history_table) -> None:
    path, _ = history_table
    uris = DeltaTable(path).file_uris()
    assert sorted(uris) == sorted(file_uris(path))
    direct = pa.concat_tables(pq.read_table(u) for u in uris).cast(ALL_TYPES)
    assert direct.sort_by("id") == read_arrow(path).sort_by("id")


def test_polars_and_duckdb_read_the_same_rows(history_table) -> None:
    path, contents = history_table
    # In a subprocess: a reader that crashes at exit must fail this test, not the run.
    script = f"""
import json, duckdb, polars as pl
from deltalake import DeltaTable
path = {path!r}
latest = pl.read_delta(path).sort("id")
first = pl.read_delta(path, version=0)
uris = DeltaTable(path).file_uris()
((count, total),) = duckdb.sql(f"SELECT count(*), sum(id) FROM read_parquet({{uris!r}})").fetchall()
print(json.dumps({{"ids": latest["id"].to_list(), "first": first.height,
                  "count": count, "total": int(total)}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    ids = sorted(r["id"] for r in contents[-1])
    assert seen == {"ids": ids, "first": len(contents[0]), "count": len(ids), "total": sum(ids)}


@pytest.mark.parametrize("engine", ENGINES)
def test_an_empty_version_reads_as_an_empty_dataframe(
    spark: SparkSession, history_table, engine
) -> None:
    path, _ = history_table
    assert file_uris(path, version=2) == []
    df = read_spark(spark, path, version=2, engine=engine_in(spark, engine))
    assert df.count() == 0
    assert df.schema == arrow_to_spark(ALL_TYPES)


def test_reading_a_missing_table_or_version_fails_clearly(tmp_path, history_table) -> None:
    path, _ = history_table
    with pytest.raises(DeltaMVError, match="no Delta table"):
        read_arrow(str(tmp_path / "nothing"))
    with pytest.raises(DeltaMVError):
        read_arrow(path, version=99)


def test_foreign_commits_have_no_deltamv_metadata(tmp_path) -> None:
    path = str(tmp_path / "foreign")
    write_deltalake(path, pa.table({"x": [1]}))
    (info,) = versions(path)
    assert (info.watermark, info.job, info.batch_id) == (None, None, None)
    assert version_at_watermark(path, 10) is None
