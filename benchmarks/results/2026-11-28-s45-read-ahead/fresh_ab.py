"""The 2,000 and 200 txn/s steady live runs (1-second trigger, 30 s) in one warm session.

BENCH names the tree's benchmarks folder (PYTHONPATH its ``src``). Usage: fresh_ab.py TAG
[RATE ...]; prints one JSON line a run."""

import json
import os
import sys

sys.path.insert(0, os.environ["BENCH"])
from _common import WORK, simulated, spark_session, write_config
from deltamv_run import run_job
from freshness import run_live

KEEP = ("reader_p50_ms", "reader_p99_ms", "commit_p50_ms", "commit_p99_ms", "batch_ms_p50",
        "batch_ms_p99", "phase_ms_p50", "achieved_rate", "load_end", "versions")  # fmt: skip

tag = sys.argv[1]
rates = [int(r) for r in sys.argv[2:]] or [2000, 200]
template = WORK / "logs" / "bank-10k" / "sim"
with spark_session({}) as spark:
    warm = simulated("warm", seed=1, txns=1000, accounts=1000)
    run_job(spark, write_config(warm, WORK / "runs" / "warm"))
    for rate in rates:
        load = os.getloadavg()[0]
        r = run_live(spark, f"ab-{tag}-{rate}", template, trigger="1 second", rate=rate,
                     duration=30, accounts=10_000)  # fmt: skip
        row = {"tag": tag, "rate": rate, "load": round(load, 2), **{k: r[k] for k in KEEP}}
        print(json.dumps(row), flush=True)
