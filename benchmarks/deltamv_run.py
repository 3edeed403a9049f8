"""Running a deltamv job inside the benchmark's warm Spark session, and what it reports.

The job is run exactly as ``deltamv run CONFIG --once`` runs it (``ViewJob.run``), in the
benchmark process so the JVM start (about 20 s here) is paid once and not counted in
every throughput figure; the cold start is measured separately by the memory runs,
which start ``deltamv run`` as a fresh process.

What a run reports comes from the job's public results only: each ``BatchReport``'s
``phases`` (seconds per step of the batch: read, match, maintain, state, publish,
finish) and ``written`` (rows, files, bytes committed), and the view modes
(``ViewJob.modes``). Spark's side (micro-batch bookkeeping, Spark jobs per batch) comes
from Spark's event log (:mod:`eventlog`), matched to the run by its time window.
Optionally a stack sampler (:mod:`sampler`) records where the driver's Python time went.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import ATTEMPTS, percentile, say, worker_timeout
from sampler import StackSampler

from deltamv.config import load_config
from deltamv.job import ViewJob

PHASES = ("read", "match", "maintain", "state", "publish", "finish")


def run_job(
    spark: Any, config_path: Path, *, sample: bool = False, keep_reports: bool = True
) -> dict[str, Any]:
    """Run the job once to the end of the log; wall time, batches, phases, bytes written.

    A run whose streaming query fails at its start because Spark's Python worker did not
    connect back in time (:data:`_common.WORKER_TIMEOUT`) is run again from scratch, its
    outputs removed first; ``retries`` counts those."""
    for attempt in range(ATTEMPTS):
        try:
            out = _run_job(spark, config_path, sample=sample, keep_reports=keep_reports)
        except Exception as exc:
            if not worker_timeout(exc) or attempt == ATTEMPTS - 1:
                raise
            say(f"{config_path.parent.name}: Python worker did not connect back in 10 s; again")
            _clear_outputs(config_path)
            continue
        out["retries"] = attempt
        return out
    raise AssertionError("unreachable")


def _clear_outputs(config_path: Path) -> None:
    """Everything ``write_config`` put next to the config (checkpoint, views), not the config."""
    for entry in config_path.parent.iterdir():
        if entry != config_path:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _run_job(spark: Any, config_path: Path, *, sample: bool, keep_reports: bool) -> dict[str, Any]:
    config = load_config(config_path)
    job = ViewJob(config, spark)
    began = time.perf_counter()
    began_ms = time.time() * 1000
    with _sampling(sample) as sampler:
        reports = job.run(once=True)
    seconds = time.perf_counter() - began
    out = summarise(reports, seconds)
    out.update(
        began_ms=began_ms,
        ended_ms=time.time() * 1000,
        modes=dict(job.modes),
    )
    if keep_reports:
        out["reports"] = [r.to_json() for r in reports]
    if sampler is not None:
        out["sampled"] = sampler.report()
    return out


@contextlib.contextmanager
def _sampling(on: bool) -> Iterator[StackSampler | None]:
    if not on:
        yield None
        return
    with StackSampler() as sampler:
        yield sampler


def summarise(reports: list[Any], seconds: float) -> dict[str, Any]:
    """Totals of a run's batch reports: phases, bytes written, batch times."""
    phases = dict.fromkeys(PHASES, 0.0)
    written = {"rows": 0, "files": 0, "bytes": 0, "tables": 0}
    for r in reports:
        for k, v in r.phases.items():
            phases[k] = phases.get(k, 0.0) + v
        for k, v in r.written.items():
            written[k] = written.get(k, 0) + v
    committed = [r for r in reports if r.committed]
    batch_s = sum(r.duration_ms for r in reports) / 1000
    return {
        "seconds": round(seconds, 3),
        "batches": len(reports),
        "committed_batches": len(committed),
        "events": sum(r.events for r in reports),
        "released": sum(r.released for r in reports),
        "batch_ms": [r.duration_ms for r in reports],
        "batch_seconds": round(batch_s, 3),
        # everything a run costs outside its batches: checks, planning the views, opening
        # the state, the start (snapshot), and Spark's streaming bookkeeping per trigger
        "outside_batches_seconds": round(seconds - batch_s, 3),
        "batch_ms_p50": percentile([r.duration_ms for r in committed], 50),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "written": written,
    }
