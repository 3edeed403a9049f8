"""Fixed sequences for bugs the differential tests found; each is checked against Spark."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
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


def test_avg_of_decimal_in_full_evaluation_and_recomputed_groups(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # The full evaluation (the view's first version) refused AVG of a DECIMAL; it now
    # rounds as Spark does: half up to the division's scale, then to the result's.
    run = Run(planned, ["by_owner_region", "total_dec"], compute)
    credits = ["0.01", "0.01", "0.00", "-0.01", "-0.01", "10.01"]
    rows = [
        _account(i, owner="a" if i < 3 else "b", region=1, credit=Decimal(c), active=True)
        for i, c in enumerate(credits)
    ]
    try:
        run.load({"accounts": rows, "transfers": []})
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.006667"), "b": Decimal("3.330000")}
        run.step([("accounts", 5, None)])
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.006667"), "b": Decimal("-0.010000")}
        run.step([("accounts", 4, _account(4, owner="b", region=1, credit=Decimal("0.00")))])
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.006667"), "b": Decimal("-0.005000")}
        assert spark_check(spark, run, SHAPES) == 2 * 3
    finally:
        run.close()
