"""One micro-batch through matcher, frontier and buffer, atomically."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from deltamv.pipeline.buffer import release
from deltamv.pipeline.frontier import min_span
from deltamv.pipeline.matcher import Matcher
from deltamv.pipeline.state import PipelineState


@dataclass(frozen=True)
class IngestResult:
    batch: int
    events: int
    released: int
    watermark: int
    previous_watermark: int


def ingest(
    state: PipelineState, batch: int, events: Iterable[pa.RecordBatch | pa.Table]
) -> IngestResult:
    """Match a batch's events, advance the watermark, stage the rows it releases.

    All or nothing: a bad record (BadRecordError) or a storage failure rolls the whole
    batch back, so the state stays at the previous batch and a replay starts clean.
    """
    progress = state.progress()
    if batch <= progress.batch:
        raise ValueError(f"batch {batch} was already ingested (state is at {progress.batch})")
    started = int(time.time() * 1000)
    with state.transaction() as db:
        matcher = Matcher(db, floor=progress.watermark)
        matcher.feed(events)
        matcher.flush()
        blocker = min_span(state.regions(), state.start_ts)
        # The global watermark never decreases (CONTRACT section 2).
        watermark = max(blocker.watermark, progress.watermark)
        released = release(db, batch=batch, watermark=watermark)
        # Transactions at or below the watermark are complete: a later COMMIT of one is
        # a straggler, recognised by its commit ts alone (see Matcher._commit).
        db.execute("DELETE FROM done WHERE commit_ts IS NULL OR commit_ts <= ?", (watermark,))
        state.put("batch", str(batch))
        state.put("watermark", str(watermark))
        db.execute(
            "INSERT OR REPLACE INTO batches (batch, watermark, events, released, started_ms, blocker) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                batch, watermark, matcher.events, released, started,
                json.dumps(
                    {"region": blocker.region, "start_key": blocker.start_key,
                     "end_key": blocker.end_key, "ts": blocker.watermark, "reason": blocker.reason}
                ),
            ),
        )  # fmt: skip
    return IngestResult(batch, matcher.events, released, watermark, progress.watermark)
