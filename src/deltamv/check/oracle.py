"""The oracle: a view's SQL over the upstream's ground truth at a version's watermark.

Used by ``deltamv check --truth`` and by the tests: every committed version of a view
must hold exactly the rows of its SQL over the truth at the version's watermark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from deltamv import delta
from deltamv.config import JobConfig


class TruthSource(Protocol):
    """What the oracle needs of a ground truth (``deltamv.sim.truth.Truth`` provides it)."""

    def tables_at(self, ts: int) -> Mapping[str, pa.Table]: ...


@dataclass(frozen=True)
class VersionPair:
    view: str
    version: int
    watermark: int
    actual: DataFrame
    expected: DataFrame


def expected_view(
    spark: SparkSession, config: JobConfig, view: str, tables: Mapping[str, pa.Table]
) -> DataFrame:
    """The view's SQL evaluated over the given table contents."""
    return expected_rows(spark, config, config.views[view].sql, tables)


def expected_rows(
    spark: SparkSession, config: JobConfig, sql: str, tables: Mapping[str, pa.Table]
) -> DataFrame:
    """``sql`` over the config's tables holding the given contents."""
    for name, table in config.tables.items():
        data = tables.get(name)
        if data is None or data.num_rows == 0:
            df = spark.createDataFrame([], table.schema.to_ddl())
        else:
            df = spark.createDataFrame(data.select(table.schema.names), table.schema.to_ddl())
        df.createOrReplaceTempView(name)
    return spark.sql(sql)


def version_pairs(
    spark: SparkSession, config: JobConfig, truth: TruthSource, view: str
) -> Iterator[VersionPair]:
    """For every version of ``view``: its rows, and the rows the truth says it must hold.

    The expected DataFrame is materialised (cached) before the next version is built,
    since the temp views it reads are replaced per version. A version is read by its
    file list (``engine="files"``): delta-spark's time travel keeps about half a
    megabyte of heap per version read and takes several times as long (that delta-spark
    reads every version the same is ``tests/delta/test_spark_conformance.py``'s check).
    """
    path = config.views[view].path
    for info in delta.versions(path):
        if info.watermark is None:
            continue
        expected = expected_view(spark, config, view, truth.tables_at(info.watermark))
        expected = spark.createDataFrame(expected.toArrow(), expected.schema)
        actual = delta.read_spark(spark, path, info.version, engine="files")
        yield VersionPair(view, info.version, info.watermark, actual, expected)


def differences(pair: VersionPair) -> tuple[int, int]:
    """Rows only in the version, rows only in the expectation (multiset difference)."""
    actual = pair.actual.select(*pair.expected.columns)
    return actual.exceptAll(pair.expected).count(), pair.expected.exceptAll(actual).count()
