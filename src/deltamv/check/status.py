"""``deltamv status``: how fresh each view is, and what holds the watermark back.

Reads only what exists already: each view's Delta log (versions and their watermarks)
and the job's state, opened read-only (:func:`deltamv.state.open_read_only`), so it
works while the job runs and never blocks or changes it. Per batch the job records the
span that held the global watermark down; per region, since when its resolved ts has
stood still; per view, how it is maintained.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from deltamv import delta, tso
from deltamv.config import JobConfig
from deltamv.errors import DeltaMVError
from deltamv.pipeline.frontier import unread_ancestors
from deltamv.state import ReadOnlyState, open_read_only

__all__ = ["Backlog", "BlockerStatus", "JobStatus", "SlotView", "ViewStatus", "job_status"]


@dataclass(frozen=True)
class ViewStatus:
    view: str
    path: str
    versions: int  # 0: no table yet
    latest_version: int | None
    watermark: int | None
    committed_ms: int | None  # wall-clock time of the latest commit
    mode: str | None = None  # "incremental" or "recompute: <reason>" (None before the first run)

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
    waiting_for: tuple[int, ...]  # ancestors whose RETIRED a successor still waits for
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
            many = len(self.waiting_for) > 1
            text += (
                f" ({'regions' if many else 'region'} {', '.join(map(str, self.waiting_for))}"
                f" not yet read to {'their' if many else 'its'} RETIRED)"
            )
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
    slot: SlotView | None = None  # a PostgreSQL job's replication slot
    copies: tuple[ViewStatus, ...] = ()  # the tables kept as Delta copies (tables.X.path)
    bootstrapped: bool = False  # the snapshot (or the empty start) is loaded
    backlog: Backlog | None = None  # a change-log job's segments not read yet


@dataclass(frozen=True)
class Backlog:
    """A change-log job's segments not read yet: those after the highest seq the job read
    in each region, as the directory lists them now."""

    segments: dict[int, int]  # region -> segments not read yet (regions with some)
    bytes: int
    error: str | None = None  # the change log could not be listed

    @property
    def total(self) -> int:
        return sum(self.segments.values())


def _backlog(config: JobConfig, state: ReadOnlyState) -> Backlog:
    from deltamv.changelog.segments import region_dirs, scan_region

    read = state.read_up_to()
    segments: dict[int, int] = {}
    size = 0
    try:
        for region, folder in region_dirs(config.changelog).items():
            found = scan_region(region, folder, after=read.get(region, -1)).segments
            if found:
                segments[region] = len(found)
            for segment in found:
                with contextlib.suppress(FileNotFoundError):
                    size += os.stat(segment.path).st_size
    except DeltaMVError as exc:
        return Backlog({}, 0, error=str(exc))
    return Backlog(segments, size)


@dataclass(frozen=True)
class SlotView:
    """A PostgreSQL job's replication slot, as ``deltamv status`` shows it."""

    name: str
    found: bool
    error: str | None = None  # the server could not be asked
    confirmed_lsn: str | None = None
    retained_bytes: int | None = None  # WAL PostgreSQL keeps for the slot
    lag_bytes: int | None = None  # WAL written since the last batch the job confirmed
    lag_ms: int | None = None  # age of the last applied commit while WAL is pending
    lost: bool = False


def _slot_view(config: JobConfig, watermark: int | None, now_ms: int) -> SlotView:
    from deltamv.job.postgres import slot_name
    from deltamv.postgres import connect, format_lsn, slot_status

    name = slot_name(config)
    try:
        with connect(config.upstream.dsn or "", timeout_s=5.0) as conn:
            found = slot_status(conn, name)
    except DeltaMVError as exc:
        return SlotView(name, found=False, error=str(exc))
    if found is None:
        return SlotView(name, found=False)
    pending = (found.lag_bytes or 0) > 0
    lag_ms = tso.lag_ms(watermark, now_ms) if pending and watermark else 0
    return SlotView(
        name, True, None,
        None if found.confirmed_flush_lsn is None else format_lsn(found.confirmed_flush_lsn),
        found.retained_bytes, found.lag_bytes, lag_ms, found.lost,
    )  # fmt: skip


def job_status(config: JobConfig, *, now_ms: int | None = None) -> JobStatus:
    """Status of a job from its views' Delta logs and its state (read-only)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    state = open_read_only(config.checkpoint, job=config.name)
    modes = {}
    if state is not None:
        modes = {n: ("incremental" if r.mode == "incremental" else f"recompute: {r.reason}")
                 for n, r in state.views().items()}  # fmt: skip
    views = tuple(_view_status(name, v.path, modes.get(name)) for name, v in config.views.items())
    copies = tuple(
        _view_status(name, t.path, "copy of the table")
        for name, t in config.tables.items()
        if t.path
    )
    postgres = config.upstream.kind == "postgres"
    if state is None:
        slot = _slot_view(config, None, now) if postgres else None
        return JobStatus(config.name, config.checkpoint, now, views, state_found=False, slot=slot,
                         copies=copies)  # fmt: skip
    try:
        last = state.last_batch()
        blocker = None
        if last is not None and last.blocker:
            since = state.watermark_since_ms(last.watermark)
            blocker = _blocker(state, last.blocker, since)
        progress = state.progress()
        return JobStatus(
            job=config.name,
            checkpoint=config.checkpoint,
            now_ms=now,
            views=views,
            state_found=True,
            batches=state.batch_count(),
            last_batch=None if last is None else last.batch,
            job_watermark=progress.watermark if last is not None else None,
            last_batch_started_ms=None if last is None else last.started_ms,
            last_duration_ms=state.last_duration_ms(),
            blocker=blocker,
            running_pid=_running_pid(Path(config.checkpoint)),
            slot=_slot_view(config, progress.watermark, now) if postgres else None,
            copies=copies,
            bootstrapped=progress.bootstrapped,
            backlog=None if postgres else _backlog(config, state),
        )
    finally:
        state.close()


def _view_status(name: str, path: str, mode: str | None) -> ViewStatus:
    if delta.table_version(path) is None:
        return ViewStatus(name, path, 0, None, None, None, mode)
    history = delta.versions(path)
    latest = history[-1]
    marked = [h for h in history if h.watermark is not None]
    watermark = marked[-1].watermark if marked else None
    return ViewStatus(
        name, path, len(history), latest.version, watermark, latest.timestamp_ms, mode
    )


def _blocker(state: ReadOnlyState, raw: dict[str, object], since: int | None) -> BlockerStatus:
    region = raw.get("region")
    resolved = resolved_since = None
    waiting: tuple[int, ...] = ()
    if isinstance(region, int):
        regions = state.regions()
        found = regions.get(region)
        if found is not None:
            resolved = found.resolved
            resolved_since = state.resolved_since_ms(region)
            waiting = unread_ancestors(regions, region)
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
