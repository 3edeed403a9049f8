"""Config errors (issue 5): each stops ``deltamv run`` before it reads or writes anything,
with a non-zero exit and one line naming the key."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltamv.state.store import STATE_FILE
from tests.helpers.bank import (
    CONFIG,
    GOOD_2_2,
    TOTAL_BALANCE_SQL,
    commit,
    lines,
    put,
    resolved,
    run_cli,
    segment,
    totals,
    view_state,
    write_start,
)

# id: (the config's text -> the bad text, the key named, a part of the reason)
CASES = {
    "unknown-key": (('name = "bank"', 'name = "bank"\nparallelism = 4'), "job.parallelism",
                    "unknown key"),
    "missing-key": (('checkpoint = "state/_checkpoint"\n', ""), "job.checkpoint",
                    "missing required key"),
    "bad-ddl": (("balance BIGINT", "balance BIGNUM"), "tables.accounts.schema", "BIGNUM"),
    "unknown-table": ((TOTAL_BALANCE_SQL, "SELECT COUNT(*) AS n FROM acounts"),
                      "views.total_balance.sql", "acounts"),
    "unknown-column": ((TOTAL_BALANCE_SQL, "SELECT SUM(balanse) AS total FROM accounts"),
                       "views.total_balance.sql", "balanse"),
    "columns-named-alike": ((TOTAL_BALANCE_SQL, "SELECT SUM(balance) AS total, COUNT(*) AS Total"
                             " FROM accounts"), "views.total_balance.sql",
                            "returns 'total' and 'Total'"),
    "column-named-like-a-weight": ((TOTAL_BALANCE_SQL, "SELECT SUM(balance) AS __w FROM accounts"),
                                   "views.total_balance.sql", "named '__w'"),
    "reserved-table-column": (("balance BIGINT", "balance BIGINT, _KEY STRING"),
                              "tables.accounts.schema", "column '_KEY': the job keeps"),
    "two-views-one-path": (('path = "out/views/rich"', 'path = "out/views/total_balance"'),
                           "views.rich.path", "also used by views.total_balance.path"),
    "view-inside-a-view": (('path = "out/views/rich"', 'path = "out/views/total_balance/rich"'),
                           "views.rich.path", "lies inside views.total_balance.path"),
    "checkpoint-inside-a-view": (('checkpoint = "state/_checkpoint"',
                                  'checkpoint = "out/views/rich/_checkpoint"'),
                                 "views.rich.path", "holds job.checkpoint"),
    "view-inside-the-change-log": (('path = "out/views/rich"', 'path = "changelog/rich"'),
                                   "views.rich.path", "lies inside job.changelog"),
    "checkpoint-in-the-change-log": (('checkpoint = "state/_checkpoint"',
                                      'checkpoint = "changelog"'),
                                     "job.checkpoint", "also used by job.changelog"),
    "percent-escape-in-a-path": (('path = "out/views/rich"', 'path = "out/views/rich%20ones"'),
                                 "views.rich.path", "reads as a percent-encoded character"),
    "bracket-in-a-path": (('path = "out/views/rich"', 'path = "out/views/rich[1]"'),
                          "views.rich.path", "has [ ], which delta-rs cannot open"),
    "not-a-spark-master": (("", '\n[spark]\nmaster = "bogus[9]"\n'), "spark.master",
                           "'bogus[9]' is not a Spark master"),
    "not-an-amount-of-memory": (("", '\n[spark]\nconf = { "spark.driver.memory" = "lots" }\n'),
                                "spark.conf.spark.driver.memory", "not an amount of memory"),
    "bad-maintenance-value": (("", '\n[maintenance]\nvacuum_retention = "a week"\n'),
                              "maintenance.vacuum_retention", "a week"),
}  # fmt: skip


def bad_config(change: tuple[str, str]) -> str:
    old, new = change
    return CONFIG + new if not old else CONFIG.replace(old, new)


@pytest.mark.parametrize(("change", "key", "reason"), CASES.values(), ids=CASES.keys())
def test_config_error_names_the_key_before_anything_is_read(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str],
    key: str, reason: str,
) -> None:  # fmt: skip
    (tmp_path / "config.toml").write_text(bad_config(change))
    code, error = run_cli(tmp_path, capsys)
    assert code == 1
    assert error is not None and f"{key}: " in error and reason in error, error
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "out").exists()


def test_a_change_log_that_is_not_there_is_named_before_a_snapshot_is_loaded(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The snapshot was loaded and every view's first version published (minutes for a
    large one) before the change log was found missing."""
    (tmp_path / "snapshot" / "accounts").mkdir(parents=True)
    (tmp_path / "snapshot" / "_snapshot.json").write_text('{"ts": 100}')
    (tmp_path / "snapshot" / "accounts" / "part-0.jsonl").write_text(
        '{"id": 1, "owner": "o1", "balance": 100}\n'
    )
    config = CONFIG.replace(
        'changelog = "changelog"', 'changelog = "changelog"\nsnapshot = "snapshot"'
    )
    assert config != CONFIG
    (tmp_path / "config.toml").write_text(config)
    _fails_without_its_change_log(tmp_path, capsys)
    (tmp_path / "changelog").mkdir()  # the same job starts once the change log is there
    assert run_cli(tmp_path, capsys) == (0, None)
    assert totals(tmp_path) == (100, 1)


