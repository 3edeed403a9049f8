"""The view job: a Spark Structured Streaming query from the change log to Delta views.

Per micro-batch (``foreachBatch``, driver side):

1. ingest  - executors parse and validate the batch's segments and write the events as
             Parquet into the checkpoint; the driver feeds them through matcher,
             frontier and buffer in ONE state transaction (all or nothing), which also
             stages the rows the new watermark releases.
2. mirrors - each table with released rows is rewritten at the new watermark and
             committed (one Delta commit per table).
3. views   - each view's SQL over the mirrors, committed (one Delta commit per view).
4. finish  - the staged rows are dropped; the batch is done.

Exactly once: Spark replays a batch whose commit it did not record with the same
offsets. The state knows whether the batch was ingested already (then step 1 is
skipped and the staged rows are used), and every Delta commit carries the app
transaction ``(deltamv:<job>, batch + 1)``, checked before committing, so a table
committed before the crash is not committed twice. Version 0 of the app transaction is
the snapshot, when the job has one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from deltamv import delta, faults, tso
from deltamv.changelog.snapshot import read_snapshot_ts, snapshot_tables
from deltamv.changelog.source import SOURCE_NAME, bad_record_from_exception
from deltamv.config import JobConfig
from deltamv.delta.housekeeping import recent_commits
from deltamv.errors import (
    CommitConflictError,
    ConfigError,
    DeltaMVError,
    StateError,
    StorageError,
    exception_chain,
)
from deltamv.maintenance import Maintenance
from deltamv.pipeline.ingest import ingest
from deltamv.pipeline.ledger import SegmentLedger
from deltamv.pipeline.state import PipelineState
from deltamv.views.maintain import arrow_schema, outputs, register_tables
from deltamv.views.mirror import KEY, mirror_schema, stage_changes, updated_mirror
from deltamv.views.sql import check_sql

log = logging.getLogger("deltamv.job")

WATERMARK_KEY = "deltamv.watermark"
JOB_KEY = "deltamv.job"
CHECKPOINT_KEY = "deltamv.checkpoint"  # which checkpoint (job instance) committed a version
_DRIVER_ROWS = 50_000  # view results up to this many rows are written by the driver
_RECENT_REPORTS = 1000  # batch reports a continuous run keeps


@dataclass(frozen=True)
class BatchReport:
    batch: int
    events: int
    released: int
    watermark: int
    committed: bool
    duration_ms: int


class ViewJob:
    """One job: its config, its Spark session, its state. Use :func:`run` to run it."""

    def __init__(self, config: JobConfig, spark: SparkSession) -> None:
        self.config = config
        self.spark = spark
        self.checkpoint = Path(config.checkpoint)
        self.app_id = f"deltamv:{config.name}"
        self.reports: deque[BatchReport] = deque()
        self.batches = 0  # batches processed by this run
        self._error: BaseException | None = None
        self.state: PipelineState | None = None
        self.ledger: SegmentLedger | None = None
        self._checkpoint_id = ""
        self._query: StreamingQuery | None = None
        self.maintenance = Maintenance(config.maintenance, self._housekept_tables())

    # -- public ----------------------------------------------------------------------------
    def run(self, *, once: bool) -> list[BatchReport]:
        """Run until the log is drained (``once``) or until interrupted.

        Returns the reports of the batches this run processed; a continuous run keeps
        only the last ``_RECENT_REPORTS`` (it may run for months).
        Raises ConfigError before anything is read, BadRecordError for bad input (nothing
        of that batch is committed), CommitConflictError when another writer touched a
        view, StorageError for I/O failures.
        """
        self.reports = deque(maxlen=None if once else _RECENT_REPORTS)
        self.batches = 0
        check_sql(self.spark, self.config)
        self._check_owners()
        start_ts = read_snapshot_ts(self.config.snapshot) if self.config.snapshot else 0
        with self._lock():
            self.state = PipelineState(
                self.checkpoint / "state.db", job=self.config.name, start_ts=start_ts
            )
            try:
                self._checkpoint_id = self._identify_checkpoint()
                self._check_tables()
                self.ledger = SegmentLedger(self.state)
                self.ledger.verify_all()
                if self.config.snapshot:
                    self._bootstrap_snapshot(start_ts)
                self._stream(once=once)
            finally:
                self.state.close()
                self.state = None
        return list(self.reports)

    def request_stop(self) -> None:
        """Ask a running job to stop (from a signal handler): the query stops from
        another thread and :meth:`run` returns. A batch cut short is replayed on restart."""
        query = self._query
        if query is not None:
            log.info("stop requested; stopping after %d batches", self.batches)
            threading.Thread(target=_stop_quietly, args=(query,), daemon=True).start()

    # -- setup -----------------------------------------------------------------------------
    def _check_owners(self) -> None:
        for path, key in self._outputs_by_target().values():
            owner = delta.owner_of(path)
            exists = delta.table_version(path) is not None
            if exists and owner != self.config.name:
                who = f"job {owner!r}" if owner else "something other than deltamv"
                raise ConfigError(
                    key, f"{path} holds a Delta table written by {who}", source=self.config.source
                )

    def _check_tables(self) -> None:
        """Refuse tables this checkpoint did not write last (a second job, a foreign writer).

        Each existing table must be at the version the state recorded, or one version
        past it if that commit is this job's own (a crash after the commit, before the
        state heard of it). Checked before anything is read, so nothing is touched.
        """
        assert self.state is not None
        targets = {f"mirror:{n}": self._mirror_path(n) for n in self.config.tables}
        targets.update({t: p for t, (p, _) in self._outputs_by_target().items()})
        progress = self.state.progress()
        bootstrapping = self.config.snapshot is not None and self.state.get("bootstrapped") != "1"
        pending = 0 if bootstrapping else progress.applied_batch + 2  # app version in flight
        for target, path in targets.items():
            current = delta.table_version(path)
            recorded = self.state.committed_version(target)
            if current is None:
                if recorded is not None:
                    raise CommitConflictError(
                        f"table {path} is gone but job {self.config.name!r} committed its"
                        f" version {recorded}: another process deleted it"
                    )
                continue
            if recorded is not None and current < recorded:
                raise CommitConflictError(
                    f"table {path} is at version {current} but job {self.config.name!r}"
                    f" committed version {recorded}: it was replaced or restored by another writer"
                )
            base = -1 if recorded is None else recorded
            for info in recent_commits(path, base):
                version = int(str(info.get("version", -1)))
                ours = (
                    version == base + 1
                    and info.get(JOB_KEY) == self.config.name
                    and info.get(CHECKPOINT_KEY, self._checkpoint_id) == self._checkpoint_id
                    and str(info.get("deltamv.batch")) == str(pending)
                )
                if ours:
                    continue
                if recorded is None:
                    raise CommitConflictError(
                        f"table {path} holds versions that this job's checkpoint"
                        f" {self.checkpoint} did not write (another job named"
                        f" {self.config.name!r}, or a new checkpoint): give each job its own"
                        " table paths"
                    )
                raise CommitConflictError(
                    f"table {path} version {version} was committed by another writer"
                    f" ({info.get('operation', 'unknown operation')}, job {info.get(JOB_KEY)!r})"
                    f" after job {self.config.name!r} committed version {recorded}: deltamv"
                    " stops rather than overwrite it"
                )

    def _identify_checkpoint(self) -> str:
        """A random id for this checkpoint, carried by every commit (``deltamv.checkpoint``)."""
        assert self.state is not None
        found = self.state.get("checkpoint_id")
        if found is None:
            found = uuid.uuid4().hex
            with self.state.transaction():
                self.state.put("checkpoint_id", found)
        return found

    def _outputs_by_target(self) -> dict[str, tuple[str, str]]:
        """Target name (as the state records commits) -> (path, config key)."""
        found: dict[str, tuple[str, str]] = {}
        for n, v in self.config.views.items():
            found[f"view:{n}"] = (v.path, f"views.{n}.path")
        for n, t in self.config.tables.items():
            if t.path:
                found[f"table:{n}"] = (t.path, f"tables.{n}.path")
        return found

    def _housekept_tables(self) -> dict[str, tuple[str, bool]]:
        tables = {f"mirror:{n}": (self._mirror_path(n), True) for n in self.config.tables}
        tables.update({t: (p, False) for t, (p, _) in self._outputs_by_target().items()})
        return tables

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Refuse to run twice: a second job with this checkpoint fails at once."""
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = open(self.checkpoint / "_lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise CommitConflictError(
                f"job {self.config.name!r} is already running on checkpoint {self.checkpoint}"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"pid": os.getpid(), "job": self.config.name}))
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    # -- snapshot --------------------------------------------------------------------------
    def _bootstrap_snapshot(self, ts: int) -> None:
        """Load the snapshot into the mirrors and commit every view at its ts (app version 0)."""
        assert self.state is not None
        if self.state.get("bootstrapped") == "1":
            return
        assert self.config.snapshot is not None
        schemas = {n: t.schema for n, t in self.config.tables.items()}
        frames = snapshot_tables(self.spark, self.config.snapshot, schemas)
        mirrors = {}
        for name, table in self.config.tables.items():
            df = frames[name]
            if KEY not in df.columns:
                df = df.selectExpr(
                    f"CAST(NULL AS STRING) AS {KEY}", *[f"`{c}`" for c in table.schema.names]
                )
            path = self._mirror_path(name)
            self._commit(f"mirror:{name}", path, df, mirror_schema(table), batch=-1, watermark=ts)
            mirrors[name] = delta.read_spark(self.spark, path)
        self._publish(mirrors, batch=-1, watermark=ts)
        with self.state.transaction():
            self.state.put("bootstrapped", "1")
            self.state.put("committed_watermark", str(ts))

    # -- streaming -------------------------------------------------------------------------
    def _stream(self, *, once: bool) -> None:
        tables = {n: t.schema.to_ddl() for n, t in self.config.tables.items()}
        reader = (
            self.spark.readStream.format(SOURCE_NAME)
            .option("path", self.config.changelog)
            .option("tables", json.dumps(tables))
            .option("maxSegmentsPerTrigger", str(self.config.max_segments_per_batch))
            .load()
        )
        writer = reader.writeStream.foreachBatch(self._on_batch).option(
            "checkpointLocation", str(self.checkpoint / "spark")
        )
        if once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(
                processingTime=f"{int(self.config.trigger_interval * 1000)} milliseconds"
            )
        query = writer.queryName(f"deltamv-{self.config.name}").start()
        self._query = query
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM: stop. The JVM may be shutting down as well (it got the
            # signal too); a batch cut short is replayed on the next start.
            with contextlib.suppress(PySparkException, Py4JError):
                query.stop()
            log.info("stopped on request after %d batches", self.batches)
            return
        except PySparkException as exc:
            raise self._explain(exc) from None
        if query.exception() is not None:
            raise self._explain(query.exception())  # type: ignore[arg-type]

    def _explain(self, exc: BaseException) -> BaseException:
        """The one-line deltamv error behind a failed streaming query."""
        if self._error is not None:
            return self._error
        bad = bad_record_from_exception(exc)
        if bad is not None:
            return bad
        storage = storage_error_from_exception(exc)
        if storage is not None:
            return storage
        return DeltaMVError(f"the streaming query failed: {str(exc).strip().splitlines()[0]}")

    def _on_batch(self, df: DataFrame, batch_id: int) -> None:
        try:
            self.process_batch(df, batch_id)
        except BaseException as exc:
            bad = bad_record_from_exception(exc) if not isinstance(exc, DeltaMVError) else None
            storage = storage_error_from_exception(exc) if bad is None else None
            self._error = bad or storage or exc
            raise

    def process_batch(self, df: DataFrame, batch_id: int) -> BatchReport:
        """Ingest and publish one micro-batch; safe to call again for the same batch."""
        state = self.state
        assert state is not None
        started = time.monotonic()
        progress = state.progress()
        if batch_id < progress.batch:
            raise StateError(
                f"Spark replays batch {batch_id} but the job state is at batch {progress.batch}: "
                f"the Spark checkpoint in {self.checkpoint / 'spark'} was reset; restore it or start "
                "with a new checkpoint and new view paths"
            )
        events = 0
        if batch_id <= progress.applied_batch:
            return BatchReport(batch_id, 0, 0, progress.watermark, False, 0)  # done before a crash
        if batch_id > progress.batch:
            staged = self._stage_events(df, batch_id)
            faults.point("after-stage")
            assert self.ledger is not None
            self.ledger.record(batch_id, _segments_read(staged))
            result = ingest(state, batch_id, _read_events(staged))
            faults.point("after-ingest")
            events = result.events
            shutil.rmtree(staged, ignore_errors=True)
        progress = state.progress()
        watermark = progress.watermark
        floor = (
            progress.committed_watermark
            if progress.committed_watermark is not None
            else state.start_ts
        )
        released = state.released_count(batch_id)
        committed = False
        if watermark > floor:
            self._apply(batch_id, watermark)
            committed = True
        duration = int((time.monotonic() - started) * 1000)
        faults.point("before-finish")
        state.finish_batch(batch_id, watermark if committed else None, duration)
        faults.point("after-finish")
        if self.ledger is not None:
            self.ledger.verify_some()
        self.maintenance.after_batch()
        report = BatchReport(batch_id, events, released, watermark, committed, duration)
        self.reports.append(report)
        self.batches += 1
        log.info(
            "batch %d: events %d, rows released %d, watermark %d, lag %d ms, %d ms%s",
            batch_id, events, released, watermark, tso.lag_ms(watermark), duration,
            "" if committed else " (watermark unchanged, nothing committed)",
        )  # fmt: skip
        return report

    def _stage_events(self, df: DataFrame, batch_id: int) -> Path:
        """Executors write the batch's parsed events as Parquet; one file per region range."""
        staged = self.checkpoint / "staging" / f"events-{batch_id}"
        if staged.exists():
            shutil.rmtree(staged)
        df.write.parquet(str(staged))
        return staged

    def _apply(self, batch_id: int, watermark: int) -> None:
        assert self.state is not None
        changes = stage_changes(
            self.state, self.config, batch_id, self.checkpoint / "staging" / f"released-{batch_id}"
        )
        mirrors = {}
        for name, table in self.config.tables.items():
            path = self._mirror_path(name)
            if name in changes:
                previous = self._read_mirror(name)
                new = updated_mirror(self.spark, table, previous, changes[name])
                self._commit(
                    f"mirror:{name}",
                    path,
                    new,
                    mirror_schema(table),
                    batch=batch_id,
                    watermark=watermark,
                )
            mirrors[name] = self._read_mirror(name)
        self._publish(mirrors, batch=batch_id, watermark=watermark)
        shutil.rmtree(self.checkpoint / "staging" / f"released-{batch_id}", ignore_errors=True)

    def _publish(self, mirrors: dict[str, DataFrame], *, batch: int, watermark: int) -> None:
        register_tables(self.spark, self.config, mirrors)
        for target, (path, df) in outputs(self.spark, self.config).items():
            self._commit(target, path, df, arrow_schema(df), batch=batch, watermark=watermark)

    def _read_mirror(self, name: str) -> DataFrame:
        path = self._mirror_path(name)
        if delta.table_version(path) is None:
            schema = delta.arrow_to_spark(mirror_schema(self.config.tables[name]))
            return self.spark.createDataFrame([], schema)
        return delta.read_spark(self.spark, path)

    def _mirror_path(self, name: str) -> str:
        return str(self.checkpoint / "mirrors" / name)

    def _write(
        self, target: str, df: DataFrame, path: str, schema: Any, *, prefix: str
    ) -> list[delta.DataFile]:
        """Write an output's data files: small view results from the driver.

        Views are mostly small (aggregates); collecting up to ``_DRIVER_ROWS`` rows as
        Arrow and writing them here saves a Spark job with Python workers per view and
        batch, the largest fixed cost of a small batch. Larger results, mirrors and table
        copies are written by the executors.
        """
        if target.startswith("view:"):
            head = df.limit(_DRIVER_ROWS + 1).toArrow()
            if head.num_rows <= _DRIVER_ROWS:
                return delta.write_arrow(head, path, schema=schema, prefix=prefix)
        return delta.write_dataframe(df, path, schema=schema, prefix=prefix)

    def _commit(
        self, target: str, path: str, df: DataFrame, schema: object, *, batch: int, watermark: int
    ) -> None:
        assert self.state is not None
        version = batch + 1  # app transaction version; 0 is the snapshot
        done = delta.committed_batch(path, self.app_id)
        if done is not None and done >= version:  # committed before a crash: keep it
            current = delta.table_version(path)
            assert current is not None
            recorded = self.state.committed_version(target)
            if recorded is not None and current not in (recorded, recorded + 1):
                raise CommitConflictError(
                    f"table {path} is at version {current} but job {self.config.name!r} last"
                    f" committed version {recorded}: another writer committed to it"
                )
            self.state.record_commit(target, current, batch)
            return
        files = self._write(target, df, path, schema, prefix=f"b{version:08d}")
        faults.point("before-commit")
        result = delta.commit(
            path,
            schema=schema,
            add=files,
            replace=True,
            app_id=self.app_id,
            batch_id=version,
            metadata={
                WATERMARK_KEY: str(watermark),
                JOB_KEY: self.config.name,
                CHECKPOINT_KEY: self._checkpoint_id,
            },
            expected_version=self.state.committed_version(target),
        )
        if result.skipped:
            for f in files:  # written again by the replay; the committed version has its own
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(path, f.path))
        faults.point("after-commit")
        self.state.record_commit(target, result.version, batch)


