"""The job on a real PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from deltamv import delta
from deltamv.config import load_config
from deltamv.job import ViewJob


def test_changes_to_snapshot_rows_find_them(spark: Any, pg_dsn: str, tmp_path: Path) -> None:
    """Rows copied from the snapshot are found by the changes' row keys: deleted, updated
    with their TOAST column left out (filled from the snapshot's row), moved to a new
    primary key with it left out."""
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute(
            "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text NOT NULL);"
            "ALTER TABLE t ALTER COLUMN note SET STORAGE EXTERNAL;"
            "INSERT INTO t SELECT g, g, repeat(md5(g::text), 80) FROM generate_series(1, 6) g"
        )
        config = tmp_path / "job.toml"
        config.write_text(
            f'[job]\nname = "snap"\ncheckpoint = "{tmp_path}/ck"\n\n'
            f'[source]\nkind = "postgres"\ndsn = "{pg_dsn}"\n\n[tables.t]\n\n'
            f'[views.all]\nsql = "SELECT id, v, note FROM t"\npath = "{tmp_path}/all"\n'
        )
        ViewJob(load_config(config), spark).run(once=True)  # the snapshot
        pg.execute("DELETE FROM t WHERE id = 1")
        pg.execute("UPDATE t SET v = 20 WHERE id = 2")  # note left out (unchanged TOAST)
        pg.execute("UPDATE t SET id = 30, v = 30 WHERE id = 3")  # moved, note left out
        with pg.transaction():  # moved and changed again in one transaction
            pg.execute("UPDATE t SET id = 40 WHERE id = 4")
            pg.execute("UPDATE t SET v = 41 WHERE id = 40")
        ViewJob(load_config(config), spark).run(once=True)
        expected = sorted(pg.execute("SELECT id, v, note FROM t").fetchall())
    got = sorted(tuple(r.values()) for r in delta.read_arrow(str(tmp_path / "all")).to_pylist())
    assert got == expected
    assert [r[0] for r in got] == [2, 5, 6, 30, 40]
