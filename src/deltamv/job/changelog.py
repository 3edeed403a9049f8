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
offset. After each batch, the segments after its own are parsed the same way, a look
at a time: those already there (a run catching up with its log), and in a continuous run
those that appear while it waits for its next trigger. A batch takes a group parsed
ahead only where it holds, in each of its regions, exactly the segments the batch reads
next there; what it reads is still decided by Spark's offset log alone.
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

from deltamv.changelog.batch import (
    EventBatch,
    SegmentFingerprint,
    concat_batches,
    parse_segments,
)
from deltamv.changelog.events import COMMIT, COMMITTED, PREWRITE
from deltamv.changelog.format import read_segment
from deltamv.changelog.segments import Segment, SegmentFormat, region_dirs, scan_region
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
_AHEAD_BYTES = 48 << 20  # segment bytes parsed ahead of a batch, not yet taken
_POLL_SECONDS = 0.1  # at least this between a continuous run's looks for new segments

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
        self._ahead: _Parser | None = None  # the next batch's segments, parsed early
        self._once = True
        # Per region, how its last segment read is named (folder, digits, suffix): where
        # the parse ahead of the next batch looks for the next one.
        self._names: dict[int, tuple[str, int, str]] = {}

    def start_ts(self) -> int:
        return read_snapshot_ts(self.config.snapshot) if self.config.snapshot else 0

    def open(self, store: StateStore) -> None:
        """Check every segment the job read is still as it was (before anything runs);
        name the columns of rows an earlier version kept pending or buffered as this one
        does (``schema.change_column``). A change log that is not there is named now,
        not after a snapshot's load and first versions."""
        region_dirs(self.config.changelog)  # (raises the one-line ConfigError)
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
        for seg in segs.segments:
            folder, name = os.path.split(seg.path)
            stem, suffix = os.path.splitext(name)
            self._names[seg.region] = (folder, len(stem), suffix)
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
        self._read_ahead(batch)

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
        self._once = once

        def planned() -> Iterator[tuple[list[Segment], int]]:
            return _grouped(self._first_batch_ahead(done, once=once))

        self._ahead = _Parser(planned, self._parse, ahead=_AHEAD_BYTES, guess=True)

    def _read_ahead(self, batch: int) -> None:
        """Start parsing, on a thread, the segments after ``batch``'s: those there now
        (a run catching up: while Spark plans the next batch), and, in a continuous run,
        those that appear while it waits for its next trigger (see :meth:`_appearing`)."""
        if self._ahead is not None:  # (a guess no batch took)
            self._ahead.close()
            self._ahead = None
        names = dict(self._names)
        last = {r: seq for r, seq in self._logged_offset(batch).items() if r in names}
        if last:
            self._ahead = _Parser(
                lambda: self._appearing(last, names, again=not self._once),
                self._parse,
                ahead=_AHEAD_BYTES,
                guess=True,
            )

    def _appearing(
        self, last: dict[int, int], names: Mapping[int, tuple[str, int, str]], *, again: bool
    ) -> Iterator[tuple[list[Segment], int] | float]:
        """The segments after ``last`` (a seq per region), a group per look, each
        region's in seq order. With ``again``, it looks until :meth:`_Parser.finish`,
        giving after each look the seconds to wait before the next one (a quarter of the
        trigger interval, or none after a look that filled a group); without, once.

        A look asks each region for the file its next seq would be, named as its last
        one read was: a few stats, where listing a folder grows with its history. A
        region whose seqs skip a number, or one not read yet in this run, is left to the
        batch. A region gives at most its share of ``max_segments_per_batch`` (what the
        source gives each region when every one has that many waiting; a backlog
        larger than a batch is not parsed past what the next batch reads). Few looks, as
        each parse has a cost of its own beside the batch's."""
        share = max(1, self.config.max_segments_per_batch // len(last))
        left = dict.fromkeys(last, share)
        pause = max(_POLL_SECONDS, self.config.trigger_interval / 4)
        while any(left.values()):
            group: list[Segment] = []
            size = 0
            for region in sorted(last):
                folder, digits, suffix = names[region]
                while left[region] and size < _GROUP_BYTES:
                    seg = _next_segment(region, last[region] + 1, folder, digits, suffix)
                    if seg is None:
                        break
                    group.append(seg[0])
                    size += seg[1]
                    last[region] += 1
                    left[region] -= 1
            if group:
                yield group, size
            if not again:
                if size < _GROUP_BYTES:
                    return
                continue
            yield 0.0 if size >= _GROUP_BYTES else pause

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
        """The segments parsed in groups of bounded size, with their fingerprints: first
        those parsed ahead that hold, in each of their regions, exactly the segments the
        batch reads next there (consecutive small ones as one group); the others in order
        on a thread of their own, each while the batch ingests the group before it.

        Each region's segments are matched in their order; there is no order between
        regions (the change log has none), so taking a region's first segments before
        another's changes nothing the batch gives."""
        rest = tuple(segments)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.finish()  # (what it has parsed, or is parsing, is all it gives)
            queue = _Queue(rest)
            try:
                while not queue.empty and (taken := ahead.next()) is not None:
                    group, parsed = taken
                    del taken
                    if queue.take(group):
                        yield from queue.hold(parsed)
                    del parsed
                    if not ahead.ready():  # (the batch goes on rather than wait to join)
                        yield from queue.flush()
                yield from queue.flush()
            finally:
                ahead.close()
            rest = queue.rest()
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


class _Queue:
    """A batch's segments as it takes groups parsed ahead (see ``groups``): which it
    may take, and the taken ones joined into groups of up to ``_GROUP_BYTES``."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments = segments
        self.next: dict[int, list[Segment]] = {}  # per region, its segments still to take
        for seg in segments:
            self.next.setdefault(seg.region, []).append(seg)
        self.taken: dict[int, int] = dict.fromkeys(self.next, 0)
        self.closed: set[int] = set()  # regions a group did not fit: none taken after it
        self.held: list[Parsed] = []
        self.held_bytes = 0

    @property
    def empty(self) -> bool:
        return all(self.taken[r] == len(s) for r, s in self.next.items())

    def take(self, group: Sequence[Segment]) -> bool:
        """Whether ``group`` holds, in each of its regions, exactly the segments the
        batch reads next there; if so they count as taken, else its regions close."""
        by_region: dict[int, list[Segment]] = {}
        for seg in group:
            by_region.setdefault(seg.region, []).append(seg)
        fits = all(
            r not in self.closed
            and self.next.get(r, [])[self.taken.get(r, 0) : self.taken.get(r, 0) + len(segs)]
            == segs
            for r, segs in by_region.items()
        )
        if not fits:
            self.closed.update(by_region)
            return False
        for r, segs in by_region.items():
            self.taken[r] += len(segs)
        return True

    def hold(self, parsed: Parsed) -> Iterator[Parsed]:
        """Hold a taken group, to be joined with the next ones; first give out those
        held, joined, if it would take them over ``_GROUP_BYTES``."""
        size = sum(r.size for r in parsed[1])
        if self.held and self.held_bytes + size > _GROUP_BYTES:
            yield from self.flush()
        self.held.append(parsed)
        self.held_bytes += size

    def flush(self) -> Iterator[Parsed]:
        """The groups held, joined into one."""
        if self.held:
            held, self.held, self.held_bytes = self.held, [], 0
            yield _joined(held)

    def rest(self) -> tuple[Segment, ...]:
        """The batch's segments not taken, in its order."""
        position = dict.fromkeys(self.next, 0)
        rest = []
        for seg in self.segments:
            if position[seg.region] >= self.taken[seg.region]:
                rest.append(seg)
            position[seg.region] += 1
        return tuple(rest)


def _joined(parts: Sequence[Parsed]) -> Parsed:
    """Groups parsed apart as one: their segments one after the other (contiguous: the
    match's kernels are slower over many chunks)."""
    if len(parts) == 1:
        return parts[0]
    joined = concat_batches([EventBatch(g.files, g.events, g.values) for g, _ in parts])
    records = [r for _, recs in parts for r in recs]
    return EventGroup(joined.files, joined.events, joined.values), records


def _next_segment(
    region: int, seq: int, folder: str, digits: int, suffix: str
) -> tuple[Segment, int] | None:
    """Segment ``seq`` of a region and its size, if it is there: named with at least
    ``digits`` digits, as ``suffix`` (``.jsonl`` or ``.parquet``) or the other."""
    for ext in (suffix, ".parquet" if suffix == ".jsonl" else ".jsonl"):
        path = os.path.join(folder, f"{seq:0{digits}d}{ext}")
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        fmt: SegmentFormat = "parquet" if ext == ".parquet" else "jsonl"
        return Segment(region, seq, path, fmt), size
    return None


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

    ``plan`` gives the groups (on the thread: finding them may list folders); a plan that
    looks for new segments again and again gives, between its looks, the seconds to wait
    before the next one, and ends at the first of them after :meth:`finish`. With
    ``guess``, they are a guess at what a batch will read (the first batch's while Spark
    starts the query, the next one's after a batch): a failure ends the parse quietly,
    and the batch parses what it did not take itself, reporting any error as it would
    have. Otherwise a failure is raised to the batch where it takes the group that
    failed, as a parse in line would raise it.
    """

    def __init__(
        self,
        plan: Callable[[], Iterable[tuple[list[Segment], int] | float]],
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
        self._finishing = False  # no group after the one being parsed
        self._stopped = False
        name = "deltamv-parse-ahead" if guess else "deltamv-parse"
        self._thread = threading.Thread(
            target=self._run, args=(plan, parse), name=name, daemon=True
        )
        self._thread.start()

    def _run(
        self,
        plan: Callable[[], Iterable[tuple[list[Segment], int] | float]],
        parse: Callable[[Sequence[Segment]], Parsed],
    ) -> None:
        try:
            for planned in plan():
                if not self._room(planned):
                    return
                if isinstance(planned, float):
                    continue
                group, size = planned
                parsed = parse(group)
                with self._changed:
                    self._ready.append((tuple(group), parsed, size))
                    self._held += size
                    self._changed.notify_all()
        except Exception as e:
            if self._guess:  # (see the class doc)
                log.debug("parse ahead of a batch ended: %s", e)
            else:  # raised where the batch takes the group that failed
                with self._changed:
                    self._ready.append(((), e, 0))
        finally:
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def _room(self, planned: tuple[list[Segment], int] | float) -> bool:
        """Wait for room to parse ``planned``, or the seconds it gives before the next
        look; False: go no further (stopped, or finished at a look)."""
        with self._changed:
            if isinstance(planned, float):
                if planned and not (self._stopped or self._finishing):
                    self._changed.wait(planned)
                return not (self._stopped or self._finishing)
            while self._ready and self._held + planned[1] > self._ahead and not self._stopped:
                self._changed.wait()
            return not self._stopped

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

    def ready(self) -> bool:
        """Whether :meth:`next` has a group parsed for the taking now."""
        with self._changed:
            return bool(self._ready)

    def finish(self) -> None:
        """End at the plan's next look for new segments: :meth:`next` gives the groups
        planned before it, then None. (No effect on a plan that does not look again.)"""
        with self._changed:
            self._finishing = True
            self._changed.notify_all()

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
