"""Time per batch against source table size, at a fixed change per batch.

One simulated bank log (10k accounts, snapshot early in the run) supplies the changes;
for each size N the snapshot's ``accounts`` is padded with N - 10k more accounts that the
log never touches. Every run reads the same change log in batches of the same number
of segments, so the change per batch is fixed and only the table grows. The views are
the bank's four (global and grouped aggregates over ``accounts``, ``transfers``) plus
two join views (each transfer with its sender's owner; per-owner sums over that join),
in the job's own mode (incremental where the rules cover the SQL).

Per size: the batch time p50 and max over the batches after the first (the first also
catches up the log before the snapshot), the start (snapshot load and first versions,
i.e. the run's time outside its batches), and what each batch committed
(``BatchReport.written``: rows, files, bytes) against the rows it released.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _common import WORK, percentile, say, write_config
from deltamv_run import run_job
from synth import JOIN_VIEWS


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
            extra_views=JOIN_VIEWS,
        )
        load = round(os.getloadavg()[0], 1)
        run = run_job(spark, config)
        # batch 0 also catches up the log before the snapshot: the steady state is after it
        steady = [r for r in run["reports"][1:] if r["committed"]]
        ms = [r["duration_ms"] for r in steady]
        per_batch = {
            k: percentile([r["written"].get(k, 0) for r in steady], 50)
            for k in ("rows", "files", "bytes")
        }
        released = percentile([r["released"] for r in steady], 50)
        result = {
            "rows": rows,
            "load": load,
            "load_end": round(os.getloadavg()[0], 1),
            "batches": run["batches"],
            "steady_batches": len(steady),
            "events": run["events"],
            "seconds": run["seconds"],
            "start_seconds": run["outside_batches_seconds"],
            "batch_ms_p50": percentile(ms, 50),
            "batch_ms_max": max(ms) if ms else None,
            "events_per_batch": percentile([r["events"] for r in steady], 50),
            "released_per_batch": released,
            "written_per_batch": per_batch,
            "phase_ms_p50": {
                k: round(1000 * (percentile([r["phases"].get(k, 0.0) for r in steady], 50) or 0))
                for k in ("read", "match", "maintain", "state", "publish", "finish")
            },
            "modes": run["modes"],
            "began_ms": run["began_ms"],
            "ended_ms": run["ended_ms"],
        }
        say(
            f"scaling {rows} rows: median batch {result['batch_ms_p50']} ms over {len(steady)}"
            f" batches, {per_batch['bytes']} bytes written per batch, start"
            f" {result['start_seconds']} s (load {load})"
        )
        results.append(result)
    return results
