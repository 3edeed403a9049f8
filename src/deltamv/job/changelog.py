"""The change log as a job's upstream: which segments a batch reads, parsed on the driver.

Spark's streaming engine plans the batches: the ``deltamv-changelog`` source picks, per
trigger, the segments up to which each region is read (its offset), and writes the
batch's offsets to the query's offset log before the batch runs. The batch itself reads
those segments here, on the driver, in one pass per file (parsed columnar and
fingerprinted from the same bytes): its segments are those after the previous batch's
offset up to this batch's, so a replayed batch reads exactly the same ones.

A batch's segments are parsed in groups of bounded size, each on a thread while the
batch matches the group before. While Spark starts the query (about a second), the job
already parses, in the background, the segments its first batch will most likely read:
the batch Spark replays, or the one the source's own planning gives from the last
offset. The batch takes those groups only as long as its segments begin with exactly
them; what it reads is still decided by Spark's offset log alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
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

_GROUP_BYTES = 16 << 20  # segment bytes parsed and matched at once (memory per step)
_AHEAD_BYTES = 48 << 20  # segment bytes parsed ahead of the first batch, not yet taken

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
        self._ahead: _Parser | None = None  # the first batch's segments, parsed early

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

        def groups() -> Generator[EventGroup, None, None]:
            parsed = self.groups(segs.segments)
            with contextlib.closing(parsed):  # (a parse on a thread ends with the batch)
                for group, records in parsed:
                    ledger.record(batch, records)
                    lap("read")
                    yield group

        taken = groups()
        try:
            return ingest(store, compute, batch, taken, offsets=segs.offsets)
        finally:
            taken.close()

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
            ahead.close()

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
        """Start finding and parsing the segments the run's first batch will most likely
        read (see the module doc), on a thread of its own, up to ``_AHEAD_BYTES`` ahead."""
        done = store.progress().batch

        def planned() -> Iterator[tuple[list[Segment], int]]:
            return _grouped(self._first_batch_ahead(done, once=once))

        self._ahead = _Parser(planned, self._parse, ahead=_AHEAD_BYTES, guess=True)

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

    def groups(self, segments: Sequence[Segment]) -> Generator[Parsed, None, None]:
        """The segments parsed in groups of bounded size, in order, with their
        fingerprints: first those parsed ahead of the first batch, as long as the segments
        begin with them; the others on a thread of their own, each while the batch
        ingests the group before it."""
        rest = tuple(segments)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                while rest and (taken := ahead.next()) is not None:
                    group, parsed = taken
                    if rest[: len(group)] != group:
                        break
                    rest = rest[len(group) :]
                    del taken, group
                    yield parsed
                    del parsed  # (not held while the later groups are parsed)
            finally:
                ahead.close()
        grouped = list(_grouped(rest))
        if len(grouped) == 1:
            yield self._parse(grouped[0][0])
            return
        own = _Parser(lambda: grouped, self._parse, ahead=_GROUP_BYTES, guess=False)
        try:
            while (taken := own.next()) is not None:
                yield taken[1]
                del taken
        finally:
            own.close()

    def _parse(self, group: Sequence[Segment]) -> Parsed:
        batch, prints = parse_segments(group, self.schemas, self.keys)
        records = [_record(p) for p in prints]
        return EventGroup(batch.files, batch.events, batch.values), records


def _grouped(segments: Sequence[Segment]) -> Iterator[tuple[list[Segment], int]]:
    """``segments`` in order, cut into groups of at most ``_GROUP_BYTES`` (at least one
    segment each), with their sizes in bytes."""
    group: list[Segment] = []
    size = 0
    for seg in segments:
        try:
            length = os.path.getsize(seg.path)
        except OSError:
            length = 0
        if group and size + length > _GROUP_BYTES:
            yield group, size
            group, size = [], 0
        group.append(seg)
        size += length
    if group:
        yield group, size


class _Parser:
    """Groups of segments parsed in order on a thread of their own, ahead of the batch
    that ingests them: at most ``ahead`` bytes of segments parsed and not yet taken
    (one group at least), so memory stays bounded however long the batch.

    ``plan`` gives the groups (on the thread: finding them may list folders). With
    ``guess``, they are a guess at what a batch will read (the first batch's, while Spark
    starts the query): a failure ends the parse quietly, and the batch parses what it did
    not take itself, reporting any error as it would have. Otherwise a failure is raised
    to the batch where it takes the group that failed, as a parse in line would raise it.
    """

    def __init__(
        self,
        plan: Callable[[], Iterable[tuple[list[Segment], int]]],
        parse: Callable[[Sequence[Segment]], Parsed],
        *,
        ahead: int,
        guess: bool,
    ) -> None:
        self._ahead = ahead
        self._guess = guess
        self._changed = threading.Condition()
        self._ready: deque[tuple[tuple[Segment, ...], Parsed | Exception, int]] = deque()
        self._held = 0  # bytes of the segments in _ready
        self._ended = False  # nothing more comes
        self._stopped = False
        name = "deltamv-parse-ahead" if guess else "deltamv-parse"
        self._thread = threading.Thread(
            target=self._run, args=(plan, parse), name=name, daemon=True
        )
        self._thread.start()

    def _run(
        self,
        plan: Callable[[], Iterable[tuple[list[Segment], int]]],
        parse: Callable[[Sequence[Segment]], Parsed],
    ) -> None:
        try:
            for group, size in plan():
                with self._changed:
                    while self._ready and self._held + size > self._ahead and not self._stopped:
                        self._changed.wait()
                    if self._stopped:
                        return
                parsed = parse(group)
                with self._changed:
                    self._ready.append((tuple(group), parsed, size))
                    self._held += size
                    self._changed.notify_all()
        except Exception as e:
            if self._guess:  # (see the class doc)
                log.debug("parse ahead of the first batch ended: %s", e)
            else:  # raised where the batch takes the group that failed
                with self._changed:
                    self._ready.append(((), e, 0))
        finally:
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def next(self) -> tuple[tuple[Segment, ...], Parsed] | None:
        """The next group and its parse, in order (waiting for it); None after the last.
        A failure to parse it is raised here."""
        with self._changed:
            while not self._ready and not self._ended:
                self._changed.wait()
            if not self._ready:
                return None
            group, item, size = self._ready.popleft()
            self._held -= size
            self._changed.notify_all()
        if isinstance(item, Exception):
            raise item
        return group, item

    def close(self) -> None:
        """Stop after the group being parsed, if any, and let go of what was not taken."""
        with self._changed:
            self._stopped = True
            self._ready.clear()
            self._changed.notify_all()
        self._thread.join()


def _last_logged(log_dir: Path) -> int:
    """The highest batch in one of Spark's logs (offsets, commits); -1 if none."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)


def _record(p: SegmentFingerprint) -> SegmentRecord:
    return SegmentRecord(p.path, p.region, p.seq, p.size, p.mtime_ns, p.digest)
