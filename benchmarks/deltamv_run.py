"""Running a deltamv job inside the benchmark's warm Spark session, with a phase profile.

The job is run exactly as ``deltamv run CONFIG --once`` runs it (``ViewJob.run``), in
the benchmark process so the JVM start (about 20 s here) is paid once and not counted
in every throughput figure; the cold start is measured separately by the memory runs,
which start ``deltamv run`` as a fresh process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from _common import PhaseTimer

from deltamv import delta
from deltamv.config import load_config
from deltamv.job import ViewJob


def run_job(spark: Any, config_path: Path, *, profile: bool = False) -> dict[str, Any]:
    """Run the job once to the end of the log; wall time, batches and (optionally) phases."""
    import deltamv.job as job_module

    config = load_config(config_path)
    timer = PhaseTimer()
    spans: list[tuple[str, float, float]] = []
    if profile:
        _instrument(timer, job_module, spans)
    began = time.perf_counter()
    began_ms = time.time() * 1000
    try:
        reports = ViewJob(config, spark).run(once=True)
    finally:
        timer.close()
    seconds = time.perf_counter() - began
    out: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "batches": len(reports),
        "events": sum(r.events for r in reports),
        "released": sum(r.released for r in reports),
        "batch_ms": [r.duration_ms for r in reports],
        "committed_batches": sum(1 for r in reports if r.committed),
        "began_ms": began_ms,
    }
    if profile:
        out["phases"] = {k: round(v, 3) for k, v in timer.seconds.items()}
        out["calls"] = dict(timer.calls)
        out["spans"] = spans
    return out


def _instrument(timer: PhaseTimer, job_module: Any, spans: list[tuple[str, float, float]]) -> None:
    """Time each stage of a batch; remember when it ran, to attribute Spark jobs to it."""
    view_job = job_module.ViewJob

    def spanned(owner: Any, name: str, label_of: Any) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            label = label_of(*args, **kwargs)
            began = time.time() * 1000
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timer.seconds[label] += time.perf_counter() - t0
                timer.calls[label] += 1
                spans.append((label, began, time.time() * 1000))

        setattr(owner, name, wrapper)
        timer._undo.append(lambda: setattr(owner, name, original))

    spanned(view_job, "process_batch", lambda *a, **k: "batch")
    spanned(
        view_job,
        "_stage_events",
        lambda *a, **k: "1 stage events (Spark: parse log, write Parquet)",
    )
    spanned(
        job_module,
        "ingest",
        lambda *a, **k: "2 ingest (driver: matcher, frontier, buffer in SQLite)",
    )
    spanned(job_module, "stage_changes", lambda *a, **k: "3 stage released rows (driver: Parquet)")
    spanned(
        view_job,
        "_commit",
        lambda self, target, *a, **k: (
            "4 mirror rewrite + commit"
            if target.startswith("mirror:")
            else "5 view recompute + commit"
        ),
    )
    spanned(view_job, "_read_mirror", lambda *a, **k: "read mirror (Delta log, plan)")
    spanned(job_module, "register_tables", lambda *a, **k: "register views")
    for name in ("commit", "committed_batch", "table_version"):
        timer.wrap(job_module.delta, name, f"delta-rs {name}")
    timer.wrap(job_module.delta, "write_dataframe", "write_dataframe (Spark job, mapInArrow)")
    timer.wrap(delta, "read_spark", "delta-rs read_spark (file list)")


def spark_jobs_by_phase(event_log: Path, spans: list[tuple[str, float, float]]) -> dict[str, Any]:
    """Spark jobs and stages from an event log, attributed to the phase running at the time."""
    jobs: dict[int, dict[str, Any]] = {}
    stages: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    tasks: dict[int, dict[str, float]] = {}
    files = sorted(event_log.glob("events_*")) if event_log.is_dir() else [event_log]
    lines = [line for f in files for line in f.read_text().splitlines() if line]
    for line in lines:
        e = json.loads(line)
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = {"start": e["Submission Time"], "stages": e["Stage IDs"]}
            for s in e["Stage IDs"]:
                stage_job[s] = e["Job ID"]
        elif kind == "SparkListenerJobEnd":
            jobs.setdefault(e["Job ID"], {})["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            if "Submission Time" in info and "Completion Time" in info:
                stages[info["Stage ID"]] = {
                    "name": info["Stage Name"].split(" at ")[0],
                    "ms": info["Completion Time"] - info["Submission Time"],
                    "tasks": info["Number of Tasks"],
                }
        elif kind == "SparkListenerTaskEnd":
            m = e.get("Task Metrics") or {}
            t = tasks.setdefault(e["Stage ID"], {"run_ms": 0.0, "cpu_ms": 0.0, "gc_ms": 0.0})
            t["run_ms"] += m.get("Executor Run Time", 0)
            t["cpu_ms"] += m.get("Executor CPU Time", 0) / 1e6
            t["gc_ms"] += m.get("JVM GC Time", 0)
    leaf = [
        s for s in spans if s[0] != "batch" and not s[0].startswith(("delta-rs", "read mirror"))
    ]

    def phase_of(ms: float) -> str:
        found = [s for s in leaf if s[1] <= ms <= s[2]]
        return min(found, key=lambda s: s[2] - s[1])[0] if found else "other (planning, streaming)"

    out: dict[str, dict[str, Any]] = {}
    for job in jobs.values():
        if "start" not in job:
            continue
        phase = out.setdefault(
            phase_of(job["start"]),
            {
                "jobs": 0,
                "job_ms": 0,
                "stages": 0,
                "task_run_ms": 0.0,
                "task_cpu_ms": 0.0,
                "gc_ms": 0.0,
            },
        )
        phase["jobs"] += 1
        phase["job_ms"] += job.get("end", job["start"]) - job["start"]
        for s in job["stages"]:
            if s in stages:
                phase["stages"] += 1
                t = tasks.get(s, {})
                phase["task_run_ms"] += t.get("run_ms", 0.0)
                phase["task_cpu_ms"] += t.get("cpu_ms", 0.0)
                phase["gc_ms"] += t.get("gc_ms", 0.0)
    return {
        k: {kk: round(vv) if isinstance(vv, float) else vv for kk, vv in v.items()}
        for k, v in out.items()
    }
