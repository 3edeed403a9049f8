"""deltamv benchmarks: throughput vs a naive pipeline and the physical floor, a profile,
freshness, scaling, incremental vs recompute, memory. ``make bench`` (quick) or
``make bench FULL=1``; ``--only a,b`` runs some sections (also the long ``scaling-10m``
and ``ivm-10m``, which are in no set).

Writes ``benchmarks/results/<date>.json``, ``<date>.md`` and ``<date>-*.png``; prints the
tables. Sections run on the same day merge into that day's file (``--fresh`` starts it
anew). Never asserts a time. Timings on a shared machine vary with its load: the load
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
from deltamv_run import run_job
from eventlog import EventLog, attach
from floor import run_floor
from freshness import run_live
from ivm import run_ivm
from memory import big_transaction_log, run_memory
from report import write_report
from scaling import run_scaling

RESULTS = Path(__file__).resolve().parent / "results"

SECTIONS = ("throughput", "profile", "freshness", "scaling", "ivm", "memory")
SEPARATE = ("scaling-10m", "ivm-10m")  # long: run alone (``--only``), merged into the day's file

QUICK: dict[str, Any] = {
    # (name, accounts, transactions) -> roughly 100k and 280k events
    "logs": [("bank-10k", 10_000, 13_000), ("bank-100k", 100_000, 12_000)],
    "batch_segments": {"bank-10k": [16, 1000], "bank-100k": [16, 1000]},
    "profile": [("bank-100k", 1000), ("bank-10k", 16)],
    "freshness": {
        "steady": [(200, "1 second"), (2000, "1 second")],
        "duration": 30,
        "large_duration": 30,
    },
    "scaling": [10_000, 100_000, 1_000_000],
    "ivm": {"accounts": 1_000_000, "batches": 5},
    "big_txn_rows": 2_000_000,
    "backlog": ("bank-10k", None),
}
FULL: dict[str, Any] = {
    "logs": [
        ("bank-10k", 10_000, 13_000),
        ("bank-100k", 100_000, 40_000),
        ("bank-1m", 1_000_000, 40_000),
    ],
    "batch_segments": {"bank-10k": [8, 16, 32, 1000], "bank-100k": [16, 1000], "bank-1m": [1000]},
    "profile": [("bank-1m", 1000), ("bank-10k", 16)],
    "freshness": {
        "steady": [(200, "1 second"), (2000, "1 second"), (200, "500 ms"), (200, "5 seconds")],
        "duration": 60,
        "large_duration": 60,
    },
    "scaling": [10_000, 100_000, 1_000_000, 10_000_000],
    "ivm": {"accounts": 10_000_000, "batches": 6},
    "big_txn_rows": 2_000_000,
    "backlog": ("backlog-2m", (10_000, 260_000)),
}
# A few minutes of everything at toy sizes: checks that the benchmarks run (not figures).
SMOKE: dict[str, Any] = {
    "logs": [("bank-10k", 10_000, 13_000)],
    "batch_segments": {"bank-10k": [16]},
    "profile": [("bank-10k", 16)],
    "freshness": {"steady": [(200, "1 second")], "duration": 10, "large_duration": 10},
    "scaling": [10_000, 20_000],
    "ivm": {"accounts": 20_000, "batches": 3},
    "big_txn_rows": 20_000,
    "backlog": ("bank-10k", None),
}
# The separate targets: 10M source rows
SCALING_10M = [10_000_000]
IVM_10M = {"accounts": 10_000_000, "batches": 6}


def load() -> float:
    return round(os.getloadavg()[0], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full set (well over an hour)")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections: {', '.join(SECTIONS + SEPARATE)}",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="toy sizes: check that everything runs"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the day's results file afresh (default: merge these sections into it)",
    )
    args = parser.parse_args()
    plan = SMOKE if args.smoke else FULL if args.full else QUICK
    only = set(args.only.split(","))
    unknown = only - set(SECTIONS + SEPARATE)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)} (known: {SECTIONS + SEPARATE})")
    began = time.perf_counter()
    date = dt.date.today().isoformat()
    run: dict[str, Any] = {
        "variant": "smoke" if args.smoke else "full" if args.full else "quick",
        "sections": sorted(only),
        "machine": machine_facts(),
        "load_at_start": load(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out: dict[str, Any] = {}
    WORK.mkdir(parents=True, exist_ok=True)
    logs: dict[str, Path] = {}
    if only & {"throughput", "profile", "freshness"}:
        logs = {
            name: simulated(name, seed=1, txns=txns, accounts=accounts)
            for name, accounts, txns in plan["logs"]
        }
    template = simulated("bank-10k", seed=1, txns=13_000, accounts=10_000)

    if only - {"memory"}:
        # one folder per invocation: sections may run in parallel invocations, and each
        # reads back only its own session's log
        event_dir = WORK / f"eventlog-{os.getpid()}"
        shutil.rmtree(event_dir, ignore_errors=True)
        event_dir.mkdir(parents=True)
        conf = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(event_dir),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
        with spark_session(conf) as spark:
            say(f"warm-up (JIT, Python workers); load {load()}")
            warm = simulated("warm", seed=1, txns=1000, accounts=1000)
            run_job(spark, write_config(warm, WORK / "runs" / "warm"))
            run_baseline(
                spark,
                write_config(warm, WORK / "runs" / "warm-b"),
                WORK / "runs" / "warm-b" / "out",
            )
            if "throughput" in only:
                out["throughput"] = throughput(spark, logs, plan)
            if "profile" in only:
                out["profile"] = profile(spark, logs, plan)
            if "freshness" in only:
                out["freshness"] = freshness(spark, template, plan)
            if only & {"scaling", "scaling-10m"}:
                sim = simulated("scaling", seed=3, txns=6_000, accounts=10_000, snapshot_at=0.02)
                sizes = (plan["scaling"] if "scaling" in only else []) + (
                    SCALING_10M if "scaling-10m" in only and 10_000_000 not in plan["scaling"]
                    else []
                )  # fmt: skip
                say(f"scaling {sizes}")
                out["scaling"] = run_scaling(spark, sim, sizes, segments_per_batch=8)
            if "ivm" in only:
                say(f"incremental vs recompute at {plan['ivm']['accounts']} accounts")
                out["ivm"] = [run_ivm(spark, **plan["ivm"])]
            if "ivm-10m" in only and plan["ivm"]["accounts"] != IVM_10M["accounts"]:
                say("incremental vs recompute at 10M accounts")
                out.setdefault("ivm", []).append(run_ivm(spark, **IVM_10M))
        attach(out, EventLog(event_dir))
        shutil.rmtree(event_dir, ignore_errors=True)
    if "memory" in only:
        out["memory"] = memory(template, plan)
    run["load_at_end"] = load()
    run["seconds"] = round(time.perf_counter() - began)
    save(WORK / "smoke-results" if args.smoke else RESULTS, date, run, out, fresh=args.fresh)


def save(folder: Path, date: str, run: dict[str, Any], out: dict[str, Any], *, fresh: bool) -> None:
    """Write the day's JSON (merging sections into an earlier run's file unless ``fresh``),
    its Markdown and plots."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / date
    path = stem.with_suffix(".json")
    data: dict[str, Any] = {"date": date, "runs": []}
    if path.exists() and not fresh:
        data = json.loads(path.read_text())
    data["runs"].append(run)
    for key, value in out.items():
        if key == "scaling" and not fresh and data.get("scaling"):
            sizes = {r["rows"] for r in value}
            value = sorted([r for r in data["scaling"] if r["rows"] not in sizes] + value,
                           key=lambda r: r["rows"])  # fmt: skip
        if key == "ivm" and not fresh and data.get("ivm"):
            sizes = {r["accounts"] for r in value}
            value = sorted([r for r in data["ivm"] if r["accounts"] not in sizes] + value,
                           key=lambda r: r["accounts"])  # fmt: skip
        data[key] = value
        data.setdefault("section_runs", {})[key] = len(data["runs"]) - 1
    path.write_text(json.dumps(data, indent=1) + "\n")
    table = write_report(data, stem)
    print(table)
    say(f"wrote {stem}.json, {stem}.md and plots in {run['seconds']} s")


