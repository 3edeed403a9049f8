"""Incremental maintenance against ground truth, on random change sequences.

Two checks of every shape in :mod:`.shapes` (each also classified incremental by
``test_classify``, so none of them passes by being recomputed):

- ``test_matches_spark``: seeded random sequences (snapshot, then batches of inserts,
  updates, deletes of present and absent rows, primary-key changes, a key changed twice,
  empty batches) through all shapes at once; at every version, the maintained rows must
  equal the view's SQL evaluated by Spark over that version's tables, with the same
  column types.
- ``test_matches_full_evaluation``: Hypothesis draws many more sequences per shape (and
  shrinks a failure to a small one); at every version the maintained rows must equal the
  plan's full evaluation in DuckDB (``full_sql``), which ``test_matches_spark`` holds to
  Spark's.

The default run keeps both small; ``-m slow`` runs the large ones.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql import SparkSession

from deltamv.compute import Compute

from .harness import Planned, Run, spark_check
from .shapes import SHAPES
from .strategies import Change, Row, batches, random_batch, random_snapshot, snapshot

TABLES = ("accounts", "transfers")


def _spark_sequences(
    spark: SparkSession, planned: Planned, compute: Compute, *, seeds: range, length: int
) -> None:
    for seed in seeds:
        rng = random.Random(seed)
        run = Run(planned, sorted(SHAPES), compute)
        try:
            run.load(random_snapshot(rng, TABLES))
            for _ in range(length):
                run.step(random_batch(rng, TABLES, max_changes=8))
            checked = spark_check(spark, run, SHAPES)
        finally:
            run.close()
        assert checked == len(SHAPES) * (length + 1)


def test_matches_spark(spark: SparkSession, planned: Planned, compute: Compute) -> None:
    _spark_sequences(spark, planned, compute, seeds=range(1), length=3)


@pytest.mark.slow
def test_matches_spark_many(spark: SparkSession, planned: Planned, compute: Compute) -> None:
    _spark_sequences(spark, planned, compute, seeds=range(100, 110), length=10)


def _hypothesis(planned: Planned, compute: Compute, shape: str, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(start=snapshot(TABLES), sequence=batches(TABLES))
    def check(start: dict[str, list[Row]], sequence: list[list[Change]]) -> None:
        run = Run(planned, [shape], compute)
        try:
            run.load(start)
            for batch in sequence:
                run.step(batch)
        finally:
            run.close()

    check()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_full_evaluation(planned: Planned, compute: Compute, shape: str) -> None:
    _hypothesis(planned, compute, shape, 25)


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_full_evaluation_many(planned: Planned, compute: Compute, shape: str) -> None:
    _hypothesis(planned, compute, shape, 200)
