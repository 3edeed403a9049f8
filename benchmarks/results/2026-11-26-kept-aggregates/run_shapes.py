"""New shapes alone: python run.py ACCOUNTS BATCHES OUT.json (PYTHONPATH picks deltamv)."""
import json, sys
sys.path.insert(0, "/work/main/benchmarks")
from _common import spark_session
from ivm import run_ivm
import deltamv
accounts, batches, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
print("deltamv from", deltamv.__file__, flush=True)
with spark_session({}) as spark:
    r = run_ivm(spark, accounts, batches=batches, shapes={"MIN/MAX per group": "extremes_by_owner", "COUNT(DISTINCT) per group": "distinct_by_owner"})
json.dump(r, open(out, "w"), indent=1)
for s in r["shapes"]:
    print(s["view"], json.dumps({m: {k: s[m][k] for k in ("mode", "batch_ms_p50", "batch_ms_max", "phase_ms_p50", "load")} for m in ("incremental", "recompute")}))
