"""The change log as a Spark streaming source: ``spark.readStream.format("deltamv-changelog")``.

Options:

- ``path``: the change-log directory (docs/changelog-format.md).
- ``tables``: JSON object ``{"<table>": "<Spark DDL>"}``, the declared source tables;
  every row value is checked against its table's schema.
- ``maxSegmentsPerTrigger`` (optional): at most this many segments per micro-batch,
  across regions. Whole segments are taken per region in ``seq`` order, round-robin
  over the regions with new segments (rotating between batches), so every region
  progresses; at least one segment is always taken.

Offsets are ``{"regions": {"<id>": <last seq read>}}``: the segments read per region.
Each micro-batch has one partition per region with new segments; a partition yields
that region's events (``EVENT_SCHEMA``) in ``seq`` then line order, as Arrow batches.
``Trigger.AvailableNow`` is supported (the target is the listing at query start).

A bad record stops the query. Errors raised in Spark's Python workers (and in the
planner process) reach the driver only as text: they are raised wired
(:func:`deltamv.errors.wire`), and :func:`deltamv.errors.unwire` rebuilds them.

The view job plans its batches with this source but reads the segments itself, on the
driver (:mod:`deltamv.job.changelog`); ``read()`` serves other readers of the format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from deltamv.changelog.events import EVENT_DDL
from deltamv.changelog.format import read_segment, table_validators
from deltamv.changelog.segments import (
    Segment,
    SegmentFormat,
    SeqRuns,
    list_region,
    list_segments,
    region_dirs,
    scan_region,
)
from deltamv.errors import BadRecordError, ConfigError, DeltaMVError, wire
from deltamv.schema import TableSchema

__all__ = [
    "SOURCE_NAME",
    "ChangelogDataSource",
    "decode_offset",
    "encode_offset",
    "register",
    "tables_option",
]

SOURCE_NAME = "deltamv-changelog"

Offset = dict[int, int]  # region id -> last seq read


def tables_option(tables: Mapping[str, TableSchema | str]) -> str:
    """The ``tables`` option for declared tables (schemas or DDL strings)."""
    return json.dumps(
        {name: s if isinstance(s, str) else s.to_ddl() for name, s in tables.items()},
        sort_keys=True,
    )


def _parse_options(options: Mapping[str, str]) -> tuple[str, dict[str, TableSchema], int | None]:
    path = options.get("path")
    if not path:
        raise ConfigError("path", f"the {SOURCE_NAME} source needs the change-log directory")
    raw = options.get("tables")
    if raw is None:
        raise ConfigError("tables", f"the {SOURCE_NAME} source needs the declared tables")
    try:
        ddls = json.loads(raw)
    except ValueError:
        raise ConfigError("tables", f"not a JSON object: {raw[:80]!r}") from None
    if not isinstance(ddls, dict) or not all(isinstance(v, str) for v in ddls.values()):
        raise ConfigError("tables", 'expected a JSON object {"<table>": "<DDL>"}')
    tables: dict[str, TableSchema] = {}
    for name, ddl in ddls.items():
        try:
            tables[name] = TableSchema.from_ddl(ddl)
        except ValueError as e:
            raise ConfigError(f"tables.{name}", str(e)) from None
    cap_text = options.get("maxSegmentsPerTrigger")
    cap: int | None = None
    if cap_text is not None:
        try:
            cap = int(cap_text)
        except ValueError:
            cap = 0
        if cap < 1:
            raise ConfigError(
                "maxSegmentsPerTrigger", f"must be a positive integer, got {cap_text!r}"
            )
    return path, tables, cap


def encode_offset(regions: Offset) -> dict[str, Any]:
    """The JSON form of an offset: ``{"regions": {"<id>": <seq>}}``."""
    return {"regions": {str(r): s for r, s in sorted(regions.items())}}


def decode_offset(offset: Mapping[str, Any] | None) -> Offset:
    if not offset:
        return {}
    return {int(r): int(s) for r, s in offset.get("regions", {}).items()}


class ChangelogPartition(InputPartition):
    """One region's segments for one micro-batch, in ``seq`` order (pickled to executors)."""

    def __init__(self, region: int, segments: Sequence[tuple[int, str, SegmentFormat]]) -> None:
        super().__init__(region)
        self.region = region
        self.segments = list(segments)  # (seq, path, fmt)

    def __repr__(self) -> str:
        return f"ChangelogPartition(region={self.region}, segments={len(self.segments)})"


