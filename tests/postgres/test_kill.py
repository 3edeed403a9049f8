"""The job on a real PostgreSQL, SIGKILLed and restarted while the bank is written.

``deltamv run CONFIG`` runs as a real process (its own process group: driver, JVM,
Python workers) while four connections write (tests/postgres/bank.py). Each run is
killed, at a named crash point (``DELTAMV_CRASH_AT``, :mod:`deltamv.faults`) or by
the test, and the next one restarts it:

- twice during the initial copy (the state holds part of the snapshot, nothing is
  committed, the slot exists): the restart drops the slot and takes a new snapshot;
- between a view's Delta commit and the state knowing of it (``after-commit``);
- after the state finished a batch and before the slot's advance (``after-finish``;
  the test sees the slot's confirmed position behind the committed one);
- at whatever point a streaming run has reached 1.5 s after its first batch.

Then the writers stop, a last ``--once`` run catches up, and every committed version
of every view is checked as in test_job.py (no batch committed twice), the latest ones
against PostgreSQL's own SQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltamv import delta
from deltamv.postgres import connect, slot_status

from ..faults.harness import _kill_group, _wait_group_gone
from . import bank

SLOT = "deltamv_pgbank"


class Runs:
    """``deltamv run`` processes on one config, one after the other."""

    def __init__(self, config: Path, checkpoint: Path, logs: Path) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.logs = logs
        self.done: list[tuple[str, int, float]] = []

    def run(self, mode: str, *, timeout: float = 600.0) -> int:
        """One run: ``point:<name>:<n>`` (continuous, killed at the crash point), ``busy:<s>``
        (continuous, killed s seconds after its first batch is in the state: wherever the
        run then is) or ``once`` (``--once``, must exit 0)."""
        env = dict(os.environ)
        env.pop("DELTAMV_CRASH_AT", None)
        args = [sys.executable, "-m", "deltamv.cli", "run", str(self.config)]
        if mode.startswith("point:"):
            env["DELTAMV_CRASH_AT"] = mode.removeprefix("point:")
        elif not mode.startswith("busy:"):
            args.append("--once")
        batch = bank.position(self.checkpoint)[1]
        log_path = self.logs / f"run-{len(self.done)}.log"
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.config.parent,
                start_new_session=True,
            )  # fmt: skip
            if mode.startswith("busy:"):
                end = time.monotonic() + timeout
                while proc.poll() is None and time.monotonic() < end:
                    if bank.position(self.checkpoint)[1] > batch:
                        time.sleep(float(mode.removeprefix("busy:")))
                        _kill_group(proc.pid)
                        break
                    time.sleep(0.2)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                raise AssertionError(f"{mode}: running after {timeout} s; {log_path}") from None
        _kill_group(proc.pid)  # the JVM and workers of a driver that killed itself
        _wait_group_gone(proc.pid)
        self.done.append((mode, rc, round(time.monotonic() - started, 1)))
        expected = 0 if mode == "once" else -signal.SIGKILL
        if rc != expected:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-8:]
            raise AssertionError(f"{mode}: exit {rc}; {log_path}:\n" + "\n".join(tail))
        return rc


def _confirmed(dsn: str) -> int:
    with connect(dsn) as conn:
        status = slot_status(conn, SLOT)
    assert status is not None and status.confirmed_flush_lsn is not None
    return status.confirmed_flush_lsn


@pytest.mark.slow
def test_killed_during_the_copy_and_before_the_advance_and_restarted(
    pg_dsn: str, tmp_path: Path
) -> None:
    bank.create(pg_dsn)
    config = tmp_path / "job.toml"
    config.write_text(bank.config_text(pg_dsn))
    out, checkpoint = tmp_path / "out", tmp_path / "out" / "_checkpoint"
    logs = tmp_path / "logs"
    logs.mkdir()
    runs = Runs(config, checkpoint, logs)
    writers = bank.Bank(pg_dsn, connections=4, seed=3, pause=0.002).start()
    try:
        writers.wait_for({"transfer": 20, "side": 1})
        # Killed in the copy, twice: nothing committed, the slot is left for the restart.
        runs.run("point:during-copy:2")
        assert delta.table_version(str(out / "views" / "total")) is None
        assert bank.position(checkpoint)[1] == -1
        runs.run("point:during-copy:3")
        assert delta.table_version(str(out / "views" / "total")) is None
        # A view committed, the state not told (the 3rd commit: among the first versions).
        runs.run("point:after-commit:3")
        writers.wait_for({"transfer": 20})
        # A later batch: every output committed and the batch finished, the slot behind it.
        runs.run("point:after-commit:9")
        runs.run("point:after-finish:3")
        after, batch, applied = bank.position(checkpoint)
        assert applied == batch >= 2, (batch, applied)
        assert _confirmed(pg_dsn) < after, "the slot advanced before the kill"
        kinds = {"move": 2, "big": 1, "side": 1, "close": 1}
        writers.wait_for(kinds)
        runs.run("busy:1.5")  # anywhere in a streaming run
        writers.wait_for(kinds)
    finally:
        writers.stop()
    runs.run("once")
    print(f"runs: {runs.done}; writers: {dict(writers.committed)}")
    found = bank.check_versions(out)
    for view in bank.VIEWS:
        batches = [v.batch_id for v in delta.versions(str(out / "views" / view))]
        assert len(set(batches)) == len(batches), f"{view}: a batch committed twice: {batches}"
    bank.check_final(out, pg_dsn)
    assert len(found["total"]) >= 4
    assert _confirmed(pg_dsn) == bank.position(checkpoint)[0]  # the last run advanced it


@pytest.mark.parametrize("when", ["start", "idle"])
def test_sigterm_to_the_driver_alone_stops_a_continuous_run(
    pg_dsn: str, tmp_path: Path, when: str
) -> None:
    """SIGTERM to the driver process only (not its JVM) stops a continuous run with exit 0:
    sent during the start (right after the first versions, before the streaming query
    may have started: the stop waits for it), or while it idles (the main thread waits
    for the query in short calls, so the handler runs)."""
    with connect(pg_dsn) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
    config = tmp_path / "job.toml"
    config.write_text(
        f'[job]\nname = "term"\ncheckpoint = "ck"\n\n[source]\nkind = "postgres"\n'
        f'dsn = "{pg_dsn}"\n\n[tables.t]\n\n[views.v]\nsql = "SELECT COUNT(*) AS n FROM t"\n'
        'path = "v"\n'
    )
    with open(tmp_path / "run.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deltamv.cli", "run", str(config)], stdout=log,
            stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
        )  # fmt: skip
        try:
            end = time.monotonic() + 600
            while delta.table_version(str(tmp_path / "v")) is None:
                assert proc.poll() is None and time.monotonic() < end, "the job did not start"
                time.sleep(0.5)
            while when == "idle" and "batch 0:" not in (tmp_path / "run.log").read_text():
                assert proc.poll() is None and time.monotonic() < end, "no batch ran"
                time.sleep(0.5)
            time.sleep(3 if when == "idle" else 0)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
        finally:
            _kill_group(proc.pid)
            _wait_group_gone(proc.pid)
    assert rc == 0, (tmp_path / "run.log").read_text()[-2000:]
    assert "stop requested" in (tmp_path / "run.log").read_text()
