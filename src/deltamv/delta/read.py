"""Reading committed versions: their history, their files, their rows.

Every read names one version (the latest if none is given) and reads exactly that
version, so a reader never sees part of a commit. Spark reads go through delta-spark when
the session has it (:mod:`.spark`), else through the version's file list read as
Parquet; file-list reads refuse tables with deletion vectors or column mapping rather
than read them wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from deltamv.delta import spark as spark_delta
from deltamv.delta._table import (
    check_plain_parquet,
    commit_infos,
    file_paths,
    require_table,
    translate_errors,
)
from deltamv.delta.commit import BATCH_KEY, JOB_KEY, WATERMARK_KEY
from deltamv.delta.schema import arrow_to_spark
from deltamv.errors import DeltaMVError, StateError

__all__ = [
    "VersionInfo",
    "arrow_schema",
    "file_uris",
    "read_arrow",
    "read_spark",
    "version_at_watermark",
    "versions",
]


@dataclass(frozen=True)
class VersionInfo:
    """One version of a table, from its commit info.

    ``watermark``, ``job`` and ``batch_id`` are None for commits deltamv did not make.
    """

    version: int
    timestamp_ms: int
    watermark: int | None
    job: str | None
    batch_id: int | None
    operation: str


def versions(table_path: str) -> list[VersionInfo]:
    """Every version the Delta log still holds, oldest first.

    Read from the log's commit files (``commit_infos``), not delta-rs' ``history()``,
    which a commit landing meanwhile made give every version the next one's watermark."""
    require_table(table_path)
    return [_version_info(table_path, commit) for commit in commit_infos(table_path)]


def version_at_watermark(table_path: str, watermark: int) -> VersionInfo | None:
    """The latest version whose watermark is <= ``watermark`` (None if there is none)."""
    found = None
    for info in versions(table_path):
        if info.watermark is not None and info.watermark <= watermark:
            found = info
    return found


def arrow_schema(table_path: str, version: int | None = None) -> pa.Schema:
    """The table's schema (at ``version``) as Arrow."""
    table = require_table(table_path, version)
    with translate_errors(table_path):
        return pa.schema(table.schema().to_arrow())


def file_uris(table_path: str, version: int | None = None) -> list[str]:
    """The data files of one version (latest by default), as absolute URIs or paths."""
    table = require_table(table_path, version)
    with translate_errors(table_path):
        check_plain_parquet(table, table_path)
        return file_paths(table)


def read_arrow(table_path: str, version: int | None = None) -> pa.Table:
    """All rows of one version (latest by default), in the table's schema."""
    table = require_table(table_path, version)
    with translate_errors(table_path):
        check_plain_parquet(table, table_path)
        schema = pa.schema(table.schema().to_arrow())
        uris = file_paths(table)
        if not uris:
            return schema.empty_table()
        parts = [pq.read_table(uri, schema=schema) for uri in uris]
        return pa.concat_tables(parts)


def read_spark(
    spark: SparkSession,
    table_path: str,
    version: int | None = None,
    *,
    engine: Literal["auto", "delta-spark", "files"] = "auto",
) -> DataFrame:
    """One version (latest by default) as a Spark DataFrame; the files are read lazily.

    The version is fixed when this is called: the DataFrame keeps reading it while the
    job commits newer ones, until VACUUM removes its files. ``engine``: ``"delta-spark"``
    reads it with delta-spark (``versionAsOf``), ``"files"`` hands the version's file list
    to ``spark.read.parquet`` (no Delta jar needed; refuses deletion vectors and column
    mapping), ``"auto"`` takes delta-spark when the session has it (docs/delta-spark.md).
    """
    if engine not in ("auto", "delta-spark", "files"):
        raise ValueError(f"engine must be 'auto', 'delta-spark' or 'files', not {engine!r}")
    table = require_table(table_path, version)
    with_delta = engine != "files" and spark_delta.available(spark)
    if engine == "delta-spark" and not with_delta:
        raise DeltaMVError(
            "this Spark session has no delta-spark jar: `make setup` fetches it"
            " (docs/delta-spark.md), or read with engine='files'"
        )
    if with_delta:
        with translate_errors(table_path):
            at = table.version()
        return spark_delta.read_version(spark, table_path, at)
    with translate_errors(table_path):
        check_plain_parquet(table, table_path)
        schema = arrow_to_spark(pa.schema(table.schema().to_arrow()))
        uris = file_paths(table)
    if not uris:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*uris)


def _version_info(table_path: str, commit: dict[str, Any]) -> VersionInfo:
    job = commit.get(JOB_KEY)
    return VersionInfo(
        version=int(commit["version"]),
        timestamp_ms=int(commit.get("timestamp", 0)),
        watermark=_int(table_path, commit, WATERMARK_KEY),
        job=job if isinstance(job, str) else None,
        batch_id=_int(table_path, commit, BATCH_KEY),
        operation=str(commit.get("operation", "")),
    )


def _int(table_path: str, commit: dict[str, Any], key: str) -> int | None:
    raw = commit.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise StateError(
            f"table {table_path} version {commit.get('version')}: {key} is {raw!r},"
            " not a decimal integer"
        ) from None
