from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole run, built by the project's own factory."""
    from deltamv.session import build_spark

    session = build_spark(app_name="deltamv-tests", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
