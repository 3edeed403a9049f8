"""The Delta layer: the only package of deltamv that talks to ``deltalake`` (delta-rs).

A :class:`TableSink` (:mod:`.sink`) turns a batch's change to a table (a Z-set of rows,
a replacement, or nothing) into one atomic, idempotent Delta commit that rewrites only
the files the change touches, through one :class:`DeltaTableHandle` (:mod:`.table`) per
table and the key-range file layout of :mod:`.layout`; the files themselves are written
by :mod:`.files`. What a commit carries (job, watermark, batch) is in :mod:`.commit`;
readers read exactly one version's files (:mod:`.read`); :mod:`.housekeeping` writes log
checkpoints and vacuums without adding a version.
"""

from __future__ import annotations

from deltamv.delta._table import empty_commit_files
from deltamv.delta.commit import CommitResult, committed_batch, owner_of, table_version
from deltamv.delta.files import DataFile, parquet_statistics, write_arrow
from deltamv.delta.layout import DEFAULT_TARGET_FILE_ROWS, FileRange, KeyRangeLayout
from deltamv.delta.read import (
    VersionInfo,
    arrow_schema,
    file_uris,
    read_arrow,
    read_spark,
    version_at_watermark,
    versions,
)
from deltamv.delta.schema import arrow_to_spark, spark_to_arrow
from deltamv.delta.sink import WEIGHT, Change, Delta, NoChange, Replace, TableSink
from deltamv.delta.table import DeltaTableHandle, TableFile

__all__ = [
    "DEFAULT_TARGET_FILE_ROWS",
    "WEIGHT",
    "Change",
    "CommitResult",
    "DataFile",
    "Delta",
    "DeltaTableHandle",
    "FileRange",
    "KeyRangeLayout",
    "NoChange",
    "Replace",
    "TableFile",
    "TableSink",
    "VersionInfo",
    "arrow_schema",
    "arrow_to_spark",
    "committed_batch",
    "empty_commit_files",
    "file_uris",
    "owner_of",
    "parquet_statistics",
    "read_arrow",
    "read_spark",
    "spark_to_arrow",
    "table_version",
    "version_at_watermark",
    "versions",
    "write_arrow",
]
