"""Fixtures of the Delta tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def delta_spark(spark: Any) -> Any:
    """The test session, when it reads with delta-spark; else the test is skipped."""
    from deltamv.session import delta_spark_available

    if not delta_spark_available(spark):
        pytest.skip("no delta-spark in the session: `make setup` fetches its jars")
    return spark
