"""The job's durable state in one SQLite file: the only place deltamv speaks SQL.

Everything that must survive a crash or can grow lives here, on disk: the matcher's
open transactions and buffered rows (as typed Arrow chunks), each source table's rows at
the applied watermark (the mirrors, keyed and indexed), each incrementally maintained
view's state, the changes each output table still has to commit, and the bookkeeping of
batches, commits and segments read. One SQLite transaction per batch makes a batch's
ingest and maintenance all or nothing: either every change of the batch is in the state
(and its outputs are staged in the outbox), or none is.

``StateStore`` opens the file for the job (one writer; a lock file keeps a second job
out); :func:`open_read_only` opens it for ``deltamv status`` and the demo, which read
while the job runs and never block it (SQLite WAL mode).

A commit writes the pages it changed to the write-ahead log and syncs it; copying them
into the database file (a checkpoint) happens on a thread of its own while the job goes
on (:class:`_Checkpointer`), so a batch does not write its pages twice before its
versions are published. A write waits for that copy only when the log has grown past
:data:`WAL_LIMIT` (back-to-back batches that leave no time to copy).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltamv.errors import StateError, StorageError
from deltamv.pipeline.frontier import RegionState
from deltamv.state.chunks import Buffer, DoneTxns, Outbox, PendingTxns, rename_chunk_columns
from deltamv.state.keyed import quote_name

__all__ = [
    "SCHEMA_VERSION",
    "STATE_FILE",
    "BatchRecord",
    "Progress",
    "ReadOnlyState",
    "SegmentRecord",
    "StateStore",
    "ViewRecord",
    "open_read_only",
]

#: The layout of the state file. A file of another version is refused with one line.
SCHEMA_VERSION = 2

STATE_FILE = "state.db"
#: The size of the write-ahead log past which a write first waits for the checkpoint.
WAL_LIMIT = 256 * 1024 * 1024
_WAL_KEPT = 64 * 1024 * 1024  # the log is cut back to this size when it starts over
_KEEP_BATCHES = 10_000  # batch records kept for status and reports

_DDL = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS regions (
    region INTEGER PRIMARY KEY, start_key TEXT, end_key TEXT, parents TEXT NOT NULL DEFAULT '[]',
    resolved INTEGER, retired INTEGER NOT NULL DEFAULT 0, resolved_since_ms INTEGER);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, tbl TEXT NOT NULL, lo INTEGER, hi INTEGER,
    rows INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_kind ON chunks (kind, lo);
CREATE TABLE IF NOT EXISTS pending (
    region INTEGER NOT NULL, start_ts INTEGER NOT NULL, chunk INTEGER NOT NULL,
    PRIMARY KEY (region, start_ts, chunk)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pending_by_chunk ON pending (chunk);
CREATE TABLE IF NOT EXISTS done (
    region INTEGER NOT NULL, start_ts INTEGER NOT NULL, commit_ts INTEGER,
    PRIMARY KEY (region, start_ts)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    batch INTEGER NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL,
    chunks TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (batch, target));
CREATE TABLE IF NOT EXISTS commits (
    target TEXT PRIMARY KEY, version INTEGER NOT NULL, batch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    batch INTEGER PRIMARY KEY, watermark INTEGER NOT NULL, events INTEGER NOT NULL,
    released INTEGER NOT NULL, started_ms INTEGER NOT NULL, duration_ms INTEGER,
    blocker TEXT, offsets TEXT, report TEXT);
CREATE TABLE IF NOT EXISTS segments (
    path TEXT PRIMARY KEY, region INTEGER NOT NULL, seq INTEGER NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, digest TEXT NOT NULL, batch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS views (
    name TEXT PRIMARY KEY, mode TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL, ready INTEGER NOT NULL DEFAULT 0);
"""


@dataclass(frozen=True)
class Progress:
    """Where the job stands."""

    batch: int  # the last ingested batch; -1 before the first
    watermark: int  # the global watermark after that batch
    applied_batch: int  # the last batch whose outputs are all committed
    committed_watermark: int | None  # watermark of the last committed view version
    bootstrapped: bool  # the snapshot (or the empty start) is loaded and published


@dataclass(frozen=True)
class BatchRecord:
    batch: int
    watermark: int
    events: int
    released: int
    started_ms: int
    duration_ms: int | None
    blocker: dict[str, Any] | None
    offsets: dict[str, Any] | None
    report: dict[str, Any] | None


