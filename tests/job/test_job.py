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
from tests.faults.conftest import CONFIG, commit, lines, put
from tests.faults.conftest import segment as write_segment


def segment(root: Path, region: int, seq: int, events: list[dict[str, Any]] | str) -> Path:
    return write_segment(root, region, seq, events if isinstance(events, str) else lines(events))


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    (tmp_path / "config.toml").write_text(CONFIG)
    segment(tmp_path, 1, 1, [
        {"region": 1, "type": "INITIALIZED", "start_key": "", "end_key": "accounts/0005"},
        put(1, 100, 1, 100), put(1, 100, 2, 100), commit(1, 100, 110, 1),
        {"region": 1, "type": "RESOLVED", "ts": 120},
    ])  # fmt: skip
    segment(tmp_path, 2, 1, [
        {"region": 2, "type": "INITIALIZED", "start_key": "accounts/0005", "end_key": ""},
        put(2, 100, 7, 100), commit(2, 100, 110, 7), {"region": 2, "type": "RESOLVED", "ts": 115},
    ])  # fmt: skip
    return tmp_path


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
    segment(
        bank,
        1,
        2,
        [put(1, 130, 1, 50), commit(1, 130, 131, 1), {"region": 1, "type": "RESOLVED", "ts": 150}],
    )
    segment(
        bank,
        2,
        2,
        [put(2, 130, 7, 150), commit(2, 130, 131, 7), {"region": 2, "type": "RESOLVED", "ts": 140}],
    )
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
    bad = segment(
        bank,
        2,
        2,
        '{"region": 2, "type": "RESOLVED", "ts": 140}\n{"region": 2, "type": "RESOLVED", "ts": 139}\n',
    )
    with pytest.raises(BadRecordError) as info:
        ViewJob(config, spark).run(once=True)
    assert (info.value.file, info.value.line) == (str(bad), 2)
    assert "going backwards" in str(info.value)
    assert "\n" not in str(info.value)
    assert delta.table_version(str(bank / "out" / "views" / "total_balance")) is None

    # Repaired (the upstream fixed the segment): the job resumes from where it stood.
    bad.write_text('{"region": 2, "type": "RESOLVED", "ts": 140}\n')
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
    text = CONFIG.replace("SELECT SUM(balance) AS total, COUNT(*) AS accounts FROM accounts", sql)
    (bank / "config.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert info.value.key == "views.total_balance.sql"
    assert message in str(info.value)
    assert not (bank / "state" / "_checkpoint").exists()
