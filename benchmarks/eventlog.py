"""Spark's event log, read after the session stops: what Spark did for a run.

Per run (a time window in wall-clock ms): the streaming triggers of its query with
Spark's own durations per trigger (``addBatch`` is the ``foreachBatch`` call, i.e. the
deltamv batch; ``walCommit``, ``commitOffsets``, ``queryPlanning``, ``latestOffset``,
``getBatch`` are the engine's bookkeeping around it), and the Spark jobs run inside
triggers (per batch) and outside them (the run's start: checks, planning).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

_DURATIONS = ("triggerExecution", "addBatch", "walCommit", "commitOffsets", "queryPlanning",
              "latestOffset", "getBatch")  # fmt: skip


def _ms(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


class EventLog:
    def __init__(self, folder: Path) -> None:
        self.jobs: list[dict[str, Any]] = []  # start, end, task run/cpu/gc ms
        self.triggers: list[dict[str, Any]] = []  # start, end, name, batch, durations
        stage_tasks: dict[int, dict[str, float]] = {}
        stage_of_job: dict[int, list[int]] = {}
        starts: dict[int, float] = {}
        ends: dict[int, float] = {}
        # one file per application (or, with rolling logs, a folder of events_* files)
        files = sorted(
            f for f in (folder.rglob("*") if folder.is_dir() else [folder])
            if f.is_file() and not f.name.startswith(("appstatus", "."))
        )  # fmt: skip
        for f in files:
            with open(f) as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    e = json.loads(line)
                    kind = e.get("Event", "")
                    if kind == "SparkListenerJobStart":
                        starts[e["Job ID"]] = e["Submission Time"]
                        stage_of_job[e["Job ID"]] = e["Stage IDs"]
                    elif kind == "SparkListenerJobEnd":
                        ends[e["Job ID"]] = e["Completion Time"]
                    elif kind == "SparkListenerTaskEnd":
                        m = e.get("Task Metrics") or {}
                        t = stage_tasks.setdefault(e["Stage ID"], {"run_ms": 0.0, "gc_ms": 0.0})
                        t["run_ms"] += m.get("Executor Run Time", 0)
                        t["gc_ms"] += m.get("JVM GC Time", 0)
                    elif kind.endswith("QueryProgressEvent"):
                        p = e["progress"]
                        start = _ms(p["timestamp"])
                        d = p.get("durationMs", {})
                        self.triggers.append({
                            "start": start, "end": start + d.get("triggerExecution", 0),
                            "name": p.get("name"), "batch": p.get("batchId"),
                            **{k: d.get(k, 0) for k in _DURATIONS},
                        })  # fmt: skip
        for job, start in starts.items():
            tasks = [stage_tasks.get(s, {}) for s in stage_of_job.get(job, [])]
            self.jobs.append({
                "start": start, "end": ends.get(job, start),
                "task_run_ms": sum(t.get("run_ms", 0.0) for t in tasks),
                "gc_ms": sum(t.get("gc_ms", 0.0) for t in tasks),
            })  # fmt: skip

    def summary(self, began_ms: float, ended_ms: float) -> dict[str, Any]:
        """What Spark did between ``began_ms`` and ``ended_ms`` (one run)."""
        triggers = [t for t in self.triggers if began_ms <= t["start"] <= ended_ms]
        jobs = [j for j in self.jobs if began_ms <= j["start"] <= ended_ms]

        def in_trigger(j: dict[str, Any]) -> bool:
            return any(t["start"] <= j["start"] <= t["end"] for t in triggers)

        inside = [j for j in jobs if in_trigger(j)]
        outside = [j for j in jobs if not in_trigger(j)]
        totals = {k: sum(t[k] for t in triggers) for k in _DURATIONS}
        n = max(1, len(triggers))
        return {
            "triggers": len(triggers),
            # from the run's start to its query's first trigger: checks, the state, planning
            # the views, starting the query and its Python source (a fresh Python process)
            "first_trigger_after_ms": round(triggers[0]["start"] - began_ms) if triggers else None,
            "trigger_ms": totals,
            # the engine's time per trigger outside foreachBatch
            "bookkeeping_ms_per_trigger": round(
                (totals["triggerExecution"] - totals["addBatch"]) / n
            ),
            "spark_jobs_in_batches": len(inside),
            "spark_jobs_per_batch": round(len(inside) / n, 2),
            "spark_job_ms_in_batches": round(sum(j["end"] - j["start"] for j in inside)),
            "spark_jobs_outside_batches": len(outside),
            "spark_job_ms_outside_batches": round(sum(j["end"] - j["start"] for j in outside)),
            "task_run_ms": round(sum(j["task_run_ms"] for j in jobs)),
            "jvm_gc_ms": round(sum(j["gc_ms"] for j in jobs)),
        }


def attach(results: Any, log: EventLog) -> None:
    """Add ``spark`` (an :meth:`EventLog.summary`) to every dict in ``results`` (nested)
    that has a run's ``began_ms`` and ``ended_ms``."""
    if isinstance(results, dict):
        if "began_ms" in results and "ended_ms" in results:
            results["spark"] = log.summary(results["began_ms"], results["ended_ms"])
        for value in results.values():
            attach(value, log)
    elif isinstance(results, list):
        for value in results:
            attach(value, log)
