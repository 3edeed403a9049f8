from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from deltamv.postgres import (
    ChangeBatch,
    TruncatedMeanwhile,
    connect,
    copy_table,
    copy_tables,
    create_slot,
    current_wal_lsn,
    ensure_publication,
    read_catalog,
    snapshot_schema,
    snapshot_transaction,
)

from .helpers import PUB, SLOT, read

TABLES = """
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint);
CREATE TABLE ledger (id bigserial PRIMARY KEY, account int, amount bigint);
INSERT INTO accounts SELECT g, 'owner ' || g, 1000 FROM generate_series(1, 20000) g;
"""


def _writer(dsn: str, stop: threading.Event, counts: dict[str, int]) -> None:
    """Small transactions of every kind, as fast as one connection goes."""
    rng = random.Random(7)
    next_id = 100_000
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            kind = rng.random()
            with conn.transaction():
                a, b = rng.randint(1, 20000), rng.randint(1, 20000)
                if kind < 0.6:  # a transfer with its ledger rows
                    conn.execute("UPDATE accounts SET balance = balance - 5 WHERE id = %s", [a])
                    conn.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", [b])
                    conn.execute(
                        "INSERT INTO ledger (account, amount) VALUES (%s, -5), (%s, 5)", [a, b]
                    )
                elif kind < 0.75:
                    conn.execute("INSERT INTO accounts VALUES (%s, 'new', 0)", [next_id])
                    next_id += 1
                elif kind < 0.85:
                    conn.execute("DELETE FROM accounts WHERE id = %s", [a])
                else:  # a primary-key move
                    conn.execute("UPDATE accounts SET id = %s WHERE id = %s", [next_id, a])
                    next_id += 1
            counts["txns"] = counts.get("txns", 0) + 1


