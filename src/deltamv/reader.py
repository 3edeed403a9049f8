"""As-of reads of deltamv views, alone or several at one common watermark.

Plain Delta time travel picks a version by number or commit time. deltamv's views carry
a watermark per version (``deltamv.watermark`` in the commit info): the rows of a
version with watermark ``w`` are the view's SQL over the source database at ``w``. So a
read "as of watermark ``T``" is the latest version with watermark ``<= T``, and a read of
several views is consistent across them only if every view is read at the *same*
watermark. That is what :func:`pick` chooses:

- the candidates are the watermarks every requested view has a version at (views of
  one job commit every batch's watermark to every view, so in steady state that is
  every watermark; a job that crashed between two views' commits leaves one view a
  version ahead until it resumes, and that watermark is then not a candidate);
- the read's watermark is the greatest candidate ``<= T`` (``T`` defaults to no limit);
- per view, the latest version with exactly that watermark.

For one view the candidates are simply its watermarks. Versions without a watermark
(not written by deltamv) are never picked. A table the job keeps as a Delta copy
(``tables.X.path``) is read as a view of the table's name.

>>> snap = pick("conf/bank.toml", ["total_balance", "balance_by_owner"])
>>> snap.watermark, snap.arrow("total_balance"), snap.spark(spark, "balance_by_owner")
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from deltamv import delta, tso
from deltamv.config import JobConfig, load_config
from deltamv.delta import VersionInfo
from deltamv.errors import DeltaMVError

__all__ = ["ConsistentRead", "parse_time", "pick", "read_arrow", "read_spark", "view_paths"]

#: A job config, a path to one, or a plain mapping of view name to Delta table path.
Source = JobConfig | str | os.PathLike[str] | Mapping[str, str]


@dataclass(frozen=True)
class ConsistentRead:
    """The versions of one or more views that together show the database at ``watermark``."""

    watermark: int
    versions: Mapping[str, VersionInfo]
    paths: Mapping[str, str]

    @property
    def time(self) -> _dt.datetime:
        """The wall-clock time (UTC) of the watermark."""
        return tso.to_datetime(self.watermark)

    def arrow(self, view: str) -> pa.Table:
        """One view's rows at the read's watermark, as an Arrow table."""
        return delta.read_arrow(self.paths[view], self._version(view))

    def spark(self, spark: SparkSession, view: str) -> DataFrame:
        """One view's rows at the read's watermark, as a (lazily read) Spark DataFrame.

        Read with delta-spark (``versionAsOf``) when the session has it, else from the
        version's file list (:func:`deltamv.delta.read_spark`).
        """
        return delta.read_spark(spark, self.paths[view], self._version(view))

    def arrow_tables(self) -> dict[str, pa.Table]:
        return {view: self.arrow(view) for view in self.versions}

    def spark_frames(self, spark: SparkSession) -> dict[str, DataFrame]:
        return {view: self.spark(spark, view) for view in self.versions}

    def _version(self, view: str) -> int:
        if view not in self.versions:
            raise DeltaMVError(
                f"view {view!r} is not part of this read ({', '.join(self.versions)})"
            )
        return self.versions[view].version


def view_paths(source: Source) -> dict[str, str]:
    """View name to Delta table path, from a config (object or file) or a mapping. A
    config's tables kept as Delta copies (``tables.X.path``) are read as views of their
    table's name (no view may share it): their versions carry the same watermarks."""
    if isinstance(source, JobConfig):
        copies = {name: t.path for name, t in source.tables.items() if t.path}
        return {**{name: v.path for name, v in source.views.items()}, **copies}
    if isinstance(source, Mapping):
        return dict(source)
    return view_paths(load_config(source))


def parse_time(text: str) -> int:
    """The TSO value of an ISO-8601 time (``2025-01-31T12:00:00Z``; no zone means UTC)."""
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise DeltaMVError(
            f"--as-of-time {text!r} is not an ISO-8601 time like 2025-01-31T12:00:00Z"
        ) from None
    return tso.from_datetime(when)


def pick(
    source: Source,
    views: str | Sequence[str],
    *,
    as_of_watermark: int | None = None,
    as_of_time: str | _dt.datetime | None = None,
) -> ConsistentRead:
    """Choose, per view, the version that shows the database at one common watermark.

    The watermark is the greatest one ``<= as_of_watermark`` (or the TSO value of
    ``as_of_time``; the latest without either) at which every view has a version.
    Reads nothing but the Delta logs; raises DeltaMVError naming the view when a view
    is unknown, has no table, or no common watermark exists.
    """
    if as_of_watermark is not None and as_of_time is not None:
        raise DeltaMVError("give at most one of as_of_watermark and as_of_time")
    limit = as_of_watermark
    if as_of_time is not None:
        limit = (
            parse_time(as_of_time) if isinstance(as_of_time, str) else tso.from_datetime(as_of_time)
        )
    names = [views] if isinstance(views, str) else list(dict.fromkeys(views))
    if not names:
        raise DeltaMVError("no view named: give at least one view")
    paths = view_paths(source)
    per_view: dict[str, dict[int, VersionInfo]] = {}
    for name in names:
        if name not in paths:
            raise DeltaMVError(f"unknown view {name!r} (views: {', '.join(sorted(paths))})")
        if delta.table_version(paths[name]) is None:
            raise DeltaMVError(f"view {name!r} has no Delta table yet at {paths[name]}")
        latest: dict[int, VersionInfo] = {}
        for info in delta.versions(paths[name]):
            if info.watermark is not None:
                latest[info.watermark] = info  # versions come oldest first: the last wins
        per_view[name] = latest
    common = set.intersection(*(set(v) for v in per_view.values()))
    eligible = [w for w in common if limit is None or w <= limit]
    if not eligible:
        raise DeltaMVError(_no_common(per_view, limit))
    chosen = max(eligible)
    return ConsistentRead(
        chosen, {n: per_view[n][chosen] for n in names}, {n: paths[n] for n in names}
    )


def read_arrow(
    source: Source,
    view: str,
    *,
    as_of_watermark: int | None = None,
    as_of_time: str | _dt.datetime | None = None,
) -> pa.Table:
    """One view as of a watermark or time (latest by default), as an Arrow table."""
    read = pick(source, view, as_of_watermark=as_of_watermark, as_of_time=as_of_time)
    return read.arrow(view)


def read_spark(
    spark: SparkSession,
    source: Source,
    view: str,
    *,
    as_of_watermark: int | None = None,
    as_of_time: str | _dt.datetime | None = None,
) -> DataFrame:
    """One view as of a watermark or time (latest by default), as a Spark DataFrame."""
    read = pick(source, view, as_of_watermark=as_of_watermark, as_of_time=as_of_time)
    return read.spark(spark, view)


def _no_common(per_view: Mapping[str, Mapping[int, VersionInfo]], limit: int | None) -> str:
    bound = "" if limit is None else f" at or below {limit}"
    empty = [n for n, v in per_view.items() if not v]
    if empty:
        return f"view {empty[0]!r} has no version with a deltamv watermark"
    if len(per_view) == 1:
        name, marks = next(iter(per_view.items()))
        return f"view {name!r} has no version{bound} (its first watermark is {min(marks)})"
    firsts = ", ".join(f"{n} from {min(v)}" for n, v in per_view.items())
    return f"the views have no common watermark{bound} (watermarks: {firsts})"
