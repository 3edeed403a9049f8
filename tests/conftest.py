from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

pytest_plugins = ["tests.views.fixtures"]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole run, built by the project's own factory."""
    from deltamv import warm_runner
    from deltamv.session import build_spark

    # 2 GB of heap: the one JVM serves every test of the run (delta-spark keeps the
    # snapshots of the tables it read), and at 1 GB the Spark oracle of the view shapes
    # near the end once ran out of it ("Not enough memory to build and broadcast").
    session = build_spark(
        app_name="deltamv-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    warm_runner.serve(session)  # the jobs' source runners forked warm, as `deltamv run` has them
    yield session
    session.stop()


@pytest.fixture(scope="session", autouse=True)
def _differential_sequences_from_the_start(request: pytest.FixtureRequest) -> None:
    """When ``test_matches_full_evaluation`` is in the run, its Hypothesis sequences (CPU
    work on worker processes of the lowest priority, ``tests/views/workers.py``) start
    with the run's first test instead of at their own module, the last: they use the
    cores the other tests leave idle while those wait on their jobs' processes and
    files, and yield to them otherwise. A failure to start them (Spark planning the
    shapes) is left to those tests to report: pytest keeps a session fixture's error."""
    if any(
        getattr(item, "originalname", None) == "test_matches_full_evaluation"
        for item in request.session.items
    ):
        with contextlib.suppress(Exception):
            request.getfixturevalue("default_runs")