@dataclass(frozen=True)
class SegmentRecord:
    """A change-log segment the job read: its fingerprint and the batch that read it."""

    path: str
    region: int
    seq: int
    size: int
    mtime_ns: int
    digest: str
    batch: int = -1


@dataclass(frozen=True)
class ViewRecord:
    name: str
    mode: str  # "incremental" or "recompute"
    reason: str  # why recompute ("" when incremental)
    fingerprint: str  # the plan the state was built for
    ready: bool  # its state is built (an incremental view), or it needs none


def _connect(uri: str, *, uri_mode: bool, read_only: bool) -> sqlite3.Connection:
    db = sqlite3.connect(uri, uri=uri_mode, isolation_level=None, check_same_thread=False,
                         timeout=30)  # fmt: skip
    if not read_only:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA temp_store=FILE")
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB of page cache, at most
        db.execute("PRAGMA wal_autocheckpoint=0")  # the _Checkpointer's work
        db.execute(f"PRAGMA journal_size_limit={_WAL_KEPT}")
    return db


class _Checkpointer:
    """Checkpoints the state file on a thread of its own after each commit.

    One thread at most, started by :meth:`request` and gone when no checkpoint is asked
    for, with its own connection: a PASSIVE checkpoint copies the pages committed so far
    while the job's connection reads and writes. A crash in the middle loses nothing (the
    log still holds the pages); a checkpoint that fails is made up by the next one.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._wanted = False
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        with self._lock:
            self._wanted = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="deltamv-state-checkpoint", daemon=True
                )
                self._thread.start()

    def wait(self) -> None:
        """Until no checkpoint runs or is asked for."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._wanted:
                    self._thread = None
                    return
                self._wanted = False
            with contextlib.suppress(sqlite3.Error):
                db = sqlite3.connect(self._path, isolation_level=None, timeout=0)
                try:
                    db.execute("PRAGMA synchronous=FULL")
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                finally:
                    db.close()


