"""One micro-batch through matcher, frontier and buffer.

Runs inside the caller's state transaction (the batch's one transaction): a bad record
(BadRecordError) or a storage failure rolls the whole batch back, so the state stays at
the previous batch and a replay starts clean.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltamv.compute import Compute
from deltamv.pipeline.frontier import Blocker, RegionState, min_span
from deltamv.pipeline.match import match
from deltamv.pipeline.release import release
from deltamv.state.store import StateStore

__all__ = ["EventGroup", "IngestResult", "ingest"]

_IN_MEMORY_ROWS = 200_000  # committed rows kept in memory before they go to the buffer


@dataclass(frozen=True)
class EventGroup:
    """Parsed events of some segments (see :mod:`deltamv.changelog.batch`)."""

    files: tuple[str, ...]
    events: pa.Table
    values: Mapping[str, pa.Table]


@dataclass(frozen=True)
class IngestResult:
    batch: int
    events: int
    released: int  # row versions released (the last change per key is in ``changes``)
    watermark: int
    previous_watermark: int
    blocker: Blocker | None
    changes: Mapping[str, pa.Table] = field(default_factory=dict)
    truncated: frozenset[str] = frozenset()  # tables emptied first (PostgreSQL TRUNCATE)


def ingest(
    store: StateStore,
    compute: Compute,
    batch: int,
    groups: Iterable[EventGroup],
    *,
    offsets: Mapping[str, Any] | None = None,
) -> IngestResult:
    """Match a batch's events, advance the watermark, release the rows it passes.

    Call inside ``store.transaction()``. The released changes (each key's last change,
    per table) are returned for the mirrors and views to apply in the same transaction.
    """
    progress = store.progress()
    if batch <= progress.batch:
        raise ValueError(f"batch {batch} was already ingested (state is at {progress.batch})")
    started = int(time.time() * 1000)
    floor = progress.watermark
    before = store.regions()
    regions: Mapping[int, RegionState] = before
    held: dict[str, list[pa.Table]] = {}
    held_rows = events = 0
    finished: pa.Table | None = None  # the last group's, added once the watermark is known
    for group in groups:
        if finished is not None:  # (the next group's match looks them up)
            store.done.add(finished)
        matched = match(
            compute, group.files, group.events, group.values,
            regions=regions, pending=store.pending, done=store.done, floor=floor,
        )  # fmt: skip
        finished = matched.finished
        regions = matched.regions
        events += matched.events
        for table, rows in matched.committed.items():
            held.setdefault(table, []).append(rows)
            held_rows += rows.num_rows
        if held_rows > _IN_MEMORY_ROWS:  # a large batch: keep memory bounded
            for table, parts in held.items():
                for rows in parts:
                    store.buffer.add(table, rows)
            held, held_rows = {}, 0
    blocker = min_span(regions, store.start_ts)
    # The global watermark never decreases.
    watermark = max(blocker.watermark, floor)
    committed = {t: pa.concat_tables(p) if len(p) > 1 else p[0] for t, p in held.items()}
    released = release(store.buffer, committed, watermark=watermark)
    if finished is not None:  # (those at or below the watermark, the prune would drop)
        store.done.add(finished.filter(pc.greater(finished.column("commit_ts"), watermark)))
    store.done.prune(watermark)
    store.save_regions({r: s for r, s in regions.items() if before.get(r) != s}, started)
    store.begin_batch(
        batch, watermark=watermark, events=events, released=released.rows, started_ms=started,
        blocker={"region": blocker.region, "start_key": blocker.start_key,
                 "end_key": blocker.end_key, "ts": blocker.watermark, "reason": blocker.reason},
        offsets=offsets,
    )  # fmt: skip
    return IngestResult(batch, events, released.rows, watermark, floor, blocker, released.changes)
