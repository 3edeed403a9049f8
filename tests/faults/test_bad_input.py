"""Bad input (issue 5): each bad record stops the job with one line naming file:line (or
the file) and the reason, commits nothing of its batch, and once the input is repaired
the job resumes and stays consistent. Parsing details are tested in tests/changelog; here
the whole job runs, through the command line. Three cases run by default (about 30 s
each); the rest are marked slow (``make test-slow``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltamv import cli, delta
from tests.helpers.bank import (
    GOOD_1_2,
    GOOD_2_2,
    commit,
    lines,
    put,
    resolved,
    rich_ids,
    run_cli,
    segment,
    totals,
    view_state,
)

FIRST = {"total_balance": [115], "rich": [115]}
AFTER = {"total_balance": [115, 140], "rich": [115, 140]}

GOOD = json.dumps(resolved(2, 140))
BAD_SEGMENTS = [
    pytest.param(GOOD_2_2 + "{not json\n", 4, "JSON", id="not-json"),
    pytest.param(
        GOOD_2_2 + '{"region": 2, "type": "RESOLV',
        4,
        "",
        marks=pytest.mark.slow,
        id="truncated-last-line",
    ),
    pytest.param(
        lines([put(2, 130, 7, 150), {**commit(2, 130, 131, 7), "commit_ts": None}]),
        2,
        "commit_ts",
        marks=pytest.mark.slow,
        id="missing-field",
    ),
    pytest.param(
        GOOD_2_2 + lines([{"region": 2, "type": "CHECKPOINT"}]),
        4,
        "CHECKPOINT",
        marks=pytest.mark.slow,
        id="unknown-type",
    ),
    pytest.param(
        lines([{**put(2, 130, 7, 150), "op": "UPSERT"}]),
        1,
        "UPSERT",
        marks=pytest.mark.slow,
        id="unknown-op",
    ),
    pytest.param(
        lines([put(2, 130, 7, "a lot")]),
        1,
        "balance",
        marks=pytest.mark.slow,
        id="value-does-not-fit-schema",
    ),
    pytest.param(
        lines([commit(2, 130, 131, 7), resolved(2, 140)]),
        1,
        "PREWRITE",
        id="commit-without-prewrite",
    ),
    pytest.param(
        lines([resolved(2, 140), resolved(2, 139)]),
        2,
        "backwards",
        marks=pytest.mark.slow,
        id="resolved-going-backwards",
    ),
]


def assert_resumes(spark: Any, bank: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, error = run_cli(bank, capsys)
    assert (code, error) == (0, None)
    assert view_state(bank) == AFTER
    assert totals(bank) == (300, 3)
    assert rich_ids(bank) == [2, 7]


@pytest.mark.parametrize(("text", "line", "reason"), BAD_SEGMENTS)
def test_bad_record_stops_commits_nothing_and_resumes_once_repaired(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str], text: str, line: int, reason: str
) -> None:
    assert run_cli(bank, capsys) == (0, None)
    segment(bank, 1, 2, GOOD_1_2)  # read in the same batch as the bad one: not committed either
    bad = segment(bank, 2, 2, text)
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error is not None and f"{bad}:{line}: " in error and reason in error, error
    assert view_state(bank) == FIRST
    segment(bank, 2, 2, GOOD_2_2)  # repaired
    assert_resumes(spark, bank, capsys)


@pytest.mark.slow
def test_parquet_segment_with_the_wrong_schema(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(bank, capsys) == (0, None)
    segment(bank, 1, 2, GOOD_1_2)
    bad = bank / "changelog" / "region-2" / "000002.parquet"
    pq.write_table(pa.table({"region": [2], "kind": ["RESOLVED"], "ts": [140]}), bad)
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error is not None and f"{bad}: " in error and "'type'" in error, error
    assert view_state(bank) == FIRST
    bad.unlink()  # repaired: the upstream rewrites the segment as JSONL
    segment(bank, 2, 2, GOOD_2_2)
    assert_resumes(spark, bank, capsys)


@pytest.mark.parametrize(
    "damage",
    [
        "rewritten",
        pytest.param("deleted", marks=pytest.mark.slow),
        pytest.param("rewritten-same-size", marks=pytest.mark.slow),
    ],
)
def test_segment_deleted_or_rewritten_after_it_was_read(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    assert run_cli(bank, capsys) == (0, None)
    target = bank / "changelog" / "region-2" / "000001.jsonl"
    original = target.read_text()
    if damage == "deleted":
        target.unlink()
    elif damage == "rewritten":
        target.write_text(original.replace('"balance": 100', '"balance": 1000'))
    else:
        target.write_text(original.replace('"balance": 100', '"balance": 900'))
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    code, error = run_cli(bank, capsys)
    assert code == 1
    assert error is not None and f"{target}: " in error, error
    assert ("deleted" if damage == "deleted" else "rewritten") in error
    assert view_state(bank) == FIRST
    target.write_text(original)  # restored: a new file with the old bytes passes
    assert_resumes(spark, bank, capsys)


def test_a_bad_record_through_a_real_process_is_one_line(bank: Path) -> None:
    """The command line: the error is deltamv's one line, without the tracebacks Spark and
    py4j would log for the failed batch first (``-v`` shows them)."""
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2 + "{not json\n")
    proc = subprocess.run(
        [sys.executable, "-m", "deltamv.cli", "run", str(bank / "config.toml"), "--once"],
        capture_output=True, text=True, timeout=300, cwd=bank,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("deltamv: error: bad record at "), proc.stderr
    assert "region-2/000002.jsonl:4" in errors[0]
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr, proc.stderr


def test_workers_that_cannot_import_deltamv_are_one_line(bank: Path) -> None:
    """``PYSPARK_PYTHON`` naming a Python without deltamv (the job's source runs in
    Spark's Python workers): one line naming that interpreter, not a traceback."""
    # A virtual environment of its own holds no package; without PYTHONPATH it cannot
    # import deltamv (Spark gives its workers pyspark's own path)
    venv.create(bank / "bare", with_pip=False)
    python = bank / "bare" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert subprocess.run([python, "-c", "import deltamv"], env=env, check=False).returncode
    proc = subprocess.run(
        [sys.executable, "-m", "deltamv.cli", "run", str(bank / "config.toml"), "--once"],
        capture_output=True, text=True, timeout=300, cwd=bank,
        env=dict(env, PYSPARK_PYTHON=str(python)),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "deltamv: error: Spark's Python workers cannot import deltamv (No module named"
        f" 'deltamv'): they run {python}; set PYSPARK_PYTHON to a Python that has deltamv"
        " installed"
    ], proc.stderr
    assert not (bank / "out").exists()


def test_a_view_failing_on_the_data_stops_the_job_in_one_line_until_its_sql_changes(
    spark: Any, bank: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A view's SQL that fails on a row (a division by zero; Spark's ANSI mode fails
    there too) stops the job with one line naming the view, maintained incrementally (in
    the batch's state transaction: nothing of the batch is committed) or recomputed by
    Spark (when its turn to be published comes); once its SQL is changed, the job goes
    on from that batch. Outputs added or changed meanwhile are written whole for it."""
    failing = "SELECT id, 1000 DIV (balance - 50) AS q FROM accounts"
    config = bank / "config.toml"
    config.write_text(config.read_text() + "".join(
        f'\n[views.ratio_{mode[:3]}]\nsql = "{failing}"\npath = "out/views/ratio_{mode[:3]}"'
        f'\nmaintain = "{mode}"\n'
        for mode in ("incremental", "recompute")
    ) + '\n[views.late]\nsql = "SELECT id, balance FROM accounts WHERE balance > 60"'
        '\npath = "out/views/late"\n')  # fmt: skip
    assert run_cli(bank, capsys) == (0, None)
    segment(bank, 1, 2, GOOD_1_2)  # account 1 goes down to 50
    segment(bank, 2, 2, GOOD_2_2)
    code, error = run_cli(bank, capsys)
    assert code == 1 and error is not None
    assert error.startswith("deltamv: error: view ratio_inc: its SQL fails on the data: ")
    assert "DIVIDE_BY_ZERO" in error and "change the view's SQL" in error, error
    assert view_state(bank) == FIRST  # the state transaction rolled back: nothing committed

    def fix(view: str) -> None:
        text = config.read_text().split(f"[views.{view}]")
        text[1] = text[1].replace("(balance - 50)", "NULLIF(balance - 50, 0)", 1)
        config.write_text(f"[views.{view}]".join(text))

    fix("ratio_inc")
    proc = subprocess.run(
        [sys.executable, "-m", "deltamv.cli", "run", str(config), "--once"],
        capture_output=True, text=True, timeout=300, cwd=bank,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("deltamv: error: view ratio_rec: its SQL fails on the data: ")
    assert "DIVIDE_BY_ZERO" in errors[0] and "ansi" not in errors[0], errors[0]
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr, proc.stderr
    rec = str(bank / "out" / "views" / "ratio_rec")
    assert [v.watermark for v in delta.versions(rec)] == [115]

    # Its SQL changed, and a copy of the table put in the config meanwhile (the staged
    # batch has the job's own copy, which leaves the config): the copy is written for
    # that batch from the mirrors, and the view recomputed over it.
    fix("ratio_rec")
    config.write_text(config.read_text().replace(
        "[tables.accounts]\n", '[tables.accounts]\npath = "out/tables/accounts"\n'))  # fmt: skip
    # and a view staged with its batch (after ratio_rec: not published) gets new SQL: the
    # batch is written by the new SQL, not the old SQL's staged change
    config.write_text(config.read_text().replace("balance > 60", "balance > 120"))
    capsys.readouterr()
    assert cli.main(["run", str(config), "--once"]) == 0
    assert "mirror:accounts is no longer in the config; not published" in capsys.readouterr().err
    assert view_state(bank) == AFTER
    expected = [{"id": 1, "q": None}, {"id": 2, "q": 20}, {"id": 7, "q": 10}]
    # ratio_inc's SQL changed while the job stood at 115 (its batch was rolled back): the
    # next start published it there; ratio_rec's, after the batch was staged
    marks = {"ratio_inc": [115, 115, 140], "ratio_rec": [115, 140]}
    for view in ("ratio_inc", "ratio_rec"):
        path = str(bank / "out" / "views" / view)
        assert [v.watermark for v in delta.versions(path)] == marks[view]
        assert delta.read_arrow(path).sort_by("id").to_pylist() == expected, view
    late = str(bank / "out" / "views" / "late")
    assert [v.watermark for v in delta.versions(late)] == [115, 140]
    assert delta.read_arrow(late).to_pylist() == [{"id": 7, "balance": 150}]
    copy = str(bank / "out" / "tables" / "accounts")
    assert [v.watermark for v in delta.versions(copy)] == [140]
    balances = delta.read_arrow(copy).sort_by("id").select(["id", "balance"]).to_pylist()
    assert balances == [{"id": 1, "balance": 50}, {"id": 2, "balance": 100},
                        {"id": 7, "balance": 150}]  # fmt: skip
