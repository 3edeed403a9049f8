"""Parts and truncations of dates and timestamps (``year``, ``dayofweek``, ``date_trunc``,
``trunc``, ``datediff``, a timestamp cast to a date), kept incrementally through their
DuckDB translation: checked against Spark at every version over values at the edges of
days, weeks, years and the epoch."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute

from .harness import Planned, Run, spark_check
from .shapes import TABLES

VIEWS = {
    "date_parts": "SELECT id, year(opened) AS y, quarter(opened) AS q, month(opened) AS m,"
    " day(opened) AS d, dayofyear(opened) AS dy, dayofweek(opened) AS dw,"
    " weekday(opened) AS wd, weekofyear(opened) AS wy,"
    " datediff(opened, DATE '2024-01-01') AS dd, datediff(DATE '2000-03-01', opened) AS dd2,"
    " trunc(opened, 'MM') AS tm, trunc(opened, 'week') AS tw, trunc(opened, 'quarter') AS tq,"
    " trunc(opened, 'YEAR') AS ty, trunc(opened, 'DD') AS tn, trunc(opened, 'Q') AS tb"
    " FROM accounts",
    "time_parts": "SELECT id, hour(seen) AS h, minute(seen) AS mi, second(seen) AS s,"
    " to_date(seen) AS d, CAST(seen AS DATE) AS d2, year(seen) AS y, dayofweek(seen) AS dw,"
    " date_trunc('DAY', seen) AS td, date_trunc('week', seen) AS tw,"
    " date_trunc('MONTH', seen) AS tm, date_trunc('quarter', seen) AS tq,"
    " date_trunc('YY', seen) AS ty, date_trunc('HOUR', seen) AS th,"
    " date_trunc('minute', seen) AS tmi, date_trunc('second', seen) AS ts,"
    " date_trunc('MILLISECOND', seen) AS tms, date_trunc('microsecond', seen) AS tus,"
    " date_trunc('dd', seen) AS tdd, date_trunc('bogus', seen) AS tb FROM accounts",
    "by_week": "SELECT date_trunc('WEEK', seen) AS w, month(opened) AS m, COUNT(*) AS n,"
    " SUM(balance) AS s FROM accounts WHERE year(opened) >= 1970 OR opened IS NULL"
    " GROUP BY 1, 2",
}

UTC = dt.UTC
DATES = [
    dt.date(2024, 2, 29), dt.date(2023, 12, 31), dt.date(2021, 1, 3), dt.date(2020, 12, 31),
    dt.date(2024, 1, 1), dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(1900, 3, 1),
    dt.date(1582, 10, 10), dt.date(9999, 12, 31), None,
]  # fmt: skip
TIMES = [
    dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2023, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
    dt.datetime(1960, 6, 1, 0, 0, 0, 1, tzinfo=UTC),
    dt.datetime(2024, 2, 29, 13, 45, 30, 123456, tzinfo=UTC),
    dt.datetime(2021, 1, 3, 10, 0, tzinfo=UTC), dt.datetime(1900, 1, 1, 0, 0, 1, tzinfo=UTC),
    None,
]  # fmt: skip


def _account(key: int, opened: Any, seen: Any, balance: int | None = 1) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(("owner", "region", "credit", "active", "rate"))
    return {**row, "id": key, "opened": opened, "seen": seen, "balance": balance}


@pytest.fixture(scope="module")
def planned(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Planned:
    return Planned.of(spark, TABLES, VIEWS, Path(tmp_path_factory.mktemp("dates")))


def test_parts_and_truncations_match_spark_at_every_version(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    run = Run(planned, sorted(VIEWS), compute)
    try:
        run.load({"accounts": [_account(i, d, TIMES[i % len(TIMES)]) for i, d in enumerate(DATES)],
                  "transfers": []})  # fmt: skip
        n = len(DATES)
        run.step([("accounts", n + i, _account(n + i, DATES[-2 - i], t, balance=i))
                  for i, t in enumerate(TIMES)])  # fmt: skip
        run.step([("accounts", i, None) for i in range(0, n, 2)]
                 + [("accounts", 1, _account(1, DATES[0], TIMES[3], balance=None))])  # fmt: skip
        run.step([("accounts", i, _account(i, DATES[i % n], TIMES[i % 3])) for i in range(6)])
        assert spark_check(spark, run, VIEWS) == len(VIEWS) * 4
        assert run.outputs["by_week"], "no group at the last version: nothing was compared"
    finally:
        run.close()
