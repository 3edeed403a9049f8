"""The job's durable pipeline state: matcher, frontier inputs and buffer, in one SQLite file.

Everything that can grow (pending locks of a 2-million-row transaction, rows committed
above the watermark) lives on disk here, not in memory: SQLite is the on-disk ordered
store of the TiCDC sorter design, and one SQLite transaction per micro-batch makes the
whole ingest step atomic. Either all of a batch's events are matched, buffered and the
new watermark's rows staged for output, or none are.

Tables:
  meta      key/value: last ingested batch, watermarks, start ts, job name
  regions   per region: span, parents, resolved ts, retired; the frontier's input
  pending   prewritten rows waiting for their transaction's COMMIT, by (region, start_ts)
  done      (region, start_ts) already committed or rolled back there: later COMMITs of
            the same transaction in that region are stragglers and add nothing
  buffer    committed rows above the watermark, one per (key, start_ts)
  released  the rows a batch released (commit_ts <= its watermark), kept until every
            table and view has committed that batch, so a replay after a crash
            re-applies exactly the same rows
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deltamv.errors import StateError, StorageError
from deltamv.pipeline.frontier import Blocker, RegionState, min_span

SCHEMA_VERSION = 1

_DDL = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS regions (
    region INTEGER PRIMARY KEY, start_key TEXT, end_key TEXT, parents TEXT NOT NULL DEFAULT '[]',
    resolved INTEGER, retired INTEGER NOT NULL DEFAULT 0,
    resolved_since_ms INTEGER, last_file TEXT, last_line INTEGER);
CREATE TABLE IF NOT EXISTS pending (
    region INTEGER NOT NULL, start_ts INTEGER NOT NULL, key TEXT NOT NULL, tbl TEXT NOT NULL,
    op TEXT NOT NULL, value TEXT, old_value TEXT, PRIMARY KEY (region, start_ts, key));
CREATE TABLE IF NOT EXISTS done (
    region INTEGER NOT NULL, start_ts INTEGER NOT NULL, commit_ts INTEGER,
    PRIMARY KEY (region, start_ts));
CREATE TABLE IF NOT EXISTS buffer (
    key TEXT NOT NULL, start_ts INTEGER NOT NULL, commit_ts INTEGER NOT NULL, tbl TEXT NOT NULL,
    op TEXT NOT NULL, value TEXT, old_value TEXT, PRIMARY KEY (key, start_ts));
CREATE INDEX IF NOT EXISTS buffer_by_commit ON buffer (commit_ts, start_ts);
CREATE TABLE IF NOT EXISTS released (
    batch INTEGER NOT NULL, ord INTEGER NOT NULL, key TEXT NOT NULL, start_ts INTEGER NOT NULL,
    commit_ts INTEGER NOT NULL, tbl TEXT NOT NULL, op TEXT NOT NULL, value TEXT, old_value TEXT,
    PRIMARY KEY (batch, ord));
CREATE TABLE IF NOT EXISTS commits (
    target TEXT PRIMARY KEY, version INTEGER NOT NULL, batch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    batch INTEGER PRIMARY KEY, watermark INTEGER NOT NULL, events INTEGER NOT NULL,
    released INTEGER NOT NULL, started_ms INTEGER NOT NULL, duration_ms INTEGER,
    blocker TEXT);
"""


@dataclass(frozen=True)
class Progress:
    """Where the job stands: the last ingested batch and its watermark."""

    batch: int  # -1 before the first batch
    watermark: int  # the latest batch's global watermark
    applied_batch: int  # the last batch whose outputs are all committed
    committed_watermark: int | None  # watermark of the last committed view version


class PipelineState:
    """The SQLite-backed state of one job. Not thread-safe; one per driver."""

    def __init__(self, path: Path, *, job: str, start_ts: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA temp_store=FILE")
            self.db.executescript(_DDL)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open job state {path}: {exc}") from None
        stored_job = self.get("job")
        if stored_job is None:
            with self.transaction():
                self.put("job", job)
                self.put("schema_version", str(SCHEMA_VERSION))
                self.put("start_ts", str(start_ts))
                self.put("batch", "-1")
                self.put("applied_batch", "-1")
                self.put("watermark", str(start_ts))
        elif stored_job != job:
            raise StateError(f"checkpoint {path.parent} belongs to job {stored_job!r}, not {job!r}")
        elif int(self.get("start_ts") or 0) != start_ts:
            raise StateError(
                f"checkpoint {path.parent} was started at ts {self.get('start_ts')}, "
                f"but the snapshot now says {start_ts}: use a new checkpoint for a new snapshot"
            )

    def close(self) -> None:
        self.db.close()

    # -- small helpers -------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic SQLite transaction; rolled back on any exception."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"job state {self.path}: {exc}") from None
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise StorageError(f"cannot commit job state {self.path}: {exc}") from None

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", (key, value))

    @property
    def start_ts(self) -> int:
        return int(self.get("start_ts") or 0)

    def progress(self) -> Progress:
        cw = self.get("committed_watermark")
        return Progress(
            batch=int(self.get("batch") or -1),
            watermark=int(self.get("watermark") or 0),
            applied_batch=int(self.get("applied_batch") or -1),
            committed_watermark=None if cw is None else int(cw),
        )

    # -- frontier ------------------------------------------------------------------------
    def regions(self) -> dict[int, RegionState]:
        rows = self.db.execute(
            "SELECT region, start_key, end_key, parents, resolved, retired FROM regions"
        ).fetchall()
        return {
            r[0]: RegionState(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4], bool(r[5]))
            for r in rows
        }

    def blocker(self) -> Blocker:
        return min_span(self.regions(), self.start_ts)

    # -- committed outputs ---------------------------------------------------------------
    def committed_version(self, target: str) -> int | None:
        row = self.db.execute("SELECT version FROM commits WHERE target = ?", (target,)).fetchone()
        return None if row is None else int(row[0])

    def record_commit(self, target: str, version: int, batch: int) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO commits (target, version, batch) VALUES (?, ?, ?)",
            (target, version, batch),
        )

    def released_rows(self, batch: int) -> sqlite3.Cursor:
        """The final change per key released by ``batch`` (the latest commit wins)."""
        # SQLite returns the bare columns of the row holding MAX(): the key's last change.
        return self.db.execute(
            "SELECT tbl, key, op, value, old_value, MAX(commit_ts) FROM released "
            "WHERE batch = ? GROUP BY key ORDER BY tbl, key",
            (batch,),
        )

    def released_count(self, batch: int) -> int:
        row = self.db.execute("SELECT COUNT(*) FROM released WHERE batch = ?", (batch,)).fetchone()
        return int(row[0])

    def released_tables(self, batch: int) -> set[str]:
        rows = self.db.execute("SELECT DISTINCT tbl FROM released WHERE batch = ?", (batch,))
        return {r[0] for r in rows}

    def finish_batch(self, batch: int, committed_watermark: int | None, duration_ms: int) -> None:
        """Every output of ``batch`` is committed: drop its staged rows, remember it."""
        with self.transaction():
            self.db.execute("DELETE FROM released WHERE batch <= ?", (batch,))
            self.put("applied_batch", str(batch))
            if committed_watermark is not None:
                self.put("committed_watermark", str(committed_watermark))
            self.db.execute(
                "UPDATE batches SET duration_ms = ? WHERE batch = ?", (duration_ms, batch)
            )