def _select(
    listing: Mapping[int, list[Segment]], start: Offset, end: Offset
) -> list[ChangelogPartition]:
    """The partitions reading, per region, the segments with start < seq <= end."""
    partitions = []
    for region, last in sorted(end.items()):
        first = start.get(region, -1)
        if last <= first:
            continue
        segs = [s for s in listing.get(region, []) if first < s.seq <= last]
        if not segs or segs[-1].seq != last:
            raise DeltaMVError(
                f"segment {last} of region {region} is in the offset but no longer in the change log"
            )
        partitions.append(ChangelogPartition(region, [(s.seq, s.path, s.fmt) for s in segs]))
    return partitions


def _read_partition(
    partition: ChangelogPartition, validators: Mapping[str, Any]
) -> Iterator[pa.RecordBatch]:
    try:
        for seq, path, fmt in partition.segments:
            table = read_segment(Segment(partition.region, seq, path, fmt), validators)
            yield from table.to_batches(max_chunksize=65536)
    except BadRecordError as e:
        raise wire(e) from None


class ChangelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of whole segments; see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.path, self.tables, self.cap = _parse_options(options)
        self._target: Offset | None = None  # Trigger.AvailableNow: the last seq per region
        # The last listing, only the segments not read yet: what a continuous job keeps
        # grows with its backlog, not with the change log's history.
        self._listing: dict[int, list[Segment]] = {}
        self._known: dict[int, SeqRuns] | None = None  # seqs per region seen so far
        self._cursor = -1  # the region served last when a cap cut a batch short

    # -- planning (driver) -------------------------------------------------

    def initialOffset(self) -> dict:
        return encode_offset({})

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.cap) if self.cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        try:
            listing = self._list({})
        except DeltaMVError as e:
            raise wire(e) from None
        self._target = {r: segs[-1].seq for r, segs in listing.items() if segs}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = decode_offset(start)
        try:
            listing = self._list(begin)
        except DeltaMVError as e:
            raise wire(e) from None
        pending: dict[int, list[int]] = {}
        for region, segs in listing.items():
            floor = begin.get(region, -1)
            ceiling = self._target.get(region, -1) if self._target is not None else None
            seqs = [s.seq for s in segs if s.seq > floor and (ceiling is None or s.seq <= ceiling)]
            if seqs:
                pending[region] = seqs
        cap = limit.max_files if isinstance(limit, ReadMaxFiles) else None
        end = dict(begin)
        for region, count in self._take(pending, cap).items():
            end[region] = pending[region][count - 1]
        return encode_offset(end)

    def _take(self, pending: Mapping[int, list[int]], cap: int | None) -> dict[int, int]:
        """How many segments to take per region: all, or round-robin up to ``cap``."""
        if cap is None or sum(len(v) for v in pending.values()) <= cap:
            return {r: len(v) for r, v in pending.items()}
        regions = sorted(pending)
        # Start after the region served last, so a cap below the number of regions
        # still reaches every region over successive batches.
        pivot = next((i for i, r in enumerate(regions) if r > self._cursor), 0)
        order = regions[pivot:] + regions[:pivot]
        taken = dict.fromkeys(order, 0)
        budget = max(cap, 1)
        while budget:
            for region in order:
                if budget and taken[region] < len(pending[region]):
                    taken[region] += 1
                    budget -= 1
                    self._cursor = region
        return {r: n for r, n in taken.items() if n}

    def _list(self, begin: Offset) -> dict[int, list[Segment]]:
        """The segments after ``begin`` per region; checks that none appeared late.

        Segments are immutable and appended in seq order: one that turns up at or below
        what has been read was written too late and would be skipped, so it stops the
        job. Only the segments after ``begin`` are kept, and the seqs seen as runs.
        """
        known = self._known
        listing: dict[int, list[Segment]] = {}
        seen: dict[int, SeqRuns] = {}
        for region, folder in region_dirs(self.path).items():
            floor = begin.get(region, -1)
            if known is None:  # this reader's first listing: what is there counts as seen
                segs = list_region(region, folder)
                seen[region] = SeqRuns.of(s.seq for s in segs)
                listing[region] = [s for s in segs if s.seq > floor]
                continue
            runs = known.get(region) or SeqRuns()
            scan = scan_region(region, folder, after=floor, read=runs)
            if scan.below != runs.count_at_most(floor):
                # Two files for one seq, or a read segment gone (the ledger's to report):
                # list the region whole once, to name the first or forget the second.
                runs = SeqRuns.of(s.seq for s in list_region(region, folder))
            else:  # what lies above the floor is exactly what this scan found
                runs.drop_above(floor)
                runs.add(s.seq for s in scan.segments)
            listing[region] = scan.segments
            seen[region] = runs
        self._known = seen
        self._listing = listing
        return listing

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = decode_offset(start), decode_offset(end)
        listing = self._listing
        covered = all(
            any(s.seq == last for s in listing.get(region, ()))
            for region, last in finish.items()
            if last > begin.get(region, -1)
        )
        try:
            if not covered:  # e.g. a restarted query replaying a planned batch
                listing = {
                    r: scan_region(r, folder, after=begin.get(r, -1)).segments
                    for r, folder in region_dirs(self.path).items()
                }
            return _select(listing, begin, finish)
        except DeltaMVError as e:
            raise wire(e) from None

    def commit(self, end: dict) -> None:
        pass  # segments are never deleted by the reader

    # -- reading (executors) ----------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangelogPartition):
            return iter(())  # Spark reads one empty InputPartition when partitions() is empty
        return _read_partition(partition, table_validators(self.tables))


