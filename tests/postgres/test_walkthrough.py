"""The flow docs/postgres.md describes ("Using the module"), run as written there: first
run from an exported snapshot, then batches of peek, apply, advance; a batch read twice
(a job killed before the advance) applies the same rows and timestamps."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from deltamv import tso
from deltamv.postgres import (
    advance_slot,
    batch_upper,
    connect,
    copy_tables,
    create_slot,
    current_wal_lsn,
    ensure_publication,
    read_catalog,
    read_changes,
)

SLOT = PUB = "deltamv_bank"


def test_walkthrough(pg: psycopg.Connection, pg_dsn: str) -> None:
    pg.execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint);"
        "INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 500) g"
    )
    stop = threading.Event()

    def transfers() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as w:
            i = 0
            while not stop.is_set():
                a, b = i % 500 + 1, (i * 7) % 500 + 1
                with w.transaction():
                    w.execute("UPDATE accounts SET balance = balance - 1 WHERE id = %s", [a])
                    w.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", [b])
                i += 1

    writer = threading.Thread(target=transfers)
    writer.start()
    mirror: dict[str, dict[str, Any]] = {}
    try:
        # --- as in docs/postgres.md ---
        conn = connect(pg_dsn)
        tables = list(read_catalog(conn, [("accounts", None)]).values())
        ensure_publication(conn, PUB, tables)
        with create_slot(pg_dsn, SLOT) as exported, connect(pg_dsn) as copier:
            for _name, rows in copy_tables(copier, exported.snapshot_name, tables):
                mirror.update({r.pop("_key"): r for r in rows.to_pylist()})
            position = exported.consistent_lsn  # the first versions are as of here
        assert sum(r["balance"] for r in mirror.values()) == 50_000
        last_tso = 0
        for round_ in range(6):
            upto = batch_upper(position, current_wal_lsn(conn), 64 * 1024)
            batch = read_changes(
                conn, SLOT, PUB, tables, after_lsn=position, upto_lsn=upto, previous_tso=last_tso
            )
            if round_ == 2:  # killed before the advance: the same batch comes again
                again = read_changes(
                    conn, SLOT, PUB, tables, after_lsn=position, upto_lsn=upto,
                    previous_tso=last_tso,
                )  # fmt: skip
                assert again == batch
            for changes in batch.tables.values():
                for row in changes.rows.to_pylist():
                    key, op = row.pop("_key"), row.pop("_op")
                    if op == "DELETE":
                        mirror.pop(key, None)
                    else:
                        mirror[key] = {k: v for k, v in row.items() if not k.startswith("_")}
            # every version keeps the invariant (transfers move money, never make it)
            assert sum(r["balance"] for r in mirror.values()) == 50_000
            advance_slot(conn, SLOT, upto)
            if batch.last_tso is not None:
                assert batch.last_tso > last_tso
                last_tso = batch.last_tso
            position = upto
        # --- end ---
    finally:
        stop.set()
        writer.join()
    rest = read_changes(conn, SLOT, PUB, tables, after_lsn=position, upto_lsn=current_wal_lsn(conn))
    for changes in rest.tables.values():
        for row in changes.rows.to_pylist():
            mirror[row["_key"]] = {"id": row["id"], "balance": row["balance"]}
    final = {
        f"accounts/[{i}]": {"id": i, "balance": b}
        for i, b in pg.execute("SELECT id, balance FROM accounts")
    }
    assert mirror == final
    assert tso.physical_ms(last_tso) > 0
    conn.close()
