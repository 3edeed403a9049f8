"""Functions of strings (``substring``, ``left``, ``right``, the trims, ``replace``,
``concat_ws``, ``instr``, ``translate``, ``upper``, ``lower``, ``initcap``, ``lpad``, ``rpad``, ``repeat``, ``locate``, ``reverse``) and of numbers (``round``, ``bround``, ``floor``,
``ceil``, ``greatest``, ``least``, ``pmod``) and digests (``md5``, ``sha1``,
``sha2``), kept incrementally through their DuckDB translation:
checked against Spark at every version over strings at the edges (empty, spaces and
tabs, characters of several bytes, a combining accent, an emoji), positions at theirs (0,
negative, beyond the end, the largest INT, NULL) and decimals at the halves."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute

from .harness import Planned, Run, spark_check
from .shapes import TABLES

VIEWS = {
    "string_parts": "SELECT id, substring(owner, 2, 3) AS s1, substr(owner, -2) AS s2,"
    " substring(owner, 0, 2) AS s3, substring(owner, region, region - 2) AS s4,"
    " substring(owner, -region) AS s5, left(owner, 2) AS l, right(owner, 3) AS r,"
    " left(owner, region - 2) AS ln, right(owner, region) AS rn,"
    " substring(owner, 2147483647, 2147483647) AS big FROM accounts",
    "trims": "SELECT id, trim(owner) AS t, ltrim(owner) AS lt, rtrim(owner) AS rt,"
    " trim(BOTH 'é ' FROM owner) AS tb, trim(LEADING 'x' FROM owner) AS tl,"
    " trim(TRAILING '😀' FROM owner) AS tt, replace(owner, 'a', 'ß') AS ra,"
    " replace(owner, ' ') AS rs, replace(owner, 'aa', '') AS rr,"
    " replace(owner, '', 'z') AS re FROM accounts",
    "more_strings": "SELECT id, concat_ws('-', owner, 'x', owner) AS cw,"
    " concat_ws(owner, 'a', CAST(NULL AS STRING), 'b') AS cs, instr(owner, 'a') AS i, ascii(owner) AS a,"
    " octet_length(owner) AS o, translate(owner, 'aé ', 'Ab') AS tr,"
    " greatest(owner, 'b') AS gs, least(owner, 'aaa', NULL) AS ls FROM accounts",
    "numbers": "SELECT id, round(credit, 1) AS r1, round(credit) AS r0, round(credit, -1) AS rn,"
    " round(credit, 3) AS r3, bround(credit, 1) AS b1, bround(credit, -1) AS bn,"
    " floor(credit) AS f, ceil(credit) AS c, floor(CAST(credit AS DECIMAL(10,0))) AS f0,"
    " round(balance, 2) AS rb, floor(balance) AS fb, ceil(region) AS cr,"
    " greatest(balance, region, 3) AS g, least(credit, 1.5) AS lc,"
    " least(opened, DATE '2024-01-01') AS ld, floor(rate) AS fr, ceil(rate) AS cf FROM accounts",
    # Spark's (ICU's) case mapping: 'ß' to 'SS', a final sigma, Unicode 16's new pairs
    "cases": "SELECT id, upper(owner) AS u, lower(owner) AS l, upper(concat(owner, 'ß')) AS us,"
    " lower(concat(owner, 'Σ')) AS ls, initcap(owner) AS ic, initcap(concat('x ', owner)) AS ix"
    " FROM accounts WHERE lower(owner) <> 'zed' OR owner IS NULL",
    "pads": "SELECT id, lpad(owner, region % 9, 'xy') AS l, rpad(owner, 6, 'é😀') AS r,"
    " lpad(owner, 3) AS l3, rpad(owner, 0, 'x') AS r0, lpad(owner, 4, '') AS le,"
    " repeat(owner, region % 4) AS rp, lpad(owner, CAST(balance AS INT), owner) AS lo"
    " FROM accounts",
    "locate": "SELECT id, locate('a', owner) AS lo, position('é' IN owner) AS po,"
    " locate('', owner) AS le, position(owner IN 'xxéx é aaa') AS pi FROM accounts",
    "reversed": "SELECT id, reverse(owner) AS r, reverse(concat(owner, 'e\u0301')) AS ra"
    " FROM accounts WHERE reverse(owner) <> 'cba' OR owner IS NULL",
    "digests": "SELECT id, md5(owner) AS m, sha1(owner) AS s1, sha(owner) AS s,"
    " sha2(owner, 256) AS s2, sha2(concat_ws('|', owner, region), 0) AS s0 FROM accounts",
    "pmods": "SELECT id, pmod(region, 3) AS p3, pmod(balance, 7) AS p7, pmod(region, 1) AS p1,"
    " pmod(CAST(region AS BIGINT) * 3, 2147483647) AS pl, pmod(-region, 2) AS pn FROM accounts",
    "by_pmod": "SELECT pmod(region, 4) AS bucket, COUNT(*) AS n, SUM(balance) AS s"
    " FROM accounts WHERE pmod(id, 3) <> 1 GROUP BY pmod(region, 4)",
    "by_lower": "SELECT lower(trim(owner)) AS o, COUNT(*) AS n, SUM(balance) AS s"
    " FROM accounts GROUP BY lower(trim(owner))",
    # a computed group key and a filter over them
    "by_prefix": "SELECT left(trim(owner), 1) AS p, COUNT(*) AS n, SUM(balance) AS s"
    " FROM accounts WHERE substring(owner, 1, 1) <> 'z' OR owner IS NULL GROUP BY 1",
}

OWNERS = [
    "", " ", "  a b  ", "\ta\t", "abc", "aaa", "xxéx é", "Straße", "e\u0301te", "😀a😀",
    "日本語テキスト", "zed", "ab", None, "ΟΔΥΣΣΕΥΣ", "ﬁx ǅ ŉ", "İı", "ZED", "Ab", " AB ",
    "\ua7cbΣ", "a\U00010d50\u0301Σ",
]  # fmt: skip
CREDITS = [
    Decimal(c) if c else None
    for c in ("1.25", "-1.25", "1.35", "-2.45", "0.05", "-0.05", "99999999.99", "15.00", "0.00", "")
]
RATES = [None, 1.5, -1.5, -0.0, 2.0, 1e300, -1e300, float("nan"), float("inf"), float("-inf"),
         9.2e18, -0.5]  # fmt: skip
OPENED = [dt.date(2024, 1, 2), dt.date(2023, 12, 31), None]
REGIONS = [None, 0, 1, 2, 3, -1, -4, 5, 2147483647, -2147483640]  # (- and -2 stay in range)


def _account(key: int, owner: Any, region: Any, balance: int | None = 1) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(("seen", "active"))
    credit, opened = CREDITS[key % len(CREDITS)], OPENED[key % len(OPENED)]
    return {**row, "id": key, "owner": owner, "region": region, "balance": balance,
            "credit": credit, "opened": opened, "rate": RATES[key % len(RATES)]}  # fmt: skip


@pytest.fixture(scope="module")
def planned(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Planned:
    return Planned.of(spark, TABLES, VIEWS, Path(tmp_path_factory.mktemp("strings")))


def test_parts_of_strings_match_spark_at_every_version(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    run = Run(planned, sorted(VIEWS), compute)  # (a view not maintained would raise here)
    try:
        n = len(OWNERS)
        run.load({"accounts": [_account(i, o, REGIONS[i % len(REGIONS)])
                               for i, o in enumerate(OWNERS)],
                  "transfers": []})  # fmt: skip
        run.step([("accounts", n + i, _account(n + i, o, REGIONS[(i + 3) % len(REGIONS)], i))
                  for i, o in enumerate(reversed(OWNERS))])  # fmt: skip
        run.step([("accounts", i, None) for i in range(0, n, 2)]
                 + [("accounts", 1, _account(1, OWNERS[5], None, balance=None))])  # fmt: skip
        run.step([("accounts", i, _account(i, OWNERS[(i * 5) % n], REGIONS[i % 7]))
                  for i in range(8)])  # fmt: skip
        assert spark_check(spark, run, VIEWS) == len(VIEWS) * 4
        assert len(run.outputs["by_prefix"]) > 3, "few groups at the last version"
    finally:
        run.close()