class _Reader:
    """Queries shared by the job's store and the read-only view of it."""

    db: sqlite3.Connection
    path: Path

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.db.execute("SELECT k, v FROM meta")}

    @property
    def job(self) -> str:
        return self._meta("job") or ""

    def read_up_to(self) -> dict[int, int]:
        """Per region, the highest segment seq the job has read."""
        rows = self.db.execute("SELECT region, MAX(seq) FROM segments GROUP BY region")
        return {int(region): int(seq) for region, seq in rows}

    @property
    def start_ts(self) -> int:
        return int(self._meta("start_ts") or 0)

    def progress(self) -> Progress:
        meta = self.meta()
        cw = meta.get("committed_watermark")
        return Progress(
            batch=int(meta.get("batch", -1)),
            watermark=int(meta.get("watermark", 0)),
            applied_batch=int(meta.get("applied_batch", -1)),
            committed_watermark=None if cw is None else int(cw),
            bootstrapped=meta.get("bootstrapped") == "1",
        )

    def regions(self) -> dict[int, RegionState]:
        rows = self.db.execute(
            "SELECT region, start_key, end_key, parents, resolved, retired FROM regions"
        ).fetchall()
        return {
            r[0]: RegionState(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4], bool(r[5]))
            for r in rows
        }

    def resolved_since_ms(self, region: int) -> int | None:
        row = self.db.execute(
            "SELECT resolved_since_ms FROM regions WHERE region = ?", (region,)
        ).fetchone()
        return None if row is None else row[0]

    def batch_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM batches").fetchone()[0])

    def last_batch(self) -> BatchRecord | None:
        row = self.db.execute(
            "SELECT batch, watermark, events, released, started_ms, duration_ms, blocker,"
            " offsets, report FROM batches ORDER BY batch DESC LIMIT 1"
        ).fetchone()
        return None if row is None else _batch_record(row)

    def batches(self, *, since: int = -1) -> list[BatchRecord]:
        rows = self.db.execute(
            "SELECT batch, watermark, events, released, started_ms, duration_ms, blocker,"
            " offsets, report FROM batches WHERE batch > ? ORDER BY batch",
            (since,),
        ).fetchall()
        return [_batch_record(r) for r in rows]

    def last_duration_ms(self) -> int | None:
        row = self.db.execute(
            "SELECT duration_ms FROM batches WHERE duration_ms IS NOT NULL"
            " ORDER BY batch DESC LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    def watermark_since_ms(self, watermark: int) -> int | None:
        """When the first recorded batch with this watermark started."""
        row = self.db.execute(
            "SELECT MIN(started_ms) FROM batches WHERE watermark = ?", (watermark,)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def views(self) -> dict[str, ViewRecord]:
        rows = self.db.execute("SELECT name, mode, reason, fingerprint, ready FROM views")
        return {r[0]: ViewRecord(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows}

    def committed_version(self, target: str) -> int | None:
        row = self.db.execute("SELECT version FROM commits WHERE target = ?", (target,)).fetchone()
        return None if row is None else int(row[0])

    def committed_batch(self, target: str) -> int | None:
        row = self.db.execute("SELECT batch FROM commits WHERE target = ?", (target,)).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        self.db.close()


def _batch_record(row: Sequence[Any]) -> BatchRecord:
    def doc(text: str | None) -> dict[str, Any] | None:
        return None if not text else dict(json.loads(text))

    return BatchRecord(row[0], row[1], row[2], row[3], row[4], row[5], doc(row[6]), doc(row[7]),
                       doc(row[8]))  # fmt: skip


class ReadOnlyState(_Reader):
    """The job's state opened read-only: never takes a write lock, never creates the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = _connect(f"{path.resolve().as_uri()}?mode=ro", uri_mode=True, read_only=True)
            version = self._meta("schema_version")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open job state {path} read-only: {exc}") from None
        _check_version(path, version)


def open_read_only(checkpoint: str | Path, *, job: str | None = None) -> ReadOnlyState | None:
    """The state of the job with this checkpoint, read-only; None if it has not run yet.
    ``job``: refuse the checkpoint of another job, as the job itself does."""
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        return None
    state = ReadOnlyState(path)
    stored = state.job
    if job is not None and stored and stored != job:
        state.close()
        raise _other_job(path, stored, job)
    return state


def _other_job(path: Path, stored: str, job: str) -> StateError:
    return StateError(f"checkpoint {path.parent} belongs to job {stored!r}, not {job!r}")


def _full(path: Path) -> str:
    """What SQLite calls a "disk I/O error" is often a full disk: say so when it is."""
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        return ""
    free = fs.f_bavail * fs.f_frsize
    return f" (the file system has {free // 1024} KiB free)" if free < _LOW_SPACE else ""


_LOW_SPACE = 1 << 20


def _check_version(path: Path, version: str | None) -> None:
    if version is not None and version != str(SCHEMA_VERSION):
        raise StateError(
            f"job state {path} has layout version {version}, this deltamv reads version"
            f" {SCHEMA_VERSION}: start the job with a new checkpoint and new output paths"
            " (or run the deltamv version that wrote it)"
        )


class StateStore(_Reader):
    """The SQLite-backed state of one job, opened for writing. Not thread-safe."""

    def __init__(self, path: Path, *, job: str, start_ts: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self.db = _connect(str(path), uri_mode=False, read_only=False)
            found = self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            version = self._meta("schema_version") if found else None
            if found and version is None:
                version = "1"  # the first layout wrote no version it checked
            _check_version(path, version)
            self.db.executescript(_DDL)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open job state {path}: {exc}{_full(path)}") from None
        self._checkpointer = _Checkpointer(path)
        self.pending = PendingTxns(self.db)
        self.done = DoneTxns(self.db)
        self.buffer = Buffer(self.db)
        self.outbox = Outbox(self.db)
        stored_job = self._meta("job")
        if stored_job is None:
            with self.transaction():
                self._put("job", job)
                self._put("schema_version", str(SCHEMA_VERSION))
                self._put("start_ts", str(start_ts))
                self._put("batch", "-1")
                self._put("applied_batch", "-1")
                self._put("watermark", str(start_ts))
        elif stored_job != job:
            raise _other_job(path, stored_job, job)
        elif self.start_ts != start_ts:
            raise StateError(
                f"checkpoint {path.parent} was started at ts {self.start_ts}, but the"
                f" snapshot now says {start_ts}: use a new checkpoint for a new snapshot"
            )

    # -- transactions ---------------------------------------------------------------------
    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """One atomic SQLite transaction; rolled back on any exception. It first waits
        for the checkpoint if the log is past :data:`WAL_LIMIT`."""
        return self._transaction(bookkeeping=False)

    @contextlib.contextmanager
    def _transaction(self, *, bookkeeping: bool) -> Iterator[None]:
        """``bookkeeping``: a few rows written right after a batch's large commit, which
        would wait for that commit's checkpoint; they leave the wait to the next batch."""
        try:
            if not bookkeeping and self._wal_bytes() > WAL_LIMIT:
                # once every page is copied, this write starts the log over (and its
                # commit cuts the file back to _WAL_KEPT)
                self._checkpointer.wait()
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"job state {self.path}: {exc}") from None
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise StorageError(
                f"cannot commit job state {self.path}: {exc}{_full(self.path)}"
            ) from None
        self._checkpointer.request()

    def _wal_bytes(self) -> int:
        try:
            return self.path.with_name(self.path.name + "-wal").stat().st_size
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        self._checkpointer.wait()
        self.db.close()

    def _put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", (key, value))

    # -- identity --------------------------------------------------------------------------
    def checkpoint_id(self, new: str) -> str:
        """This checkpoint's random id, set to ``new`` the first time it is asked for."""
        found = self._meta("checkpoint_id")
        if found is None:
            with self.transaction():
                self._put("checkpoint_id", new)
            found = new
        return found

    def source_position(self, key: str) -> str | None:
        """A position the source keeps with the state (e.g. the last PostgreSQL commit)."""
        return self._meta(f"source.{key}")

    def set_source_position(self, key: str, value: str) -> None:
        self._put(f"source.{key}", value)

    def set_watermark(self, watermark: int) -> None:
        """The watermark the state stands at (a source's start, e.g. its snapshot time)."""
        self._put("watermark", str(watermark))

    # -- batches ---------------------------------------------------------------------------
    def begin_batch(
        self, batch: int, *, watermark: int, events: int, released: int, started_ms: int,
        blocker: Mapping[str, Any] | None, offsets: Mapping[str, Any] | None,
    ) -> None:  # fmt: skip
        """Record an ingested batch (inside the batch's transaction)."""
        self._put("batch", str(batch))
        self._put("watermark", str(watermark))
        self.db.execute(
            "INSERT OR REPLACE INTO batches (batch, watermark, events, released, started_ms,"
            " blocker, offsets) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (batch, watermark, events, released, started_ms,
             None if blocker is None else json.dumps(blocker),
             None if offsets is None else json.dumps(offsets)),
        )  # fmt: skip

    def batch_record(self, batch: int) -> BatchRecord | None:
        row = self.db.execute(
            "SELECT batch, watermark, events, released, started_ms, duration_ms, blocker,"
            " offsets, report FROM batches WHERE batch = ?",
            (batch,),
        ).fetchone()
        return None if row is None else _batch_record(row)

    def batch_offsets(self, batch: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT offsets FROM batches WHERE batch = ?", (batch,)).fetchone()
        return None if row is None or row[0] is None else dict(json.loads(row[0]))

    def finish_batch(
        self, batch: int, *, committed_watermark: int | None, duration_ms: int,
        report: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Every output of ``batch`` is committed: drop its outbox, remember it."""
        with self._transaction(bookkeeping=True):
            self._drop_outbox(batch)
            self._put("applied_batch", str(batch))
            if committed_watermark is not None:
                self._put("committed_watermark", str(committed_watermark))
            self.db.execute(
                "UPDATE batches SET duration_ms = ?, report = ? WHERE batch = ?",
                (duration_ms, None if report is None else json.dumps(report), batch),
            )
            self.db.execute("DELETE FROM batches WHERE batch <= ?", (batch - _KEEP_BATCHES,))

    def drop_outbox(self, batch: int) -> None:
        """Drop the outbox of ``batch`` and before (every output of it is committed)."""
        with self._transaction(bookkeeping=True):
            self._drop_outbox(batch)

    def rename_chunk_columns(self, renames: Mapping[str, Mapping[str, str]]) -> int:
        """See :func:`.chunks.rename_chunk_columns` (in a transaction of its own)."""
        with self.transaction():
            return rename_chunk_columns(self.db, renames)

    def mark_bootstrapped(self) -> None:
        """The start is in the state (a snapshot loaded, its first versions staged)."""
        self._put("bootstrapped", "1")

    # -- regions ---------------------------------------------------------------------------
    def save_regions(self, regions: Mapping[int, RegionState], now_ms: int) -> None:
        for state in regions.values():
            self.db.execute(
                "INSERT INTO regions (region, start_key, end_key, parents, resolved, retired,"
                " resolved_since_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(region) DO UPDATE"
                " SET start_key=excluded.start_key, end_key=excluded.end_key,"
                " parents=excluded.parents, resolved_since_ms=CASE WHEN regions.resolved IS"
                " excluded.resolved THEN regions.resolved_since_ms ELSE excluded.resolved_since_ms"
                " END, resolved=excluded.resolved, retired=excluded.retired",
                (state.region, state.start_key, state.end_key, json.dumps(list(state.parents)),
                 state.resolved, int(state.retired), now_ms),
            )  # fmt: skip

    # -- views -----------------------------------------------------------------------------
    def set_view(self, record: ViewRecord) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO views (name, mode, reason, fingerprint, ready)"
            " VALUES (?, ?, ?, ?, ?)",
            (record.name, record.mode, record.reason, record.fingerprint, int(record.ready)),
        )

    def drop_view(self, name: str) -> None:
        self.db.execute("DELETE FROM views WHERE name = ?", (name,))

    def tables(self) -> list[str]:
        """The names of the state file's tables."""
        rows = self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return [r[0] for r in rows]

    def drop_table(self, name: str) -> None:
        self.db.execute(f"DROP TABLE IF EXISTS {quote_name(name)}")

    def column_names(self, table: str) -> list[str]:
        """The columns of the state file's table ``table`` (none when there is no such table)."""
        return [row[1] for row in self.db.execute(f"PRAGMA table_info({quote_name(table)})")]

    def tables_with_kept_rows(self) -> set[str]:
        """The source tables of which rows are kept, pending or buffered, not yet applied."""
        rows = self.db.execute(
            "SELECT DISTINCT tbl FROM chunks WHERE kind IN ('pending', 'buffer')"
        )
        return {r[0] for r in rows}

    # -- the source tables' declarations ------------------------------------------------------
    def declaration(self, table: str) -> str | None:
        """How ``table`` was declared (columns, primary key: JSON) when recorded."""
        return self._meta(f"table.{table}")

    def set_declaration(self, table: str, value: str) -> None:
        with self.transaction():
            self._put(f"table.{table}", value)

    # -- committed outputs -----------------------------------------------------------------
    def record_commit(self, target: str, version: int, batch: int) -> None:
        with self._transaction(bookkeeping=True):
            self.db.execute(
                "INSERT OR REPLACE INTO commits (target, version, batch) VALUES (?, ?, ?)",
                (target, version, batch),
            )

    def committed_targets(self) -> dict[str, tuple[int, int]]:
        """Target -> (version, batch) of its last recorded commit."""
        rows = self.db.execute("SELECT target, version, batch FROM commits")
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    # -- the segment ledger (see deltamv.pipeline.ledger) ----------------------------------
    _SEGMENT_COLUMNS = "path, region, seq, size, mtime_ns, digest, batch"

    def segments_recorded(self, paths: Sequence[str]) -> dict[str, SegmentRecord]:
        found: dict[str, SegmentRecord] = {}
        for start in range(0, len(paths), 500):
            part = list(paths[start : start + 500])
            marks = ", ".join("?" for _ in part)
            rows = self.db.execute(
                f"SELECT {self._SEGMENT_COLUMNS} FROM segments WHERE path IN ({marks})", part
            )
            found.update({r[0]: SegmentRecord(*r) for r in rows})
        return found

    def record_segments(self, records: Sequence[SegmentRecord]) -> None:
        self.db.executemany(
            "INSERT OR REPLACE INTO segments (path, region, seq, size, mtime_ns, digest, batch)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r.path, r.region, r.seq, r.size, r.mtime_ns, r.digest, r.batch) for r in records],
        )

    def segments_up_to(self, batch: int) -> Iterator[SegmentRecord]:
        cursor = self.db.execute(
            f"SELECT {self._SEGMENT_COLUMNS} FROM segments WHERE batch <= ?", (batch,)
        )
        for row in cursor.fetchall():
            yield SegmentRecord(*row)

    def segments_after(self, path: str, batch: int, limit: int) -> list[SegmentRecord]:
        rows = self.db.execute(
            f"SELECT {self._SEGMENT_COLUMNS} FROM segments WHERE path > ? AND batch <= ?"
            " ORDER BY path LIMIT ?",
            (path, batch, limit),
        ).fetchall()
        return [SegmentRecord(*r) for r in rows]

    def update_segment_mtime(self, path: str, mtime_ns: int) -> None:
        self.db.execute("UPDATE segments SET mtime_ns = ? WHERE path = ?", (mtime_ns, path))

    # -- outbox (see deltamv.state.chunks) -------------------------------------------------
    def _drop_outbox(self, batch: int) -> None:
        ids: list[int] = []
        for (text,) in self.db.execute("SELECT chunks FROM outbox WHERE batch <= ?", (batch,)):
            ids.extend(json.loads(text))
        self.db.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in ids])
        self.db.execute("DELETE FROM outbox WHERE batch <= ?", (batch,))
