"""The view job end to end on small hand-written change logs (the simulator tests are
in test_job_oracle.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from deltamv import delta
from deltamv.config import load_config
from deltamv.errors import BadRecordError, ConfigError
from deltamv.job import ViewJob
from tests.helpers.bank import (
    CONFIG,
    GOOD_1_2,
    GOOD_2_2,
    TOTAL_BALANCE_SQL,
    lines,
    resolved,
    segment,
    write_start,
)


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return write_start(tmp_path)


def rows(spark: Any, path: Path, version: int | None = None) -> Any:
    return delta.read_spark(spark, str(path), version)


def test_once_commits_one_consistent_version_per_view(spark: Any, bank: Path) -> None:
    config = load_config(bank / "config.toml")
    reports = ViewJob(config, spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [115]
    total = bank / "out" / "views" / "total_balance"
    assert [v.watermark for v in delta.versions(str(total))] == [115]
    expected = spark.createDataFrame([(300, 3)], "total BIGINT, accounts BIGINT NOT NULL")
    assert_df_equality(rows(spark, total), expected, ignore_nullable=True)

    # A transfer of 50 from account 1 to 7, split over both regions; then run again.
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    ViewJob(config, spark).run(once=True)
    versions = delta.versions(str(total))
    assert [v.watermark for v in versions] == [115, 140]
    assert all(v.job == "bank" for v in versions)
    assert_df_equality(rows(spark, total, 1), expected, ignore_nullable=True)
    rich = spark.createDataFrame([(2, "o2"), (7, "o7")], "id BIGINT, owner STRING")
    assert_df_equality(
        rows(spark, bank / "out" / "views" / "rich"),
        rich,
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_bad_record_stops_the_batch_and_commits_nothing(spark: Any, bank: Path) -> None:
    config = load_config(bank / "config.toml")
    bad = segment(bank, 2, 2, lines([resolved(2, 140), resolved(2, 139)]))
    with pytest.raises(BadRecordError) as info:
        ViewJob(config, spark).run(once=True)
    assert (info.value.file, info.value.line) == (str(bad), 2)
    assert "going backwards" in str(info.value)
    assert "\n" not in str(info.value)
    assert delta.table_version(str(bank / "out" / "views" / "total_balance")) is None

    # Repaired (the upstream fixed the segment): the job resumes from where it stood.
    bad.write_text(lines([resolved(2, 140)]))
    ViewJob(config, spark).run(once=True)
    assert [v.watermark for v in delta.versions(str(bank / "out" / "views" / "total_balance"))] == [
        120
    ]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT SUM(balance) FROM acounts", "acounts"),
        ("SELECT SUM(balanse) AS total FROM accounts", "balanse"),
        ("SELEC 1", "views.total_balance.sql"),
    ],
)
def test_view_sql_errors_name_the_key_before_reading(
    spark: Any, bank: Path, sql: str, message: str
) -> None:
    text = CONFIG.replace(TOTAL_BALANCE_SQL, sql)
    (bank / "config.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert info.value.key == "views.total_balance.sql"
    assert message in str(info.value)
    assert not (bank / "state" / "_checkpoint").exists()
