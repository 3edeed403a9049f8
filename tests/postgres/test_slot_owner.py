"""A first start drops only a replication slot its own checkpoint created.

A start killed after creating its slot (before the checkpoint kept the slot's position,
or during the copy) leaves a slot whose snapshot is gone: the next start drops it and
takes a new one. Any other slot under the job's slot name (another consumer's, or
another checkpoint's of a job with the same name) holds somebody else's position: the
first start refuses with one line and leaves it, and PostgreSQL, alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from deltamv import cli, delta
from deltamv.config import load_config
from deltamv.errors import StateError
from deltamv.job import ViewJob
from deltamv.job.postgres import ORIGIN_FILE
from deltamv.postgres import connect, slot_status

from ..faults.harness import _kill_group, _wait_group_gone

SLOT = "deltamv_owner"


def _config(tmp_path: Path, dsn: str, checkpoint: str, view: str) -> Path:
    path = tmp_path / f"{checkpoint}.toml"
    path.write_text(
        f'[job]\nname = "owner"\ncheckpoint = "{tmp_path}/{checkpoint}"\n\n'
        f'[source]\nkind = "postgres"\ndsn = "{dsn}"\n\n[tables.t]\n\n'
        f'[views.v]\nsql = "SELECT COUNT(*) AS n FROM t"\npath = "{tmp_path}/{view}"\n'
    )
    return path


def _confirmed(dsn: str) -> int | None:
    with connect(dsn) as pg:
        status = slot_status(pg, SLOT)
    return None if status is None else status.confirmed_flush_lsn


def _refused(spark: Any, config: Path) -> str:
    with pytest.raises(StateError) as err:
        ViewJob(load_config(config), spark).run(once=True)
    text = str(err.value)
    assert "\n" not in text, text
    assert text.startswith(f"replication slot {SLOT} exists but job 'owner' did not create it")
    assert f"SELECT pg_drop_replication_slot('{SLOT}')" in text
    assert 'slot = "..." under [source]' in text
    return text


def test_a_slot_somebody_else_made_is_refused_and_left_alone(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
        pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [SLOT])
        pg.execute("INSERT INTO t VALUES (2)")
        pg.execute(  # the other consumer has read some of it
            "SELECT pg_replication_slot_advance(%s, pg_current_wal_flush_lsn())", [SLOT]
        )
    theirs = _confirmed(pg_dsn)
    _refused(spark, _config(tmp_path, pg_dsn, "ck", "v"))
    assert _confirmed(pg_dsn) == theirs
    assert delta.table_version(str(tmp_path / "v")) is None
    with connect(pg_dsn) as pg:
        assert pg.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
        assert pg.execute(
            "SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database()"
        ).fetchall() == [(SLOT,)]


def test_another_checkpoint_of_the_same_job_keeps_its_slot(
    spark: Any, pg_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two checkpoints, one job name: the second's first start refuses; the first goes on
    from its position. Then ``deltamv retire`` drops the job's slot and publication: not
    while the job runs (its checkpoint's lock is held), and a second time it says they
    are gone."""
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
    first = _config(tmp_path, pg_dsn, "ck1", "v1")
    ViewJob(load_config(first), spark).run(once=True)
    assert (tmp_path / "ck1" / ORIGIN_FILE).exists()
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("INSERT INTO t VALUES (2)")
    position = _confirmed(pg_dsn)
    assert position is not None
    _refused(spark, _config(tmp_path, pg_dsn, "ck2", "v2"))
    assert _confirmed(pg_dsn) == position
    assert delta.table_version(str(tmp_path / "v2")) is None
    ViewJob(load_config(first), spark).run(once=True)  # the first job is unharmed
    assert delta.read_arrow(str(tmp_path / "v1")).to_pylist() == [{"n": 2}]
    assert (_confirmed(pg_dsn) or 0) > position

    def retire() -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main(["retire", str(first)])
        out, err = capsys.readouterr()
        return code, out.strip(), err.strip()

    with open(tmp_path / "ck1" / "_lock", "a+") as lock:  # as a running job holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, err = retire()
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert code == 1 and "job 'owner' is running on checkpoint" in err, err
    assert _confirmed(pg_dsn) is not None
    assert retire() == (0, f"replication slot {SLOT} dropped; publication"
                           f" {SLOT} dropped", "")  # fmt: skip
    assert _confirmed(pg_dsn) is None
    with connect(pg_dsn) as pg:
        assert pg.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
    assert retire() == (0, f"replication slot {SLOT} was already gone; publication"
                           f" {SLOT} was already gone", "")  # fmt: skip


def _killed_at(config: Path, point: str, log: Path) -> None:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deltamv.cli", "run", str(config), "--once"],
            stdout=out, stderr=subprocess.STDOUT, cwd=config.parent, start_new_session=True,
            env={**os.environ, "DELTAMV_CRASH_AT": point},
        )  # fmt: skip
        try:
            rc = proc.wait(timeout=600)
        finally:
            _kill_group(proc.pid)  # the JVM and workers of a driver that killed itself
            _wait_group_gone(proc.pid)
    assert rc == -signal.SIGKILL, f"{point}: exit {rc}; " + log.read_text()[-2000:]


def test_a_start_killed_after_creating_its_slot_starts_again(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    """Killed right after creating the slot (the checkpoint knows only that it was about
    to), then in the copy (it knows the slot's position): each restart drops its own slot
    and takes a new snapshot; the last one completes."""
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY)")
        pg.execute("INSERT INTO t SELECT generate_series(1, 3)")
    config = _config(tmp_path, pg_dsn, "ck", "v")
    origin = tmp_path / "ck" / ORIGIN_FILE
    _killed_at(config, "after-slot", tmp_path / "run-0.log")
    created = _confirmed(pg_dsn)
    assert created is not None
    assert json.loads(origin.read_text())["consistent_lsn"] is None
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("INSERT INTO t VALUES (4)")
    _killed_at(config, "during-copy", tmp_path / "run-1.log")
    assert delta.table_version(str(tmp_path / "v")) is None
    again = _confirmed(pg_dsn)
    assert again is not None and again > created  # a new slot
    assert json.loads(origin.read_text())["consistent_lsn"] is not None
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("INSERT INTO t VALUES (5)")
    ViewJob(load_config(config), spark).run(once=True)
    assert delta.read_arrow(str(tmp_path / "v")).to_pylist() == [{"n": 5}]
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("INSERT INTO t VALUES (6)")
    ViewJob(load_config(config), spark).run(once=True)
    assert delta.read_arrow(str(tmp_path / "v")).to_pylist() == [{"n": 6}]


def test_a_copy_that_cannot_connect_leaves_no_claim_on_a_later_slot(
    spark: Any, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first start whose copy cannot connect creates no slot and records none: a slot
    another consumer makes under that name afterwards is refused, not dropped."""
    from deltamv.job import postgres as job_postgres

    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
    config = _config(tmp_path, pg_dsn, "ck", "v")
    real = job_postgres.connect

    def refusing(dsn: str, *args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_code.co_name == "_copy_once":  # the copy's own connection
            raise psycopg.OperationalError("sorry, too many clients already")
        return real(dsn, *args, **kwargs)

    monkeypatch.setattr(job_postgres, "connect", refusing)
    with pytest.raises(Exception, match="too many clients"):
        ViewJob(load_config(config), spark).run(once=True)
    monkeypatch.undo()
    assert not (tmp_path / "ck" / ORIGIN_FILE).exists()
    assert _confirmed(pg_dsn) is None
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [SLOT])
    theirs = _confirmed(pg_dsn)
    _refused(spark, config)
    assert _confirmed(pg_dsn) == theirs
