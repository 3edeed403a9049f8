"""deltamv alone (SEGMENTS a batch) on bank-10k and bank-100k: seconds in batches and per phase.
BENCH names the benchmarks folder of the tree under test (PYTHONPATH its src).
Usage: phases.py ROUNDS TAG SEGMENTS; one JSON line per run."""

import json
import os
import sys

sys.path.insert(0, os.environ["BENCH"])
from _common import WORK, simulated, spark_session, write_config
from deltamv_run import run_job

rounds, tag, segments = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
specs = {"bank-10k": (10_000, 13_000), "bank-100k": (100_000, 12_000)}
logs = {n: simulated(n, seed=1, txns=t, accounts=a) for n, (a, t) in specs.items()}
with spark_session({}) as spark:
    warm = simulated("warm", seed=1, txns=1000, accounts=1000)
    run_job(spark, write_config(warm, WORK / "runs" / "warm"))
    for r in range(rounds):
        for n, sim in logs.items():
            cfg = write_config(sim, WORK / "runs" / f"ph-{n}-{segments}", max_segments=segments)
            load = os.getloadavg()[0]
            mv = run_job(spark, cfg, keep_reports=False)
            print(
                json.dumps(
                    {
                        "tag": tag,
                        "log": n,
                        "round": r,
                        "load": round(load, 2),
                        "segments": segments,
                        "batches": mv.get("batches"),
                        "seconds": round(mv["batch_seconds"], 3),
                        "phases": mv["phases"],
                    }
                ),
                flush=True,
            )