_STORAGE_FAULT = re.compile(
    r"No space left on device|Input/output error|Disk quota exceeded|Read-only file system"
    r"|database or disk is full|disk I/O error"
)


def storage_error_from_exception(exc: BaseException) -> StorageError | None:
    """A one-line StorageError for a disk-full or I/O failure anywhere in ``exc``'s chain
    (Spark forwards executor failures as text), or None when ``exc`` is no storage fault."""
    if isinstance(exc, DeltaMVError):
        return exc if isinstance(exc, StorageError) else None
    for e in exception_chain(exc):
        if isinstance(e, StorageError):
            return e
        if isinstance(e, OSError) and e.strerror:
            where = f" ({e.filename})" if e.filename else ""
            return StorageError(f"storage failed{where}: {e.strerror}")
        for line in str(e).splitlines():
            match = _STORAGE_FAULT.search(line)
            if match:
                text = " ".join(line.split())
                return StorageError(f"storage failed: {text[:300]}")
    return None


def _segments_read(staged: Path) -> set[tuple[str, int, int]]:
    """The ``(file, region, seq)`` of every segment the staged events came from."""
    found: set[tuple[str, int, int]] = set()
    for f in sorted(staged.glob("*.parquet")):
        table = (
            pq.read_table(f, columns=["file", "region", "seq"])
            .group_by(["file", "region", "seq"])
            .aggregate([])
        )
        found.update(
            zip(*(table.column(c).to_pylist() for c in ("file", "region", "seq")), strict=True)
        )
    return found


def _stop_quietly(query: StreamingQuery) -> None:
    with contextlib.suppress(PySparkException, Py4JError):  # already stopping: fine
        query.stop()


def _read_events(staged: Path) -> Iterator[object]:
    files = sorted(p for p in staged.glob("*.parquet"))
    for f in files:
        yield from pq.ParquetFile(f).iter_batches(batch_size=65_536)


def run(config: JobConfig, *, once: bool, spark: SparkSession | None = None) -> list[BatchReport]:
    """Run a job (``deltamv run``). Builds the Spark session from the config if not given."""
    from deltamv.session import build_spark

    session = spark or build_spark(config)
    return ViewJob(config, session).run(once=once)
