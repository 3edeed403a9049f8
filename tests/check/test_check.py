"""``deltamv check``: invariants, watermarks and the truth, at every version of a view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltamv import tso
from deltamv.check.invariants import check_job
from deltamv.cli import main
from deltamv.config import load_config
from deltamv.errors import ConfigError
from deltamv.sim import job_toml
from deltamv.sim.truth import Truth, TruthRow, TruthTxn
from deltamv.sim.workloads import Bank
from tests.helpers import bank
from tests.helpers.views import commit_version

T0 = tso.compose(1_700_000_000_000)
TOTALS = pa.schema([("total", pa.int64()), ("accounts", pa.int64())])
NEGATIVE = pa.schema([("negative", pa.int64())])
ACCOUNTS = pa.schema([("id", pa.int64()), ("balance", pa.int64())])

CONFIG = job_toml(
    name="hand", changelog="changelog", checkpoint="out/_checkpoint",
    tables={"accounts": bank.ACCOUNTS}, view_dir="views",
    views={"total_balance": bank.TOTAL_BALANCE_SQL, "negative_accounts": bank.NEGATIVE_SQL,
           "balances": "SELECT id, balance FROM accounts"},
    invariants={"money_is_conserved": Bank.invariants["money_is_conserved"],
                "no_negative_balance": Bank.invariants["no_negative_balance"]},
)  # fmt: skip


def ts(seconds: int) -> int:
    return T0 + tso.compose(seconds * 1000)


def write_config(tmp: Path) -> Path:
    path = tmp / "job.toml"
    path.write_text(CONFIG)
    return path


def versions(
    tmp: Path, view: str, schema: pa.Schema, contents: list[tuple[int, list[Any]]]
) -> None:
    for watermark, rows in contents:
        commit_version(str(tmp / "views" / view), rows, schema, watermark=watermark)


def consistent_tables(tmp: Path) -> None:
    versions(tmp, "total_balance", TOTALS, [(ts(1), [{"total": 1000, "accounts": 2}]),
                                            (ts(3), [{"total": 1000, "accounts": 2}])])  # fmt: skip
    versions(
        tmp, "negative_accounts", NEGATIVE, [(ts(1), [{"negative": 0}]), (ts(3), [{"negative": 0}])]
    )
    versions(tmp, "balances", ACCOUNTS, [(ts(1), [{"id": 1, "balance": 500}, {"id": 2, "balance": 500}]),
                                         (ts(3), [{"id": 1, "balance": 400}, {"id": 2, "balance": 600}])])  # fmt: skip


def bank_truth() -> Truth:
    def put(i: int, balance: int) -> TruthRow:
        key = f"accounts/{i:04d}"
        return TruthRow("accounts", key, "PUT", {"id": i, "owner": f"o{i}", "balance": balance})

    return Truth(
        [
            TruthTxn(ts(1) - 5, ts(1), (put(1, 500), put(2, 500))),
            TruthTxn(ts(2), ts(3) - 1, (put(1, 400), put(2, 600))),
        ],
        {"accounts": ("id BIGINT, owner STRING, balance BIGINT", ("id",))},
    )


def test_consistent_views_pass_with_and_without_truth(spark: Any, tmp_path: Path) -> None:
    consistent_tables(tmp_path)
    config = load_config(write_config(tmp_path))
    report = check_job(spark, config, truth=bank_truth())
    assert report.ok, report.violations
    by_view = {v.view: v for v in report.views}
    assert by_view["total_balance"].versions == 2
    assert by_view["total_balance"].invariants_held == 1
    assert by_view["balances"].truth_checked == 2
    assert check_job(spark, config, views=["negative_accounts"]).ok


def test_an_inconsistent_table_is_caught_and_the_violation_named(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consistent_tables(tmp_path)
    # An eventually consistent writer: half a transfer applied (version 2), then a
    # watermark that goes back (version 3), then a negative balance (always broken).
    versions(tmp_path, "total_balance", TOTALS, [(ts(4), [{"total": 900, "accounts": 2}]),
                                                 (ts(2), [{"total": 1000, "accounts": 2}])])  # fmt: skip
    versions(tmp_path, "negative_accounts", NEGATIVE, [(ts(4), [{"negative": 1}])])
    versions(
        tmp_path,
        "balances",
        ACCOUNTS,
        [(ts(4), [{"id": 1, "balance": 400}, {"id": 2, "balance": 500}])],
    )
    config_path = write_config(tmp_path)
    report = check_job(spark, load_config(config_path), truth=bank_truth())
    assert not report.ok
    found = {(v.view, v.check, v.version, v.watermark) for v in report.violations}
    assert ("total_balance", "money_is_conserved", 2, ts(4)) in found
    assert ("total_balance", "watermark", 3, ts(2)) in found
    assert ("negative_accounts", "no_negative_balance", 2, ts(4)) in found
    assert ("balances", "truth", 2, ts(4)) in found
    money = next(v for v in report.violations if v.check == "money_is_conserved")
    assert "[(900)] != [(1000)] at version 0" in money.detail
    truth = next(v for v in report.violations if v.check == "truth")
    assert "1 row(s) only in the version, 1 only in the view SQL over the truth" in truth.detail

    assert main(["check", str(config_path), "--view", "total_balance"]) == 1
    out = capsys.readouterr().out
    assert "total_balance: money_is_conserved violated at version 2" in out
    assert "FAILED" in out


def test_a_commit_without_watermark_and_a_missing_table_are_violations(
    spark: Any, tmp_path: Path
) -> None:
    consistent_tables(tmp_path)
    commit_version(str(tmp_path / "views" / "total_balance"), [{"total": 1000, "accounts": 2}],
                   TOTALS, watermark=None)  # fmt: skip
    text = CONFIG + '\n[views.missing]\nsql = "SELECT 1 AS one"\npath = "views/missing"\n'
    (tmp_path / "job.toml").write_text(text)
    report = check_job(spark, load_config(tmp_path / "job.toml"))
    found = {(v.view, v.check, v.version) for v in report.violations}
    assert found == {("total_balance", "watermark", 2), ("missing", "table", None)}


def test_an_always_query_must_return_one_boolean_column(spark: Any, tmp_path: Path) -> None:
    consistent_tables(tmp_path)
    text = CONFIG.replace('always = "SELECT negative = 0 FROM', 'always = "SELECT negative FROM')
    (tmp_path / "job.toml").write_text(text)
    with pytest.raises(ConfigError) as refused:  # once, over the view's schema, as `run` does
        check_job(spark, load_config(tmp_path / "job.toml"), views=["negative_accounts"])
    assert refused.value.key == "invariants.no_negative_balance.always"
    assert str(refused.value).endswith(
        "exactly one BOOLEAN column; over view 'negative_accounts' it returns negative BIGINT"
    )
    # the view's other invariants are not looked at when it is not checked
    report = check_job(spark, load_config(tmp_path / "job.toml"), views=["total_balance"])
    assert report.ok, report.violations


def test_a_published_table_is_checked_against_the_truth_too(spark: Any, tmp_path: Path) -> None:
    """``tables.X.path`` copies were left out: a wrong copy passed the check."""
    consistent_tables(tmp_path)
    copy = tmp_path / "tables" / "accounts"
    full = pa.schema([("id", pa.int64()), ("owner", pa.string()), ("balance", pa.int64())])
    commit_version(
        str(copy),
        [{"id": 1, "owner": "o1", "balance": 500}, {"id": 2, "owner": "o2", "balance": 500}],
        full,
        watermark=ts(1),
    )
    commit_version(str(copy), [{"id": 1, "owner": "o1", "balance": 400}], full, watermark=ts(3))
    text = CONFIG.replace("[tables.accounts]\n", '[tables.accounts]\npath = "tables/accounts"\n')
    assert 'path = "tables/accounts"' in text
    (tmp_path / "job.toml").write_text(text)
    report = check_job(spark, load_config(tmp_path / "job.toml"), truth=bank_truth())
    by_name = {v.view: v for v in report.views}
    assert by_name["tables.accounts"].truth_checked == 2
    found = {(v.view, v.check, v.version) for v in report.violations}
    assert found == {("tables.accounts", "truth", 1)}
