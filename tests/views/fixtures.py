"""The views' shared fixtures, a plugin of the root ``conftest.py`` (so that it can
start the differential sequences with the run's first test, see there).

``compute``, ``viewset`` and ``planned`` are once per run; ``default_runs`` is every
shape's Hypothesis sequences queued on :class:`.workers.Workers`, whose results
``test_matches_full_evaluation`` waits for.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.job.views import ViewSet
from deltamv.state.keyed import Mirror
from deltamv.state.store import StateStore

from .harness import Planned, job_config
from .shapes import RECOMPUTE, SHAPES, TABLES
from .workers import Outcome, Workers

# Hypothesis sequences per shape: in the default run, and with ``-m slow``.
EXAMPLES = 130
MANY_EXAMPLES = 1000


@pytest.fixture(scope="session")
def compute() -> Iterator[Compute]:
    engine = Compute(threads=1, memory_limit="256MB")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def viewset(
    spark: SparkSession, compute: Compute, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ViewSet]:
    """Every shape (incremental and recompute ones) planned and classified by the job's
    own ViewSet, once per test session."""
    folder = Path(tmp_path_factory.mktemp("shapes"))
    views = {**SHAPES, **{name: sql for name, (sql, _) in RECOMPUTE.items()}}
    config = job_config(TABLES, views, folder)
    store = StateStore(folder / "state.db", job=config.name, start_ts=0)
    mirrors = {
        name: Mirror(store.db, name, t.schema.to_arrow(), t.primary_key)
        for name, t in config.tables.items()
    }
    yield ViewSet(spark, config, store, compute, mirrors)
    store.close()


@pytest.fixture(scope="session")
def planned(viewset: ViewSet) -> Planned:
    """The same plans, for the differential harness (which keeps its own state per run)."""
    return Planned(viewset.config, {name: v.plan for name, v in viewset.views.items()})


@pytest.fixture(scope="session")
def workers(planned: Planned) -> Iterator[Workers]:
    pool = Workers(planned)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def default_runs(workers: Workers) -> dict[str, Future[dict[str, Outcome]]]:
    return workers.submit(sorted(SHAPES), EXAMPLES)
