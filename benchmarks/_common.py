"""Shared helpers of the benchmarks: machine facts, cached inputs, configs, timing, RSS.

Benchmarks print and plot; they never assert a time. Inputs and job outputs live under
``$DELTAMV_BENCH_DIR`` (default ``/tmp/deltamv-bench``); simulated logs are cached there
by their arguments, so a second run skips the generation.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

WORK = Path(os.environ.get("DELTAMV_BENCH_DIR", "/tmp/deltamv-bench"))
ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", PYTHON)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", PYTHON)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# Spark waits a fixed 10 s (not configurable) for a fresh Python worker to connect back;
# deltamv's streaming source starts one per query. With a load average far above the
# machine's 2 cores (other work running) the worker's imports can take longer, and the
# query fails at its start. Such a run is retried from scratch, and the retry recorded.
WORKER_TIMEOUT = "Python worker failed to connect back"
ATTEMPTS = 3


def worker_timeout(error: BaseException | str) -> bool:
    return WORKER_TIMEOUT in str(error)


# -- machine -----------------------------------------------------------------------------
def machine_facts() -> dict[str, Any]:
    import deltalake
    import pyarrow
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    disk = shutil.disk_usage(WORK if WORK.exists() else "/")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "disk_free_gb": round(disk.free / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java.splitlines()[0] if java else "unknown",
        "spark": pyspark.__version__,
        "delta_rs": deltalake.__version__,
        "pyarrow": pyarrow.__version__,
        "spark_master": "local[2]",
        "git": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
    }


# -- inputs ------------------------------------------------------------------------------
def simulated(name: str, **kwargs: Any) -> Path:
    """A simulated bank run in ``WORK/logs/<name>``, generated once per set of arguments."""
    from deltamv.sim import simulate

    run = WORK / "logs" / name
    stamp = run / "bench-args.json"
    wanted = json.dumps(kwargs, sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return run / "sim"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    began = time.perf_counter()
    result = simulate("bank", run / "sim", **kwargs)
    say(f"simulated {name}: {result.events} events in {time.perf_counter() - began:.1f} s")
    stamp.write_text(wanted)
    return run / "sim"


def log_size(changelog: Path) -> dict[str, int]:
    """Events (lines), bytes and segments of a JSONL change log."""
    events = size = segments = 0
    for f in changelog.glob("region-*/*.jsonl"):
        data = f.read_bytes()
        events += data.count(b"\n")
        size += len(data)
        segments += 1
    return {"events": events, "bytes": size, "segments": segments}


def write_config(
    sim_dir: Path,
    dest: Path,
    *,
    changelog: Path | None = None,
    snapshot: Path | None = None,
    max_segments: int = 1000,
    trigger: str = "1 second",
    spark_conf: Mapping[str, str] | None = None,
    views: list[str] | None = None,
    extra_views: Mapping[str, str] | None = None,
    maintain: str | None = None,
) -> Path:
    """A job config for the simulated workload, with every path under ``dest``.

    ``views`` keeps only the named views of the workload; ``extra_views`` adds views
    (name to SQL); ``maintain`` sets every view's ``maintain`` key ("incremental",
    "recompute"; default: the job's own choice).
    """
    raw = tomllib.loads((sim_dir / "config.toml").read_text())
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    lines = [
        "[job]",
        f'name = "{raw["job"]["name"]}"',
        f"changelog = {json.dumps(str(changelog or sim_dir / 'changelog'))}",
        f"checkpoint = {json.dumps(str(dest / 'checkpoint'))}",
        f'trigger_interval = "{trigger}"',
        f"max_segments_per_batch = {max_segments}",
    ]
    if snapshot is not None:
        lines.append(f"snapshot = {json.dumps(str(snapshot))}")
    for name, table in raw["tables"].items():
        lines += ["", f"[tables.{name}]", f"schema = {json.dumps(table['schema'])}"]
        lines.append(f"primary_key = {json.dumps(table['primary_key'])}")
    chosen = {n: v["sql"] for n, v in raw["views"].items() if views is None or n in views}
    chosen.update(extra_views or {})
    for name, sql in chosen.items():
        lines += ["", f"[views.{name}]", f"sql = {json.dumps(sql)}"]
        lines.append(f"path = {json.dumps(str(dest / 'views' / name))}")
        if maintain is not None:
            lines.append(f"maintain = {json.dumps(maintain)}")
    if spark_conf:
        lines += ["", "[spark.conf]"]
        lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in spark_conf.items()]
    path = dest / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# -- memory ------------------------------------------------------------------------------
class TreeRSS:
    """Samples the summed RSS of a process and all its descendants (driver, JVM, workers)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.peak_parts: dict[str, int] = {}
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._began = time.perf_counter()

    def __enter__(self) -> TreeRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            total = 0
            parts: dict[str, int] = collections.defaultdict(int)
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    rss = p.memory_info().rss
                    total += rss
                    parts[_kind(p)] += rss
            self.samples.append((time.perf_counter() - self._began, total))
            if total > self.peak:
                self.peak = total
                self.peak_parts = dict(parts)
            self._stop.wait(self.interval)


def _kind(p: psutil.Process) -> str:
    name = p.name()
    if "java" in name:
        return "jvm"
    cmd = " ".join(p.cmdline()[:4])
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "worker" in cmd:
        return "python_workers"
    return "driver_python" if "python" in name else name


@contextlib.contextmanager
def spark_session(conf: Mapping[str, str] | None = None) -> Iterator[Any]:
    from deltamv import warm_runner
    from deltamv.session import build_spark

    spark = build_spark(conf=dict(conf or {}))
    warm_runner.serve(spark)  # each run's source runner forked warm, as `deltamv run` has it
    try:
        yield spark
    finally:
        spark.stop()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def run_cli(args: list[str], *, cwd: Path, log: Path, timeout: float) -> tuple[int, TreeRSS, float]:
    """Run ``deltamv ...`` in a fresh process (fresh JVM); sample its tree's RSS."""
    env = dict(os.environ, DELTAMV_SPARK_LOG_LEVEL="ERROR")
    began = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [PYTHON, "-m", "deltamv.cli", *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        with TreeRSS(proc.pid) as rss:
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.terminate()
                code = proc.wait()
    return code, rss, time.perf_counter() - began
