"""deltamv benchmarks: throughput vs a naive pipeline and the physical floor, freshness,
scaling, memory and a one-batch profile. ``make bench`` (quick) or ``make bench FULL=1``.

Writes ``benchmarks/results/<date>.json``, ``<date>.md`` and ``<date>-*.png``; prints the
table. Never asserts a time. Timings on a shared machine vary with its load: the load
average at each step is recorded next to the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import WORK, log_size, machine_facts, say, simulated, spark_session, write_config
from baseline import run_baseline
from deltamv_run import run_job, spark_jobs_by_phase
from floor import run_floor
from freshness import run_live
from memory import big_transaction_log, run_memory
from report import write_report
from scaling import run_scaling

RESULTS = Path(__file__).resolve().parent / "results"

QUICK: dict[str, Any] = {
    # (name, accounts, transactions) -> roughly 100k and 200k events
    "logs": [("bank-10k", 10_000, 13_000), ("bank-100k", 100_000, 12_000)],
    "batch_segments": {"bank-10k": [16, 1000], "bank-100k": [1000]},
    "freshness": {"triggers": ["1 second", "5 seconds"], "duration": 30, "large_duration": 30},
    "scaling": [10_000, 100_000, 1_000_000],
    "big_txn_rows": 2_000_000,
    "backlog": ("bank-10k", None),
}
FULL: dict[str, Any] = {
    "logs": [
        ("bank-10k", 10_000, 13_000),
        ("bank-100k", 100_000, 40_000),
        ("bank-1m", 1_000_000, 40_000),
    ],
    "batch_segments": {"bank-10k": [8, 32, 1000], "bank-100k": [32, 1000], "bank-1m": [1000]},
    "freshness": {
        "triggers": ["500 ms", "1 second", "2 seconds", "5 seconds", "10 seconds"],
        "duration": 60,
        "large_duration": 60,
    },
    "scaling": [10_000, 100_000, 1_000_000, 10_000_000],
    "big_txn_rows": 2_000_000,
    "backlog": ("backlog-2m", (10_000, 260_000)),
}


def load() -> float:
    return round(os.getloadavg()[0], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full set (about an hour)")
    parser.add_argument(
        "--only",
        default="throughput,profile,freshness,scaling,memory",
        help="comma-separated sections",
    )
    args = parser.parse_args()
    plan = FULL if args.full else QUICK
    only = set(args.only.split(","))
    began = time.perf_counter()
    out: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "variant": "full" if args.full else "quick",
        "machine": machine_facts(),
        "load_at_start": load(),
    }
    WORK.mkdir(parents=True, exist_ok=True)
    logs = {
        name: simulated(name, seed=1, txns=txns, accounts=accounts)
        for name, accounts, txns in plan["logs"]
    }
    template = logs["bank-10k"]

    if only & {"throughput", "profile", "freshness", "scaling"}:
        event_dir = WORK / "eventlog"
        shutil.rmtree(event_dir, ignore_errors=True)
        event_dir.mkdir(parents=True)
        conf = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(event_dir),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
        with spark_session(conf) as spark:
            say("warm-up (JIT, Python workers)")
            warm = simulated("warm", seed=1, txns=1000, accounts=1000)
            run_job(spark, write_config(warm, WORK / "runs" / "warm"))
            run_baseline(
                spark,
                write_config(warm, WORK / "runs" / "warm-b"),
                WORK / "runs" / "warm-b" / "out",
            )
            if "throughput" in only or "profile" in only:
                out["throughput"] = throughput(spark, logs, plan, profile="profile" in only)
                if "profile" in only:
                    out["profile"] = profile(out["throughput"], event_dir)
            if "freshness" in only:
                out["freshness"] = freshness(spark, template, plan)
            if "scaling" in only:
                say("scaling")
                sim = simulated("scaling", seed=3, txns=6_000, accounts=10_000, snapshot_at=0.02)
                out["scaling"] = run_scaling(spark, sim, plan["scaling"], segments_per_batch=8)
    if "memory" in only:
        out["memory"] = memory(template, plan)
    out["load_at_end"] = load()
    out["seconds"] = round(time.perf_counter() - began)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / out["date"]
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    table = write_report(out, stem)
    print(table)
    say(f"wrote {stem}.json, {stem}.md and plots in {out['seconds']} s")


def throughput(
    spark: Any, logs: dict[str, Path], plan: dict[str, Any], *, profile: bool
) -> list[dict[str, Any]]:
    rows = []
    for name, sim in logs.items():
        size = log_size(sim / "changelog")
        floor = run_floor(sim / "changelog", WORK / "runs" / f"{name}-floor")
        say(f"floor {name}: {floor['seconds']} s")
        for segments in plan["batch_segments"][name]:
            config = write_config(sim, WORK / "runs" / f"{name}-{segments}", max_segments=segments)
            before = load()
            mv = run_job(spark, config, profile=profile)
            base = run_baseline(spark, config, WORK / "runs" / f"{name}-{segments}-naive")
            row = {
                "log": name,
                "segments_per_batch": segments,
                **size,
                "load": before,
                "deltamv": mv,
                "naive": base,
                "floor": floor,
                "deltamv_events_per_s": round(size["events"] / mv["seconds"]),
                "deltamv_mb_per_s": round(size["bytes"] / 1e6 / mv["seconds"], 2),
                "naive_events_per_s": round(size["events"] / base["seconds"]),
                "floor_events_per_s": round(size["events"] / floor["seconds"]),
                "ratio_to_naive": round(base["seconds"] / mv["seconds"], 2),
                "ratio_to_floor": round(floor["seconds"] / mv["seconds"], 3),
            }
            say(
                f"throughput {name} x{segments}: deltamv {mv['seconds']} s ({mv['batches']} batches), "
                f"naive {base['seconds']} s, floor {floor['seconds']} s"
            )
            rows.append(row)
    return rows


def profile(rows: list[dict[str, Any]], event_dir: Path) -> dict[str, Any]:
    """Where the time of the largest single-batch run went."""
    single = [r for r in rows if r["deltamv"]["batches"] == 1] or rows
    chosen = max(single, key=lambda r: r["events"])
    mv = chosen["deltamv"]
    logs = sorted(event_dir.iterdir())
    spark_phases = spark_jobs_by_phase(logs[-1], mv.get("spans", [])) if logs else {}
    return {
        "run": f"{chosen['log']} x{chosen['segments_per_batch']}",
        "events": chosen["events"],
        "batch_seconds": mv["phases"].get("batch"),
        "phases": mv["phases"],
        "calls": mv["calls"],
        "spark_by_phase": spark_phases,
    }


def freshness(spark: Any, template: Path, plan: dict[str, Any]) -> dict[str, Any]:
    f = plan["freshness"]
    triggers = [
        run_live(
            spark,
            f"trigger-{t.replace(' ', '')}",
            template,
            trigger=t,
            duration=f["duration"],
            accounts=10_000,
        )
        for t in f["triggers"]
    ]
    large = dict(accounts=10_000, large_every=400, large_size=500, large_prewrite_ms=1000)
    modes = [
        run_live(
            spark,
            f"large-{mode}",
            template,
            trigger="1 second",
            duration=f["large_duration"],
            watermark_mode=mode,
            **large,
        )
        for mode in ("start-ts", "min-commit-ts")
    ]
    return {"triggers": triggers, "large_txn_modes": modes}


def memory(template: Path, plan: dict[str, Any]) -> list[dict[str, Any]]:
    rows = plan["big_txn_rows"]
    log = big_transaction_log(WORK / "logs" / "big-txn", rows)
    results = [run_memory(f"txn-{rows // 1000}k-rows", template, log, timeout=1500)]
    name, sizing = plan["backlog"]
    sim = (
        simulated(name, seed=1, txns=sizing[1], accounts=sizing[0])
        if sizing
        else simulated("bank-10k", seed=1, txns=13_000, accounts=10_000)
    )
    results.append(run_memory(f"backlog-{name}", template, sim / "changelog", timeout=1500))
    return results


if __name__ == "__main__":
    main()
