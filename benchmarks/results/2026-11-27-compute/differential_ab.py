"""A/B of ``Compute.query``: tables registered for each query (before) against found by
DuckDB's replacement scan in a namespace holding them alone (after), through the
differential harness of ``tests/views`` (every shape maintained and checked at every
version) over the same seeded sequences, alternated in one process.

    PYTHONPATH=src:. .venv/bin/python benchmarks/results/2026-11-27-compute/differential_ab.py
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from tests.views.harness import Planned, Run, job_config
from tests.views.shapes import SHAPES
from tests.views.shapes import TABLES as SCHEMAS
from tests.views.strategies import random_batch, random_snapshot
from tests.views.workers import TABLES

from deltamv.compute import Compute
from deltamv.job.views import ViewSet
from deltamv.session import build_spark
from deltamv.state.keyed import Mirror
from deltamv.state.store import StateStore


class Registering(Compute):
    """``Compute.query`` as it was: each table registered for the query, then dropped."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.con.execute("SET python_enable_replacements = false")

    def query(self, sql: str, /, **tables: pa.Table) -> pa.Table:
        for name, table in tables.items():
            self.con.register(name, table)
        try:
            return self.con.sql(sql).to_arrow_table()
        finally:
            for name in tables:
                self.con.unregister(name)


def planned(folder: Path) -> Planned:
    spark = build_spark(app_name="ab", conf={"spark.sql.shuffle.partitions": "2"})
    config = job_config(SCHEMAS, dict(SHAPES), folder)
    compute = Compute(threads=1, memory_limit="256MB")
    store = StateStore(folder / "state.db", job=config.name, start_ts=0)
    mirrors = {
        n: Mirror(store.db, n, t.schema.to_arrow(), t.primary_key) for n, t in config.tables.items()
    }
    views = ViewSet(spark, config, store, compute, mirrors)
    out = Planned(views.config, {n: v.plan for n, v in views.views.items()})
    spark.stop()
    return out


def run(plans: Planned, compute: Compute, seeds: range) -> float:
    started = time.perf_counter()
    for seed in seeds:
        rng = random.Random(seed)
        harness = Run(plans, sorted(SHAPES), compute)
        try:
            harness.load(random_snapshot(rng, TABLES))
            for _ in range(4):
                harness.step(random_batch(rng, TABLES, max_changes=6))
        finally:
            harness.close()
    return time.perf_counter() - started


def main() -> None:
    plans = planned(Path(tempfile.mkdtemp()))
    sides = {"before": Registering(threads=1, memory_limit="256MB"),
             "after": Compute(threads=1, memory_limit="256MB")}  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(3):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            seconds[name].append(run(plans, sides[name], range(round_ * 5, round_ * 5 + 5)))
    print({k: [round(s, 1) for s in v] for k, v in seconds.items()},
          "after/before", round(sum(seconds["after"]) / sum(seconds["before"]), 3))  # fmt: skip


if __name__ == "__main__":
    main()