def test_a_table_keeps_its_columns_and_primary_key_for_its_checkpoints_life(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state holds the table's rows, and a prewrite still waiting for its commit, with
    the declared columns: another declaration is refused in one line naming the key, and
    nothing is committed; the old one runs on and loses nothing."""
    bank = write_start(tmp_path)
    assert run_cli(bank, capsys) == (0, None)
    segment(bank, 1, 2, lines([put(1, 130, 1, 50), resolved(1, 125)]))  # pending in the state
    assert run_cli(bank, capsys) == (0, None)
    config = bank / "config.toml"
    checkpoint = bank / "state" / "_checkpoint"
    held = "columns (id BIGINT, owner STRING, balance BIGINT) and primary key (id)"
    advice = (
        ": a table keeps its columns and primary key for its checkpoint's life (the rows held"
        " have no values for a new column); restore them, or start the job with a new"
        " checkpoint and new output paths"
    )
    changes = {
        "balance BIGINT": ("balance BIGINT, note STRING", "schema", "adds note STRING"),
        "balance BIGINT\"": ("balance DOUBLE\"", "schema", "declares balance DOUBLE"),
        "owner STRING, balance BIGINT": ("balance BIGINT, owner STRING", "schema",
                                         "orders them (id, balance, owner)"),
        '["id"]': ('["id", "owner"]', "primary_key", "declares the primary key (id, owner)"),
    }  # fmt: skip
    for old, (new, key, what) in changes.items():
        config.write_text(CONFIG.replace(old, new))
        code, error = run_cli(bank, capsys)
        assert code == 1
        assert error == (
            f"deltamv: error: {config}: tables.accounts.{key}: the job's checkpoint {checkpoint}"
            f" holds the rows of accounts with {held}, and this config {what}{advice}"
        ), error
    assert view_state(bank) == {"total_balance": [115], "rich": [115]}
    # A state written before the declarations were recorded: its mirror's column names.
    with contextlib.closing(sqlite3.connect(checkpoint / STATE_FILE)) as db, db:
        db.execute("DELETE FROM meta WHERE k = 'table.accounts'")
    config.write_text(CONFIG.replace("balance BIGINT", "balance BIGINT, note STRING"))
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert (
        error is not None
        and (
            "holds the rows of accounts with columns (id, owner, balance), and this config adds"
            " note STRING"
        )
        in error
    ), error
    config.write_text(CONFIG)
    segment(bank, 1, 3, lines([commit(1, 130, 131, 1), resolved(1, 150)]))
    segment(bank, 2, 2, GOOD_2_2)
    assert run_cli(bank, capsys) == (0, None)
    assert view_state(bank) == {"total_balance": [115, 140], "rich": [115, 140]}
    assert totals(bank) == (300, 3)


def test_a_table_whose_changes_the_state_holds_stays_in_the_config(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table taken out of the config while a change of it waits in the state for its
    commit: one line naming it (an internal KeyError before), and it runs once back."""
    from tests.helpers import changelog as log

    bank = write_start(tmp_path)
    config = bank / "config.toml"
    notes = '[tables.notes]\nschema = "id BIGINT, t STRING"\nprimary_key = ["id"]\n\n'
    with_notes = CONFIG.replace("[views.total_balance]", notes + "[views.total_balance]")
    config.write_text(with_notes)
    assert run_cli(bank, capsys) == (0, None)
    note = log.put(1, 130, "notes/0001", {"id": 1, "t": "x"}, table="notes")
    segment(bank, 1, 2, lines([note, resolved(1, 125)]))
    assert run_cli(bank, capsys) == (0, None)
    config.write_text(CONFIG)
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error == (
        f"deltamv: error: {config}: tables: notes is no longer in the config, but the job's"
        f" checkpoint {bank / 'state' / '_checkpoint'} holds changes of it not yet applied"
        " (committed above the watermark, or not yet committed): a table whose changes the"
        " change log carries stays in the config; put it back"
    ), error
    config.write_text(with_notes)
    segment(bank, 1, 3, lines([log.commit(1, 130, 131, "notes/0001", table="notes"),
                               resolved(1, 150)]))  # fmt: skip
    segment(bank, 2, 2, GOOD_2_2)
    assert run_cli(bank, capsys) == (0, None)
    assert view_state(bank)["total_balance"] == [115, 140]


def test_view_path_holding_a_table_someone_else_wrote(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    foreign = tmp_path / "out" / "views" / "rich"
    write_deltalake(str(foreign), pa.table({"id": [1], "owner": ["x"]}))
    code, error = run_cli(tmp_path, capsys)
    assert code == 1
    assert error is not None and "views.rich.path: " in error
    assert "written by something other than deltamv" in error
    assert not (tmp_path / "state").exists()
    assert len(list((foreign / "_delta_log").glob("*.json"))) == 1  # untouched


def test_config_errors_through_a_real_process(tmp_path: Path) -> None:
    """The command line itself (no Spark is started for a config the loader rejects)."""
    (tmp_path / "config.toml").write_text(CONFIG.replace("[views.rich]", "[viewz.rich]"))
    proc = subprocess.run(
        [sys.executable, "-m", "deltamv.cli", "run", str(tmp_path / "config.toml"), "--once"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deltamv: error: "), proc.stderr
    assert "viewz: unknown key" in lines[0]


def _fails_without_its_change_log(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``deltamv run --once`` stops with the one line naming the missing change log, and
    no output exists."""
    code, error = run_cli(root, capsys)
    assert code == 1
    assert error == (
        f"deltamv: error: {root / 'config.toml'}: job.changelog: change log directory"
        f" {root / 'changelog'} does not exist"
    )
    assert not (root / "out").exists()


def test_a_change_log_that_is_not_there_is_one_line_also_with_once(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under ``--once`` the change log is first listed where Spark prepares the run (a
    Python worker): the job said only "[STREAM_FAILED] ... Traceback"."""
    (tmp_path / "config.toml").write_text(CONFIG)
    _fails_without_its_change_log(tmp_path, capsys)
