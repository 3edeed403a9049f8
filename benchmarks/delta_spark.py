"""What delta-spark costs deltamv: session start, reads, and a job's batches.

    python benchmarks/delta_spark.py [--runs 5] [--job]

Every sample runs in a fresh process (a fresh JVM), the variants interleaved so they
share the machine's load; the 1-minute load average is printed beside each figure.
Variants: ``off`` (``DELTAMV_DELTA_SPARK=0``: no jars, no extension, file-list reads)
and ``on`` (the fetched jars, Delta's extension and catalog, delta-spark reads; the job
reads its own tables by file list either way).
Prints a table; asserts nothing (docs/delta-spark.md quotes the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, sys, time
t0 = time.perf_counter()
from deltamv.session import build_spark, delta_spark_available
spark = build_spark()
spark.range(1).count()
out = {"start": time.perf_counter() - t0, "delta": delta_spark_available(spark)}
from deltamv import delta
path = sys.argv[1]
t = time.perf_counter(); delta.read_spark(spark, path, 1).collect()
out["first_old"] = time.perf_counter() - t
old, new = [], []
for _ in range(5):
    t = time.perf_counter(); delta.read_spark(spark, path, 1).collect()
    old.append(time.perf_counter() - t)
    t = time.perf_counter(); delta.read_spark(spark, path).collect()
    new.append(time.perf_counter() - t)
out["warm_old"] = sorted(old)[2]
out["warm_latest"] = sorted(new)[2]
print("RESULT " + json.dumps(out))
spark.stop()
"""

JOB = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from deltamv.session import build_spark
from tests.job.simrun import SimJob
spark = build_spark(conf={"spark.sql.shuffle.partitions": "2"})
times = []
for rep in range(2):
    job = SimJob.create(Path(tempfile.mkdtemp()), "bank", seed=1, txns=300, splits=2,
                        segments_per_batch=8, segment_events=100)
    t = time.perf_counter()
    while job.pending:
        job.publish(2)
        job.run_once(spark)
    times.append(time.perf_counter() - t)
print("RESULT " + json.dumps({"cold": times[0], "warm": times[1]}))
spark.stop()
"""


def table_with_versions(folder: Path) -> str:
    """A small deltamv-committed table with three versions."""
    import pyarrow as pa

    sys.path.insert(0, str(ROOT))
    from tests.helpers.views import commit_version

    path = str(folder / "t")
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    for i in range(3):
        commit_version(path, [{"k": k, "v": i} for k in range(100)], schema, watermark=100 + i)
    return path


def run(code: str, args: list[str], env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=1800
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"probe failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--job", action="store_true", help="also time a job (bank, 300 txns)")
    args = parser.parse_args()
    base = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", DELTAMV_SPARK_LOG_LEVEL="ERROR")
    variants = {
        "off": dict(base, DELTAMV_DELTA_SPARK="0"),
        "on": dict(base, DELTAMV_DELTA_SPARK="1"),
    }
    samples: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = table_with_versions(Path(tmp))
        for i in range(args.runs):
            for name, env in variants.items():
                loads.append(os.getloadavg()[0])
                result = run(PROBE, [path], env)
                samples[name].append(result)
                print(f"run {i + 1} {name:3}: " + ", ".join(
                    f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in result.items()
                ) + f" (load {loads[-1]:.2f})", flush=True)  # fmt: skip
    print(f"\nload average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f}")
    print(f"{'seconds (median of ' + str(args.runs) + ')':34} {'off':>8} {'on':>8}")
    for key, label in [
        ("start", "session start + first job"),
        ("first_old", "first read of an old version"),
        ("warm_old", "warm read of an old version"),
        ("warm_latest", "warm read of the latest version"),
    ]:
        med = {n: statistics.median(s[key] for s in samples[n]) for n in variants}
        print(f"{label:34} {med['off']:8.2f} {med['on']:8.2f}")
    if not args.job:
        return
    jobs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for i in range(max(1, args.runs // 2)):
        for name in jobs:
            load = os.getloadavg()[0]
            result = run(JOB, [str(ROOT)], variants[name])
            jobs[name].append(result)
            print(f"job run {i + 1} {name}: cold {result['cold']:.1f}s, warm {result['warm']:.1f}s"
                  f" (load {load:.2f})", flush=True)  # fmt: skip
    print(f"\njob (bank, 300 txns), seconds, median of {len(jobs['on'])}: cold / warm")
    for name, res in jobs.items():
        cold = statistics.median(r["cold"] for r in res)
        warm = statistics.median(r["warm"] for r in res)
        print(f"  {name:22} {cold:6.1f} / {warm:6.1f}")


if __name__ == "__main__":
    main()