class ChangelogBatchReader(DataSourceReader):
    """``spark.read.format("deltamv-changelog")`` between ``startOffset`` and ``endOffset``.

    Both options are offsets in the JSON form; ``startOffset`` defaults to nothing read,
    ``endOffset`` to everything listed now.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.path, self.tables, _ = _parse_options(options)
        self.start = decode_offset(json.loads(options.get("startOffset") or "{}"))
        end_text = options.get("endOffset")
        self.end = decode_offset(json.loads(end_text)) if end_text else None

    def partitions(self) -> Sequence[InputPartition]:
        listing = list_segments(self.path)
        end = self.end
        if end is None:
            end = {r: segs[-1].seq for r, segs in listing.items() if segs}
        return _select(listing, self.start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangelogPartition):
            return iter(())  # Spark reads one empty InputPartition when partitions() is empty
        return _read_partition(partition, table_validators(self.tables))


class ChangelogDataSource(DataSource):
    """The ``deltamv-changelog`` data source (streaming and batch)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return EVENT_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return ChangelogStreamReader(self.options)

    def reader(self, schema: Any) -> DataSourceReader:
        return ChangelogBatchReader(self.options)


def register(spark: Any) -> None:
    """Register the deltamv data sources with ``spark`` (idempotent)."""
    from deltamv.changelog.snapshot import SnapshotDataSource

    spark.dataSource.register(ChangelogDataSource)
    spark.dataSource.register(SnapshotDataSource)


def read_events(
    spark: Any,
    changelog_dir: str,
    tables: Mapping[str, TableSchema | str],
    start: Mapping[int, int] | None,
    end: Mapping[int, int],
) -> Any:
    """A batch DataFrame (``EVENT_DDL``) of the segments after ``start`` up to ``end``."""
    return (
        spark.read.format(SOURCE_NAME)
        .option("path", os.fspath(changelog_dir))
        .option("tables", tables_option(tables))
        .option("startOffset", json.dumps(encode_offset(dict(start or {}))))
        .option("endOffset", json.dumps(encode_offset(dict(end))))
        .load()
    )
