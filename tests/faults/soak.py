"""Soak (``make soak``): a live simulator and a continuous job, side by side, for a while.

Runs ``deltamv simulate bank --live`` and ``deltamv run CONFIG`` (no ``--once``) as two
processes for ``SOAK_MINUTES`` (default 30). Every ``--every`` seconds it samples the
job's memory (RSS of the driver, its JVM and Python workers, summed), the views' latest
version, its watermark and lag, and checks the bank's invariant (the total balance)
on the latest version. At the end it lets the job catch up with the simulator's final
watermark, stops it with SIGTERM, and checks the latest version of every view against
the ground truth. Writes ``soak.json`` and ``soak-rss.png`` to ``--out`` (default
``demo-out/soak``). Exit 1 if memory grew (the last fifth's median RSS more than
``--max-growth`` above the median after warm-up) or a check failed.

The job runs with ``[maintenance]`` checkpoint_interval = 20, vacuum_retention =
"0 hours", vacuum_interval = "1 minute": a long run keeps its tables small.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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


def _tree_rss(proc: psutil.Process) -> tuple[int, int]:
    """(total RSS of the process and its descendants, RSS of the driver alone), bytes."""
    try:
        driver = proc.memory_info().rss
        total = driver
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += child.memory_info().rss
        return total, driver
    except psutil.NoSuchProcess:
        return 0, 0


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
    parser.add_argument("--max-growth", type=float, default=0.25)
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
            total_rss, driver_rss = _tree_rss(proc)
            version, watermark = _latest(view_path)
            if version >= 0:
                value = _total(view_path)
                if value is not None:
                    totals.add(value)
            sample = {
                "t": round(time.monotonic() - started, 1),
                "rss_mb": round(total_rss / 2**20, 1),
                "driver_rss_mb": round(driver_rss / 2**20, 1),
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
    warm = [
        s["rss_mb"] for s in samples if s["t"] >= min(300.0, args.minutes * 60 / 3) and s["rss_mb"]
    ]
    fifth = max(1, len(warm) // 5)
    early = statistics.median(warm[:fifth]) if warm else None
    late = statistics.median(warm[-fifth:]) if warm else None
    growth = (late - early) / early if early and late else None
    if growth is not None and growth > args.max_growth:
        failures.append(
            f"RSS grew {growth:.0%} (median {early} MB after warm-up, {late} MB at the end)"
        )
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
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [s["rss_mb"] for s in samples], label="job RSS (driver + JVM + workers)")
    ax.plot(t, [s["driver_rss_mb"] for s in samples], label="driver (Python) RSS")
    ax.set_xlabel("minutes")
    ax.set_ylabel("MB")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(t, [(s["lag_ms"] or 0) / 1000 for s in samples], color="grey", alpha=0.4, label="lag")
    ax2.set_ylabel("lag (s)")
    ax.legend(loc="lower right")
    ax.set_title("deltamv soak: memory over time")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