def throughput(spark: Any, logs: dict[str, Path], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """deltamv, the naive pipeline and the floor on the same log, one after the other."""
    rows = []
    for name, sim in logs.items():
        size = log_size(sim / "changelog")
        floor_load = load()
        floor = run_floor(sim / "changelog", WORK / "runs" / f"{name}-floor")
        floor["load"] = floor_load
        say(f"floor {name}: {floor['seconds']} s (load {floor_load})")
        for segments in plan["batch_segments"][name]:
            config = write_config(sim, WORK / "runs" / f"{name}-{segments}", max_segments=segments)
            mv_load = load()
            mv = run_job(spark, config, keep_reports=False)
            mv["load"] = mv_load
            naive_load = load()
            base = run_baseline(spark, config, WORK / "runs" / f"{name}-{segments}-naive")
            base["load"] = naive_load
            row = {
                "log": name,
                "segments_per_batch": segments,
                **size,
                "load": mv_load,
                "deltamv": mv,
                "naive": base,
                "floor": floor,
                "deltamv_events_per_s": round(size["events"] / mv["seconds"]),
                "deltamv_batch_events_per_s": round(
                    size["events"] / max(mv["batch_seconds"], 1e-3)
                ),
                "deltamv_mb_per_s": round(size["bytes"] / 1e6 / mv["seconds"], 2),
                "naive_events_per_s": round(size["events"] / base["seconds"]),
                "floor_events_per_s": round(size["events"] / floor["seconds"]),
                "ratio_to_naive": round(base["seconds"] / mv["seconds"], 2),
                "ratio_to_floor": round(floor["seconds"] / mv["seconds"], 3),
            }
            say(
                f"throughput {name} x{segments}: deltamv {mv['seconds']} s ({mv['batches']} batches,"
                f" {mv['batch_seconds']} s in batches; load {mv_load}), naive {base['seconds']} s"
                f" (load {naive_load}), floor {floor['seconds']} s"
            )
            rows.append(row)
    return rows


def profile(spark: Any, logs: dict[str, Path], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Where a run's time goes: each batch's phases (``BatchReport.phases``), Spark's
    side (event log) and the driver's Python stacks (sampled), for a large and a small
    batch size. Separate runs from the throughput ones (the sampler costs a little)."""
    out = []
    for name, segments in plan["profile"]:
        if name not in logs:
            continue
        config = write_config(
            logs[name], WORK / "runs" / f"profile-{name}-{segments}", max_segments=segments
        )
        before = load()
        mv = run_job(spark, config, sample=True)
        mv.update(log=name, segments_per_batch=segments, load=before, load_end=load())
        say(f"profile {name} x{segments}: {mv['seconds']} s, {mv['batches']} batches")
        out.append(mv)
    return out


def freshness(spark: Any, template: Path, plan: dict[str, Any]) -> dict[str, Any]:
    f = plan["freshness"]
    steady = [
        run_live(
            spark,
            f"rate{rate}-{trigger.replace(' ', '')}",
            template,
            trigger=trigger,
            rate=rate,
            duration=f["duration"],
            accounts=10_000,
        )
        for rate, trigger in f["steady"]
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
    return {"steady": steady, "large_txn_modes": modes}


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
