"""Set-up shared by the PostgreSQL tests: tables, publication and slot in one call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from deltamv.postgres import (
    ChangeBatch,
    PgTable,
    create_slot,
    current_wal_lsn,
    ensure_publication,
    read_catalog,
    read_changes,
)

SLOT = "deltamv_test"
PUB = "deltamv_test"


def start(
    pg: psycopg.Connection[Any], dsn: str, ddl: str, names: list[str]
) -> tuple[list[PgTable], int]:
    """Run ``ddl``, publish ``names``, create the slot; the tables and the slot's start."""
    if ddl:
        pg.execute(ddl)
    tables = list(read_catalog(pg, [(n, None) for n in names]).values())
    ensure_publication(pg, PUB, tables)
    with create_slot(dsn, SLOT) as exported:
        return tables, exported.consistent_lsn


def read(
    pg: psycopg.Connection[Any], tables: list[PgTable], after: int, **kwargs: Any
) -> ChangeBatch:
    """Everything flushed since ``after``."""
    upto = kwargs.pop("upto", None) or current_wal_lsn(pg)
    return read_changes(pg, SLOT, PUB, tables, after_lsn=after, upto_lsn=upto, **kwargs)


def rows(batch: ChangeBatch, table: str, *columns: str) -> list[tuple[Any, ...]]:
    """``(_key, _op, *columns)`` of a table's net rows, in commit order."""
    data = batch.tables[table].rows
    return list(zip(*(data[c].to_pylist() for c in ("_key", "_op", *columns)), strict=True))


def one_table_job(dsn: str, folder: Path, job: str, view_sql: str, source: str = "") -> Path:
    """Table ``t (id int PRIMARY KEY, v int)`` holding (1, 1), and the config of a job
    ``job`` reading it (checkpoint and view ``all`` under ``folder``; ``source``: more
    lines of its ``[source]``)."""
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
    config = folder / "job.toml"
    config.write_text(
        f'[job]\nname = "{job}"\ncheckpoint = "{folder}/ck"\n\n'
        f'[source]\nkind = "postgres"\ndsn = "{dsn}"\n{source}\n[tables.t]\n\n'
        f'[views.all]\nsql = "{view_sql}"\npath = "{folder}/all"\n'
    )
    return config
