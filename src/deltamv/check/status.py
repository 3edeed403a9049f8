"""``deltamv status``: how fresh each view is, and what holds the watermark back.

Reads only what exists already: each view's Delta log (versions and their watermarks)
and the job's state file ``<checkpoint>/state.db``, opened read-only, so it works while
the job runs and never blocks or changes it. Per batch the job records the span that
held the global watermark down (``batches.blocker``); per region, since when its
resolved ts has stood still (``regions.resolved_since_ms``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deltamv import delta, tso
from deltamv.config import JobConfig
from deltamv.errors import StorageError

__all__ = ["BlockerStatus", "JobStatus", "ViewStatus", "job_status"]


@dataclass(frozen=True)
class ViewStatus:
    view: str
    path: str
    versions: int  # 0: no table yet
    latest_version: int | None
    watermark: int | None
    committed_ms: int | None  # wall-clock time of the latest commit

    def lag_ms(self, now_ms: int) -> int | None:
        return None if self.watermark is None else tso.lag_ms(self.watermark, now_ms)


@dataclass(frozen=True)
class BlockerStatus:
    """The key span with the lowest resolved ts at the last batch, and who is responsible."""

    start_key: str
    end_key: str  # "" is unbounded
    ts: int
    reason: str
    region: int | None  # None: nobody covers the span yet
    region_resolved: int | None  # the region's resolved ts now
    resolved_since_ms: int | None  # when the region's resolved ts last moved
    waiting_for: tuple[int, ...]  # parents whose RETIRED a successor still waits for
    watermark_since_ms: int | None  # first batch that had the current watermark

    def describe(self) -> str:
        span = (
            f"[{self.start_key!r}, {self.end_key!r})"
            if self.end_key
            else f"[{self.start_key!r}, end)"
        )
        if self.region is None:
            return f"span {span}: {self.reason}"
        text = f"region {self.region} {span}: {self.reason}"
        if self.waiting_for:
            text += f" (parent {', '.join(map(str, self.waiting_for))} not yet read to its RETIRED)"
        return text


@dataclass(frozen=True)
class JobStatus:
    job: str
    checkpoint: str
    now_ms: int
    views: tuple[ViewStatus, ...]
    state_found: bool
    batches: int = 0
    last_batch: int | None = None
    job_watermark: int | None = None  # the global watermark of the last ingested batch
    last_batch_started_ms: int | None = None
    last_duration_ms: int | None = None
    blocker: BlockerStatus | None = None
    running_pid: int | None = None


def job_status(config: JobConfig, *, now_ms: int | None = None) -> JobStatus:
    """Status of a job from its views' Delta logs and its state (read-only)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    views = tuple(_view_status(name, v.path) for name, v in config.views.items())
    state_path = Path(config.checkpoint) / "state.db"
    if not state_path.exists():
        return JobStatus(config.name, config.checkpoint, now, views, state_found=False)
    with _read_only(state_path) as db:
        meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
        count, last = db.execute("SELECT COUNT(*), MAX(batch) FROM batches").fetchone()
        started = duration = blocker = None
        if last is not None:
            row = db.execute(
                "SELECT started_ms, blocker, watermark FROM batches WHERE batch = ?", (last,)
            ).fetchone()
            started, raw_blocker, watermark = row
            timed = db.execute(
                "SELECT duration_ms FROM batches WHERE duration_ms IS NOT NULL "
                "ORDER BY batch DESC LIMIT 1"
            ).fetchone()
            duration = None if timed is None else int(timed[0])
            since = db.execute(
                "SELECT MIN(started_ms) FROM batches WHERE watermark = ?", (watermark,)
            ).fetchone()[0]
            if raw_blocker:
                blocker = _blocker(db, json.loads(raw_blocker), since)
    return JobStatus(
        job=config.name,
        checkpoint=config.checkpoint,
        now_ms=now,
        views=views,
        state_found=True,
        batches=int(count),
        last_batch=None if last is None else int(last),
        job_watermark=int(meta["watermark"]) if "watermark" in meta else None,
        last_batch_started_ms=started,
        last_duration_ms=duration,
        blocker=blocker,
        running_pid=_running_pid(Path(config.checkpoint)),
    )


def _view_status(name: str, path: str) -> ViewStatus:
    if delta.table_version(path) is None:
        return ViewStatus(name, path, 0, None, None, None)
    history = delta.versions(path)
    latest = history[-1]
    marked = [h for h in history if h.watermark is not None]
    watermark = marked[-1].watermark if marked else None
    return ViewStatus(name, path, len(history), latest.version, watermark, latest.timestamp_ms)


def _blocker(db: sqlite3.Connection, raw: dict[str, object], since: int | None) -> BlockerStatus:
    region = raw.get("region")
    resolved = resolved_since = None
    waiting: tuple[int, ...] = ()
    if isinstance(region, int):
        row = db.execute(
            "SELECT resolved, resolved_since_ms, parents FROM regions WHERE region = ?", (region,)
        ).fetchone()
        if row is not None:
            resolved, resolved_since = row[0], row[1]
            parents = json.loads(row[2] or "[]")
            retired = {
                r[0] for r in db.execute("SELECT region FROM regions WHERE retired = 1").fetchall()
            }
            waiting = tuple(p for p in parents if p not in retired)
    return BlockerStatus(
        start_key=str(raw.get("start_key") or ""),
        end_key=str(raw.get("end_key") or ""),
        ts=int(raw.get("ts") or 0),  # type: ignore[call-overload]
        reason=str(raw.get("reason") or ""),
        region=region if isinstance(region, int) else None,
        region_resolved=resolved,
        resolved_since_ms=resolved_since,
        waiting_for=waiting,
        watermark_since_ms=since,
    )


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """The job's state, read-only: never takes a write lock, never creates the file."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open job state {path} read-only: {exc}") from None
    try:
        yield db
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read job state {path}: {exc}") from None
    finally:
        db.close()


def _running_pid(checkpoint: Path) -> int | None:
    """The pid in the job's lock file if that process is alive (a hint, not a lock test)."""
    try:
        pid = int(json.loads((checkpoint / "_lock").read_text() or "{}").get("pid"))
    except (OSError, ValueError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid
