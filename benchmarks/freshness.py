"""Freshness: watermark lag of a continuously running job under steady live load.

The simulator runs live (wall-clock TSO, a segment per region every ``flush_ms``) in a
subprocess; the job runs continuously (``ViewJob.run(once=False)``, what ``deltamv run
CONFIG`` does) in a thread of the benchmark's warm Spark session, and is stopped when the
simulator is done. Lag is read back from the committed versions of one view:

- ``commit``: at each commit, commit time - (watermark >> 18): how old the newest
  version is when it appears;
- ``reader``: sampled every 50 ms over the measuring window, now - (watermark of the
  newest committed version >> 18): the staleness a reader sees at a random moment.

The job starts first, on an empty change-log folder that a relay thread fills by
hard-linking each segment the simulator publishes (within 20 ms; a hard link appears
atomically, as the contract asks), so the job's start-up (30 s on a loaded machine) is
not part of the run. The window starts 3 s after the job's first commit and ends when
the simulator stops.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from _common import ATTEMPTS, PYTHON, WORK, percentile, say, worker_timeout, write_config

from deltamv import delta
from deltamv.config import load_config
from deltamv.job import ViewJob

VIEW = "total_balance"


def run_live(spark: Any, name: str, template: Path, **options: Any) -> dict[str, Any]:
    """One live run (:func:`_run_live`); run again from scratch if the job's streaming
    query failed at its start because Spark's Python worker did not connect back in time
    (a loaded machine), recorded as ``retries``."""
    for attempt in range(ATTEMPTS):
        try:
            result = _run_live(spark, name, template, **options)
        except RuntimeError as exc:
            if not worker_timeout(exc) or attempt == ATTEMPTS - 1:
                raise
            say(f"freshness {name}: Python worker did not connect back in 10 s; again")
            continue
        result["retries"] = attempt
        return result
    raise AssertionError("unreachable")


def _run_live(
    spark: Any,
    name: str,
    template: Path,
    *,
    trigger: str,
    duration: float,
    rate: int = 200,
    watermark_mode: str = "start-ts",
    **sim_options: Any,
) -> dict[str, Any]:
    base = WORK / "live" / name
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    feed = base / "feed"
    feed.mkdir()
    # The bank workload's tables and views, from any bank run (the template).
    config_path = write_config(
        template, base / "job", changelog=feed, trigger=trigger, views=[VIEW]
    )
    config = load_config(config_path)
    job = ViewJob(config, spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run(once=False)
        except BaseException as exc:  # reported below, not hidden
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    began_ms = time.time() * 1000
    load = round(os.getloadavg()[0], 1)
    thread.start()
    while not spark.streams.active and not errors:  # the job is up and polling
        time.sleep(0.2)
    time.sleep(2)
    options = dict(
        seed=7,
        duration=duration,
        live=True,
        rate=rate,
        watermark_mode=watermark_mode,
        **sim_options,
    )
    script = (
        "import json, sys; from deltamv.sim import simulate, large_txn_summary; "
        "r = simulate('bank', sys.argv[1], **json.loads(sys.argv[2])); "
        "print(json.dumps({'events': r.events, 'transactions': r.transactions, "
        "'final_watermark': r.final_watermark, 'large': large_txn_summary(r)}))"
    )
    sim = subprocess.Popen(
        [PYTHON, "-c", script, str(base / "sim"), json.dumps(options)],
        stdout=subprocess.PIPE,
        text=True,
    )
    stop_relay = threading.Event()
    relay = threading.Thread(target=_relay, args=(base / "sim" / "changelog", feed, stop_relay))
    relay.start()
    out, _ = sim.communicate()
    stop_relay.set()
    relay.join()
    sim_end_ms = time.time() * 1000
    summary = json.loads(out.strip().splitlines()[-1])
    view_path = config.views[VIEW].path
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not errors:  # let the job catch up with the end
        infos = delta.versions(view_path) if Path(view_path, "_delta_log").exists() else []
        if infos and (infos[-1].watermark or 0) >= summary["final_watermark"]:
            break
        time.sleep(0.5)
    job.request_stop()
    thread.join(timeout=60)
    ended_ms = time.time() * 1000
    if errors:
        raise RuntimeError(f"live job {name} failed: {errors[0]}")
    infos = [v for v in delta.versions(view_path) if v.watermark]
    result = lag_stats(infos, sim_end_ms)
    reports = [r for r in job.reports if r.committed]
    phases = {
        k: percentile([r.phases.get(k, 0.0) * 1000 for r in reports], 50)
        for k in ("read", "match", "maintain", "state", "publish", "finish")
    }
    result.update(
        began_ms=began_ms,
        ended_ms=ended_ms,
        load=load,
        batch_ms_p99=percentile([r.duration_ms for r in reports], 99),
        batch_ms_max=max((r.duration_ms for r in reports), default=None),
        phase_ms_p50={k: round(v) for k, v in phases.items() if v is not None},
        events_per_batch_p50=percentile([r.events for r in reports], 50),
        load_end=round(os.getloadavg()[0], 1),
        trigger=trigger,
        watermark_mode=watermark_mode,
        rate=rate,
        sim_events=summary["events"],
        sim_transactions=summary["transactions"],
        achieved_rate=round(summary["transactions"] / duration),
        large_txns=summary["large"],
        batches=len(job.reports),
        batch_ms_p50=percentile([r.duration_ms for r in job.reports if r.committed], 50),
        sim_options={k: v for k, v in sim_options.items()},
    )
    say(
        f"freshness {name}: lag p50 {result['reader_p50_ms']} ms, p99 {result['reader_p99_ms']} ms "
        f"({result['versions']} versions, load {load})"
    )
    return result


def _relay(source: Path, feed: Path, stop: threading.Event) -> None:
    seen: set[Path] = set()
    while True:
        last = stop.is_set()
        for segment in sorted(source.glob("region-*/[0-9]*.*")) if source.exists() else []:
            if segment not in seen:
                target = feed / segment.parent.name / segment.name
                target.parent.mkdir(exist_ok=True)
                os.link(segment, target)
                seen.add(segment)
        if last:
            return
        time.sleep(0.02)


def lag_stats(
    infos: list[Any], end_ms: float, *, start_ms: float | None = None, step_ms: int = 50
) -> dict[str, Any]:
    """Lag at each commit in [start_ms, end_ms] and as a reader sees it, sampled every
    ``step_ms`` over that window (default start: 3 s after the first version)."""
    if not infos:
        return {"versions": 0}
    if start_ms is None:
        start_ms = infos[0].timestamp_ms + 3000
    window = [v for v in infos if start_ms <= v.timestamp_ms <= end_ms]
    at_commit = [v.timestamp_ms - (v.watermark >> 18) for v in window]
    reader: list[float] = []
    i = 0
    t = start_ms
    while t <= end_ms:
        while i + 1 < len(infos) and infos[i + 1].timestamp_ms <= t:
            i += 1
        reader.append(t - (infos[i].watermark >> 18))
        t += step_ms
    return {
        "versions": len(window),
        "window_s": round((end_ms - start_ms) / 1000, 1),
        "commit_p50_ms": percentile(at_commit, 50),
        "commit_p99_ms": percentile(at_commit, 99),
        "reader_p50_ms": percentile(reader, 50),
        "reader_p99_ms": percentile(reader, 99),
        "reader_max_ms": max(reader) if reader else None,
        "reader_samples": reader[::4],
    }
