"""As-of reads, alone and across views at one common watermark (deltamv.reader)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from deltamv import tso
from deltamv.errors import DeltaMVError
from deltamv.reader import parse_time, pick, read_arrow, read_spark
from tests.helpers.views import commit_version

SCHEMA = pa.schema([("total", pa.int64())])
T0 = tso.compose(1_700_000_000_000)


def ts(seconds: int) -> int:
    return T0 + tso.compose(seconds * 1000)


def make_views(tmp: Path, watermarks: dict[str, list[int]]) -> dict[str, str]:
    """One table per view; version i holds total = its watermark's second."""
    paths = {}
    for view, marks in watermarks.items():
        path = str(tmp / view)
        for w in marks:
            commit_version(
                path,
                [{"total": (tso.physical_ms(w) - tso.physical_ms(T0)) // 1000}],
                SCHEMA,
                watermark=w,
            )
        paths[view] = path
    return paths


def total(table: pa.Table) -> int:
    return int(table.column("total")[0].as_py())


def test_one_view_as_of_watermark_takes_the_latest_version_at_or_below(tmp_path: Path) -> None:
    paths = make_views(tmp_path, {"a": [ts(1), ts(2), ts(5)]})
    assert pick(paths, "a").watermark == ts(5)
    assert pick(paths, "a", as_of_watermark=ts(4)).watermark == ts(2)
    assert pick(paths, "a", as_of_watermark=ts(2)).versions["a"].version == 1
    assert total(read_arrow(paths, "a", as_of_watermark=ts(3))) == total(
        read_arrow(paths, "a", as_of_watermark=ts(2))
    )
    with pytest.raises(DeltaMVError, match="no version at or below"):
        pick(paths, "a", as_of_watermark=ts(0))


def test_as_of_time_is_the_tso_of_the_wall_clock(tmp_path: Path) -> None:
    paths = make_views(tmp_path, {"a": [ts(1), ts(2), ts(5)]})
    when = tso.to_datetime(ts(3))
    assert pick(paths, "a", as_of_time=when.isoformat()).watermark == ts(2)
    assert pick(paths, "a", as_of_time=when).watermark == ts(2)
    naive = when.replace(tzinfo=None).isoformat()  # no zone: UTC
    assert pick(paths, "a", as_of_time=naive).watermark == ts(2)
    assert parse_time("2023-11-14T22:13:20Z") == tso.from_datetime(
        dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    )
    with pytest.raises(DeltaMVError, match="ISO-8601"):
        parse_time("yesterday")


def test_views_are_read_at_one_common_watermark(tmp_path: Path) -> None:
    # b crashed after a's commit at 4: a is one version ahead until the job resumes.
    paths = make_views(tmp_path, {"a": [ts(1), ts(2), ts(4)], "b": [ts(1), ts(2)]})
    read = pick(paths, ["a", "b"])
    assert read.watermark == ts(2)
    assert {n: v.watermark for n, v in read.versions.items()} == {"a": ts(2), "b": ts(2)}
    assert total(read.arrow("a")) == total(read.arrow("b")) == 2
    # Alone, a's latest is at 4.
    assert pick(paths, "a").watermark == ts(4)


def test_common_watermark_steps_down_to_one_every_view_has(tmp_path: Path) -> None:
    paths = make_views(
        tmp_path, {"a": [ts(1), ts(3), ts(5), ts(7)], "b": [ts(1), ts(2), ts(5), ts(6)],
                   "c": [ts(1), ts(5), ts(6), ts(7)]},
    )  # fmt: skip
    assert pick(paths, ["a", "b", "c"]).watermark == ts(5)
    assert pick(paths, ["b", "c"]).watermark == ts(6)
    assert pick(paths, ["a", "b", "c"], as_of_watermark=ts(4)).watermark == ts(1)
    with pytest.raises(DeltaMVError, match="no common watermark"):
        pick(paths, ["a", "b"], as_of_watermark=ts(0))


def test_repeated_watermark_reads_the_latest_version_and_unmarked_versions_are_skipped(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "a")
    commit_version(path, [{"total": 1}], SCHEMA, watermark=ts(1))
    commit_version(path, [{"total": 2}], SCHEMA, watermark=ts(1))
    commit_version(path, [{"total": 3}], SCHEMA, watermark=None)  # not a deltamv commit
    read = pick({"a": path}, "a")
    assert (read.watermark, read.versions["a"].version, total(read.arrow("a"))) == (ts(1), 1, 2)


def test_errors_name_the_view(tmp_path: Path) -> None:
    paths = make_views(tmp_path, {"a": [ts(1)]})
    with pytest.raises(DeltaMVError, match="unknown view 'zzz'"):
        pick(paths, ["a", "zzz"])
    with pytest.raises(DeltaMVError, match="view 'b' has no Delta table"):
        pick({**paths, "b": str(tmp_path / "none")}, ["a", "b"])


def test_a_version_whose_files_are_gone_says_so(tmp_path: Path) -> None:
    from deltamv.delta import file_uris

    paths = make_views(tmp_path, {"a": [ts(1), ts(2)]})
    for uri in file_uris(paths["a"], 0):
        Path(uri.removeprefix("file://")).unlink()
    with pytest.raises(DeltaMVError, match=r"a file it names is gone .*by a vacuum"):
        read_arrow(paths, "a", as_of_watermark=ts(1))
    assert total(read_arrow(paths, "a")) == 2


def test_spark_reads_match_arrow_reads(spark: Any, tmp_path: Path) -> None:
    paths = make_views(tmp_path, {"a": [ts(1), ts(2), ts(3)], "b": [ts(1), ts(2)]})
    read = pick(paths, ["a", "b"])
    frames = read.spark_frames(spark)
    for name, table in read.arrow_tables().items():
        assert_df_equality(frames[name], spark.createDataFrame(table), ignore_nullable=True)
    df = read_spark(spark, paths, "a", as_of_watermark=ts(2))
    assert [r.total for r in df.collect()] == [2]


def test_spark_reads_use_delta_spark_when_the_session_has_it(spark: Any, tmp_path: Path) -> None:
    from deltamv.session import delta_spark_available

    from .delta.test_spark import through_delta_spark

    paths = make_views(tmp_path, {"a": [ts(1), ts(2)]})
    df = pick(paths, "a", as_of_watermark=ts(1)).spark(spark, "a")
    assert through_delta_spark(df) == delta_spark_available(spark)
    assert [r.total for r in df.collect()] == [1]
    assert through_delta_spark(read_spark(spark, paths, "a")) == delta_spark_available(spark)


def test_a_table_kept_as_a_delta_copy_is_read_by_its_name(tmp_path: Path) -> None:
    from deltamv.config import parse_config

    paths = make_views(tmp_path, {"accounts": [ts(1), ts(2)], "total": [ts(1), ts(3)]})
    config = parse_config(
        {
            "job": {"name": "bank", "changelog": "log", "checkpoint": "ck"},
            "tables": {"accounts": {"schema": "id BIGINT", "primary_key": ["id"],
                                    "path": paths["accounts"]}},
            "views": {"total": {"sql": "SELECT COUNT(*) AS n FROM accounts",
                                "path": paths["total"]}},
        },
        base_dir=tmp_path,
    )  # fmt: skip
    both = pick(config, ["accounts", "total"])
    assert both.watermark == ts(1)
    assert total(both.arrow("accounts")) == 1
    assert total(read_arrow(config, "accounts")) == 2
    with pytest.raises(DeltaMVError, match=r"unknown view 'acounts' \(views: accounts, total\)"):
        pick(config, "acounts")