def _contents(conn: psycopg.Connection[Any], tables: list[Any]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for name, batch in copy_tables(conn, None, tables):
        for row in batch.to_pylist():
            out.setdefault(name, {})[row.pop("_key")] = row
    return out


def _apply(state: dict[str, dict[str, dict]], batch: ChangeBatch) -> None:
    for name, changes in batch.tables.items():
        rows = state.setdefault(name, {})
        if changes.truncated:
            rows.clear()
        for row in changes.rows.to_pylist():
            key, op = row.pop("_key"), row.pop("_op")
            assert row.pop("_unchanged") == [] and row.pop("_prev_key") is None
            if op == "DELETE":
                rows.pop(key, None)
            else:
                rows[key] = row


def test_copy_in_the_exported_snapshot_then_changes_is_the_table_exactly(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    pg.execute(TABLES)
    tables = list(read_catalog(pg, [("accounts", None), ("ledger", None)]).values())
    ensure_publication(pg, PUB, tables)
    stop = threading.Event()
    counts: dict[str, int] = {}
    writer = threading.Thread(target=_writer, args=(pg_dsn, stop, counts))
    writer.start()
    try:
        time.sleep(0.3)
        copied: dict[str, dict[str, dict]] = {}
        with create_slot(pg_dsn, SLOT) as exported, connect(pg_dsn) as copier:
            during = counts.get("txns", 0)
            sizes = []
            for name, batch in copy_tables(copier, exported.snapshot_name, tables, batch_rows=3000):
                assert batch.schema == snapshot_schema(
                    tables[0] if name == "accounts" else tables[1]
                )
                sizes.append(batch.num_rows)
                for row in batch.to_pylist():
                    copied.setdefault(name, {})[row.pop("_key")] = row
                time.sleep(0.01)  # let the writer commit while the copy runs
            begin = exported.consistent_lsn
        assert max(sizes) <= 3000 and len(sizes) >= 7
        time.sleep(0.3)
    finally:
        stop.set()
        writer.join()
    assert counts["txns"] > during > 0  # writes before, during and after the copy
    batch = read(pg, tables, begin)
    assert batch.transactions > 10
    state = {k: dict(v) for k, v in copied.items()}
    _apply(state, batch)
    final = _contents(pg, tables)
    assert state["accounts"] == final["accounts"]
    assert state["ledger"] == final["ledger"]
    assert copied["accounts"] != final["accounts"]
    # and the invariant the transfers keep holds in the copy alone too
    assert sum(r["amount"] for r in copied.get("ledger", {}).values()) == 0


def test_copy_streams_in_bounded_batches(pg: psycopg.Connection) -> None:
    pg.execute(
        "CREATE TABLE wide (id int PRIMARY KEY, pad text, n numeric(9,2), at timestamp, raw bytea);"
        "INSERT INTO wide SELECT g, repeat('p', 200) || E'\\n\"x\",', g / 100.0, "
        "'2024-01-01'::timestamp + g * interval '1 second', decode(md5(g::text), 'hex') "
        "FROM generate_series(1, 30000) g"
    )
    table = read_catalog(pg, [("wide", None)])["wide"]
    with snapshot_transaction(pg, None):
        batches = list(copy_table(pg, table, batch_rows=4096))
    assert all(b.num_rows <= 4096 for b in batches) and len(batches) >= 8
    data = pa.Table.from_batches(batches)
    assert data.num_rows == 30000
    row = data.slice(122, 1).to_pylist()[0]
    assert row["_key"] == "wide/[123]"
    assert row["pad"].endswith('\n"x",') and str(row["n"]) == "1.23"
    assert row["raw"] == bytes.fromhex(__import__("hashlib").md5(b"123").hexdigest())
    assert pg.execute("SELECT 1").fetchone() == (1,)  # the connection is usable again
    assert current_wal_lsn(pg) > 0


def test_an_empty_table_copies_as_no_rows(pg: psycopg.Connection, pg_dsn: str) -> None:
    """An empty table (a ledger nobody wrote yet) copies as no rows, beside a full one."""
    pg.execute(
        "CREATE TABLE empty (id int PRIMARY KEY, v text);"
        "CREATE TABLE one (id int PRIMARY KEY); INSERT INTO one VALUES (1)"
    )
    tables = list(read_catalog(pg, [("empty", None), ("one", None)]).values())
    with connect(pg_dsn) as copier:
        got = [(name, batch.num_rows) for name, batch in copy_tables(copier, None, tables)]
    assert got == [("one", 1)]


def test_a_table_truncated_after_the_snapshot_is_refused_not_copied_empty(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    """TRUNCATE is not MVCC-safe: in a snapshot taken before it committed, the table reads
    as empty. The copy locks every table first and refuses one truncated meanwhile."""
    pg.execute(
        "CREATE TABLE side (id int PRIMARY KEY); INSERT INTO side SELECT generate_series(1, 5);"
        "CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other VALUES (1)"
    )
    tables = list(read_catalog(pg, [("other", None), ("side", None)]).values())
    ensure_publication(pg, PUB, tables)
    with create_slot(pg_dsn, SLOT) as exported, connect(pg_dsn) as copier:
        with pg.transaction():
            pg.execute("TRUNCATE side")
            pg.execute("INSERT INTO side VALUES (9)")
        with pytest.raises(TruncatedMeanwhile, match=r"table public\.side was truncated"):
            list(copy_tables(copier, exported.snapshot_name, tables))


def test_a_truncate_waits_for_the_copy(pg: psycopg.Connection, pg_dsn: str) -> None:
    pg.execute("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY);"
               "INSERT INTO a VALUES (1); INSERT INTO b VALUES (1)")  # fmt: skip
    tables = list(read_catalog(pg, [("a", None), ("b", None)]).values())
    with connect(pg_dsn) as copier:
        copy = copy_tables(copier, None, tables)
        assert next(copy)[0] == "a"  # b is not copied yet, but locked already
        pg.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            pg.execute("TRUNCATE b")
        assert [name for name, _ in copy] == ["b"]
    pg.execute("TRUNCATE b")
