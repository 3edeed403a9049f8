"""The ``ivm`` section's run (incremental against recompute, one job per view and mode)
for the views named, at any size; prints each view's figures and writes them as JSON.

    PYTHONPATH=<checkout>/src .venv/bin/python benchmarks/ivm_shapes.py ACCOUNTS BATCHES OUT.json VIEW...

``PYTHONPATH`` picks the deltamv to measure (a worktree of the commit before, or this
one); the benchmark code is this checkout's. Views: ``synth``'s and ``ivm.EXTRA_VIEWS``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import spark_session
from ivm import run_ivm

import deltamv


def run(accounts: int, batches: int, out: Path, views: list[str]) -> None:
    """Measure ``views`` at ``accounts``, write the JSON to ``out`` and print each view."""
    print("deltamv from", deltamv.__file__, flush=True)
    with spark_session({}) as spark:
        result = run_ivm(spark, accounts, batches=batches, shapes={v: v for v in views})
    out.write_text(json.dumps(result, indent=1))
    keys = ("mode", "batch_ms_p50", "batch_ms_max", "phase_ms_p50", "load")
    for shape in result["shapes"]:
        modes = {m: {k: shape[m][k] for k in keys} for m in ("incremental", "recompute")}
        print(shape["view"], json.dumps(modes))


def main() -> None:
    if len(sys.argv) < 5:
        sys.exit("usage: ivm_shapes.py ACCOUNTS BATCHES OUT.json VIEW...")
    run(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])


if __name__ == "__main__":
    main()
