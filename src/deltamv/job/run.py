"""A job's run: checks before anything is read, the start, and the streaming query.

:class:`ViewJob` holds the checkpoint's lock for the whole run, opens the job's state,
plans and classifies the views, checks that every output table is the job's own and
untouched, publishes the start (a snapshot's first versions), and runs a Spark
Structured Streaming query whose batches :class:`~deltamv.job.batch.BatchRunner`
processes. Where the upstream's stream does not read the state, the query starts while
the job opens, and its first batch waits for the job. Errors leave as one-line deltamv
errors.
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
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from deltamv import tso
from deltamv.compute import Compute
from deltamv.config import JobConfig
from deltamv.delta.table import DeltaTableHandle
from deltamv.errors import CommitConflictError, ConfigError, DeltaMVError, StorageError, unwire
from deltamv.job.batch import BatchReport, BatchRunner
from deltamv.job.changelog import ChangelogUpstream
from deltamv.job.ownership import check_declarations, check_owners, check_tables
from deltamv.job.targets import targets_of
from deltamv.job.upstream import Upstream
from deltamv.job.views import ViewSet
from deltamv.maintenance import Maintenance
from deltamv.state.keyed import Mirror
from deltamv.state.store import STATE_FILE, StateStore
from deltamv.views.plan import Analysed
from deltamv.views.sql import check_sql

__all__ = ["ViewJob"]

log = logging.getLogger("deltamv.job")

_RECENT_REPORTS = 1000  # batch reports a continuous run keeps


class ViewJob:
    """One job: its config and its Spark session. :meth:`run` runs it."""

    def __init__(self, config: JobConfig, spark: SparkSession) -> None:
        self.config = config
        self.spark = spark
        self.checkpoint = Path(config.checkpoint)
        self.app_id = f"deltamv:{config.name}"
        self.reports: deque[BatchReport] = deque()
        self.batches = 0  # batches processed by this run
        self.modes: dict[str, str] = {}  # view -> "incremental" or "recompute: <reason>"
        self._error: BaseException | None = None
        self._query: StreamingQuery | None = None
        self._stop_requested = False  # a stop asked for before the query started
        self._unset_checkpoint_files = False  # the run set the session's manager: unset it

    # -- public ----------------------------------------------------------------------------
    def run(self, *, once: bool) -> list[BatchReport]:
        """Run until the log is drained (``once``) or until interrupted.

        Returns the reports of the batches this run processed; a continuous run keeps
        only the last ``_RECENT_REPORTS`` (it may run for months).
        Raises ConfigError before any change is read (a view that cannot be maintained
        as its config demands: after Spark may have planned the first batch, which the
        next run replays), BadRecordError for bad input (nothing of that batch is
        committed), CommitConflictError when another writer touched a view, StorageError
        for I/O failures.
        """
        try:
            return self._run(once=once)
        except ConfigError as exc:  # (a folder the config names, found missing by a reader)
            if exc.source is not None:
                raise
            raise ConfigError(exc.key, exc.reason, source=self.config.origin) from None

    def _run(self, *, once: bool) -> list[BatchReport]:
        self.reports = deque(maxlen=None if once else _RECENT_REPORTS)
        self.batches = 0
        upstream = self._upstream()
        with check_sql(self.spark, self.config) as analysed:  # (planned as the job opens)
            check_owners(self.config)
            with _lock(self.checkpoint, self.config.name):
                return self._locked(upstream, analysed, once=once)

    def _locked(self, upstream: Upstream, analysed: Analysed, *, once: bool) -> list[BatchReport]:
        """The run, in the checkpoint's lock."""
        # Scratch a run killed or ended at once left behind (mirrors' Parquet copies,
        # DuckDB's spill): nothing in it outlives a run.
        shutil.rmtree(self.checkpoint / "tmp", ignore_errors=True)
        store = StateStore(
            self.checkpoint / STATE_FILE, job=self.config.name, start_ts=upstream.start_ts()
        )
        compute = Compute(temp_dir=str(self.checkpoint / "tmp" / "compute"))
        opened = _Opened()
        query: StreamingQuery | None = None
        try:
            if self.config.upstream.kind != "postgres":  # (it checks its catalog's)
                check_declarations(self.config, store)  # before Spark starts the query
            if not upstream.stream_reads_state:
                # Spark starts the query (its Python source's worker takes about half
                # a second) while the job opens; a batch waits for the job to be open.
                query = self._start(upstream, store, opened, once=once)
            fresh = not store.progress().bootstrapped
            if not fresh:  # (a first start loads the snapshot first: memory of its own)
                upstream.prefetch(store, once=once)
            runner = self._open(store, compute, upstream, analysed)
            runner.bootstrap(upstream.snapshot(store) if fresh else None)
            runner.refresh()
            if fresh:
                upstream.prefetch(store, once=once)
            if self._stop_requested:  # while the job opened: no batch runs
                log.info("stopped on request before the first batch")
                return list(self.reports)
            opened.set(runner)
            if query is None:
                query = self._start(upstream, store, opened, once=once)
            self._await(query, opened)
            upstream.after_run(store)
        finally:
            # A batch still waiting (the job failed to open or stopped) fails; one
            # still running (a stop ends the query without waiting for it) ends first.
            opened.clear()
            upstream.close()
            if query is not None:
                self._query = None
                _stop_quietly(query)  # stopped already, unless the job failed to open
            if self._unset_checkpoint_files:
                self.spark.conf.unset(_CHECKPOINT_FILES)
                self._unset_checkpoint_files = False
            compute.close()
            store.close()
        return list(self.reports)

    def _upstream(self) -> Upstream:
        """The job's upstream; a PostgreSQL one fills in the tables from its catalog."""
        if self.config.upstream.kind == "postgres":
            from deltamv.job.postgres import PostgresUpstream

            upstream = PostgresUpstream(self.config, self.checkpoint / "spark")
            self.config = upstream.config
            return upstream
        return ChangelogUpstream(self.config, self.checkpoint / "spark")

    def request_stop(self) -> None:
        """Ask a running job to stop (from a signal handler): the query stops from
        another thread and :meth:`run` returns. A batch cut short is replayed on restart."""
        self._stop_requested = True
        query = self._query
        if query is None:
            log.info("stop requested; stopping once the streaming query has started")
        else:
            log.info("stop requested after %d batches; stopping the streaming query", self.batches)
            threading.Thread(target=_stop_quietly, args=(query,), daemon=True).start()

    # -- the start -------------------------------------------------------------------------
    def _open(
        self, store: StateStore, compute: Compute, upstream: Any, analysed: Analysed
    ) -> BatchRunner:
        config = self.config
        # The upstream's refusals (a segment changed since it was read, a PostgreSQL
        # table's columns changed) come before the views are planned and their state
        # synced: a refused start leaves the state as it found it.
        upstream.open(store)
        mirrors = {
            name: Mirror(store.db, name, t.schema.to_arrow(), t.primary_key)
            for name, t in config.tables.items()
        }
        if config.snapshot is None:  # only a change-log snapshot's rows come without keys
            for mirror in mirrors.values():
                mirror.all_keyed()
        views = ViewSet(self.spark, config, store, compute, mirrors, analysed)
        views.log_modes()
        self.modes = {n: v.describe for n, v in views.views.items()}
        targets = targets_of(
            config,
            {n: (v.schema, v.layout) for n, v in views.views.items()},
            sorted(views.recomputed_tables()),
        )
        handles = {t.id: DeltaTableHandle(t.path) for t in targets.values()}
        checkpoint_id = store.checkpoint_id(uuid.uuid4().hex)
        check_tables(config, targets, handles, store, checkpoint_id)
        with store.transaction():
            views.sync_state()
        sinks = {  # one handle per table for the whole run
            tid: target.sink(
                handles[tid], app_id=self.app_id, job=config.name, checkpoint_id=checkpoint_id
            )
            for tid, target in targets.items()
        }
        self.maintenance = Maintenance(
            config.maintenance, {tid: (handles[tid], t.internal) for tid, t in targets.items()}
        )
        scratch = self.checkpoint / "tmp"
        return BatchRunner(
            config=config, spark=self.spark, store=store, compute=compute, upstream=upstream,
            views=views, mirrors=mirrors, targets=targets, sinks=sinks, scratch=scratch,
        )  # fmt: skip

    # -- streaming -------------------------------------------------------------------------
    def _start(
        self, upstream: Upstream, store: StateStore, opened: _Opened, *, once: bool
    ) -> StreamingQuery:
        """Start the streaming query whose batches the job's runner processes."""
        self._unset_checkpoint_files = _local_checkpoint_files(self.spark)
        _clear_interrupted_writes(self.checkpoint / "spark")
        try:
            reader = upstream.stream(self.spark, store)
        except PySparkException as exc:
            missing = self._workers_lack_deltamv(exc)
            if missing is None:
                raise
            raise missing from None

        def on_batch(df: DataFrame, batch_id: int) -> None:
            with opened.running() as runner:
                try:
                    report = runner.run(batch_id)
                except BaseException as exc:
                    if self._stop_requested:
                        # The stop interrupted the query's thread, and the batch's next
                        # call into the JVM failed. Spark tells a stop from a failure by
                        # a regex over the error's text, which overflows the JVM's stack
                        # on a long one (a Java stack trace: ~1,000 lines of
                        # StackOverflowError on stderr): fail with a short text. The
                        # batch is replayed on the next start.
                        raise _CutShort(f"batch {batch_id} cut short by a stop") from None
                    self._error = unwire(exc) or _storage_error(exc) or exc
                    raise
                self.reports.append(report)
                self.batches += 1
                self.maintenance.after_batch()
                _log_report(report)

        writer = reader.writeStream.foreachBatch(on_batch).option(
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
        if self._stop_requested:  # during the start (signal handlers run in this thread)
            self.request_stop()
        return query

    def _await(self, query: StreamingQuery, opened: _Opened) -> None:
        try:
            # In short waits: Python runs a signal handler only in the main thread, and
            # only between bytecodes; a SIGTERM delivered to another thread would wait
            # for the end of a single long call into the JVM (for ever while idle).
            while not query.awaitTermination(1):
                pass
        except KeyboardInterrupt:
            # Ctrl-C without the job's handler (a library caller): stop. A batch cut
            # short is replayed on the next start.
            self._stop_requested = True  # first: a batch the stop cuts short says so
            _stop_quietly(query)
        except PySparkException as exc:
            if not self._stop_requested:
                raise self._explain(exc) from None
        else:
            failure = query.exception()
            if failure is not None and not self._stop_requested:
                raise self._explain(failure)
        if self._stop_requested:
            # The query ends without waiting for a batch running in Python: the job
            # waits for it (it commits, or fails on its next call into the JVM). Either
            # way Spark has not recorded it, and the next start replays it.
            opened.clear()
            log.info("stopped on request after %d batches", self.batches)

    def _explain(self, exc: BaseException) -> BaseException:
        """The one-line deltamv error behind a failed streaming query."""
        log.debug("the streaming query failed: %s", exc)
        if self._error is not None:
            return self._error
        found = unwire(exc) or _storage_error(exc) or self._workers_lack_deltamv(exc)
        if found is not None:
            return found
        text = str(exc).strip()
        io = _JAVA_IO.search(text)
        if io is not None:  # most often Spark's own files: its offsets and commits
            return StorageError(
                f"Spark failed on I/O: {io.group(1).strip()} (Spark writes its offsets and"
                f" commits under {self.config.checkpoint})"
            )
        first = text.splitlines()[0]
        raised = _python_error(text)
        if raised is not None:  # a Python worker's or the source planner's own exception
            first = first.removesuffix(_TRACEBACK).rstrip() + f" {raised}"
        return DeltaMVError(f"the streaming query failed: {first}")

    def _workers_lack_deltamv(self, exc: BaseException) -> DeltaMVError | None:
        """The error for Spark's Python workers failing to import deltamv (the job's
        source runs in them): the interpreter they run is not one deltamv is installed
        in."""
        missing = _NO_DELTAMV.search(str(exc))
        if missing is None:
            return None
        python = self.spark.sparkContext.pythonExec
        return DeltaMVError(
            f"Spark's Python workers cannot import deltamv ({missing.group(0)}): they run"
            f" {python}; set PYSPARK_PYTHON to a Python that has deltamv installed"
        )


class _Opened:
    """The job's batch runner, handed from the thread that opens the job to Spark's batches.

    A batch that arrives while the job still opens waits for it; one that arrives after
    the run ended, or when the job failed to open, fails. Spark's callback server keeps
    the batch function after the query ends: it reaches the run only through this. A
    stopped query does not wait for a batch running in Python: :meth:`clear` does.
    """

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._runner: BatchRunner | None = None
        self._changed = threading.Condition()
        self._running = 0

    def set(self, runner: BatchRunner) -> None:
        self._runner = runner
        self._ready.set()

    def clear(self) -> None:
        """No batch starts from now on; one running ends first."""
        with self._changed:
            self._runner = None
            self._ready.set()
            while self._running:
                self._changed.wait(1)  # (in short waits: signal handlers run meanwhile)

    @contextlib.contextmanager
    def running(self) -> Iterator[BatchRunner]:
        """The runner, for one batch (waiting for the job to open)."""
        self._ready.wait()
        with self._changed:
            runner = self._runner
            if runner is None:
                raise DeltaMVError("a batch arrived after the job's run ended")
            self._running += 1
        try:
            yield runner
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()


_CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"
_FILE_SYSTEM_MANAGER = (  # Spark 4.2's package, then 4.0's
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


def _local_checkpoint_files(spark: SparkSession) -> bool:
    """Have Spark write its offset and commit logs through Hadoop's ``FileSystem`` API.

    The job's Spark checkpoint is a local directory (next to the state file, which must
    be local). Spark's default manager goes through Hadoop's ``FileContext``, which on
    the local file system starts a ``readlink`` process for each rename: about 25 ms of
    each log write, two writes a trigger. Through ``FileSystem`` a write takes about 7 ms
    and is as atomic here (a temporary file renamed; the checkpoint's lock keeps other
    writers out). A manager the user chose is kept. The setting is the session's: True
    when it was set here, for the run to unset at its end (other streaming queries of
    the session may checkpoint elsewhere, where a rename may not be atomic).
    """
    if spark.conf.get(_CHECKPOINT_FILES, None):
        return False
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    for name in _FILE_SYSTEM_MANAGER:
        try:
            jvm.java.lang.Class.forName(name)
        except Py4JError:
            continue
        spark.conf.set(_CHECKPOINT_FILES, name)
        return True
    return False


def _clear_interrupted_writes(spark_checkpoint: Path) -> None:
    """Remove what a log write cut short left in Spark's checkpoint (the job holds its lock).

    Spark writes each offset and commit log entry to a hidden temporary file and renames
    it; a stop or a kill during the write leaves the temporary file. Spark's logs skip
    it, but a query starting at batch 0 refuses an offset log that holds any file, so
    the job could not start again.
    """
    for log_dir in ("offsets", "commits"):
        folder = spark_checkpoint / log_dir
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.name.startswith(".") and entry.name.endswith((".tmp", ".tmp.crc")):
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                log.info("removed %s, left by an interrupted write", entry)


_NO_DELTAMV = re.compile(r"No module named 'deltamv'")
_TRACEBACK = "Traceback (most recent call last):"
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+$")


def _python_error(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text`` ("KeyError: 'x'"):
    Spark's message for a failure in Python (the source's planning, a worker) holds the
    traceback whole, and its first line ends where the traceback starts."""
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    for line in text[at + len(_TRACEBACK) :].splitlines():
        if line.strip() and not line[0].isspace():  # frames are indented; the error is not
            return _SQLSTATE.sub("", line).strip()
    return None


_JAVA_IO = re.compile(r"java\.io\.IOException: (.*?)(?: SQLSTATE: \w+)?$", re.MULTILINE)


def _storage_error(exc: BaseException) -> StorageError | None:
    from deltamv.errors import exception_chain

    for e in exception_chain(exc):
        # (a connection refused or reset is py4j's to the JVM, which is gone: not storage)
        if isinstance(e, OSError) and e.strerror and not isinstance(e, ConnectionError):
            where = f" ({e.filename})" if e.filename else ""
            return StorageError(f"storage failed{where}: {e.strerror}")
    return None


def _log_report(report: BatchReport) -> None:
    if report.replay == "finished":
        log.info("batch %d: finished by an earlier run (Spark replays it); nothing to do",
                 report.batch)  # fmt: skip
        return
    what = (
        "resumed (an earlier run ingested it and stopped before it finished)"
        if report.replay
        else f"events {report.events}, rows released {report.released}"
    )
    if report.committed:
        log.info(
            "batch %d: %s, watermark %d, lag %d ms, %d ms",
            report.batch, what, report.watermark, tso.lag_ms(report.watermark),
            report.duration_ms,
        )  # fmt: skip
    else:
        log.info(
            "batch %d: %s, %d ms; no new watermark yet, nothing committed",
            report.batch, what, report.duration_ms,
        )  # fmt: skip


def refuse_if_running(checkpoint: Path, job: str) -> None:
    """Fail at once if a run holds the checkpoint's lock: a look before Spark starts (it
    takes seconds), creating nothing; the run itself then takes the lock for good."""
    try:
        fd = os.open(checkpoint / "_lock", os.O_RDONLY)
    except OSError:
        return  # no lock file yet (a first run), or none to read: the run's lock decides
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        raise _running(job, checkpoint) from None
    finally:
        os.close(fd)


def _running(job: str, checkpoint: Path) -> CommitConflictError:
    return CommitConflictError(f"job {job!r} is already running on checkpoint {checkpoint}")


@contextlib.contextmanager
def _lock(checkpoint: Path, job: str) -> Iterator[None]:
    """Refuse to run twice: a second job with this checkpoint fails at once."""
    try:
        checkpoint.mkdir(parents=True, exist_ok=True)
        fd = os.open(checkpoint / "_lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StorageError(
            f"storage failed ({checkpoint}): cannot take the checkpoint's lock: {e.strerror}"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _running(job, checkpoint) from None
    try:
        with contextlib.suppress(OSError):  # who holds it, for people; the lock is flock's
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "job": job}).encode(), 0)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class _CutShort(Exception):
    """A batch interrupted by a requested stop (its text is what Spark sees)."""


def _stop_quietly(query: StreamingQuery) -> None:
    # Already stopping, or its JVM gone: fine.
    with contextlib.suppress(PySparkException, Py4JError, ConnectionError):
        query.stop()
