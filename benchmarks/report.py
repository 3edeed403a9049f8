"""The Markdown table and the plots of one benchmark run (from its JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_report(out: dict[str, Any], stem: Path) -> str:
    lines = [f"# deltamv benchmarks, {out['date']} ({out['variant']})", ""]
    m = out["machine"]
    lines += [
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['ram_gb']} GB RAM; Python {m['python']}, "
        f"{m['java']}, Spark {m['spark']} ({m['spark_master']}), delta-rs {m['delta_rs']}, "
        f"pyarrow {m['pyarrow']}; commit {m['git']}. Load average {out['load_at_start']} at start, "
        f"{out['load_at_end']} at end (2 cores: anything above 2 means other work competed). "
        f"Total {out['seconds']} s.",
        "",
    ]
    if out.get("throughput"):
        lines += [
            "## Throughput (warm session, log read to committed view versions)",
            "",
            "| log | events | MB | segments/batch | batches | deltamv s | events/s | MB/s | naive s | "
            "deltamv/naive | floor s | deltamv/floor | load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in out["throughput"]:
            lines.append(
                f"| {r['log']} | {r['events']} | {r['bytes'] / 1e6:.1f} | {r['segments_per_batch']} | "
                f"{r['deltamv']['batches']} | {r['deltamv']['seconds']:.1f} | {r['deltamv_events_per_s']} | "
                f"{r['deltamv_mb_per_s']} | {r['naive']['seconds']:.1f} | {r['ratio_to_naive']} | "
                f"{r['floor']['seconds']:.2f} | {r['ratio_to_floor']} | {r['load']} |"
            )
        lines.append("")
        lines.append(
            "deltamv/naive and deltamv/floor are throughput ratios (their time / deltamv's time): "
            "1.0 = as fast; the goal is deltamv/naive >= 0.8."
        )
        lines.append("")
        _plot_throughput(out["throughput"], stem)
    if out.get("profile"):
        p = out["profile"]
        lines += [f"## Where one batch's time goes ({p['run']}, {p['events']} events)", ""]
        lines += ["| phase | seconds | calls |", "|---|---:|---:|"]
        for phase, sec in sorted(p["phases"].items(), key=lambda kv: kv[0]):
            lines.append(f"| {phase} | {sec:.2f} | {p['calls'].get(phase, '')} |")
        lines += ["", "Spark jobs per phase (event log):", ""]
        lines += [
            "| phase | jobs | job ms | task run ms | JVM GC ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for phase, s in sorted(p["spark_by_phase"].items()):
            lines.append(
                f"| {phase} | {s['jobs']} | {s['job_ms']} | {s['task_run_ms']} | {s['gc_ms']} |"
            )
        lines.append("")
    if out.get("freshness"):
        fr = out["freshness"]
        lines += [
            "## Freshness (live simulator, 200 txn/s, continuous job)",
            "",
            "| run | trigger | mode | versions | lag p50 ms | lag p99 ms | max ms | at commit p50 ms | "
            "batch p50 ms |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in _live_runs(fr):
            lines.append(
                f"| {name} | {r['trigger']} | {r['watermark_mode']} | {r['versions']} | "
                f"{r.get('reader_p50_ms')} | {r.get('reader_p99_ms')} | {r.get('reader_max_ms')} | "
                f"{r.get('commit_p50_ms')} | {r.get('batch_ms_p50')} |"
            )
        lines.append("")
        _plot_lag(fr, stem)
    if out.get("scaling"):
        lines += ["## Scaling (fixed change rate, growing table)", ""]
        lines += [
            "| accounts | batches | events/batch | batch p50 ms | batch max ms |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in out["scaling"]:
            lines.append(
                f"| {r['rows']} | {r['batches']} | {r['events_per_batch']} | {r['batch_ms_p50']} | {r['batch_ms_max']} |"
            )
        lines.append("")
        _plot_scaling(out["scaling"], stem)
    if out.get("memory"):
        lines += ["## Memory (fresh `deltamv run --once`, spark.driver.memory = 1g)", ""]
        lines += [
            "| case | events | exit | seconds | peak RSS MB | by process |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in out["memory"]:
            parts = ", ".join(f"{k} {v}" for k, v in sorted(r["peak_parts_mb"].items()))
            lines.append(
                f"| {r['case']} | {r['events']} | {r['exit_code']} | {r['seconds']} | {r['peak_rss_mb']} | {parts} |"
            )
        lines.append("")
    text = "\n".join(lines)
    stem.with_suffix(".md").write_text(text + "\n")
    return text


def _live_runs(fr: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    runs = [(f"steady {r['trigger']}", r) for r in fr.get("triggers", [])]
    runs += [(f"large txns, {r['watermark_mode']}", r) for r in fr.get("large_txn_modes", [])]
    return [(n, r) for n, r in runs if r.get("versions") is not None]


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
    ax.set_xticks(range(len(rows)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("change events / s (log scale)")
    ax.set_title("Throughput, log to committed views")
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
    ax.set_xticks(range(1, len(runs) + 1), [n.replace(", ", "\n") for n, _ in runs])
    ax.set_ylabel("watermark lag seen by a reader (s)")
    ax.set_title("Freshness: lag distribution (whiskers p1-p99)")
    fig.tight_layout()
    fig.savefig(f"{stem}-lag.png", dpi=110)
    plt.close(fig)


def _plot_scaling(rows: list[dict[str, Any]], stem: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(
        [r["rows"] for r in rows],
        [(r["batch_ms_p50"] or 0) / 1000 for r in rows],
        "o-",
        label="p50",
    )
    ax.plot(
        [r["rows"] for r in rows],
        [(r["batch_ms_max"] or 0) / 1000 for r in rows],
        "x--",
        label="max",
    )
    ax.set_xscale("log")
    ax.set_xlabel("accounts (source table rows)")
    ax.set_ylabel("seconds per batch")
    ax.set_title("Scaling at a fixed change rate (recompute)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{stem}-scaling.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    path = Path(sys.argv[1])
    print(write_report(json.loads(path.read_text()), path.with_suffix("")))
