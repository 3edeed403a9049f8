"""``deltamv status`` on a job whose watermark one region holds back, then on a real
job's history: check passes against the simulator's truth."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from deltamv.changelog.segments import list_segments
from deltamv.check.commands import print_slot, print_status
from deltamv.check.invariants import check_job
from deltamv.check.status import JobStatus, SlotView, ViewStatus, job_status
from deltamv.cli import main
from deltamv.config import load_config
from deltamv.job import ViewJob
from deltamv.sim import Truth, simulate
from deltamv.sim._io import read_segment

HELD = 2  # the region held back


def resolved_ts(path: str) -> list[int]:
    return [
        int(e["ts"]) for e in read_segment(path) if isinstance(e, dict) and e["type"] == "RESOLVED"
    ]


def publish(run: Path, job_dir: Path, *, hold: bool, after: int = 0) -> int:
    """Copy the run's segments into the job's log; with ``hold``, region HELD only up to
    its first segment resolving above ``after``.

    Returns the highest resolved ts the published part of region HELD reports.
    """
    resolved = 0
    for region, segs in list_segments(str(run / "changelog")).items():
        target = job_dir / "changelog" / f"region-{region}"
        target.mkdir(parents=True, exist_ok=True)
        chosen = segs
        if region == HELD and hold:
            first = next(
                i for i, seg in enumerate(segs) if any(t > after for t in resolved_ts(seg.path))
            )
            assert first + 2 < len(segs), "the held region must have more to publish"
            chosen = segs[: first + 1]
        for seg in chosen:
            name = Path(seg.path).name
            if not (target / name).exists():
                shutil.copyfile(seg.path, target / f".{name}")
                (target / f".{name}").rename(target / name)
            if region == HELD:
                resolved = max([resolved, *resolved_ts(seg.path)])
    return resolved


@pytest.fixture(scope="module")
def held_job(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("status")
    run = tmp / "run"
    simulate("bank", run, seed=11, txns=150, regions=4, splits=0, segment_events=40, accounts=100)
    job_dir = tmp / "job"
    job_dir.mkdir()
    text = (run / "config.toml").read_text()  # with a Delta copy of one table
    copied = text.replace(
        'primary_key = ["id"]\n', 'primary_key = ["id"]\npath = "out/accounts"\n', 1
    )
    assert copied != text
    (job_dir / "config.toml").write_text(copied)
    config = load_config(job_dir / "config.toml")
    # Hold the region once the initial rows are in (a region may resolve at the genesis
    # transaction's start ts while it still prewrites, showing empty tables).
    genesis = Truth.load(run).commit_timestamps()[0]
    held_ts = publish(run, job_dir, hold=True, after=genesis)
    assert held_ts > 0
    ViewJob(config, spark).run(once=True)
    status = job_status(config)
    published = len(list((job_dir / "changelog" / f"region-{HELD}").iterdir()))
    publish(run, job_dir, hold=False)
    behind = job_status(config)  # the rest of the region is in the log, not read yet
    ViewJob(config, spark).run(once=True)
    return {
        "config": config,
        "run": run,
        "status": status,
        "held_ts": held_ts,
        "behind": behind,
        "unread": len(list((job_dir / "changelog" / f"region-{HELD}").iterdir())) - published,
        "after": job_status(config),
    }


def test_status_names_the_region_holding_the_watermark(held_job: dict[str, Any]) -> None:
    status, held_ts = held_job["status"], held_job["held_ts"]
    blocker = status.blocker
    assert blocker is not None
    assert (blocker.region, blocker.reason, blocker.ts) == (HELD, "lowest resolved ts", held_ts)
    assert blocker.region_resolved == held_ts
    assert blocker.resolved_since_ms is not None and blocker.resolved_since_ms <= status.now_ms
    assert blocker.watermark_since_ms is not None
    assert status.job_watermark == held_ts
    for view in status.views:
        assert (view.versions, view.watermark) == (1, held_ts)
        assert view.lag_ms(status.now_ms) > 0
    assert status.last_duration_ms is not None and status.last_duration_ms > 0
    # The table's copy is listed as the views are, under its table's name
    assert [(c.view, c.versions, c.watermark) for c in status.copies] == [("accounts", 1, held_ts)]

    console = Console(record=True, width=160)
    print_status(status, console)
    text = console.export_text()
    assert any(line.split()[1:3] == ["table", "accounts"] for line in text.splitlines()
               if "copy of the table" in line), text  # fmt: skip
    assert f"held back by: region {HELD} [" in text
    assert "lowest resolved ts" in text
    assert "unchanged since" in text


def test_status_counts_the_segments_the_job_has_not_read(held_job: dict[str, Any]) -> None:
    # The blocker is what the job read; a job behind its log said nothing of the rest
    # (an outside check: "unchanged since ... 282 s ago" during a long catch-up).
    def shown(status: JobStatus) -> str:
        console = Console(record=True, width=160)
        print_status(status, console)
        return console.export_text()

    assert held_job["status"].backlog.total == 0
    assert "change log: every segment read" in shown(held_job["status"])
    behind, unread = held_job["behind"], held_job["unread"]
    assert unread > 1
    assert behind.backlog.segments == {HELD: unread} and behind.backlog.bytes > 0
    text = shown(behind)
    assert f"change log: {unread} segments (" in text and "in 1 region not read yet" in text
    assert f"its region has {unread} segments not read yet" in text
    assert held_job["after"].backlog.total == 0


def test_status_of_a_job_whose_first_batch_failed_points_at_the_run() -> None:
    # Nothing below to see: no batch finished, so nothing holds the watermark back yet
    # (it used to say "see what holds it back below", over nothing).
    view = ViewStatus("v", "/out/v", 0, None, None, None, "incremental")
    status = JobStatus("bank", "/ckpt", 0, (view,), state_found=True)
    console = Console(record=True, width=200)
    print_status(status, console)
    text = console.export_text()
    assert "no view has a version yet: no batch has finished (a run that stopped" in text
    assert "below" not in text
    # batches done, no hold-back recorded (a PostgreSQL job's batches record none)
    ran = JobStatus("bank", "/ckpt", 0, (view,), state_found=True, batches=2, last_batch=1)
    console = Console(record=True, width=200)
    print_status(ran, console)
    text = console.export_text()
    assert "no view has a version yet: the batches read so far did not resolve" in text
    assert "below" not in text


def test_status_after_the_region_catches_up(held_job: dict[str, Any]) -> None:
    after = held_job["after"]
    assert after.job_watermark is not None and after.job_watermark > held_job["held_ts"]
    assert all(v.versions == 2 and v.watermark == after.job_watermark for v in after.views)
    assert after.batches >= 2


def test_the_cli_status_reads_state_read_only(
    held_job: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    state = Path(held_job["config"].checkpoint) / "state.db"
    before = state.stat().st_mtime_ns
    assert main(["status", held_job["config"].origin]) == 0
    assert "held back by" in capsys.readouterr().out
    assert state.stat().st_mtime_ns == before


def test_status_refuses_the_checkpoint_of_another_job(
    held_job: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """It showed the other job's batches and watermark under this job's name."""
    origin = Path(held_job["config"].origin)
    name = held_job["config"].name
    other = origin.with_name("other.toml")  # beside it: the same relative paths
    other.write_text(origin.read_text().replace(f'name = "{name}"', 'name = "someone-else"', 1))
    assert 'name = "someone-else"' in other.read_text()
    capsys.readouterr()
    assert main(["status", str(other)]) == 1
    err = capsys.readouterr().err
    assert f"belongs to job {name!r}, not 'someone-else'" in err


def test_check_passes_on_the_real_job_against_the_truth(
    spark: Any, held_job: dict[str, Any]
) -> None:
    report = check_job(spark, held_job["config"], truth=Truth.load(held_job["run"]))
    assert report.ok, report.violations
    assert all(v.versions == 2 and v.truth_checked == 2 for v in report.views)


def test_a_slot_line_says_what_the_wal_after_it_is() -> None:
    """PostgreSQL writes WAL for other tables, vacuum and checkpoints too: the line says
    how much the job has not confirmed, without calling it changes."""

    def line(**fields: Any) -> str:
        out = Console(width=400, record=True)
        print_slot(out, SlotView("deltamv_bank", True, confirmed_lsn="0/83C8FA58", **fields))
        return out.export_text().strip()

    start = "replication slot deltamv_bank: confirmed at 0/83C8FA58, holds"
    assert line(retained_bytes=24_700_000, lag_bytes=4_800_000, lag_ms=197_400) == (
        f"{start} 23.6 MiB of WAL; 4.6 MiB of WAL after it not confirmed yet (it may hold"
        " no change to the job's tables; its last commit applied is 197.4 s old)"
    )
    assert line(retained_bytes=4096, lag_bytes=2048, lag_ms=0) == (
        f"{start} 4.0 KiB of WAL; 2.0 KiB of WAL after it not confirmed yet (it may hold"
        " no change to the job's tables)"
    )  # no watermark yet: no age
    assert (
        line(retained_bytes=1024, lag_bytes=0, lag_ms=0)
        == f"{start} 1.0 KiB of WAL; no WAL after it"
    )
    assert line(retained_bytes=None, lag_bytes=None) == (
        f"{start} - of WAL; the WAL after it is unknown"
    )


def test_a_slot_line_tells_a_slot_not_created_yet_from_one_dropped_outside() -> None:
    def line(*, loaded: bool) -> str:
        out = Console(width=400, record=True)
        print_slot(out, SlotView("deltamv_bank", False), loaded=loaded)
        return out.export_text().strip()

    assert line(loaded=False) == (
        "replication slot deltamv_bank: none yet (the job creates it on its first run)"
    )
    assert line(loaded=True).startswith(
        "replication slot deltamv_bank: GONE, dropped outside deltamv after the job loaded"
        " its snapshot: the job refuses to start without it"
    )


def test_check_refuses_the_truth_of_another_workload(
    held_job: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The truth of a run without the job's tables: one line, not a violation at every
    version (its views were compared with empty tables)."""
    simulate("orders", tmp_path / "orders", seed=3, txns=5, regions=1, splits=0)
    capsys.readouterr()
    code = main(["check", str(held_job["config"].origin), "--truth", str(tmp_path / "orders")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith(f"deltamv: error: --truth {tmp_path / 'orders'}: its run ('orders'"
                              " workload) lacks tables 'accounts', 'transfers' of job 'bank'"), err  # fmt: skip


def test_check_refuses_an_invariant_whose_sql_cannot_run_in_one_line(
    held_job: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """As `run` does at start: not Spark's error logs and a violation at every version."""
    origin = Path(held_job["config"].origin)
    bad = origin.with_name("config-bad-invariant.toml")  # beside it: the same paths
    text = origin.read_text()
    broken = text.replace('"SELECT total FROM total_balance"', '"SELECT totl FROM total_balance"')
    assert broken != text
    bad.write_text(broken)
    capsys.readouterr()
    assert main(["check", str(bad)]) == 1
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if " deltamv.session " not in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"deltamv: error: {bad}: invariants.money_is_conserved.constant:"), (
        err
    )
    assert "`totl` cannot be resolved" in lines[0] and out == "", (out, err)
