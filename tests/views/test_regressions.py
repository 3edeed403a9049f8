"""Fixed sequences for bugs the differential tests found; each is checked against Spark."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pyspark.sql import SparkSession

from deltamv.compute import Compute

from .harness import Planned, Run, spark_check
from .shapes import SHAPES
from .strategies import COLUMNS


def _account(key: int, **values: Any) -> dict[str, Any]:
    return {"id": key, **dict.fromkeys(COLUMNS["accounts"]), **values}


def _transfer(key: int, **values: Any) -> dict[str, Any]:
    return {"id": key, **dict.fromkeys(COLUMNS["transfers"]), **values}


def test_join_on_a_null_safe_and_a_strict_key_matches_null_on_the_null_safe_one(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # A mirror lookup by (src, owner) used to compare every column strictly as soon as
    # one key was strict, so a NULL owner never found its <=> match.
    views = ["join_mixed_keys", "full_join_nullsafe"]
    run = Run(planned, views, compute)
    try:
        run.load({"accounts": [_account(1), _account(2, owner="a")], "transfers": []})
        run.step([("transfers", 7, _transfer(7, src=1)), ("transfers", 8, _transfer(8, src=2))])
        assert run.outputs["join_mixed_keys"] == Counter({(7, 1): 1})
        assert run.outputs["full_join_nullsafe"] == Counter({(1, 7): 1, (2, None): 1, (None, 8): 1})
        run.step([("accounts", 1, None)])
        assert run.outputs["join_mixed_keys"] == Counter()
        assert spark_check(spark, run, SHAPES) == 2 * 3
    finally:
        run.close()
