"""The job on a real PostgreSQL under a concurrent workload (tests/postgres/bank.py).

The job runs continuously (1-second trigger) while at least four connections write;
afterwards every committed version of every view is checked (invariants, watermarks,
``deltamv.pg_lsn``, the views agreeing at each watermark) and the latest versions are
compared with the same SQL evaluated by PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.compute as pc
import pytest

from deltamv import delta
from deltamv.config import load_config
from deltamv.job import ViewJob

from . import bank
from .helpers import one_table_job

EVERY_KIND = {
    "transfer": 5, "twice": 2, "move": 2, "open": 1, "close": 1, "note": 1, "owner": 1,
    "side": 1, "big": 2, "savepoint": 1,
}  # fmt: skip


class RunningJob:
    """``ViewJob(...).run(once=False)`` in a thread; :meth:`stop` asks it to stop."""

    def __init__(self, config_path: Path, spark: Any) -> None:
        self.job = ViewJob(load_config(config_path), spark)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="deltamv-job")

    def _run(self) -> None:
        try:
            self.job.run(once=False)
        except BaseException as exc:
            self.error = exc

    def start(self) -> RunningJob:
        self.thread.start()
        return self

    def alive(self) -> None:
        """Raise the job's error if it stopped."""
        if not self.thread.is_alive():
            if self.error is not None:
                raise self.error
            raise AssertionError("the job stopped")

    def stop(self, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while self.thread.is_alive() and time.monotonic() < end:
            self.job.request_stop()
            self.thread.join(timeout=2)
        assert not self.thread.is_alive(), "the job did not stop"
        if self.error is not None:
            raise self.error


def test_continuous_job_under_concurrent_writers(spark: Any, pg_dsn: str, tmp_path: Path) -> None:
    bank.create(pg_dsn)
    config = tmp_path / "job.toml"
    config.write_text(bank.config_text(pg_dsn))
    writers = bank.Bank(pg_dsn, connections=4, seed=1).start()  # writing during the copy too
    job = RunningJob(config, spark).start()
    out = tmp_path / "out"
    try:
        bank.wait_versions(out, 1, alive=job.alive)  # the snapshot is committed
        writers.wait_for(EVERY_KIND)
        bank.wait_versions(out, 5, alive=job.alive)
    finally:
        writers.stop()
    assert writers.rolled_back["rollback"] > 0
    target = bank.wal_flushed(pg_dsn)
    try:
        bank.wait_caught_up(tmp_path / "out" / "_checkpoint", target, alive=job.alive)
    finally:
        job.stop()
    found = bank.check_versions(tmp_path / "out")
    bank.check_final(tmp_path / "out", pg_dsn)
    assert len(found["total"]) >= 4, "the job committed too few versions to mean much"
    print(f"writers: {dict(writers.committed)}; versions per view: {len(found['total'])}")


@pytest.mark.parametrize(
    "names",
    [("id", "v", "note"), ("key", "op", "commit_ts"), ('"Key"', '"OP"', '"_Prev_Key"')],
    ids=["plain", "like-fields", "like-fields-in-other-case"],
)
def test_changes_to_snapshot_rows_find_them(
    spark: Any, pg_dsn: str, tmp_path: Path, names: tuple[str, str, str]
) -> None:
    """Rows copied from the snapshot are found by the changes' row keys: deleted, updated
    with their TOAST column left out (filled from the snapshot's row), moved to a new
    primary key with it left out. Also with columns named like a change's own fields, in
    their case and in another (DuckDB, which fills the values left out, ignores case)."""
    i, v, note = names
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute(
            f"CREATE TABLE t ({i} int PRIMARY KEY, {v} int NOT NULL, {note} text NOT NULL);"
            f"ALTER TABLE t ALTER COLUMN {note} SET STORAGE EXTERNAL;"
            "INSERT INTO t SELECT g, g, repeat(md5(g::text), 80) FROM generate_series(1, 6) g"
        )
        config = tmp_path / "job.toml"
        config.write_text(
            f'[job]\nname = "snap"\ncheckpoint = "{tmp_path}/ck"\n\n'
            f'[source]\nkind = "postgres"\ndsn = "{pg_dsn}"\n\n[tables.t]\n\n'
            f'[views.all]\nsql = "SELECT * FROM t"\npath = "{tmp_path}/all"\n'
        )
        ViewJob(load_config(config), spark).run(once=True)  # the snapshot
        pg.execute(f"DELETE FROM t WHERE {i} = 1")
        pg.execute(f"UPDATE t SET {v} = 20 WHERE {i} = 2")  # note left out (unchanged TOAST)
        pg.execute(f"UPDATE t SET {i} = 30, {v} = 30 WHERE {i} = 3")  # moved, note left out
        with pg.transaction():  # moved and changed again in one transaction
            pg.execute(f"UPDATE t SET {i} = 40 WHERE {i} = 4")
            pg.execute(f"UPDATE t SET {v} = 41 WHERE {i} = 40")
        ViewJob(load_config(config), spark).run(once=True)
        expected = sorted(pg.execute(f"SELECT {i}, {v}, {note} FROM t").fetchall())
    got = sorted(tuple(r.values()) for r in delta.read_arrow(str(tmp_path / "all")).to_pylist())
    assert got == expected
    assert [r[0] for r in got] == [2, 5, 6, 30, 40]


@pytest.mark.slow
def test_continuous_job_under_concurrent_writers_longer(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    bank.create(pg_dsn)
    config = tmp_path / "job.toml"
    config.write_text(bank.config_text(pg_dsn))
    writers = bank.Bank(pg_dsn, connections=6, seed=2, big_every=1.0).start()
    job = RunningJob(config, spark).start()
    try:
        writers.wait_for({k: n * 5 for k, n in EVERY_KIND.items()}, timeout=600)
    finally:
        writers.stop()
    target = bank.wal_flushed(pg_dsn)
    try:
        bank.wait_caught_up(tmp_path / "out" / "_checkpoint", target, alive=job.alive)
    finally:
        job.stop()
    bank.check_versions(tmp_path / "out")
    bank.check_final(tmp_path / "out", pg_dsn)


def test_a_copy_cut_short_by_the_server_is_one_line_and_the_next_start_copies_again(
    spark: Any, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server restarting during the first start's copy (its backend ends with
    AdminShutdown) stops the job with one line; the next start drops the slot and copies
    again."""
    import deltamv.job.postgres as job_postgres
    from deltamv.errors import StorageError

    config = one_table_job(pg_dsn, tmp_path, "cut", "SELECT id, v FROM t")
    real = job_postgres.copy_tables

    def cut_short(*args: Any, **kwargs: Any) -> Any:
        yield from ()
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

    monkeypatch.setattr(job_postgres, "copy_tables", cut_short)
    with pytest.raises(StorageError) as info:
        ViewJob(load_config(config), spark).run(once=True)
    assert "the copy of the tables from PostgreSQL" in str(info.value)
    assert "failed: terminating connection due to administrator command" in str(info.value)
    assert "\n" not in str(info.value)
    monkeypatch.setattr(job_postgres, "copy_tables", real)
    ViewJob(load_config(config), spark).run(once=True)
    got = [tuple(r.values()) for r in delta.read_arrow(str(tmp_path / "all")).to_pylist()]
    assert got == [(1, 1)]


def test_a_transaction_far_larger_than_max_batch_bytes_takes_a_few_batches(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    """With ``max_batch_bytes = 1000``, a 5,000-row transaction (some 600 KB of WAL)
    and one small transaction after it. A batch whose window holds no commit widens its
    window until it holds the large transaction's, reads that one alone, and confirms
    the slot past it, so Spark's next window starts there: a few batches, not one per
    1000 bytes of WAL (each of which decoded the transaction from its start again).
    Every version is the table after one of the transactions."""
    config = one_table_job(pg_dsn, tmp_path, "wide", "SELECT * FROM t", "max_batch_bytes = 1000\n")
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        ViewJob(load_config(config), spark).run(once=True)  # the snapshot
        pg.execute("INSERT INTO t SELECT g, g FROM generate_series(2, 5001) g")
        pg.execute("UPDATE t SET v = 0 WHERE id = 1")
        ViewJob(load_config(config), spark).run(once=True)
        expected = sorted(pg.execute("SELECT id, v FROM t").fetchall())
    out = str(tmp_path / "all")
    got = sorted(tuple(r.values()) for r in delta.read_arrow(out).to_pylist())
    assert got == expected
    states = [
        (t.num_rows, t.filter(pc.equal(t["id"], 1))["v"].to_pylist())
        for t in (delta.read_arrow(out, v.version) for v in delta.versions(out))
    ]
    assert states == [(1, [1]), (5001, [1]), (5001, [0])]
    # A window of 1000 bytes at a time would take some 600 batches; widening, a few (6
    # or fewer, and 8 once on a loaded machine: how many windows hold no commit varies
    # with the other WAL the server writes meanwhile).
    batches = len(list((tmp_path / "ck" / "spark" / "commits").iterdir()))
    assert batches <= 20, f"{batches} micro-batches"
