"""One micro-batch, from the change log to committed Delta versions.

1. **ingest + maintain** (one state transaction): the batch's segments are read and
   parsed, matched, the watermark advances, the rows it passes are released; their
   changes are applied to the mirrors, every incremental view computes its change from
   them (with the state before and after the batch), and each output table's commit is
   staged in the outbox: a Z-set of changed rows, a rebuild, a Spark recompute, or no
   change (a version at the new watermark, no data touched).
2. **publish**: each output table commits its staged change as one Delta version with
   the app transaction ``(deltamv:<job>, batch + 1)``; a table that has it already
   (committed before a crash) is skipped.
3. **finish**: the outbox of the batch is dropped; the batch is done.

A crash anywhere replays the batch: before 1 commits, from the start (nothing of it is in
the state); after, from the outbox, skipping the tables already committed. Version 0 of
the app transaction is the start from a snapshot; without one, the first batch that
moves the watermark creates the tables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from deltamv import faults
from deltamv.compute import Compute
from deltamv.config import JobConfig
from deltamv.delta import read_spark
from deltamv.delta.commit import WATERMARK_KEY, CommitResult
from deltamv.delta.sink import Delta, NoChange, Replace, TableSink
from deltamv.errors import DeltaMVError, StateError
from deltamv.job.targets import Target
from deltamv.job.upstream import Upstream
from deltamv.job.views import ViewSet, view_errors
from deltamv.pipeline.ingest import IngestResult
from deltamv.state.chunks import OutboxEntry
from deltamv.state.keyed import KEY, Mirror
from deltamv.state.store import StateStore
from deltamv.views.ivm import Batch
from deltamv.views.mirror import (
    BlindDeleteError,
    DuplicateKeyError,
    TableChange,
    apply_change,
    insert_rows,
    loading,
    table_change,
)

__all__ = ["BatchReport", "BatchRunner"]

log = logging.getLogger("deltamv.job")

# The order outputs are published in: a recomputed view reads the table copies.
_ORDER = {"mirror": 0, "table": 1, "view": 2}
# Commits of one kind made at once: at most this many threads, holding at most this many
# changed rows in all (more rows: committed apart, as memory allows).
_COMMIT_THREADS = 4
_TOGETHER_ROWS = 100_000


def _rows(change: Delta | NoChange | Replace) -> int:
    """The rows a change holds in memory (a rewrite whole streams its rows: none)."""
    return change.rows.num_rows if isinstance(change, Delta) else 0


Replay = Literal["", "ingested", "finished"]  # see BatchReport


def _commit_ts(changes: pa.Table, key: str | None) -> int | None:
    """The commit_ts of ``key``'s change among a batch's released ``changes``."""
    if key is None or "commit_ts" not in changes.column_names:
        return None
    mine = changes.filter(pc.equal(changes.column("key"), key))
    return mine.column("commit_ts")[0].as_py() if mine.num_rows else None


@dataclass(frozen=True)
class BatchReport:
    """What one batch did. ``phases`` holds seconds per step (read, match, maintain,
    state, publish, finish), ``written`` the rows, files and bytes its commits wrote.
    ``replay``: "" for a new batch; "ingested" when an earlier run ingested it and was
    stopped before it finished (this run published it; ``events`` and ``released`` count
    nothing then); "finished" when an earlier run finished it (nothing was done)."""

    batch: int
    events: int
    released: int
    watermark: int
    committed: bool
    duration_ms: int
    phases: Mapping[str, float] = field(default_factory=dict)
    written: Mapping[str, int] = field(default_factory=dict)
    replay: Replay = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "batch": self.batch, "events": self.events, "released": self.released,
            "watermark": self.watermark, "committed": self.committed,
            "duration_ms": self.duration_ms, "phases": dict(self.phases),
            "written": dict(self.written), "replay": self.replay,
        }  # fmt: skip


class _Clock:
    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + (now - self._last)
        self._last = now


class BatchRunner:
    """Runs a job's batches; built once per run with everything a batch needs."""

    def __init__(
        self,
        *,
        config: JobConfig,
        spark: SparkSession,
        store: StateStore,
        compute: Compute,
        upstream: Upstream,
        views: ViewSet,
        mirrors: Mapping[str, Mirror],
        targets: Mapping[str, Target],
        sinks: Mapping[str, TableSink],
        scratch: Path,
    ) -> None:
        self.config = config
        self.spark = spark
        self.store = store
        self.compute = compute
        self.upstream = upstream
        self.views = views
        self.mirrors = mirrors
        self.targets = targets
        self.sinks = sinks
        self.scratch = scratch

    # -- a batch ------------------------------------------------------------------------
    def run(self, batch: int) -> BatchReport:
        """Ingest, maintain and publish one micro-batch; safe to call again for a batch
        that was cut short (it resumes where it stopped)."""
        started = time.monotonic()
        clock = _Clock()
        progress = self.store.progress()
        if batch < progress.batch:
            raise StateError(
                f"Spark replays batch {batch} but the job state is at batch {progress.batch}:"
                f" the Spark checkpoint was reset; restore it or start with a new checkpoint"
                " and new output paths"
            )
        self._check_planned_from(batch if batch <= progress.batch else batch - 1)
        if batch <= progress.applied_batch:
            self.upstream.after_batch(self.store, batch)
            return BatchReport(batch, 0, 0, progress.watermark, False, 0, replay="finished")
        events = released = 0
        replay: Replay = "ingested" if batch == progress.batch else ""
        with self.views.mirrors_written_once(self.scratch):
            if batch > progress.batch:
                result = self._ingest(batch, clock)
                events, released = result.events, result.released
            written = self._publish(batch, clock)
        watermark = self.store.progress().watermark
        committed = bool(self.store.outbox.entries(batch))
        duration = int((time.monotonic() - started) * 1000)
        report = BatchReport(batch, events, released, watermark, committed, duration,
                             clock.phases, written, replay)  # fmt: skip
        faults.point("before-finish")
        self.store.finish_batch(
            batch, committed_watermark=watermark if committed else None, duration_ms=duration,
            report=report.to_json(),
        )  # fmt: skip
        faults.point("after-finish")
        clock.lap("finish")
        self.upstream.after_batch(self.store, batch)
        return BatchReport(batch, events, released, watermark, committed,
                           int((time.monotonic() - started) * 1000), clock.phases, written,
                           replay)  # fmt: skip

    def _check_planned_from(self, batch: int) -> None:
        """Spark's offset log must say of ``batch`` what the job recorded when it read it:
        a replayed batch reads what it read, and a new one starts where it ended. A lost
        entry of the log has Spark plan the batch again over other offsets; the job then
        skipped changes as done, or read some twice (a false bad record)."""
        recorded = self.store.batch_offsets(batch) if batch >= 0 else None
        if not recorded:
            return
        planned = self.upstream.planned_offsets(batch)
        if any(k in recorded and recorded[k] != v for k, v in planned.items()):
            raise StateError(
                f"Spark's offset log says batch {batch} ends at {dict(planned)}, but the job"
                f" read it up to {dict(recorded)}: entries of the Spark checkpoint were lost"
                " or changed; restore it, or start with a new checkpoint and new output paths"
            )

    def _ingest(self, batch: int, clock: _Clock) -> IngestResult:
        with self.store.transaction():
            result = self.upstream.ingest(self.store, self.compute, batch, clock.lap)
            clock.lap("match")
            if result.watermark > result.previous_watermark:
                self._maintain(batch, result, clock)
            faults.point("after-stage")
        faults.point("after-ingest")
        clock.lap("state")
        return result

    def _maintain(self, batch: int, result: IngestResult, clock: _Clock) -> None:
        """Apply a batch's released changes to mirrors and views; stage every output."""
        try:
            table_changes: dict[str, TableChange] = {
                t: table_change(self.compute, self.mirrors[t], rows, truncate=t in result.truncated)
                for t, rows in result.changes.items()
            }
        except BlindDeleteError as exc:  # named at its record (its batch's too: in the state)
            raise self._at_record(exc, exc.key, exc.commit_ts) from None
        deltas = {t: c.delta for t, c in table_changes.items() if c.delta.num_rows}
        b = Batch(self.compute, self.mirrors, deltas)
        was_ready = {n: self.views.ready(n) for n in self.views.views}
        from_empty = self._from_empty(was_ready)
        view_deltas = self.views.deltas(b)
        clock.lap("maintain")
        self.views.finish(b)
        for t, change in table_changes.items():
            try:
                apply_change(self.mirrors[t], change)
            except DuplicateKeyError as exc:  # named at its record, as a blind DELETE
                ts = _commit_ts(result.changes[t], exc.key)
                raise self._at_record(exc, exc.key, ts) from None
        not_ready = [n for n, ok in was_ready.items() if not ok]
        if not_ready:
            self.views.build(not_ready, self.scratch)
        missed = self._missed()
        for target in self.targets.values():
            self._stage(batch, target, deltas, view_deltas, was_ready, from_empty, missed)
        clock.lap("maintain")

    def _at_record(
        self, exc: BlindDeleteError | DuplicateKeyError, key: str | None, commit_ts: int | None
    ) -> DeltaMVError:
        """``exc`` at the record of ``key``'s change committed at ``commit_ts``, where the
        upstream has records."""
        if key is None or commit_ts is None:
            return exc
        where = self.upstream.locate(self.store, key, commit_ts)
        return exc if where is None else exc.at(*where)

    def refresh(self) -> None:
        """At the start: the outputs new in the config, views whose SQL or mode changed,
        and outputs put back after missing batches get their version at the watermark the
        job stands at, not at the next batch that moves it. So a run that finds nothing
        new (``--once``) still leaves every output at the global watermark (CONTRACT
        section 6). Staged in one state transaction (the views' state built), then each
        committed for the last batch again; a start after a crash in between publishes
        what was staged, and a commit that landed is not made twice."""
        progress = self.store.progress()
        batch = progress.batch
        if progress.committed_watermark is None or progress.applied_batch != batch:
            return  # no output yet (the first batch makes them), or a batch to publish
        with self.views.mirrors_written_once(self.scratch):
            if not self.store.outbox.entries(batch):
                committed = self.store.committed_targets()
                missed = self._missed()
                stale = [
                    tid for tid, t in self.targets.items()
                    if tid not in committed or tid in missed
                    or (t.kind == "view" and not self.views.ready(t.name))
                ]  # fmt: skip
                if not stale:
                    return
                with self.store.transaction():
                    not_ready = [n for n in self.views.views if not self.views.ready(n)]
                    if not_ready:
                        self.views.build(not_ready, self.scratch)
                    for tid in stale:
                        self.store.outbox.put(batch, tid, self._whole(self.targets[tid]))
            staged = sorted(self.store.outbox.entries(batch))
            self._publish(batch, _Clock(), again=True)
            self.store.drop_outbox(batch)
        log.info(
            "start: published %s at the watermark the job stands at, %d (new or changed"
            " since the last run)", ", ".join(staged), self._watermark_of(batch),
        )  # fmt: skip

    def _whole(self, target: Target) -> str:
        """The outbox kind that writes ``target`` whole: Spark recomputes a recomputed
        view; anything else is rebuilt from the mirrors."""
        recompute = target.kind == "view" and self.views.views[target.name].mode == "recompute"
        return "recompute" if recompute else "rebuild"

    def _missed(self) -> set[str]:
        """The outputs whose table lacks batches the job published to the others (taken
        out of the config for a while): a change would apply to an old copy; they are
        rebuilt instead. (One put back between a batch's staging and its publishing is
        rebuilt by the publishing: :meth:`_publish`.)"""
        committed = self.store.committed_targets()
        latest = max((b for _, b in committed.values()), default=None)
        return {
            tid for tid in self.targets
            if tid in committed and committed[tid][1] != latest and self.sinks[tid].handle.exists()
        }  # fmt: skip

    def _from_empty(self, was_ready: Mapping[str, bool]) -> set[str]:
        """The targets this batch creates from empty inputs (those of a job started
        without a snapshot, or added later while their tables are still empty): never
        committed, no table yet, every table they read still empty, and for a view,
        incremental and ready. Their first version is their contents over
        empty tables plus the batch's change, with no full evaluation of the mirrors.
        Called before the batch changes the mirrors."""
        out = set()
        for tid, target in self.targets.items():
            if self.sinks[tid].handle.exists() or self.store.committed_version(tid) is not None:
                continue  # (the handle is in memory: most batches stop at it)
            if target.kind == "view":
                view = self.views.views[target.name]
                if view.maintainer is None or not was_ready[target.name]:
                    continue
                tables = view.tables
            else:
                tables = frozenset([target.name])
            if all(self.mirrors[t].is_empty() for t in tables):
                out.add(tid)
        return out

    def _stage(
        self,
        batch: int,
        target: Target,
        deltas: Mapping[str, pa.Table],
        view_deltas: Mapping[str, pa.Table | None],
        was_ready: Mapping[str, bool],
        from_empty: set[str],
        missed: set[str],
    ) -> None:
        outbox = self.store.outbox
        exists = self.sinks[target.id].handle.exists()
        if target.id in missed:  # its table lacks batches the others have (_missed)
            outbox.put(batch, target.id, self._whole(target))
            return
        if target.kind == "view" and target.id in from_empty:
            # its content before the batch: the view over empty tables
            delta = view_deltas.get(target.name)
            base = self.views.over_empty(target.name, self.scratch, like=delta)
            outbox.put(batch, target.id, "delta", [base] if delta is None else [base, delta])
            return
        if target.kind == "view":
            view = self.views.views[target.name]
            if view.mode == "recompute":
                # (a view of the time of evaluation moves without its tables)
                changed = bool(view.plan.clock) or any(t in deltas for t in view.tables)
                kind = (
                    "recompute" if (changed or not exists or not was_ready[target.name]) else "none"
                )
                outbox.put(batch, target.id, kind)
                return
            if not exists or not was_ready[target.name]:
                outbox.put(batch, target.id, "rebuild")
                return
            delta = view_deltas.get(target.name)
            outbox.put(batch, target.id, "none" if delta is None else "delta",
                       [] if delta is None else [delta])  # fmt: skip
            return
        if not exists and target.id not in from_empty:  # from empty: its change is all of it
            outbox.put(batch, target.id, "rebuild")
            return
        delta = deltas.get(target.name)
        outbox.put(batch, target.id, "none" if delta is None else "delta",
                   [] if delta is None else [delta])  # fmt: skip

    # -- publishing -----------------------------------------------------------------------
    def _publish(self, batch: int, clock: _Clock, *, again: bool = False) -> dict[str, int]:
        """Commit the outputs ``batch`` staged (``again``: the ones :meth:`refresh` staged
        for the batch the job stands at, which the others have committed already)."""
        entries = self.store.outbox.entries(batch)
        written = {"rows": 0, "files": 0, "bytes": 0, "tables": 0}
        if not entries:
            return written
        for gone in sorted(set(entries) - set(self.targets)):
            # staged before the output left the config (the run stopped before publishing)
            log.info("batch %d: %s is no longer in the config; not published", batch, gone)
            del entries[gone]
        for tid, target in self.targets.items():
            # Put in the config, or its view's SQL or mode changed (the staging builds
            # every view it stages), after the batch was staged: written whole for it,
            # from the mirrors, which hold the batch, or by Spark.
            changed = target.kind == "view" and not self.views.ready(target.name)
            if (tid not in entries and not again) or changed:
                entries[tid] = OutboxEntry(batch, tid, self._whole(target), ())
        watermark = self._watermark_of(batch)
        metadata = {
            WATERMARK_KEY: str(watermark),
            **self.upstream.commit_metadata(self.store, batch),
        }
        position = {tid: i for i, tid in enumerate(self.targets)}  # the config's order
        ordered = sorted(
            entries.values(),
            key=lambda e: (_ORDER[self.targets[e.target].kind], position[e.target]),
        )
        # Tables of one kind commit at once, on threads (delta-rs works outside the GIL):
        # small changes, held together up to _TOGETHER_ROWS rows; a rewrite whole alone.
        # A kind's changes are read once the kinds before it are committed (a recompute
        # reads the table copies).
        group: list[tuple[Target, Delta | NoChange | Replace]] = []
        for entry in ordered:
            target = self.targets[entry.target]
            if group and (_ORDER[group[0][0].kind] != _ORDER[target.kind]
                          or isinstance(group[0][1], Replace)):  # fmt: skip
                self._commit(batch, group, metadata, again, written)
                group = []
            change = self._change(target, entry.kind, list(self.store.outbox.read(entry)))
            rows = sum(_rows(c) for _, c in group) + _rows(change)
            if group and (isinstance(change, Replace) or rows > _TOGETHER_ROWS):
                self._commit(batch, group, metadata, again, written)
                group = []
            group.append((target, change))
        self._commit(batch, group, metadata, again, written)
        clock.lap("publish")
        return written

    def _commit(
        self,
        batch: int,
        group: list[tuple[Target, Delta | NoChange | Replace]],
        metadata: Mapping[str, str],
        again: bool,
        written: dict[str, int],
    ) -> None:
        """Commit each change of ``group`` to its table (several at once on threads),
        then record the commits made in the state, in order; raise the first failure
        (the tables committed beside it are recorded: a replay skips them)."""
        if not group:
            return
        expected = {t.id: self.store.committed_version(t.id) for t, _ in group}

        def commit(target: Target, change: Delta | NoChange | Replace) -> CommitResult:
            faults.point("before-commit")
            result = self.sinks[target.id].commit(
                batch + 1, change, metadata=metadata, expected_version=expected[target.id],
                again=again,
            )  # fmt: skip
            faults.point("after-commit")
            return result

        if len(group) == 1:
            outcomes: list[CommitResult | BaseException] = [commit(*group[0])]
        else:
            with ThreadPoolExecutor(min(len(group), _COMMIT_THREADS)) as pool:
                futures = [pool.submit(commit, target, change) for target, change in group]
            outcomes = [f.exception() or f.result() for f in futures]
        failure = None
        for (target, _), outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                failure = failure or outcome
                continue
            self.store.record_commit(target.id, outcome.version, batch)
            written["rows"] += outcome.rows_written
            written["files"] += outcome.files_added
            written["bytes"] += outcome.bytes_written
            written["tables"] += 0 if outcome.skipped else 1
        if failure is not None:
            raise failure

    def _watermark_of(self, batch: int) -> int:
        if batch < 0:  # the start: published before any batch moved the watermark
            return self.store.progress().watermark
        record = self.store.batch_record(batch)
        if record is None:
            raise StateError(f"the job state has no record of batch {batch}, which it must publish")
        return record.watermark

    def _change(
        self, target: Target, kind: str, parts: list[pa.Table]
    ) -> Delta | NoChange | Replace:
        if kind == "none":
            return NoChange()
        if kind == "delta":
            if not parts:  # every part was empty (the outbox keeps no empty chunk)
                return NoChange()  # (a first commit still creates the table)
            rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            return Delta(rows)
        if kind == "rebuild":
            if target.kind == "view":
                return Replace(self.views.contents(target.name, self.scratch))
            return Replace(self._mirror_rows(target))
        if kind == "recompute":
            return Replace(self._recompute(target.name))
        raise StateError(f"unknown outbox entry {kind!r} for {target.id}")

    def _mirror_rows(self, target: Target) -> Iterable[pa.RecordBatch]:
        names = target.schema.names
        for chunk in self.mirrors[target.name].scan():
            yield from chunk.select(names).cast(target.schema).to_batches()

    def _recompute(self, view: str) -> pa.Table:
        """A recomputed view's rows: its SQL in Spark over the tables' committed copies."""
        for table in self.views.views[view].tables:
            path = self._copy_path(table)
            # The job reads its own tables by file list: no Delta log replay per batch.
            read_spark(self.spark, path, engine="files").createOrReplaceTempView(table)
        df = self.spark.sql(self.config.views[view].sql)
        with view_errors(view):
            rows = df.toArrow()
        return rows.cast(self.views.views[view].schema)

    def _copy_path(self, table: str) -> str:
        for target in self.targets.values():
            if target.name == table and target.kind in ("table", "mirror"):
                return target.path
        raise StateError(f"table {table} has no Delta copy for Spark to read")

    # -- the start ----------------------------------------------------------------------
    def bootstrap(self, snapshot: Iterable[tuple[str, pa.Table]] | None) -> None:
        """Load the snapshot (if any) into the mirrors, build every view's state and,
        with a snapshot, stage and publish the first version of every output (app
        version 0, watermark = start)."""
        with self.views.mirrors_written_once(self.scratch):
            if not self.store.progress().bootstrapped:
                with self.store.transaction():
                    self._start(snapshot)
            if self.store.outbox.entries(-1):
                clock = _Clock()
                self._publish(-1, clock)
                watermark = self.store.progress().watermark
                self.store.finish_batch(-1, committed_watermark=watermark, duration_ms=0)
                log.info(
                    "snapshot: published as the first version of %d output(s), watermark %d",
                    sum(not t.internal for t in self.targets.values()), watermark,
                )  # fmt: skip

    def _start(self, snapshot: Iterable[tuple[str, pa.Table]] | None) -> None:
        self.views.sync_state()
        if snapshot is None:
            # The tables start empty: each incremental view's state is that of empty
            # tables, and the first batch that moves the watermark creates the outputs
            # from the batch's change (see _from_empty).
            self.views.build(list(self.views.views), self.scratch)
        else:
            files = self.views.files  # (the views' first evaluation reads the rows there)
            try:
                with loading(self.mirrors.values()):  # (the indexes built at the end)
                    for table, rows in snapshot:
                        mirror = self.mirrors[table]
                        # Rows with a key (PostgreSQL's, keyed as its changes are) are
                        # found by it; rows without one by primary key (views/mirror.py).
                        key = (rows.column(KEY) if KEY in rows.column_names
                               else pa.nulls(rows.num_rows, pa.string()))  # fmt: skip
                        keyed = rows.select(mirror.schema.names[1:]).add_column(0, KEY, key)
                        keyed = keyed.cast(mirror.schema)
                        insert_rows(mirror, keyed)
                        files.load(table, keyed)
            except DuplicateKeyError as exc:
                folder = self.config.snapshot
                where = f"{folder}/{exc.table}" if folder else "the upstream's first copy"
                raise exc.at(where, None) from None
            files.loaded()
            self.views.build(list(self.views.views), self.scratch)  # (over the files loaded)
            for target in self.targets.values():
                self.store.outbox.put(-1, target.id, self._whole(target))
        self.store.mark_bootstrapped()
