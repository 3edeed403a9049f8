"""Foreign writers (issue 5): another process committing to a view, and a second job with
the same name. The job stops with a clear error and changes nothing."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deltamv import delta, session
from deltamv.config import load_config
from deltamv.errors import CommitConflictError
from deltamv.job import ViewJob
from deltamv.state.store import open_read_only
from tests.helpers.bank import (
    CONFIG,
    GOOD_1_2,
    GOOD_2_2,
    lines,
    resolved,
    run_cli,
    segment,
    view_state,
)

FOREIGN_APPEND = """
import sys, pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
table = DeltaTable(sys.argv[1])
write_deltalake(sys.argv[1], pq.read_table(table.file_uris()[0]).slice(0, 1), mode="append")
"""


def foreign_commit(path: Path) -> None:
    """Another process appends a row to the table (a plain delta-rs writer)."""
    subprocess.run([sys.executable, "-c", FOREIGN_APPEND, str(path)], check=True, timeout=120)


def test_foreign_commit_between_runs_is_refused_at_start(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(bank, capsys) == (0, None)
    total = bank / "out" / "views" / "total_balance"
    foreign_commit(total)
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error is not None and f"table {total} version 1 was committed by another writer" in error
    assert view_state(bank) == {"total_balance": [115, None], "rich": [115]}  # nothing added
    assert spark.streams.active == []  # the query, started while the job opened, stopped
    code, again = run_cli(bank, capsys)  # still refused: the job never overwrites it
    assert code == 1 and again == error


@pytest.mark.parametrize("damage", ["emptied", "replaced"])
def test_a_damaged_last_commit_is_refused_at_start(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """The last commit file of a view emptied (a write cut short by a crash, a full disk)
    or rewritten by something else: the table still counted as at the version the job
    committed, and the next versions silently lacked that commit's rows."""
    assert run_cli(bank, capsys) == (0, None)
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    assert run_cli(bank, capsys) == (0, None)
    rich = bank / "out" / "views" / "rich"
    last = rich / "_delta_log" / f"{1:020d}.json"
    if damage == "emptied":
        last.write_bytes(b"")
    else:
        last.write_text('{"commitInfo":{"operation":"WRITE"}}\n')
    segment(bank, 1, 3, lines([resolved(1, 170)]))
    segment(bank, 2, 3, lines([resolved(2, 170)]))
    code, error = run_cli(bank, capsys)
    assert code == 1
    expected = (
        "is empty (a write cut short"
        if damage == "emptied"
        else (f"table {rich} version 1 is not the commit job 'bank' made there")
    )
    assert error is not None and expected in error, error
    assert len(delta.versions(str(bank / "out" / "views" / "total_balance"))) == 2  # nothing added


def _foreign_commit_mid_batch(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch, view: str
) -> tuple[Path, str]:
    """A first run, the transfer, then a run during whose batch another writer commits to
    ``view`` (while the batch is ingested): the view's path and the run's error."""
    config = load_config(bank / "config.toml")
    ViewJob(config, spark).run(once=True)
    path = bank / "out" / "views" / view
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)

    from deltamv import faults

    real = faults.point

    def point(name: str) -> None:
        if name == "after-ingest":
            foreign_commit(path)
        real(name)

    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(CommitConflictError) as info:
        ViewJob(config, spark).run(once=True)
    return path, str(info.value)


def test_foreign_commit_during_a_batch_stops_at_the_next_commit(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rich, error = _foreign_commit_mid_batch(spark, bank, monkeypatch, "rich")
    assert f"table {rich} is at version 1 but job bank last committed version 0" in error
    # total_balance is committed, at the new consistent watermark; rich keeps its own
    # version and the foreign one. Every deltamv version is still a consistent one.
    assert view_state(bank) == {"total_balance": [115, 140], "rich": [115, None]}


def test_a_table_committed_beside_a_refused_one_is_recorded(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The views commit at once: a foreign commit to the first one refuses that one,
    while the other commits beside it; the state then knows of that commit, as it knows
    of one made before a crash."""
    total, error = _foreign_commit_mid_batch(spark, bank, monkeypatch, "total_balance")
    assert f"table {total} is at version 1 but job bank last committed version 0" in error
    assert view_state(bank) == {"total_balance": [115, None], "rich": [115, 140]}
    state = open_read_only(bank / "state" / "_checkpoint")
    assert state is not None
    try:
        assert state.committed_version("view:rich") == 1
        assert state.committed_version("view:total_balance") == 0
    finally:
        state.close()


def test_second_job_with_the_same_name_refuses_to_run(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(bank, capsys) == (0, None)
    # Same name, same tables, its own checkpoint.
    (bank / "config.toml").write_text(CONFIG.replace("state/_checkpoint", "state2/_checkpoint"))
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error is not None and "did not write (another job named 'bank'" in error, error
    assert view_state(bank) == {"total_balance": [115], "rich": [115]}


def test_a_view_renamed_on_its_path_is_named_with_its_old_name(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "another job": the checkpoint wrote the table, as the view's old name."""
    assert run_cli(bank, capsys) == (0, None)
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    assert run_cli(bank, capsys) == (0, None)
    (bank / "config.toml").write_text(CONFIG.replace("[views.rich]", "[views.wealthy]"))
    segment(bank, 1, 3, lines([resolved(1, 160)]))
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error == (
        f"deltamv: error: {bank / 'config.toml'}: views.wealthy.path: {bank / 'out' / 'views' / 'rich'} holds"
        " versions this job wrote for another of its outputs (view rich, no longer in the"
        " config: renamed?): an output keeps its path under its name; keep the old name, or"
        " give this one a new path (it is then built there from the tables)"
    ), error
    assert view_state(bank) == {"total_balance": [115, 140], "rich": [115, 140]}


def test_second_job_on_the_same_checkpoint_refuses_to_run(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = bank / "state" / "_checkpoint"
    checkpoint.mkdir(parents=True)
    started: list[object] = []
    real_build = session.build_spark
    monkeypatch.setattr(
        session, "build_spark", lambda c, **kw: started.append(c) or real_build(c, **kw)
    )
    with open(checkpoint / "_lock", "a+") as held:  # the first job holds its lock
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, error = run_cli(bank, capsys)
    assert code == 1
    assert error is not None and "job 'bank' is already running on checkpoint" in error
    assert started == []  # refused before Spark's start, not seconds after it
    assert delta.table_version(str(bank / "out" / "views" / "rich")) is None
    # Once the lock is free, the same command runs (the look took no lock of its own).
    assert run_cli(bank, capsys) == (0, None)
    assert len(started) == 1
