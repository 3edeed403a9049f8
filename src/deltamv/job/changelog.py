"""The change log as a job's upstream: which segments a batch reads, parsed on the driver.

Spark's streaming engine plans the batches: the ``deltamv-changelog`` source picks, per
trigger, the segments up to which each region is read (its offset), and writes the
batch's offsets to the query's offset log before the batch runs. The batch itself reads
those segments here, on the driver, in one pass per file (parsed columnar and
fingerprinted from the same bytes): its segments are those after the previous batch's
offset up to this batch's, so a replayed batch reads exactly the same ones.

While Spark starts the query (about a second), the job already parses, in the
background, the first group of segments its first batch will most likely read: the
batch Spark replays, or the one the source's own planning gives from the last offset.
The batch uses that parse only if its segments begin with exactly those segments; what
it reads is still decided by Spark's offset log alone.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from deltamv.changelog.batch import SegmentFingerprint, parse_segments
from deltamv.changelog.events import COMMIT, COMMITTED, PREWRITE
from deltamv.changelog.format import read_segment
from deltamv.changelog.segments import Segment, SegmentFormat, scan_region
from deltamv.changelog.snapshot import iter_snapshot, read_snapshot_ts
from deltamv.changelog.source import (
    SOURCE_NAME,
    ChangelogStreamReader,
    decode_offset,
    encode_offset,
    tables_option,
)
from deltamv.compute import Compute
from deltamv.config import JobConfig
from deltamv.errors import DeltaMVError
from deltamv.job.upstream import Lap, logged_offset
from deltamv.pipeline.ingest import EventGroup, IngestResult, ingest
from deltamv.pipeline.ledger import SegmentLedger
from deltamv.pipeline.match import renamed_since_kept
from deltamv.state.store import SegmentRecord, StateStore

__all__ = ["BatchSegments", "ChangelogUpstream"]

log = logging.getLogger(__name__)

_GROUP_BYTES = 48 << 20  # segment bytes parsed and matched at once (memory per step)

Parsed = tuple[EventGroup, list[SegmentRecord]]


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
        self._ahead: _Ahead | None = None  # the first batch's first group, parsed early

    def start_ts(self) -> int:
        return read_snapshot_ts(self.config.snapshot) if self.config.snapshot else 0

    def open(self, store: StateStore) -> None:
        """Check every segment the job read is still as it was (before anything runs);
        name the columns of rows an earlier version kept pending or buffered as this one
        does (``schema.change_column``)."""
        self.ledger = SegmentLedger(store)
        self.ledger.verify_all()
        renames = {
            name: renamed_since_kept(table.schema.names, table.primary_key)
            for name, table in self.config.tables.items()
        }
        if any(renames.values()) and store.rename_chunk_columns(renames):
            log.info("renamed columns of rows kept from an earlier version (%s)",
                     ", ".join(sorted(n for n, r in renames.items() if r)))  # fmt: skip

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

    def planned_offsets(self, batch: int) -> Mapping[str, Any]:
        return {"regions": {str(r): s for r, s in sorted(self._logged_offset(batch).items())}}

    def commit_metadata(self, store: StateStore, batch: int) -> Mapping[str, str]:
        return {}

    def locate(self, store: StateStore, key: str, commit_ts: int) -> tuple[str, int] | None:
        """Searched in the segments the job read (the failing batch's too: its ledger
        entries are in the open transaction), the latest first: the change's COMMITTED
        record, or its COMMIT, whose start_ts then finds its PREWRITE."""
        read = sorted(store.segments_up_to(sys.maxsize), key=lambda r: (r.batch, r.seq),
                      reverse=True)  # fmt: skip
        start_ts = None
        for record in read:
            fmt: SegmentFormat = "parquet" if record.path.endswith(".parquet") else "jsonl"
            try:
                events = read_segment(Segment(record.region, record.seq, record.path, fmt),
                                      self.schemas)  # fmt: skip
            except DeltaMVError:
                continue  # (changed since it was read: the ledger says so at the next start)
            events = events.filter(pc.equal(events.column("key"), key))
            if start_ts is None:
                at = events.filter(pc.equal(events.column("commit_ts"), commit_ts))
                committed = at.filter(pc.equal(at.column("type"), COMMITTED))
                if committed.num_rows:
                    return record.path, int(committed.column("line")[0].as_py())
                commits = at.filter(pc.equal(at.column("type"), COMMIT))
                if commits.num_rows:
                    start_ts = commits.column("start_ts")[0].as_py()
            if start_ts is not None:
                prewrites = events.filter(
                    pc.and_(
                        pc.equal(events.column("type"), PREWRITE),
                        pc.equal(events.column("start_ts"), start_ts),
                    )
                )
                if prewrites.num_rows:
                    return record.path, int(prewrites.column("line")[0].as_py())
        return None

    def after_batch(self, store: StateStore, batch: int) -> None:
        if self.ledger is not None:
            self.ledger.verify_some()

    def after_run(self, store: StateStore) -> None:
        pass

    def close(self) -> None:
        """Wait for a parse started ahead that no batch took, and let go of it."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.join()

    stream_reads_state = False  # the source lists segments; the state is not needed

    def _options(self) -> dict[str, str]:
        return {
            "path": self.config.changelog,
            "tables": tables_option(self.schemas),
            "maxSegmentsPerTrigger": str(self.config.max_segments_per_batch),
        }

    def stream(self, spark: SparkSession, store: StateStore) -> DataFrame:
        return spark.readStream.format(SOURCE_NAME).options(**self._options()).load()

    def prefetch(self, store: StateStore, *, once: bool) -> None:
        """Start finding and parsing the first group of segments the run's first batch
        will most likely read (see the module doc), on a thread of its own."""
        done = store.progress().batch

        def first_group() -> tuple[Segment, ...]:
            return tuple(next(_grouped(self._first_batch_ahead(done, once=once)), ()))

        self._ahead = _Ahead(first_group, self._parse)

    def _first_batch_ahead(self, done: int, *, once: bool) -> tuple[Segment, ...]:
        """The segments of the first batch this run will ingest (after batch ``done``):
        a batch Spark planned and did not finish, else the next one as the source would
        plan it now (new segments may still change that)."""
        planned = _last_logged(self.offset_log)
        if planned > done:  # Spark replays it
            return self.segments(planned).segments
        start = self._logged_offset(planned) if planned >= 0 else {}
        reader = ChangelogStreamReader(self._options())
        if once:
            reader.prepareForTriggerAvailableNow()
        end = reader.latestOffset(encode_offset(start), reader.getDefaultReadLimit())
        return self._between(planned + 1, start, decode_offset(end))

    def segments(self, batch: int) -> BatchSegments:
        """The segments ``batch`` reads, from Spark's offset log."""
        end = self._logged_offset(batch)
        start = self._logged_offset(batch - 1) if batch > 0 else {}
        return BatchSegments(batch, start, end, self._between(batch, start, end))

    def _between(
        self, batch: int, start: Mapping[int, int], end: Mapping[int, int]
    ) -> tuple[Segment, ...]:
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
        return tuple(found)

    def _logged_offset(self, batch: int) -> dict[int, int]:
        return decode_offset(logged_offset(self.offset_log, batch))

    def groups(self, segments: Sequence[Segment]) -> Iterator[Parsed]:
        """The segments parsed in groups of bounded size, with their fingerprints; the
        first group parsed ahead if the segments begin with it."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            parsed = ahead.take(segments)
            if parsed is not None:
                skip = len(ahead.group)
                del ahead
                yield parsed
                del parsed  # (not held while the later groups are parsed)
                segments = segments[skip:]
        for group in _grouped(segments):
            yield self._parse(group)

    def _parse(self, group: Sequence[Segment]) -> Parsed:
        batch, prints = parse_segments(group, self.schemas, self.keys)
        records = [_record(p) for p in prints]
        return EventGroup(batch.files, batch.events, batch.values), records


def _grouped(segments: Sequence[Segment]) -> Iterator[list[Segment]]:
    """``segments`` in order, cut into groups of at most ``_GROUP_BYTES`` (at least one
    segment each)."""
    group: list[Segment] = []
    size = 0
    for seg in segments:
        try:
            length = os.path.getsize(seg.path)
        except OSError:
            length = 0
        if group and size + length > _GROUP_BYTES:
            yield group
            group, size = [], 0
        group.append(seg)
        size += length
    if group:
        yield group


class _Ahead:
    """The first group of a batch's segments, found and parsed on a thread of its own,
    for the batch that reads them.

    A guess or a parse that fails is dropped: the batch parses the segments itself and
    reports any error as it would have.
    """

    def __init__(
        self,
        plan: Callable[[], tuple[Segment, ...]],
        parse: Callable[[Sequence[Segment]], Parsed],
    ) -> None:
        self.group: tuple[Segment, ...] = ()
        self._parsed: Parsed | None = None
        self._thread = threading.Thread(
            target=self._run, args=(plan, parse), name="deltamv-parse-ahead", daemon=True
        )
        self._thread.start()

    def _run(
        self, plan: Callable[[], tuple[Segment, ...]], parse: Callable[[Sequence[Segment]], Parsed]
    ) -> None:
        try:
            group = plan()
            if group:
                self._parsed = parse(group)
                self.group = group
        except Exception as e:  # see the class doc
            log.debug("no parse ahead of the first batch: %s", e)

    def join(self) -> None:
        """Wait for the thread (a parse is not cut short) and drop what it parsed."""
        self._thread.join()
        self._parsed = None

    def take(self, segments: Sequence[Segment]) -> Parsed | None:
        """The parse, if ``segments`` begin with its group (else None, and dropped)."""
        self._thread.join()
        parsed, self._parsed = self._parsed, None
        if parsed is None or tuple(segments[: len(self.group)]) != self.group:
            return None
        return parsed


def _last_logged(log_dir: Path) -> int:
    """The highest batch in one of Spark's logs (offsets, commits); -1 if none."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)


def _record(p: SegmentFingerprint) -> SegmentRecord:
    return SegmentRecord(p.path, p.region, p.seq, p.size, p.mtime_ns, p.digest)
