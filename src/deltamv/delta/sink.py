"""Table sinks: each batch's change to one output table becomes exactly one Delta commit.

A :class:`TableSink` receives, per batch, a :class:`Delta` (a Z-set of changed rows),
a :class:`Replace` (the whole new contents) or :class:`NoChange`, and commits it as one
Delta version that carries the job's app transaction and commit metadata. A Delta
change rewrites only the files that hold the rows it changes (the table's key-range
layout, :mod:`deltamv.delta.layout`): a batch costs what it changes, not what the table
holds.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

import pyarrow as pa
from deltalake import PostCommitHookProperties
from deltalake import Schema as DeltaSchema
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from deltamv.delta._table import translate_errors
from deltamv.delta._zset import WEIGHT, consolidate
from deltamv.delta.commit import BATCH_KEY, JOB_KEY, CommitResult
from deltamv.delta.files import DataFile, write_arrow
from deltamv.delta.layout import DEFAULT_TARGET_FILE_ROWS, KeyRangeLayout, Rewrite
from deltamv.delta.table import DeltaTableHandle, TableFile
from deltamv.errors import CommitConflictError, DeltaMVError

__all__ = [
    "USER_METADATA_KEY",
    "WEIGHT",
    "Change",
    "Delta",
    "NoChange",
    "Replace",
    "TableSink",
]

USER_METADATA_KEY = "userMetadata"
_DELTAMV_PREFIX = "deltamv."
#: Rewrites of one commit made at once (each holds up to a few files' rows in memory).
REWRITE_THREADS = 2


@dataclass(frozen=True)
class Replace:
    """The table's whole new contents (rows in the table's schema, columns by name).

    A ``pa.Table`` is sorted in memory; batches (any iterable, e.g. a RecordBatchReader)
    are sorted with bounded memory, spilling to a temporary folder.
    """

    data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]


@dataclass(frozen=True, eq=False)
class Delta:
    """A Z-set: rows in the table's schema plus the int64 weight column ``__w``.

    Weight +n inserts n copies of the row, -n removes n copies. Equal rows (NULL equal to
    NULL, NaN to NaN, -0.0 to 0.0) are summed first; rows that cancel change nothing.
    """

    rows: pa.Table


@dataclass(frozen=True)
class NoChange:
    """Nothing changed: the table still gets a version (at the batch's new watermark)."""


Change = Replace | Delta | NoChange


class TableSink:
    """Commits one output table's changes, one Delta version per batch.

    ``layout`` names the columns the table's files are sorted by; the first one ranges
    the files (:class:`~deltamv.delta.layout.KeyRangeLayout`). ``metadata`` goes into
    every commit's info (say ``deltamv.job``); ``app_id`` is the app transaction id.
    ``sort_memory_limit`` bounds DuckDB's sort of a Replace given as batches and of large
    rewrites (beyond it the sort spills to a temporary folder). A sink holds one :class:`~deltamv.delta.table.DeltaTableHandle` (pass ``handle`` to
    share one) and is not thread-safe. Only one sink should write a table at a time;
    commits never retry over another writer.
    """

    def __init__(
        self,
        path: str,
        schema: pa.Schema,
        *,
        layout: Sequence[str],
        app_id: str,
        metadata: Mapping[str, str],
        target_file_rows: int = DEFAULT_TARGET_FILE_ROWS,
        sort_memory_limit: str = "1GB",
        handle: DeltaTableHandle | None = None,
    ) -> None:
        if WEIGHT in schema.names:
            raise DeltaMVError(f"a table's schema cannot hold the weight column {WEIGHT!r}")
        self._path = path
        self._schema = schema
        self._app_id = app_id
        self._metadata = dict(metadata)
        self._layout = KeyRangeLayout(
            schema,
            layout,
            target_file_rows=target_file_rows,
            sort_memory_limit=sort_memory_limit,
        )
        self._handle = handle if handle is not None else DeltaTableHandle(path)

    @property
    def handle(self) -> DeltaTableHandle:
        """The handle the sink reads the table through (refreshed after each commit)."""
        return self._handle

    @property
    def layout(self) -> KeyRangeLayout:
        return self._layout

    def commit(
        self,
        app_version: int,
        change: Change,
        *,
        metadata: Mapping[str, str],
        expected_version: int | None,
        again: bool = False,
    ) -> CommitResult:
        """Commit ``change`` as one new version of the table; atomic and idempotent.

        - **Atomic**: new files are written into the table folder under fresh names, then
          one Delta commit removes the files it replaces and adds the new ones, with the
          app transaction ``(app_id, app_version)`` and the commit metadata. Readers see
          the whole change or none of it.
        - **Idempotent**: if the table's app transaction for ``app_id`` is already
          ``>= app_version``, nothing is committed, files written by this call are deleted,
          and the result is ``skipped`` with the current version.
        - ``again``: a commit for an ``app_version`` the table may have already (an
          output rewritten for the batch the job stands at): made unless the table has
          moved past ``expected_version`` (then it landed before: skipped).
        - ``expected_version`` is the version this job committed last (None before its
          first commit). A table elsewhere, missing, or moved by another writer during
          the call: CommitConflictError; never retried.
        - No table yet: this commit creates it (version 0) with the sink's schema. An
          existing table with other columns: CommitConflictError naming both.
        - ``Delta``: rewrites exactly the files whose key ranges the change touches.
          A removed row the table does not hold: StateError, nothing committed. A change
          that cancels out commits no data actions. ``Replace``: removes every current
          file, adds the new contents. ``NoChange``: a commit with no data actions.
        - Commit info: ``deltamv.batch`` (= ``app_version``), the sink's and the call's
          ``metadata``, and ``userMetadata``, the compact JSON of its ``deltamv.*`` keys.
        - I/O failures: StorageError. The handle is refreshed after the commit.
        """
        if not isinstance(change, Replace | Delta | NoChange):
            raise TypeError(f"a change is Replace, Delta or NoChange, not {type(change)}")
        if app_version < 0:
            raise ValueError(f"app_version must be >= 0, not {app_version}")
        info = self._commit_info(app_version, metadata)
        job = info.get(JOB_KEY, self._app_id)
        handle = self._handle
        handle.refresh()
        current = handle.version()
        if current is not None:
            done = handle.transaction_version(self._app_id)
            if (
                done is not None
                and done >= app_version
                and not (again and current == expected_version)
            ):
                return CommitResult(current, skipped=True)
            if expected_version is not None and current != expected_version:
                raise CommitConflictError(
                    f"table {self._path} is at version {current} but job {job} last"
                    f" committed version {expected_version}: another writer committed to it"
                )
            handle.check_plain()
            handle.check_schema(self._schema)
        elif expected_version is not None:
            raise CommitConflictError(
                f"table {self._path} does not exist but job {job} last committed version"
                f" {expected_version}: another writer deleted it"
            )

        properties = CommitProperties(
            custom_metadata=info,
            app_transactions=[Transaction(self._app_id, app_version)],
            max_commit_retries=0,
        )
        written: list[DataFile] = []
        try:
            removed = self._write(change, app_version, written)
            version = self._commit(current, written, removed, properties)
        except CommitConflictError as e:
            if self._landed_else_discard(app_version, written):  # a replay of ours, first
                return CommitResult(handle.version() or 0, skipped=True)
            latest = handle.version()
            if current is None:
                raise CommitConflictError(
                    f"table {self._path} was created by another writer while job {job}"
                    f" created it with batch {app_version}"
                ) from e
            raise CommitConflictError(
                f"table {self._path} moved from version {current} to {latest} while job"
                f" {job} committed batch {app_version}: another writer committed to it"
            ) from e
        except BaseException:
            self._landed_else_discard(app_version, written)
            raise
        handle.refresh()
        return CommitResult(
            version,
            skipped=False,
            files_added=len(written),
            files_removed=len(removed),
            rows_written=sum(f.num_records for f in written),
            bytes_written=sum(f.size for f in written),
        )

    def _write(self, change: Change, app_version: int, written: list[DataFile]) -> list[TableFile]:
        """Write the new files (appending each to ``written`` at once); return the
        current files they replace."""
        handle = self._handle
        prefix = f"b{app_version}"
        if isinstance(change, NoChange):
            return []
        if isinstance(change, Replace):
            for contents in self._layout.arrange(change.data):
                self._write_file(contents, prefix, written)
            return list(handle.files())
        zset = consolidate(change.rows, self._schema)
        if len(zset) == 0:
            return []
        ranges = self._layout.file_ranges(handle) if handle.exists() else []
        by_path = {f.path: f for f in handle.files()} if handle.exists() else {}
        jobs = self._layout.plan(ranges, zset, table=self._path)
        self._rewrite(jobs, prefix, written)
        return [by_path[f.path] for job in jobs for f in job.files]

    def _rewrite(self, jobs: Sequence[Rewrite], prefix: str, written: list[DataFile]) -> None:
        """Each job's files rewritten with its change, in key order. Jobs held in memory
        run :data:`REWRITE_THREADS` at a time (pyarrow reads, sorts and encodes Parquet
        outside the GIL: a change at random keys of a large table rewrites many files);
        a job that streams its files runs alone, its memory bounded. Every file written
        is in ``written`` even when a job fails; the first failing job in key order is
        raised (jobs after it not started yet are dropped)."""

        def run(job: Rewrite) -> None:
            for contents in self._layout.rewrite(self._handle, job):
                self._write_file(contents, prefix, written)

        self._handle.filesystem()  # opened once, before threads share it
        held: list[Rewrite] = []
        for job in jobs:
            if self._layout.streams(job):
                _on_threads(run, held)
                held = []
                run(job)
            else:
                held.append(job)
        _on_threads(run, held)

    def _write_file(self, contents: pa.Table, prefix: str, written: list[DataFile]) -> None:
        files = write_arrow(
            contents,
            self._handle.uri,
            schema=self._schema,
            prefix=prefix,
            target_rows_per_file=max(contents.num_rows, 1),
        )
        written.extend(files)
        (data_file,) = files
        self._layout.remember(self._handle, data_file.path, contents)

    def _commit(
        self,
        current: int | None,
        written: list[DataFile],
        removed: list[TableFile],
        properties: CommitProperties,
    ) -> int:
        """One Delta commit of the files written and removed; the version it made."""
        now = _now_ms()
        adds = [AddAction(f.path, f.size, {}, now, True, f.stats) for f in written]
        if current is None:
            try:
                with translate_errors(self._path):
                    create_table_with_add_actions(
                        self._handle.uri,
                        DeltaSchema.from_arrow(self._schema),
                        adds,
                        mode="error",
                        commit_properties=properties,
                        post_commithook_properties=_NO_HOOKS,
                    )
            except DeltaMVError as e:
                # delta-rs reports "a table already exists" as a generic error: if a table
                # is there now, another writer created it between our look and our commit.
                self._handle.reload()
                if self._handle.exists():
                    raise CommitConflictError(f"table {self._path} was created meanwhile") from e
                raise
            return 0
        removes = [RemoveAction(f.path, True, now, f.size, {}) for f in removed]
        with translate_errors(self._path):
            self._handle.delta_table().create_write_transaction(
                [*removes, *adds],
                mode="append",
                schema=self._schema,
                commit_properties=properties,
                post_commithook_properties=_NO_HOOKS,
            )
        # With no retries a successful commit is the version after the one read.
        return current + 1

    def _landed_else_discard(self, app_version: int, written: list[DataFile]) -> bool:
        """After a failed commit: whether the table holds batch ``app_version`` now (this
        attempt's commit or a replay's). An error can come after the commit landed, so
        the files this attempt wrote are deleted only when the table, read again, does
        not hold them; when it cannot be read, they are left as orphans for VACUUM."""
        try:
            self._handle.reload()
            done = self._handle.transaction_version(self._app_id)
            held = {f.path for f in self._handle.files()} if self._handle.exists() else set()
        except Exception:
            return False
        if not held & {f.path for f in written}:
            self._discard(written)
        return done is not None and done >= app_version

    def _discard(self, written: list[DataFile]) -> None:
        """Delete files this attempt wrote; a leftover is an orphan VACUUM removes."""
        fs, root = self._handle.filesystem()
        for f in written:
            with contextlib.suppress(OSError):
                fs.delete_file(f"{root}/{f.path}")

    def _commit_info(self, app_version: int, metadata: Mapping[str, str]) -> dict[str, str]:
        info = {**self._metadata, **metadata, BATCH_KEY: str(app_version)}
        for key, value in info.items():
            if not isinstance(value, str):
                raise TypeError(f"commit metadata {key!r} must be a string, not {value!r}")
        ours = {k: info[k] for k in sorted(info) if k.startswith(_DELTAMV_PREFIX)}
        # delta-rs puts custom keys at the top level of commitInfo: this one lands where
        # Delta keeps userMetadata, the only commit field delta-spark's history shows.
        info[USER_METADATA_KEY] = json.dumps(ours, separators=(",", ":"), ensure_ascii=False)
        return info


# delta-rs writes a log checkpoint every 100 versions after a commit, in the commit's
# call: a failure there would come after the commit landed. The job checkpoints and
# cleans the log itself (housekeeping.py, `checkpoint_interval`).
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def _on_threads(run: Callable[[Rewrite], None], jobs: Sequence[Rewrite]) -> None:
    """``run`` of each of ``jobs`` on :data:`REWRITE_THREADS` threads; the first job's
    failure, in their order, raised once every started job has ended."""
    if len(jobs) < 2 or REWRITE_THREADS < 2:
        for job in jobs:
            run(job)
        return
    with ThreadPoolExecutor(REWRITE_THREADS, thread_name_prefix="deltamv-rewrite") as pool:
        futures = [pool.submit(run, job) for job in jobs]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            future.cancel()  # (those not started yet; the pool waits for the rest)
    for future in futures:
        if not future.cancelled():
            future.result()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
