"""What a PostgreSQL job refuses, through the job itself: one line naming the table, and
nothing committed (no slot or output for a table refused at the start; no version of
the failing batch for a column changed while running). The catalog's and the decoder's
own tests (test_catalog.py, test_changes.py) hold every variant of each refusal."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from deltamv import delta
from deltamv.config import load_config
from deltamv.errors import ConfigError, DeltaMVError, StateError
from deltamv.job import ViewJob
from deltamv.postgres import connect, slot_status

from .test_job import RunningJob


def _config(tmp_path: Path, dsn: str, table: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f'[job]\nname = "refuse"\ncheckpoint = "{tmp_path}/ck"\n\n'
        f'[source]\nkind = "postgres"\ndsn = "{dsn}"\n\n[tables.{table}]\n\n'
        f'[views.v]\nsql = "SELECT COUNT(*) AS n FROM {table}"\npath = "{tmp_path}/v"\n'
    )
    return path


def _refused(spark: Any, config: Path) -> DeltaMVError:
    with pytest.raises(DeltaMVError) as err:
        ViewJob(load_config(config), spark).run(once=True)
    text = str(err.value)
    assert "\n" not in text, text
    return err.value


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("CREATE TABLE t (id int, v text)", "table public.t has no primary key"),
        (
            "CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t REPLICA IDENTITY NOTHING",
            "table public.t has REPLICA IDENTITY NOTHING",
        ),
        ("CREATE TABLE t (id int PRIMARY KEY, p point)", "column public.t.p has type point"),
    ],
)
def test_refused_at_the_start_with_nothing_created(
    spark: Any, pg_dsn: str, tmp_path: Path, ddl: str, message: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute(ddl)
        pg.execute("INSERT INTO t (id) VALUES (1)")
    error = _refused(spark, _config(tmp_path, pg_dsn, "t"))
    assert isinstance(error, ConfigError)
    assert message in str(error)
    assert delta.table_version(str(tmp_path / "v")) is None
    with connect(pg_dsn) as pg:
        assert slot_status(pg, "deltamv_refuse") is None
        assert pg.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)


def test_a_column_added_while_running_stops_the_batch_with_nothing_committed(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    """The running job stops at the transaction that changed the columns; restarted, it
    refuses at once (the catalog no longer matches its snapshot). Nothing of that
    transaction is committed either time."""
    config = _config(tmp_path, pg_dsn, "t")
    out = str(tmp_path / "v")
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
        job = RunningJob(config, spark).start()
        pg.execute("INSERT INTO t VALUES (2, 2)")
        end = time.monotonic() + 300
        while delta.table_version(out) is None or delta.read_arrow(out).to_pylist() != [{"n": 2}]:
            job.alive()
            assert time.monotonic() < end, "the job did not apply the insert"
            time.sleep(0.5)
        versions = [v.version for v in delta.versions(out)]
        with pg.transaction():  # one transaction: before the change, the change, after it
            pg.execute("INSERT INTO t VALUES (3, 3)")
            pg.execute("ALTER TABLE t ADD COLUMN extra text")
            pg.execute("INSERT INTO t VALUES (4, 4, 'x')")
    job.thread.join(timeout=300)
    assert not job.thread.is_alive(), "the job did not stop"
    assert isinstance(job.error, StateError)
    assert "\n" not in str(job.error)
    assert str(job.error).startswith(
        "columns of public.t changed while the job runs: added extra text; nothing of this"
        " batch is committed"
    ), str(job.error)
    assert [v.version for v in delta.versions(out)] == versions
    assert delta.read_arrow(out).to_pylist() == [{"n": 2}]
    error = _refused(spark, config)  # restarted
    assert isinstance(error, StateError)
    assert str(error).startswith(
        "columns of public.t changed since the job's snapshot: added extra text; nothing more"
        " is committed"
    ), str(error)
    assert [v.version for v in delta.versions(out)] == versions
    # A refused start changes nothing in the state either: with the column dropped again,
    # the next start did not find its view's plan changed (it rebuilt the view's state and
    # wrote the view again at the same watermark, an outside check), and is refused again
    # (the slot still holds the transaction that added the column).
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("ALTER TABLE t DROP COLUMN extra")
    assert isinstance(_refused(spark, config), StateError)
    assert [v.version for v in delta.versions(out)] == versions


def test_a_table_the_snapshot_did_not_copy_or_copied_before_it_was_created_again(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    """A table added to the config after the first run, and a table dropped and created
    again while the job was stopped, are refused at the start (their views took only the
    changes after that, without the rows from before; an outside check)."""
    config = _config(tmp_path, pg_dsn, "t")
    out = str(tmp_path / "v")
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
        pg.execute("CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1), (2)")
        ViewJob(load_config(config), spark).run(once=True)
        versions = [v.version for v in delta.versions(out)]

        added = tmp_path / "added.toml"
        added.write_text(config.read_text() + f'\n[tables.u]\n\n[views.vu]\nsql = "SELECT COUNT(*)'
                         f' AS n FROM u"\npath = "{tmp_path}/vu"\n')  # fmt: skip
        pg.execute("ALTER PUBLICATION deltamv_refuse ADD TABLE u")  # as a user might
        error = _refused(spark, added)
        assert isinstance(error, StateError)
        assert str(error).startswith("table public.u ([tables.u]) was not in the job's snapshot"), (
            str(error)
        )
        assert delta.table_version(str(tmp_path / "vu")) is None

        pg.execute("DROP TABLE t; CREATE TABLE t (id int PRIMARY KEY, v int)")
        pg.execute("ALTER PUBLICATION deltamv_refuse ADD TABLE t; INSERT INTO t VALUES (5, 5)")
        error = _refused(spark, config)
        assert isinstance(error, StateError)
        assert str(error).startswith(
            "table public.t is not the table the job's snapshot copied (it was dropped and"
            " created again"
        ), str(error)
    assert [v.version for v in delta.versions(out)] == versions
