"""The Markdown tables and the plots of a day's benchmark results (from its JSON).

    .venv/bin/python benchmarks/report.py benchmarks/results/<date>.json [--before <old>.json]

The goals (issues 12 and 13) are printed next to the figures, met or not; the
comparison with an earlier run (``--before``; by default the 2026-11-22 figures, taken
before the batch path was rewritten) matches runs by log and batch size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BEFORE = Path(__file__).resolve().parent / "results" / "2026-11-22.json"

GOAL_EVENTS = 150_000
GOAL_FLOOR = 0.25
GOAL_NAIVE = 1.0
GOAL_LAG_P99_MS = 2000
GOAL_RSS_MB = 2048
GOAL_SCALING = 1.2
GOAL_SPEEDUP = 10


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**not met**")


def write_report(data: dict[str, Any], stem: Path, before: Path | None = BEFORE) -> str:
    old = json.loads(before.read_text()) if before and before.exists() else None
    lines = [f"# deltamv benchmarks, {data['date']}", ""]
    runs = data.get("runs", [])
    if runs:
        m = runs[-1]["machine"]
        lines += [
            f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['ram_gb']} GB RAM; Python "
            f"{m['python']}, {m['java']}, Spark {m['spark']} ({m['spark_master']}), delta-rs "
            f"{m['delta_rs']}, pyarrow {m['pyarrow']}; commit {m['git']}. The machine is shared: "
            "2 cores, so a load average above 2 means other work competed; each figure has the "
            "load average (1 min) taken when it started.",
            "",
            "| run | variant | sections | started | load at start | load at end | seconds |",
            "|---:|---|---|---|---:|---:|---:|",
        ]
        for i, r in enumerate(runs):
            lines.append(
                f"| {i} | {r['variant']} | {', '.join(r['sections'])} | {r.get('started', '')} | "
                f"{r['load_at_start']} | {r['load_at_end']} | {r['seconds']} |"
            )
        lines.append("")
    retried = _retried(data)
    if retried:
        lines += [
            "Runs started again from scratch because Spark's Python worker did not connect "
            f"back within its fixed 10 s (load far above 2 cores): {', '.join(retried)}.",
            "",
        ]
    goals: list[tuple[str, str, str]] = []
    if data.get("throughput"):
        lines += _throughput(data["throughput"], goals)
        _plot_throughput(data["throughput"], stem)
    if data.get("profile"):
        lines += _profile(data["profile"])
    if data.get("freshness"):
        lines += _freshness(data["freshness"], goals)
        _plot_lag(data["freshness"], stem)
    if data.get("scaling"):
        lines += _scaling(data["scaling"], goals)
        _plot_scaling(data["scaling"], stem)
    if data.get("ivm"):
        lines += _ivm(data["ivm"], goals)
    if data.get("memory"):
        lines += _memory(data["memory"], goals)
    if goals:
        lines += ["## Goals (issues 12 and 13)", "", "| goal | measured | |", "|---|---|---|"]
        lines += [f"| {g} | {m} | {ok} |" for g, m, ok in goals]
        lines.append("")
    if old:
        lines += _before_after(data, old)
    text = "\n".join(lines)
    stem.with_suffix(".md").write_text(text + "\n")
    return text


def _retried(value: Any, where: str = "") -> list[str]:
    """Where a run was retried (``retries`` > 0), as ``section/name xN``."""
    out: list[str] = []
    if isinstance(value, dict):
        if value.get("retries"):
            out.append(f"{where} x{value['retries']}")
        for k, v in value.items():
            name = v.get("case") or v.get("log") or k if isinstance(v, dict) else k
            out += _retried(v, f"{where}/{name}" if where else str(name))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _retried(v, f"{where}[{i}]")
    return out


# -- sections ---------------------------------------------------------------------------
def _throughput(rows: list[dict[str, Any]], goals: list[tuple[str, str, str]]) -> list[str]:
    lines = [
        "## Throughput (warm session, log read to committed view versions)",
        "",
        "deltamv: `ViewJob.run(once=True)`, end to end (checks, planning, state, every batch, "
        "Spark's streaming bookkeeping); *in batches*: the sum of its `BatchReport` durations. "
        "naive: `benchmarks/baseline.py`. floor: pyarrow reads the log and writes Parquet "
        "once. Ratios are throughput ratios (their time / deltamv's time).",
        "",
        "| log | events | MB | segments/batch | batches | deltamv s | in batches s | events/s | "
        "events/s in batches | naive s | deltamv/naive | floor s | deltamv/floor | "
        "Spark jobs/batch (deltamv, naive) | load (deltamv, naive, floor) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        mv, nv, fl = r["deltamv"], r["naive"], r["floor"]
        jobs = (
            f"{mv.get('spark', {}).get('spark_jobs_per_batch', '')}, "
            f"{nv.get('spark', {}).get('spark_jobs_per_batch', '')}"
        )
        lines.append(
            f"| {r['log']} | {r['events']} | {r['bytes'] / 1e6:.1f} | {r['segments_per_batch']} | "
            f"{mv['batches']} | {mv['seconds']:.2f} | {mv['batch_seconds']:.2f} | "
            f"{r['deltamv_events_per_s']} | {r['deltamv_batch_events_per_s']} | "
            f"{nv['seconds']:.2f} | {r['ratio_to_naive']} | {fl['seconds']:.2f} | "
            f"{r['ratio_to_floor']} | {jobs} | {mv.get('load')}, {nv.get('load')}, "
            f"{fl.get('load')} |"
        )
    lines.append("")
    large = [r for r in rows if r["segments_per_batch"] >= 1000]
    if large:
        best = max(large, key=lambda r: r["deltamv_events_per_s"])
        goals.append((
            f">= {GOAL_EVENTS // 1000}k change events/s end to end, large batches",
            f"best {best['deltamv_events_per_s']} ({best['log']} x{best['segments_per_batch']}); "
            f"in batches only: {best['deltamv_batch_events_per_s']}",
            _met(best["deltamv_events_per_s"] >= GOAL_EVENTS),
        ))  # fmt: skip
        worst = min(large, key=lambda r: r["ratio_to_floor"])
        goals.append((
            f">= {GOAL_FLOOR}x the pyarrow floor (same run)",
            ", ".join(f"{r['log']} x{r['segments_per_batch']}: {r['ratio_to_floor']}"
                      for r in large),
            _met(worst["ratio_to_floor"] >= GOAL_FLOOR),
        ))  # fmt: skip
    goals.append((
        f">= {GOAL_NAIVE}x the naive pipeline at every batch size",
        ", ".join(f"{r['log']} x{r['segments_per_batch']}: {r['ratio_to_naive']}" for r in rows),
        _met(all(r["ratio_to_naive"] >= GOAL_NAIVE for r in rows)),
    ))  # fmt: skip
    spark_rows = [r for r in rows if r["deltamv"].get("spark")]
    if spark_rows:
        lines += [
            "Spark's micro-batch bookkeeping per trigger (event log: `triggerExecution - "
            "addBatch`, i.e. WAL and commit-log writes, planning the unused batch DataFrame, "
            "offsets) against the deltamv batch itself (`addBatch`):",
            "",
            "| log | segments/batch | triggers | addBatch ms | walCommit ms | commitOffsets ms | "
            "queryPlanning ms | latestOffset ms | bookkeeping ms/trigger | outside batches s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in spark_rows:
            s = r["deltamv"]["spark"]
            t = s["trigger_ms"]
            lines.append(
                f"| {r['log']} | {r['segments_per_batch']} | {s['triggers']} | {t['addBatch']} | "
                f"{t['walCommit']} | {t['commitOffsets']} | {t['queryPlanning']} | "
                f"{t['latestOffset']} | {s['bookkeeping_ms_per_trigger']} | "
                f"{r['deltamv']['outside_batches_seconds']} |"
            )
        lines.append("")
    return lines


def _profile(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["## Where a run's time goes (profile)", ""]
    for p in runs:
        batch_total = p["batch_seconds"] or 1e-9
        lines += [
            f"### {p['log']} x{p['segments_per_batch']}: {p['events']} events, {p['batches']} "
            f"batches, {p['seconds']} s end to end, {p['batch_seconds']} s in batches "
            f"(load {p.get('load')} -> {p.get('load_end')})",
            "",
            "Per phase (`BatchReport.phases`, summed over the run's batches):",
            "",
            "| phase | seconds | share of batch time | ms per batch |",
            "|---|---:|---:|---:|",
        ]
        for k, v in p["phases"].items():
            lines.append(
                f"| {k} | {v:.3f} | {100 * v / batch_total:.0f}% | {1000 * v / p['batches']:.0f} |"
            )
        lines.append(f"| batches (sum of durations) | {p['batch_seconds']:.3f} | 100% | "
                     f"{1000 * p['batch_seconds'] / p['batches']:.0f} |")  # fmt: skip
        outside = p["outside_batches_seconds"]
        lines.append(f"| outside batches (start, Spark bookkeeping) | {outside:.3f} | | |")
        lines.append("")
        s = p.get("spark")
        if s:
            lines += [
                f"Spark (event log): first trigger {s.get('first_trigger_after_ms', '?')} ms after "
                f"the run's start; {s['triggers']} triggers, bookkeeping "
                f"{s['bookkeeping_ms_per_trigger']} ms per trigger outside `foreachBatch`; "
                f"{s['spark_jobs_in_batches']} Spark jobs inside batches "
                f"({s['spark_job_ms_in_batches']} ms), {s['spark_jobs_outside_batches']} outside "
                f"({s['spark_job_ms_outside_batches']} ms).",
                "",
            ]
        sampled = p.get("sampled") or {}
        if sampled:
            lines += [
                f"The main thread waited {sampled['waiting_for_query_s']} s on the streaming "
                "query (the batches run in Spark's callback thread meanwhile); the run's time "
                "outside batches that no Python frame of deltamv holds is Spark's: starting the "
                "query and its Python source, offsets, WAL and commit log.",
                "",
            ]
        for part, title in (("batch", "inside batches"), ("start", "outside batches")):
            d = sampled.get(part)
            if not d:
                continue
            lines += [
                f"Driver Python, sampled every {sampled['interval_s'] * 1000:.0f} ms, {title} "
                f"({d['seconds']} s sampled): by function (inclusive) and by line (own time, "
                "`-> X`: waiting in X)",
                "",
                "| function (inclusive) | s | line (own) | s |",
                "|---|---:|---|---:|",
            ]
            inc, own = d["inclusive"][:15], d["own"][:15]
            for i in range(max(len(inc), len(own))):
                a = inc[i] if i < len(inc) else ("", "")
                b = own[i] if i < len(own) else ("", "")
                lines.append(f"| `{a[0]}` | {a[1]} | `{b[0]}` | {b[1]} |")
            lines.append("")
    return lines


def _live_runs(fr: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    runs = [
        (f"{r['rate']} txn/s (ran {r.get('achieved_rate', '?')}), {r['trigger']}", r)
        for r in fr.get("steady", [])
    ]
    runs += [(f"large txns, {r['watermark_mode']}", r) for r in fr.get("large_txn_modes", [])]
    return [(n, r) for n, r in runs if r.get("versions") is not None]


def _freshness(fr: dict[str, Any], goals: list[tuple[str, str, str]]) -> list[str]:
    lines = [
        "## Freshness (live simulator, continuous job, lag a reader sees)",
        "",
        "Lag: now - the latest committed version's watermark time, sampled every 50 ms over the "
        "run (from 3 s after the first commit to the simulator's end). *at commit*: the lag of "
        "each version when it was committed. *upstream's own lag*: the worst lag of the "
        "simulator's own global watermark during a large transaction's prewrite phase (a "
        "start-ts watermark waits for it): no reader of any pipeline can be fresher than that.",
        "",
        "| run | trigger | mode | versions | lag p50 ms | lag p99 ms | max ms | at commit p50 ms | "
        "batch p50 ms | batch p99 ms | events/batch p50 | Spark bookkeeping ms/trigger | "
        "upstream's own lag max ms (large txns: n, prewrite ms) | load |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name, r in _live_runs(fr):
        book = r.get("spark", {}).get("bookkeeping_ms_per_trigger", "")
        big = r.get("large_txns") or {}
        upstream = (
            f"{big.get('max_lag_ms')} ({big.get('large_txns')}, {big.get('prewrite_ms', 0):.0f})"
            if big.get("large_txns")
            else ""
        )
        lines.append(
            f"| {name} | {r['trigger']} | {r['watermark_mode']} | {r['versions']} | "
            f"{r.get('reader_p50_ms')} | {r.get('reader_p99_ms')} | {r.get('reader_max_ms')} | "
            f"{r.get('commit_p50_ms')} | {r.get('batch_ms_p50')} | {r.get('batch_ms_p99')} | "
            f"{r.get('events_per_batch_p50')} | {book} | {upstream} | {r.get('load')} -> "
            f"{r.get('load_end')} |"
        )
    lines.append("")
    # Issue 13's goals: the lag's p99 at most 2 s with a 1-second trigger at 200 and 2,000
    # txn/s; large transactions not raising it in min-commit-ts mode. (In start-ts mode
    # the upstream's own watermark waits for a large transaction's prewrite, 1 s here: no
    # reader of any pipeline sees fresher; shown above, not a goal.)
    steady = [(n, r) for n, r in _live_runs({"steady": fr.get("steady", [])})
              if r["trigger"] == "1 second"]  # fmt: skip
    if steady:
        goals.append((
            f"lag p99 <= {GOAL_LAG_P99_MS / 1000:.0f} s, 1-second trigger, 200 and 2,000 txn/s",
            ", ".join(f"{n}: {r.get('reader_p99_ms')} ms" for n, r in steady),
            _met(all((r.get("reader_p99_ms") or 1e9) <= GOAL_LAG_P99_MS for _, r in steady)),
        ))  # fmt: skip
    base = next((r for _, r in steady if r["rate"] == 200), None)
    large = next((r for r in fr.get("large_txn_modes", [])
                  if r["watermark_mode"] == "min-commit-ts" and r.get("versions")), None)  # fmt: skip
    if base and large and base.get("reader_p99_ms") and large.get("reader_p99_ms"):
        p99, steady_p99 = large["reader_p99_ms"], base["reader_p99_ms"]
        goals.append((
            "large transactions do not raise the lag in min-commit-ts mode (p99 <= 2 s and"
            " within 10% of the steady run at the same rate)",
            f"{p99} ms with large txns against {steady_p99} ms steady (200 txn/s)",
            _met(p99 <= GOAL_LAG_P99_MS and p99 <= 1.1 * steady_p99),
        ))  # fmt: skip
    return lines


def _scaling(rows: list[dict[str, Any]], goals: list[tuple[str, str, str]]) -> list[str]:
    base = next((r for r in rows if r["rows"] == 10_000), None)
    lines = [
        "## Scaling (fixed change per batch, growing source table)",
        "",
        "Bank views plus two join views (`transfer_owner`, `moved_by_owner`), each in the "
        "job's own mode; the same log at every size, `accounts` padded. Written: what the "
        "batch's commits wrote (`BatchReport.written`), p50 per batch. Start: the run's time "
        "outside batches (snapshot load into the state, first versions).",
        "",
        "| accounts | batches | events/batch | released rows/batch | batch p50 ms | batch max ms | "
        "p50 / p50 at 10k | written rows/batch | files/batch | bytes/batch | start s | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ratio = (
            round(r["batch_ms_p50"] / base["batch_ms_p50"], 2)
            if base and base.get("batch_ms_p50") and r.get("batch_ms_p50")
            else ""
        )
        w = r.get("written_per_batch", {})
        lines.append(
            f"| {r['rows']} | {r.get('steady_batches', r['batches'])} | {r['events_per_batch']} | "
            f"{r.get('released_per_batch', '')} | {r['batch_ms_p50']} | {r['batch_ms_max']} | "
            f"{ratio} | {w.get('rows', '')} | {w.get('files', '')} | {w.get('bytes', '')} | "
            f"{r.get('start_seconds', '')} | {r.get('load', '')} -> {r.get('load_end', '')} |"
        )
    lines.append("")
    lines += ["Phases, p50 ms per batch:", "",
              "| accounts | read | match | maintain | state | publish | finish |",
              "|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        p = r.get("phase_ms_p50", {})
        lines.append(
            f"| {r['rows']} | "
            + " | ".join(
                str(p.get(k, ""))
                for k in ("read", "match", "maintain", "state", "publish", "finish")
            )
            + " |"
        )
    lines.append("")
    top = max(rows, key=lambda r: r["rows"])
    if base and top is not base and base.get("batch_ms_p50") and top.get("batch_ms_p50"):
        ratio = top["batch_ms_p50"] / base["batch_ms_p50"]
        goals.append((
            f"batch p50 at the largest table within {GOAL_SCALING}x of 10k",
            f"{top['rows']}: {top['batch_ms_p50']} ms vs {base['batch_ms_p50']} ms = {ratio:.2f}x "
            f"(load {top.get('load')} vs {base.get('load')})",
            _met(ratio <= GOAL_SCALING) + ("" if top["rows"] >= 10_000_000 else " (not at 10M)"),
        ))  # fmt: skip
    return lines


def _ivm(sets: list[dict[str, Any]], goals: list[tuple[str, str, str]]) -> list[str]:
    lines = [
        "## Incremental vs recompute (same batches, one view per job, `maintain` key)",
        "",
        "| source rows (accounts) | change/batch | shape | view | incremental p50 ms | "
        "recompute p50 ms | recompute / incremental | written/batch inc (rows, bytes) | "
        "written/batch rec (rows, bytes) | start s (inc, rec) | load (inc, rec) |",
        "|---:|---|---|---|---:|---:|---:|---|---|---|---|",
    ]
    for s in sets:
        change = f"{s['changed_accounts_per_batch']} accounts + {s['inserted_transfers_per_batch']} transfers"
        for r in s["shapes"]:
            i, c = r["incremental"], r["recompute"]
            wi, wc = i["written_per_batch"], c["written_per_batch"]
            lines.append(
                f"| {s['accounts']} | {change} | {r['shape']} | `{r['view']}` | "
                f"{i['batch_ms_p50']} | {c['batch_ms_p50']} | {r['speedup']} | "
                f"{wi['rows']}, {wi['bytes']} | {wc['rows']}, {wc['bytes']} | "
                f"{i['start_seconds']}, {c['start_seconds']} | {i['load']}, {c['load']} |"
            )
        lines.append("")
        if s["accounts"] >= 10_000_000 or s is sets[-1]:
            ok = all((r["speedup"] or 0) >= GOAL_SPEEDUP for r in s["shapes"])
            goals.append((
                f"incremental >= {GOAL_SPEEDUP}x faster than recompute, 0.1% change",
                f"{s['accounts']} rows: "
                + ", ".join(f"{r['shape']} {r['speedup']}x" for r in s["shapes"]),
                _met(ok) + ("" if s["accounts"] >= 10_000_000 else " (not at 10M)"),
            ))  # fmt: skip
    return lines


def _memory(rows: list[dict[str, Any]], goals: list[tuple[str, str, str]]) -> list[str]:
    lines = [
        "## Memory (fresh `deltamv run --once`, spark.driver.memory = 1g)",
        "",
        "| case | events | exit | seconds | peak RSS MB | by process at the peak (MB) | load |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(r["peak_parts_mb"].items()))
        lines.append(
            f"| {r['case']} | {r['events']} | {r['exit_code']} | {r['seconds']} | "
            f"{r['peak_rss_mb']} | {parts} | {r.get('load', '')} -> {r.get('load_end', '')} |"
        )
    lines.append("")
    big = next((r for r in rows if r["case"].startswith("txn-")), None)
    if big:
        goals.append((
            f"2M-row transaction passes, peak RSS of the process tree <= {GOAL_RSS_MB} MB",
            f"exit {big['exit_code']}, {big['peak_rss_mb']} MB",
            _met(big["exit_code"] == 0 and big["peak_rss_mb"] <= GOAL_RSS_MB),
        ))  # fmt: skip
    return lines


def _before_after(data: dict[str, Any], old: dict[str, Any]) -> list[str]:
    lines = [
        f"## Before and after (before: {old['date']}, load {old.get('load_at_start')} at its "
        "start)",
        "",
        "| measure | before | load | after | load | after / before |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, a: float | None, la: Any, b: float | None, lb: Any) -> None:
        if a is None or b is None:
            return
        lines.append(f"| {name} | {a} | {la} | {b} | {lb} | {b / a:.2f} |" if a else "")

    for r in data.get("throughput", []):
        o = next((x for x in old.get("throughput", []) if x["log"] == r["log"]
                  and x["segments_per_batch"] == r["segments_per_batch"]), None)  # fmt: skip
        if o:
            row(f"throughput {r['log']} x{r['segments_per_batch']}, events/s",
                o["deltamv_events_per_s"], o["load"], r["deltamv_events_per_s"], r["load"])  # fmt: skip
            row(f"throughput {r['log']} x{r['segments_per_batch']}, deltamv/naive",
                o["ratio_to_naive"], o["load"], r["ratio_to_naive"], r["load"])  # fmt: skip
    fr = data.get("freshness", {})
    ofr = old.get("freshness", {})
    new_200 = next((r for r in fr.get("steady", []) if r["rate"] == 200
                    and r["trigger"] == "1 second"), None)  # fmt: skip
    old_200 = next((r for r in ofr.get("triggers", []) if r["trigger"] == "1 second"), None)
    if new_200 and old_200:
        for k in ("reader_p50_ms", "reader_p99_ms", "batch_ms_p50"):
            row(f"freshness 200 txn/s, 1 s trigger, {k}", old_200.get(k), old.get("load_at_start"),
                new_200.get(k), new_200.get("load"))  # fmt: skip
    for mode in ("start-ts", "min-commit-ts"):
        a = next((r for r in ofr.get("large_txn_modes", []) if r["watermark_mode"] == mode), None)
        b = next((r for r in fr.get("large_txn_modes", []) if r["watermark_mode"] == mode), None)
        if a and b:
            row(f"freshness large txns {mode}, reader_p99_ms", a.get("reader_p99_ms"),
                old.get("load_at_start"), b.get("reader_p99_ms"), b.get("load"))  # fmt: skip
    for r in data.get("scaling", []):
        o = next((x for x in old.get("scaling", []) if x["rows"] == r["rows"]), None)
        if o:
            row(f"scaling {r['rows']} accounts, batch p50 ms (before: 4 views, recompute)",
                o["batch_ms_p50"], old.get("load_at_start"), r["batch_ms_p50"], r.get("load"))  # fmt: skip
    for r in data.get("memory", []):
        o = next((x for x in old.get("memory", []) if x["case"] == r["case"]), None)
        if o:
            row(f"memory {r['case']}, peak RSS MB", o["peak_rss_mb"], old.get("load_at_start"),
                r["peak_rss_mb"], r.get("load"))  # fmt: skip
            row(f"memory {r['case']}, seconds", o["seconds"], old.get("load_at_start"),
                r["seconds"], r.get("load"))  # fmt: skip
    lines.append("")
    return [line for line in lines if line != ""] + [""]


# -- plots ------------------------------------------------------------------------------
def _plot_throughput(rows: list[dict[str, Any]], stem: Path) -> None:
    labels = [f"{r['log']}\nx{r['segments_per_batch']}" for r in rows]
    series = [
        ("deltamv", [r["deltamv_events_per_s"] for r in rows]),
        ("naive", [r["naive_events_per_s"] for r in rows]),
        ("floor (pyarrow)", [r["floor_events_per_s"] for r in rows]),
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.27
    for i, (name, values) in enumerate(series):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], values, width, label=name)
    ax.axhline(GOAL_EVENTS, color="grey", linestyle=":", label="goal 150k/s")
    ax.set_xticks(range(len(rows)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("change events / s (log scale)")
    ax.set_title("Throughput, log to committed views (end to end)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{stem}-throughput.png", dpi=110)
    plt.close(fig)


def _plot_lag(fr: dict[str, Any], stem: Path) -> None:
    runs = [(n, r) for n, r in _live_runs(fr) if r.get("reader_samples")]
    if not runs:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.boxplot([[s / 1000 for s in r["reader_samples"]] for _, r in runs], whis=(1, 99))
    ax.axhline(GOAL_LAG_P99_MS / 1000, color="grey", linestyle=":", label="goal: p99 <= 2 s")
    ax.set_xticks(range(1, len(runs) + 1), [n.replace(", ", "\n") for n, _ in runs])
    ax.set_ylabel("watermark lag seen by a reader (s)")
    ax.set_title("Freshness: lag distribution (whiskers p1-p99)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{stem}-lag.png", dpi=110)
    plt.close(fig)


def _plot_scaling(rows: list[dict[str, Any]], stem: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["rows"] for r in rows]
    ax.plot(xs, [(r["batch_ms_p50"] or 0) / 1000 for r in rows], "o-", label="p50")
    ax.plot(xs, [(r["batch_ms_max"] or 0) / 1000 for r in rows], "x--", label="max")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("accounts (source table rows)")
    ax.set_ylabel("seconds per batch")
    ax.set_title("Scaling at a fixed change per batch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{stem}-scaling.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--before", type=Path, default=BEFORE)
    a = parser.parse_args()
    print(write_report(json.loads(a.results.read_text()), a.results.with_suffix(""), a.before))
