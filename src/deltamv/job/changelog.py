"""The change log as a job's upstream: which segments a batch reads, parsed on the driver.

Spark's streaming engine plans the batches: the ``deltamv-changelog`` source picks, per
trigger, the segments up to which each region is read (its offset), and writes the
batch's offsets to the query's offset log before the batch runs. The batch itself reads
those segments here, on the driver, in one pass per file (parsed columnar and
fingerprinted from the same bytes): its segments are those after the previous batch's
offset up to this batch's, so a replayed batch reads exactly the same ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from deltamv.changelog.batch import SegmentFingerprint, parse_segments
from deltamv.changelog.segments import Segment, scan_region
from deltamv.changelog.snapshot import iter_snapshot, read_snapshot_ts
from deltamv.changelog.source import SOURCE_NAME, decode_offset, tables_option
from deltamv.compute import Compute
from deltamv.config import JobConfig
from deltamv.errors import DeltaMVError
from deltamv.job.upstream import Lap, logged_offset
from deltamv.pipeline.ingest import EventGroup, IngestResult, ingest
from deltamv.pipeline.ledger import SegmentLedger
from deltamv.state.store import SegmentRecord, StateStore

__all__ = ["BatchSegments", "ChangelogUpstream"]

_GROUP_BYTES = 48 << 20  # segment bytes parsed and matched at once (memory per step)


@dataclass(frozen=True)
class BatchSegments:
    batch: int
    start: Mapping[int, int]
    end: Mapping[int, int]
    segments: tuple[Segment, ...]

    @property
    def offsets(self) -> dict[str, Any]:
        return {"regions": {str(r): s for r, s in sorted(self.end.items())}}


class ChangelogUpstream:
    """Reads a job's change log (see the module doc)."""

    def __init__(self, config: JobConfig, spark_checkpoint: Path) -> None:
        self.config = config
        self.offset_log = spark_checkpoint / "offsets"
        self.schemas = {n: t.schema for n, t in config.tables.items()}
        self.keys = {n: t.primary_key for n, t in config.tables.items()}
        self.ledger: SegmentLedger | None = None

    def start_ts(self) -> int:
        return read_snapshot_ts(self.config.snapshot) if self.config.snapshot else 0

    def open(self, store: StateStore) -> None:
        """Check every segment the job read is still as it was (before anything runs)."""
        self.ledger = SegmentLedger(store)
        self.ledger.verify_all()

    def snapshot(self, store: StateStore) -> Iterator[tuple[str, pa.Table]] | None:
        snapshot = self.config.snapshot
        if snapshot is None:
            return None

        def rows() -> Iterator[tuple[str, pa.Table]]:
            for name, table in self.config.tables.items():
                for batch in iter_snapshot(snapshot, name, table.schema):
                    yield name, pa.Table.from_batches([batch])

        return rows()

    def ingest(self, store: StateStore, compute: Compute, batch: int, lap: Lap) -> IngestResult:
        segs = self.segments(batch)
        lap("read")
        ledger = self.ledger
        assert ledger is not None, "open() first"

        def groups() -> Iterator[EventGroup]:
            for group, records in self.groups(segs.segments):
                ledger.record(batch, records)
                lap("read")
                yield group

        return ingest(store, compute, batch, groups(), offsets=segs.offsets)

    def commit_metadata(self, store: StateStore, batch: int) -> Mapping[str, str]:
        return {}

    def after_batch(self, batch: int) -> None:
        if self.ledger is not None:
            self.ledger.verify_some()

    def after_run(self, store: StateStore) -> None:
        pass

    stream_reads_state = False  # the source lists segments; the state is not needed

    def stream(self, spark: SparkSession, store: StateStore) -> DataFrame:
        return (
            spark.readStream.format(SOURCE_NAME)
            .option("path", self.config.changelog)
            .option("tables", tables_option(self.schemas))
            .option("maxSegmentsPerTrigger", str(self.config.max_segments_per_batch))
            .load()
        )

    def segments(self, batch: int) -> BatchSegments:
        """The segments ``batch`` reads, from Spark's offset log."""
        end = self._logged_offset(batch)
        start = self._logged_offset(batch - 1) if batch > 0 else {}
        found: list[Segment] = []
        root = self.config.changelog
        for region, last in sorted(end.items()):
            first = start.get(region, -1)
            if last <= first:
                continue
            folder = os.path.join(root, f"region-{region}")
            segs = [s for s in scan_region(region, folder, after=first).segments if s.seq <= last]
            if not segs or segs[-1].seq != last:
                raise DeltaMVError(
                    f"segment {last} of region {region} is in batch {batch}'s offsets but no"
                    f" longer in the change log {root}"
                )
            found.extend(segs)
        return BatchSegments(batch, start, end, tuple(found))

    def _logged_offset(self, batch: int) -> dict[int, int]:
        return decode_offset(logged_offset(self.offset_log, batch))

    def groups(
        self, segments: Sequence[Segment]
    ) -> Iterator[tuple[EventGroup, list[SegmentRecord]]]:
        """The segments parsed in groups of bounded size, with their fingerprints."""
        group: list[Segment] = []
        size = 0
        for seg in segments:
            try:
                length = os.path.getsize(seg.path)
            except OSError:
                length = 0
            if group and size + length > _GROUP_BYTES:
                yield self._parse(group)
                group, size = [], 0
            group.append(seg)
            size += length
        if group:
            yield self._parse(group)

    def _parse(self, group: Sequence[Segment]) -> tuple[EventGroup, list[SegmentRecord]]:
        batch, prints = parse_segments(group, self.schemas, self.keys)
        records = [_record(p) for p in prints]
        return EventGroup(batch.files, batch.events, batch.values), records


def _record(p: SegmentFingerprint) -> SegmentRecord:
    return SegmentRecord(p.path, p.region, p.seq, p.size, p.mtime_ns, p.digest)
