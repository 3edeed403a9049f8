"""Shapes an outside black-box check of the change-log upstream found wrong; each fixed
sequence is checked against Spark (and the maintained rows against the full evaluation).

The tables are named ``accounts`` and ``transfers`` (the Spark oracle renames those per
version) but have columns of their own: wide decimals.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.job.views import MirrorFiles
from deltamv.views.expr import Unsupported

from .harness import Planned, Run, bag_of, spark_check

TABLES = {
    "accounts": (
        "id BIGINT, owner STRING, big DECIMAL(38,4), wide DECIMAL(38,10), small DECIMAL(10,2),"
        " mid DECIMAL(37,3), seen TIMESTAMP, rate DOUBLE",
        ("id",),
    ),
    "transfers": ("id BIGINT, amount DECIMAL(38,20)", ("id",)),
}

VIEWS = {
    # AVG of a DECIMAL(p,s) is DECIMAL(min(38, p+4), min(38, s+4)) in Spark, not the
    # precision-loss adjustment of arithmetic (which gave DECIMAL(38,6) values in a
    # DECIMAL(38,8) column); exact state path
    "avg_wide": "SELECT owner, AVG(big) AS ab, AVG(wide) AS aw, AVG(mid) AS am,"
    " SUM(wide) AS sw, COUNT(*) AS n FROM accounts GROUP BY owner",
    "avg_wide_global": "SELECT AVG(big) AS ab, AVG(wide) AS aw FROM accounts",
    # ... and the groups recomputed in DuckDB (a MAX beside it)
    "avg_wide_minmax": "SELECT owner, AVG(big) AS ab, AVG(wide) AS aw, MAX(big) AS mb"
    " FROM accounts GROUP BY owner",
    # DuckDB multiplies two decimals of at most 18 digits as DECIMAL(18) and failed on a
    # product Spark's DECIMAL(21,4) holds
    "product": "SELECT id, small * small AS sq, small * 3 AS s3, big * small AS bs FROM accounts",
}

# Timestamp literals: instants in UTC whatever DuckDB's TimeZone (the machine's) is
TIMESTAMP_VIEWS = {
    "ts_literals": "SELECT id FROM accounts WHERE seen >= TIMESTAMP '2024-01-01 00:00:00'"
    " AND seen <> TIMESTAMP '2024-01-01 05:00:00'",
    "ts_in": "SELECT id, seen FROM accounts"
    " WHERE seen IN (TIMESTAMP '2024-01-01 00:00:00', TIMESTAMP '2024-01-01 12:00:00')",
    "ts_inset": "SELECT id FROM accounts WHERE seen IN ("
    + ", ".join(f"TIMESTAMP '2024-01-01 {h:02d}:00:00'" for h in range(0, 24, 2))
    + ")",
}

# NaN rows found by a filter in the full evaluation over the mirrors' Parquet files
NAN_VIEWS = {
    "nan_eq": "SELECT id FROM accounts WHERE rate = CAST('NaN' AS DOUBLE)",
    "nan_isnan": "SELECT id FROM accounts WHERE isnan(rate)",
    "nan_max": "SELECT owner, MAX(rate) AS mx, COUNT(*) AS n FROM accounts"
    " WHERE rate >= CAST('NaN' AS DOUBLE) GROUP BY owner",
}

# Spark rounds this product to a smaller scale than the exact one: recomputed
WIDE_PRODUCT = {"wide_product": "SELECT id, amount * amount AS sq FROM transfers"}


@pytest.fixture(scope="module")
def outside(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Planned:
    return Planned.of(
        spark,
        TABLES,
        {**VIEWS, **WIDE_PRODUCT, **TIMESTAMP_VIEWS, **NAN_VIEWS},
        Path(tmp_path_factory.mktemp("o")),
    )


@pytest.fixture
def run(outside: Planned, compute: Compute) -> Iterator[Run]:
    r = Run(outside, sorted(VIEWS), compute)
    yield r
    r.close()


def _account(key: int, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(("owner", "big", "wide", "small", "mid", "seen", "rate"))
    return {"id": key, **row, **values}


def test_avg_of_wide_decimals_and_products_of_narrow_ones(spark: SparkSession, run: Run) -> None:
    rows = [
        _account(1, owner="a", big=Decimal("-99.9999"), wide=Decimal("-99.9999"),
                 small=Decimal("99999999.99"), mid=Decimal("1.001")),
        _account(2, owner="a", big=Decimal("1.2345"), wide=Decimal("1.2345"),
                 small=Decimal("-99999999.99"), mid=Decimal("0.001")),
        _account(3, owner="a", big=Decimal("-0.0001"), wide=Decimal("-0.0001"),
                 mid=Decimal("0.000")),
        _account(4, owner="b", big=Decimal("0.0001"), wide=Decimal("0.0000000001")),
    ]  # fmt: skip
    run.load({"accounts": rows, "transfers": []})
    averages = {row[0]: row[1:3] for row in run.outputs["avg_wide"]}
    assert averages["a"] == (Decimal("-32.92183333"), Decimal("-32.92183333333333"))
    run.step([("accounts", 3, None), ("accounts", 5, _account(5, owner="b", big=Decimal("2")))])
    run.step(
        [("accounts", 4, _account(4, owner="a", big=Decimal("0.0002"), small=Decimal("0.01")))]
    )
    run.step([("accounts", 1, None), ("accounts", 2, None), ("accounts", 4, None)])
    # 10^19 in DECIMAL(38,10): its unscaled value, 10^29, outgrows DECIMAL(38,10)
    huge = Decimal("10000000000000000000.5")
    run.step([("accounts", 6, _account(6, owner="c", big=Decimal(1), wide=huge))])
    assert spark_check(spark, run, VIEWS) == len(VIEWS) * 5


def test_a_product_of_decimals_beyond_scale_38_is_recomputed(
    outside: Planned, compute: Compute
) -> None:
    with pytest.raises(Unsupported, match="Spark rounds the product"):
        Run(outside, ["wide_product"], compute)


def test_timestamp_literals_are_utc_instants_in_any_machine_time_zone(
    spark: SparkSession, outside: Planned
) -> None:
    # DuckDB's TimeZone defaults to the machine's: a literal cast to TIMESTAMPTZ was read
    # in it (05:00 UTC compared as 00:00 in New York). The driver's engine works in UTC
    # whatever the machine's zone (tests/test_compute.py runs it in New York).
    compute = Compute(threads=1, memory_limit="256MB")
    run = Run(outside, sorted(TIMESTAMP_VIEWS), compute)
    utc = dt.UTC
    try:
        run.load({"accounts": [], "transfers": []})
        run.step(
            [
                ("accounts", i, _account(i, seen=dt.datetime(2024, 1, 1, h, tzinfo=utc)))
                for i, h in enumerate((0, 5, 12, 23), start=1)
            ]
        )
        assert run.outputs["ts_literals"] == Counter({(1,): 1, (3,): 1, (4,): 1})
        assert sorted(r[0] for r in run.outputs["ts_in"]) == [1, 3]
        assert sorted(r[0] for r in run.outputs["ts_inset"]) == [1, 3]
        run.step([("accounts", 1, None)])
        assert spark_check(spark, run, TIMESTAMP_VIEWS) == len(TIMESTAMP_VIEWS) * 3
    finally:
        run.close()
        compute.close()


def test_full_evaluation_over_mirror_files_finds_nan_rows(
    spark: SparkSession, outside: Planned, compute: Compute, tmp_path: Path
) -> None:
    # The mirrors' Parquet files for a full evaluation (a view's first version) had
    # min/max statistics, which leave NaN out; DuckDB skipped the row group by them.
    nan = float("nan")
    rows = [
        _account(1, owner="a", rate=nan),
        _account(2, owner="a", rate=2.0),
        _account(3, owner="b", rate=-0.0),
        _account(4, owner="b", rate=nan),
    ]
    run = Run(outside, sorted(NAN_VIEWS), compute)
    try:
        run.load({"accounts": rows, "transfers": []})
        assert run.outputs["nan_eq"] == Counter({(1,): 1, (4,): 1})
        with MirrorFiles(run.mirrors, tmp_path) as files:
            for name, maintainer in run.views.items():
                found = compute.query(maintainer.full_sql(files.base))
                assert bag_of(found, maintainer.root.output) == run.outputs[name], name
        assert spark_check(spark, run, NAN_VIEWS) == len(NAN_VIEWS)
    finally:
        run.close()
