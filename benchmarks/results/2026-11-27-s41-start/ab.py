"""The floor and deltamv (SEGMENTS a batch, 1000 unless given) alternated in one warm session.

BENCH names the benchmarks folder of the tree under test (PYTHONPATH its ``src``).
Usage: ab.py ROUNDS TAG [SEGMENTS [phases]]; prints one JSON line per run. With
``phases``: deltamv alone, with its seconds per phase summed over the run's batches."""

import json
import os
import sys

sys.path.insert(0, os.environ["BENCH"])
from _common import WORK, simulated, spark_session, write_config
from deltamv_run import run_job
from floor import run_floor

rounds = int(sys.argv[1])
tag = sys.argv[2]
segments = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
phases = sys.argv[4:5] == ["phases"]
specs = {"bank-10k": (10_000, 13_000), "bank-100k": (100_000, 12_000)}
logs = {n: simulated(n, seed=1, txns=t, accounts=a) for n, (a, t) in specs.items()}
with spark_session({}) as spark:
    warm = simulated("warm", seed=1, txns=1000, accounts=1000)
    run_job(spark, write_config(warm, WORK / "runs" / "warm"))
    for r in range(rounds):
        for n, sim in logs.items():
            cfg = write_config(sim, WORK / "runs" / f"ab-{n}-{segments}", max_segments=segments)
            fl = None if phases else run_floor(sim / "changelog", WORK / "runs" / f"{n}-floor")
            load = os.getloadavg()[0]
            mv = run_job(spark, cfg, keep_reports=False)
            row = {"tag": tag, "log": n, "round": r, "load": round(load, 2), "segments": segments}
            if fl is None:
                row.update(seconds=round(mv["batch_seconds"], 3), phases=mv["phases"])
            else:
                row.update(floor=fl["seconds"], mv=round(mv["seconds"], 3),
                           batches=round(mv["batch_seconds"], 3),
                           ratio=round(fl["seconds"] / mv["seconds"], 3))  # fmt: skip
            print(json.dumps(row), flush=True)
