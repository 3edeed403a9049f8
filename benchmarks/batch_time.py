"""Per-batch time of the view job on a fixed small-batch bank run.

The quick before/after check for changes to the per-batch path: a bank log (3,000
transactions by default), 8 segments per batch, one warm session; prints each committed
batch's time, then, over the batches after the first three (warm-up), the median batch,
the median of each phase and the DuckDB queries a batch runs. Prints, never asserts.

    .venv/bin/python benchmarks/batch_time.py [--txns 30000] [--joins]

``--joins`` adds the two join views of the scaling and ivm sections
(``synth.JOIN_VIEWS``: a join, an aggregate over it) to the bank's four.

To compare two trees side by side, run it once with the other tree's ``src`` first on
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import WORK, say
from synth import JOIN_VIEWS

from deltamv.compute import Compute
from deltamv.config import load_config
from deltamv.job import ViewJob
from deltamv.job.batch import BatchRunner
from deltamv.session import build_spark
from deltamv.sim import simulate

PHASES = ("read", "match", "maintain", "state", "publish", "finish")


def _count_queries() -> list[int]:
    """Count Compute.query calls per BatchRunner.run (patched in for this process)."""
    queries = [0]
    per_batch: list[int] = []
    query, run = Compute.query, BatchRunner.run

    def counted_query(self: Compute, sql: str, /, **tables: Any) -> Any:
        queries[0] += 1
        return query(self, sql, **tables)

    def counted_run(self: BatchRunner, batch: int) -> Any:
        before = queries[0]
        report = run(self, batch)
        if report.committed:
            per_batch.append(queries[0] - before)
        return report

    Compute.query = counted_query  # type: ignore[method-assign]
    BatchRunner.run = counted_run  # type: ignore[method-assign]
    return per_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txns", type=int, default=3000, help="transactions in the bank log")
    parser.add_argument("--joins", action="store_true", help="add the two join views")
    args = parser.parse_args()
    run = WORK / "batch-time" / f"bank-{args.txns}{'-joins' if args.joins else ''}"
    if not (run / "changelog").exists():
        shutil.rmtree(run, ignore_errors=True)
        simulate("bank", run, seed=9, txns=args.txns)
    shutil.rmtree(run / "out", ignore_errors=True)
    config_path = run / "config.toml"
    text = config_path.read_text()
    if "max_segments_per_batch" not in text:
        text = text.replace(
            'changelog = "changelog"', 'changelog = "changelog"\nmax_segments_per_batch = 8'
        )
        if args.joins:
            text += "".join(
                f'\n[views.{name}]\nsql = "{sql}"\npath = "out/views/{name}"\n'
                for name, sql in JOIN_VIEWS.items()
            )
        config_path.write_text(text)
    config = load_config(config_path)
    per_batch = _count_queries()
    reports = [r for r in ViewJob(config, build_spark(config)).run(once=True) if r.committed]
    say(f"committed batches: {len(reports)}; ms per batch: {[r.duration_ms for r in reports]}")
    rest = reports[3:] or reports
    phases = {p: round(statistics.median(r.phases.get(p, 0.0) for r in rest) * 1000, 1)
              for p in PHASES}  # fmt: skip
    say(
        f"after the first three: batch p50 {statistics.median(r.duration_ms for r in rest)} ms,"
        f" mean {sum(r.duration_ms for r in rest) // len(rest)} ms;"
        f" DuckDB queries per batch p50 {statistics.median(per_batch[3:] or per_batch)};"
        f" load {os.getloadavg()[0]:.1f}"
    )
    say("phases p50 ms: " + ", ".join(f"{p} {v}" for p, v in phases.items()))


if __name__ == "__main__":
    main()
