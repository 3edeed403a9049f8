"""Time per batch against source table size, at a fixed change rate.

One simulated bank log (10k accounts, snapshot early in the run) supplies the changes;
for each size N the snapshot's ``accounts`` is padded with N - 10k more accounts that the
log never touches. Every run reads the same change log in batches of the same number
of segments, so the change per batch is fixed and only the table grows. Recompute
rewrites each changed mirror and re-evaluates every view, so this curve grows with N;
incremental maintenance will be judged against it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _common import WORK, percentile, say, write_config
from deltamv_run import run_job


def padded_snapshot(sim: Path, rows: int) -> Path:
    out = WORK / "scaling" / f"snapshot-{rows}"
    if (out / "_snapshot.json").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(sim / "snapshot", out)
    have = pq.read_metadata(next((out / "accounts").glob("*.parquet"))).num_rows
    extra = rows - have
    chunk = 1_000_000
    start = 100_000_000  # ids far above the simulator's
    for n, at in enumerate(range(0, max(0, extra), chunk)):
        ids = pa.array(range(start + at, start + min(extra, at + chunk)), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "owner": pa.array([f"owner-{i % 997:05d}" for i in range(len(ids))]),
                "balance": pa.array([1000] * len(ids), pa.int64()),
            }
        )
        pq.write_table(table, out / "accounts" / f"pad-{n:04d}.parquet")
    return out


def run_scaling(
    spark: Any, sim: Path, sizes: list[int], *, segments_per_batch: int
) -> list[dict[str, Any]]:
    results = []
    for rows in sizes:
        snapshot = padded_snapshot(sim, rows)
        config = write_config(
            sim,
            WORK / "scaling" / f"job-{rows}",
            snapshot=snapshot,
            max_segments=segments_per_batch,
        )
        run = run_job(spark, config)
        steady = [ms for ms in run["batch_ms"][1:]]  # batch 0 also catches up the pre-snapshot log
        result = {
            "rows": rows,
            "batches": run["batches"],
            "events": run["events"],
            "seconds": run["seconds"],
            "batch_ms_p50": percentile(steady, 50),
            "batch_ms_max": max(steady) if steady else None,
            "events_per_batch": round(run["events"] / max(1, run["batches"])),
        }
        say(
            f"scaling {rows} rows: median batch {result['batch_ms_p50']} ms over {run['batches']} batches"
        )
        results.append(result)
    return results
