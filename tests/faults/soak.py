"""Soak (``make soak``): a live simulator and a continuous job, side by side, for a while.

Runs ``deltamv simulate bank --live`` and ``deltamv run CONFIG`` (no ``--once``) as two
processes for ``SOAK_MINUTES`` (default 30). Every ``--every`` seconds it samples the
job's memory (RSS of the driver, its JVM and Python workers, summed), the views' latest
version, its watermark and lag, and checks the bank's invariant (the total balance)
on the latest version. At the end it lets the job catch up with the simulator's final
watermark, stops it with SIGTERM, and checks the latest version of every view against
the ground truth. Writes ``soak.json`` and ``soak-rss.png`` to ``--out`` (default
``demo-out/soak``). Exit 1 if memory grew (the last fifth's median RSS more than
``--max-growth``, 10 %, above the first fifth's after warm-up) or a check failed. The
report gives each part's median and slope (MB per hour) after warm-up: the driver, the
JVM (and its heap in use), the Python process planning the source, the Python workers.

The job runs with ``[maintenance]`` checkpoint_interval = 20, vacuum_retention =
"0 hours", vacuum_interval = "1 minute": a long run keeps its tables small.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq

from deltamv import delta, tso
from deltamv.sim import simulate

ROOT = Path(__file__).resolve().parents[2]
VIEW = "total_balance"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("DELTAMV_CRASH_AT", None)
    return env


_PARTS = (
    "driver_rss_mb", "jvm_rss_mb", "source_rss_mb", "workers_rss_mb", "jvm_heap_used_mb",
)  # fmt: skip


def _tree_rss(proc: psutil.Process) -> tuple[dict[str, int], int | None]:
    """RSS in bytes of the job's processes by role: ``driver`` (the Python driver),
    ``jvm``, ``source`` (Spark's Python process planning the streaming source),
    ``workers`` (Python workers and their daemon), and ``total``; and the JVM's pid."""
    parts = dict.fromkeys(("driver", "jvm", "source", "workers"), 0)
    jvm_pid = None
    try:
        parts["driver"] = proc.memory_info().rss
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return {**parts, "total": 0}, None
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            rss = child.memory_info().rss
            if child.name() == "java":
                parts["jvm"] += rss
                jvm_pid = child.pid
            elif "streaming_source_runner" in " ".join(child.cmdline()):
                parts["source"] += rss
            else:
                parts["workers"] += rss
    return {**parts, "total": sum(parts.values())}, jvm_pid


def _jvm_native_memory(pid: int | None) -> dict[str, float] | None:
    """Committed MB per JVM memory area (``jcmd VM.native_memory``; needs ``--nmt``)."""
    jcmd = shutil.which("jcmd")
    if jcmd is None or pid is None:
        return None
    try:
        text = subprocess.run(
            [jcmd, str(pid), "VM.native_memory", "summary"],
            capture_output=True, text=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    found: dict[str, float] = {}
    for match in re.finditer(r"^-\s+([A-Za-z ]+?) \(reserved=\d+KB, committed=(\d+)KB", text, re.M):
        found[match.group(1).strip()] = round(int(match.group(2)) / 1024, 1)
    total = re.search(r"^Total: reserved=\d+KB, committed=(\d+)KB", text, re.M)
    if total:
        found["Total"] = round(int(total.group(1)) / 1024, 1)
    return found or None


def _jvm_heap_used_mb(pid: int | None) -> float | None:
    """The JVM's used heap (MB, from ``jstat -gc``), where jstat is on PATH."""
    jstat = shutil.which("jstat")
    if jstat is None or pid is None:
        return None
    try:
        out = subprocess.run(
            [jstat, "-gc", str(pid)], capture_output=True, text=True, timeout=10
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    cols = dict(zip(out[: len(out) // 2], out[len(out) // 2 :], strict=True))
    try:
        used = sum(float(cols[k]) for k in ("S0U", "S1U", "EU", "OU"))
    except (KeyError, ValueError):
        return None
    return round(used / 1024, 1)


def _latest(path: Path) -> tuple[int, int | None]:
    """(latest version, its watermark) of a view; (-1, None) before the first commit."""
    if delta.table_version(str(path)) is None:
        return -1, None
    info = delta.versions(str(path))[-1]
    return info.version, info.watermark


def _total(path: Path) -> int | None:
    table = pq.ParquetDataset(delta.file_uris(str(path))).read()
    value = table.column("total")[0].as_py() if table.num_rows else None
    return int(value) if value is not None else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 30)))
    parser.add_argument("--out", type=Path, default=ROOT / "demo-out" / "soak")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--max-growth", type=float, default=0.10)
    parser.add_argument(
        "--nmt", action="store_true",
        help="run the JVM with native memory tracking and sample it every minute",
    )  # fmt: skip
    args = parser.parse_args(argv)

    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    work = out / "work"
    work.mkdir(parents=True)
    # The config of the bank workload (the live simulator writes its own only at the end).
    simulate("bank", work / "proto", txns=10)
    text = (work / "proto" / "config.toml").read_text()
    job_dir = work / "job"
    job_dir.mkdir()
    text = text.replace('changelog = "changelog"', f'changelog = "{work / "run" / "changelog"}"')
    text += (
        '\n[maintenance]\ncheckpoint_interval = 20\nvacuum_retention = "0 hours"\n'
        'vacuum_interval = "1 minute"\n'
    )
    if args.nmt:
        text += (
            '\n[spark.conf]\n"spark.driver.extraJavaOptions" = "-XX:NativeMemoryTracking=summary"\n'
        )
    (job_dir / "config.toml").write_text(text)
    view_path = job_dir / "out" / "views" / VIEW

    seconds = args.minutes * 60
    sim_log = open(out / "simulator.log", "wb")  # noqa: SIM115 (lives as long as the run)
    job_log = open(out / "job.log", "wb")  # noqa: SIM115
    sim = subprocess.Popen(
        [sys.executable, "-m", "deltamv.cli", "simulate", "bank", "--out", str(work / "run"),
         "--live", "--duration", str(seconds), "--regions", "4", "--splits", "2"],
        stdout=sim_log, stderr=subprocess.STDOUT, env=_env(),
        start_new_session=True,
    )  # fmt: skip
    while not (work / "run" / "changelog").exists():
        time.sleep(0.2)
    job = subprocess.Popen(
        [sys.executable, "-m", "deltamv.cli", "run", str(job_dir / "config.toml")],
        stdout=job_log, stderr=subprocess.STDOUT, env=_env(),
        cwd=str(job_dir), start_new_session=True,
    )  # fmt: skip
    proc = psutil.Process(job.pid)
    samples: list[dict[str, Any]] = []
    failures: list[str] = []
    totals: set[int] = set()
    started = time.monotonic()
    print(f"soak: {args.minutes:g} min, samples every {args.every:g} s -> {out}", flush=True)
    try:
        while sim.poll() is None:
            if job.poll() is not None:
                failures.append(f"the job exited with {job.returncode} during the soak")
                break
            tick = len(samples)
            rss, jvm_pid = _tree_rss(proc)
            version, watermark = _latest(view_path)
            if version >= 0:
                value = _total(view_path)
                if value is not None:
                    totals.add(value)
            sample = {
                "t": round(time.monotonic() - started, 1),
                "rss_mb": round(rss["total"] / 2**20, 1),
                "driver_rss_mb": round(rss["driver"] / 2**20, 1),
                "jvm_rss_mb": round(rss["jvm"] / 2**20, 1),
                "source_rss_mb": round(rss["source"] / 2**20, 1),
                "workers_rss_mb": round(rss["workers"] / 2**20, 1),
                "jvm_heap_used_mb": _jvm_heap_used_mb(jvm_pid),
                "jvm_nmt_mb": _jvm_native_memory(jvm_pid) if args.nmt and tick % 12 == 0 else None,
                "version": version,
                "lag_ms": tso.lag_ms(watermark) if watermark else None,
            }
            samples.append(sample)
            if len(samples) % 12 == 1:
                print(json.dumps(sample), flush=True)
            time.sleep(args.every)
        sim.wait()
        final = json.loads((work / "run" / "truth" / "meta.json").read_text())["final_watermark"]
        deadline = time.monotonic() + 300
        while job.poll() is None and time.monotonic() < deadline:
            if _latest(view_path)[1] == final:
                break
            time.sleep(2)
        caught_up = _latest(view_path)[1] == final
        if not caught_up:
            failures.append(f"the job did not reach the final watermark {final} within 5 minutes")
    finally:
        for p in (sim, job):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in (sim, job):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    if len(totals) > 1:
        failures.append(f"SUM(balance) was not constant across versions: {sorted(totals)}")

    failures += _check_latest(job_dir, work / "run")
    report = _report(samples, args, failures, view_path, totals)
    (out / "soak.json").write_text(json.dumps({**report, "samples": samples}, indent=1))
    _plot(samples, out / "soak-rss.png")
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


def _check_latest(job_dir: Path, run: Path) -> list[str]:
    """The latest version of every view against the truth, in Spark (the oracle)."""
    from deltamv.check.oracle import expected_view
    from deltamv.config import load_config
    from deltamv.session import build_spark
    from deltamv.sim import Truth

    config = load_config(job_dir / "config.toml")
    spark = build_spark(app_name="deltamv-soak-check")
    truth = Truth.load(run)
    failures = []
    try:
        for name, view in config.views.items():
            info = delta.versions(view.path)[-1]
            assert info.watermark is not None
            expected = expected_view(spark, config, name, truth.tables_at(info.watermark))
            actual = delta.read_spark(spark, view.path).select(*expected.columns)
            if actual.exceptAll(expected).count() or expected.exceptAll(actual).count():
                failures.append(f"{name} version {info.version} differs from the truth")
    finally:
        spark.stop()
    return failures


def _report(
    samples: list[dict[str, Any]], args: Any, failures: list[str], view_path: Path,
    totals: set[int],
) -> dict[str, Any]:  # fmt: skip
    rss = [s["rss_mb"] for s in samples if s["rss_mb"]]
    # Warm-up: Spark starts, the JIT compiles, and the JVM grows its heap up to the
    # driver's -Xmx (spark.driver.memory). Growth is judged after it.
    warmup = max(300.0, args.minutes * 60 / 3)
    after = [s for s in samples if s["t"] >= warmup and s["rss_mb"]]
    warm = [s["rss_mb"] for s in after]
    fifth = max(1, len(warm) // 5)
    early = statistics.median(warm[:fifth]) if warm else None
    late = statistics.median(warm[-fifth:]) if warm else None
    growth = (late - early) / early if early and late else None
    if growth is not None and growth > args.max_growth:
        failures.append(
            f"RSS grew {growth:.0%} (median {early} MB after warm-up, {late} MB at the end)"
        )
    slopes = {}  # MB per hour after warm-up, per part of the job
    for key in ("rss_mb", *_PARTS):
        points = [(s["t"] / 3600, s[key]) for s in after if s.get(key) is not None]
        if len(points) >= 3 and len({t for t, _ in points}) > 1:
            fit = statistics.linear_regression(*zip(*points, strict=True))
            slopes[key] = round(fit.slope, 1)
    medians = {
        key: statistics.median(s[key] for s in after if s.get(key) is not None)
        for key in _PARTS
        if any(s.get(key) is not None for s in after)
    }
    lags = [s["lag_ms"] for s in samples if s["lag_ms"] is not None]
    versions = (
        delta.versions(str(view_path)) if delta.table_version(str(view_path)) is not None else []
    )
    return {
        "minutes": args.minutes,
        "samples": len(samples),
        "rss_peak_mb": max(rss) if rss else None,
        "rss_median_after_warmup_mb": early,
        "rss_median_last_fifth_mb": late,
        "rss_growth": round(growth, 3) if growth is not None else None,
        "warmup_s": warmup,
        "median_after_warmup_mb": medians,
        "slope_after_warmup_mb_per_h": slopes,
        "versions": versions[-1].version + 1 if versions else 0,
        "lag_ms_median": statistics.median(lags) if lags else None,
        "lag_ms_max": max(lags) if lags else None,
        "total_balance_values": sorted(totals),
        "failures": failures,
        "ok": not failures,
    }


def _plot(samples: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[plot]')")
        return
    t = [s["t"] / 60 for s in samples]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    lines = [
        ("rss_mb", "job RSS (all processes)"),
        ("jvm_rss_mb", "JVM"),
        ("workers_rss_mb", "Python workers"),
        ("driver_rss_mb", "driver (Python)"),
        ("source_rss_mb", "source planner (Python)"),
        ("jvm_heap_used_mb", "JVM heap in use"),
    ]
    for key, label in lines:
        ax.plot(t, [s.get(key) or float("nan") for s in samples], label=label)
    ax.set_xlabel("minutes")
    ax.set_ylabel("MB")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(t, [(s["lag_ms"] or 0) / 1000 for s in samples], color="grey", alpha=0.3, label="lag")
    ax2.set_ylabel("lag (s)")
    ax.legend(loc="center right", fontsize="small")
    ax.set_title("deltamv soak: memory over time")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
