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

Spark checks one seeded sequence in the default run and Hypothesis 130 per shape
(``fixtures.EXAMPLES``, ``MANY_EXAMPLES``), on worker processes (:mod:`.workers`) that start with the run's
first test (the root ``conftest.py``); ``-m slow`` runs ten and 1,000.
"""

from __future__ import annotations

import random
from concurrent.futures import Future

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute

from .fixtures import EXAMPLES, MANY_EXAMPLES
from .harness import Planned, Run, spark_check
from .shapes import SHAPES
from .strategies import random_batch, random_snapshot
from .workers import TABLES, Outcome, Workers


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


@pytest.fixture(scope="module")
def many_runs(workers: Workers) -> dict[str, Future[dict[str, Outcome]]]:
    return workers.submit(sorted(SHAPES), MANY_EXAMPLES)


def _passed(outcome: Outcome, examples: int) -> None:
    if outcome.failure is not None:
        pytest.fail(f"shape {outcome.shape}:\n{outcome.failure}", pytrace=False)
    assert outcome.ran >= examples, f"shape {outcome.shape}: only {outcome.ran} sequences ran"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_full_evaluation(
    default_runs: dict[str, Future[dict[str, Outcome]]], shape: str
) -> None:
    _passed(default_runs[shape].result()[shape], EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_full_evaluation_many(
    many_runs: dict[str, Future[dict[str, Outcome]]], shape: str
) -> None:
    _passed(many_runs[shape].result()[shape], MANY_EXAMPLES)
