from __future__ import annotations

import datetime as dt
from decimal import Decimal

import psycopg
import pytest

from deltamv import tso
from deltamv.errors import StateError
from deltamv.postgres import (
    advance_slot,
    batch_upper,
    changes_schema,
    commit_tso,
    copy_table,
    current_wal_lsn,
    snapshot_transaction,
)
from deltamv.postgres.timestamps import PG_EPOCH_US

from .helpers import read, rows, start

ACCOUNTS = "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint)"
BIG = (
    "CREATE TABLE docs (id int PRIMARY KEY, n int, body text);"
    " ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL"  # stored out of line, as is
)
BODY = "repeat('toasted-', 1000)"  # 8 kB: TOASTed out of line


def test_inserts_updates_deletes_and_the_last_state_wins(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    pg.execute("INSERT INTO accounts VALUES (1, 'ann', 10), (2, 'bob', 20), (3, 'cy', 30)")
    with pg.transaction():
        pg.execute("UPDATE accounts SET balance = 11 WHERE id = 1")
        pg.execute("UPDATE accounts SET balance = 12 WHERE id = 1")
        pg.execute("DELETE FROM accounts WHERE id = 2")
        pg.execute("INSERT INTO accounts VALUES (4, 'dee', 40)")
        pg.execute("DELETE FROM accounts WHERE id = 4")
    pg.execute("UPDATE accounts SET owner = 'cyd' WHERE id = 3")
    batch = read(pg, tables, begin)
    assert batch.transactions == 3
    assert batch.changes == 9
    assert rows(batch, "accounts", "id", "owner", "balance") == [
        ("accounts/[1]", "PUT", 1, "ann", 12),
        ("accounts/[2]", "DELETE", 2, None, None),
        ("accounts/[4]", "DELETE", 4, None, None),
        ("accounts/[3]", "PUT", 3, "cyd", 30),
    ]
    data = batch.tables["accounts"].rows
    assert data.schema == changes_schema(tables[0])
    assert data["_unchanged"].to_pylist() == [[], [], [], []]
    assert batch.tables["accounts"].truncated is False


def test_commit_lsn_time_and_tso(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    before = dt.datetime.now(dt.UTC)
    pg.execute("INSERT INTO accounts VALUES (1, 'a', 1)")
    pg.execute("INSERT INTO accounts VALUES (2, 'b', 2)")
    batch = read(pg, tables, begin)
    lsn = pg.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert batch.last_commit_lsn is not None and batch.last_end_lsn is not None
    assert begin <= batch.last_commit_lsn < batch.last_end_lsn
    assert batch.last_commit_time_us is not None
    when = dt.datetime.fromtimestamp(batch.last_commit_time_us / 1e6, dt.UTC)
    assert abs((when - before).total_seconds()) < 30
    assert batch.last_tso is not None
    assert tso.physical_ms(batch.last_tso) == batch.last_commit_time_us // 1000
    # folded over both transactions from previous_tso
    far = tso.compose(batch.last_commit_time_us // 1000 + 10_000, 0)
    again = read(pg, tables, begin, previous_tso=far)
    assert again.last_tso == far + 2
    assert commit_tso(batch.last_commit_time_us, far) == far + 1
    assert lsn is not None and PG_EPOCH_US == 946_684_800_000_000


def test_primary_key_update_moves_the_row(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    pg.execute("INSERT INTO accounts VALUES (1, 'ann', 10), (2, 'bob', 20)")
    after = current_wal_lsn(pg)
    pg.execute("UPDATE accounts SET id = 5 WHERE id = 1")
    with pg.transaction():  # moved twice, and a key freed then reused in one transaction
        pg.execute("UPDATE accounts SET id = 6 WHERE id = 2")
        pg.execute("UPDATE accounts SET id = 7 WHERE id = 6")
        pg.execute("INSERT INTO accounts VALUES (2, 'new', 0)")
    batch = read(pg, tables, after)
    assert rows(batch, "accounts", "id", "owner", "balance") == [
        ("accounts/[1]", "DELETE", 1, None, None),
        ("accounts/[5]", "PUT", 5, "ann", 10),
        ("accounts/[6]", "DELETE", 6, None, None),
        ("accounts/[7]", "PUT", 7, "bob", 20),
        ("accounts/[2]", "PUT", 2, "new", 0),
    ]
    assert begin < after


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_deletes_under_replica_identity(pg: psycopg.Connection, pg_dsn: str, identity: str) -> None:
    tables, begin = start(
        pg,
        pg_dsn,
        f"CREATE TABLE t (a int, b text, v text, PRIMARY KEY (b, a)); ALTER TABLE t REPLICA IDENTITY {identity}",
        ["t"],
    )
    pg.execute("INSERT INTO t VALUES (1, 'x', 'one'), (2, 'y', 'two')")
    after = current_wal_lsn(pg)
    pg.execute("DELETE FROM t WHERE a = 1")
    pg.execute("UPDATE t SET a = 3 WHERE a = 2")
    batch = read(pg, tables, after)
    full = identity == "FULL"
    assert rows(batch, "t", "a", "b", "v") == [
        ('t/["x",1]', "DELETE", 1, "x", "one" if full else None),
        ('t/["y",2]', "DELETE", 2, "y", "two" if full else None),
        ('t/["y",3]', "PUT", 3, "y", "two"),
    ]
    assert tables[0].primary_key == ("b", "a") and begin < after


def test_unchanged_toast_kept_listed_or_filled(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, BIG, ["docs"])
    pg.execute(f"INSERT INTO docs VALUES (1, 0, {BODY}), (2, 0, {BODY}), (3, 0, {BODY})")
    after = current_wal_lsn(pg)
    pg.execute("UPDATE docs SET n = 1 WHERE id = 1")  # body not sent, not in the batch
    pg.execute("UPDATE docs SET id = 20, n = 2 WHERE id = 2")  # moved, body not sent
    pg.execute(f"INSERT INTO docs VALUES (4, 0, {BODY} || 'x')")
    pg.execute("UPDATE docs SET n = 4 WHERE id = 4")  # body from the insert in this batch
    pg.execute("UPDATE docs SET n = 5 WHERE id = 4")
    pg.execute("UPDATE docs SET id = 40 WHERE id = 4")  # ... followed through a move
    batch = read(pg, tables, after)
    body = pg.execute(f"SELECT {BODY}").fetchone()[0]  # type: ignore[index]
    got = rows(batch, "docs", "id", "n", "body", "_unchanged", "_prev_key")
    assert got == [
        ("docs/[1]", "PUT", 1, 1, None, ["body"], "docs/[1]"),
        ("docs/[2]", "DELETE", 2, None, None, [], None),
        ("docs/[20]", "PUT", 20, 2, None, ["body"], "docs/[2]"),
        ("docs/[4]", "DELETE", 4, None, None, [], None),
        ("docs/[40]", "PUT", 40, 5, body + "x", [], None),
    ]
    assert begin < after


def test_columns_named_like_the_fields_of_a_change(pg: psycopg.Connection, pg_dsn: str) -> None:
    """A table's ``key``, ``op``, ``_op`` ... columns live beside the change's own fields
    under names of their own (``schema.change_column``); TOAST values left unchanged are
    still filled in by name."""
    ddl = (
        'CREATE TABLE kv (key text PRIMARY KEY, op text, commit_ts bigint, "_op" int,'
        ' "#key" text, "__old_key" text, body text);'
        " ALTER TABLE kv ALTER COLUMN body SET STORAGE EXTERNAL"
    )
    tables, begin = start(pg, pg_dsn, ddl, ["kv"])
    pg.execute(f"INSERT INTO kv VALUES ('a', 'x', 7, 1, 'h', 'o', {BODY})")
    batch = read(pg, tables, begin)
    body = pg.execute(f"SELECT {BODY}").fetchone()[0]  # type: ignore[index]
    data = batch.tables["kv"].rows
    assert data.column_names[:8] == [
        "_key", "_op", "#key", "#op", "#commit_ts", "#_op", "##key", "#__old_key"
    ]  # fmt: skip
    assert data.slice(0, 1).drop_columns(["_unchanged", "_prev_key"]).to_pylist() == [
        {"_key": "kv/[\"a\"]", "_op": "PUT", "#key": "a", "#op": "x", "#commit_ts": 7,
         "#_op": 1, "##key": "h", "#__old_key": "o", "body": body}
    ]  # fmt: skip


def test_unchanged_toast_under_replica_identity_full(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, _ = start(pg, pg_dsn, BIG + "; ALTER TABLE docs REPLICA IDENTITY FULL", ["docs"])
    pg.execute(f"INSERT INTO docs VALUES (1, 0, {BODY})")
    after = current_wal_lsn(pg)
    pg.execute("UPDATE docs SET n = 1 WHERE id = 1")
    pg.execute("UPDATE docs SET n = 2 WHERE id = 1")
    pg.execute("DELETE FROM docs WHERE id = 1")
    pg.execute(f"INSERT INTO docs VALUES (2, 0, {BODY})")
    batch = read(pg, tables, after)
    got = rows(batch, "docs", "id", "n", "_unchanged")
    assert got[0] == ("docs/[1]", "DELETE", 1, 2, [])
    assert got[1][:4] == ("docs/[2]", "PUT", 2, 0)


def test_truncate_then_inserts(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(
        pg, pg_dsn, ACCOUNTS + "; CREATE TABLE side (id int PRIMARY KEY)", ["accounts", "side"]
    )
    pg.execute("INSERT INTO accounts VALUES (1, 'a', 1), (2, 'b', 2)")
    pg.execute("INSERT INTO side VALUES (1)")
    with pg.transaction():
        pg.execute("UPDATE accounts SET balance = 5 WHERE id = 1")
        pg.execute("TRUNCATE accounts")
        pg.execute("INSERT INTO accounts VALUES (3, 'c', 3)")
    pg.execute("INSERT INTO accounts VALUES (4, 'd', 4)")
    batch = read(pg, tables, begin)
    assert batch.tables["accounts"].truncated
    assert rows(batch, "accounts", "id") == [("accounts/[3]", "PUT", 3), ("accounts/[4]", "PUT", 4)]
    assert not batch.tables["side"].truncated
    # a truncate in a later transaction of the batch, then inserts after it
    after = current_wal_lsn(pg)
    pg.execute("INSERT INTO accounts VALUES (5, 'e', 5)")
    pg.execute("TRUNCATE accounts, side")
    pg.execute("INSERT INTO accounts VALUES (6, 'f', 6)")
    batch = read(pg, tables, after)
    assert batch.tables["accounts"].truncated and batch.tables["side"].truncated
    assert rows(batch, "accounts", "id") == [("accounts/[6]", "PUT", 6)]
    assert batch.tables["side"].rows.num_rows == 0
    # a truncate alone
    after = current_wal_lsn(pg)
    pg.execute("TRUNCATE accounts")
    batch = read(pg, tables, after)
    assert batch.tables["accounts"].truncated and batch.tables["accounts"].rows.num_rows == 0


def test_rollbacks_never_appear(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    with pytest.raises(RuntimeError), pg.transaction():
        pg.execute("INSERT INTO accounts VALUES (1, 'gone', 1)")
        raise RuntimeError
    with pg.transaction():
        pg.execute("INSERT INTO accounts VALUES (2, 'kept', 2)")
        with pytest.raises(RuntimeError), pg.transaction():  # a savepoint rolled back
            pg.execute("INSERT INTO accounts VALUES (3, 'gone', 3)")
            pg.execute("UPDATE accounts SET owner = 'gone' WHERE id = 2")
            raise RuntimeError
    batch = read(pg, tables, begin)
    assert batch.transactions == 1
    assert rows(batch, "accounts", "owner") == [("accounts/[2]", "PUT", "kept")]


def test_column_change_stops_the_batch(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    pg.execute("INSERT INTO accounts VALUES (1, 'a', 1)")
    middle = current_wal_lsn(pg)
    pg.execute("ALTER TABLE accounts ADD COLUMN extra integer")
    pg.execute("INSERT INTO accounts VALUES (2, 'b', 2, 7)")
    assert read(pg, tables, begin, upto=middle).transactions == 1  # before it: fine
    with pytest.raises(StateError) as err:
        read(pg, tables, begin)
    assert pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # peek ended
    assert str(err.value) == (
        "columns of public.accounts changed while the job runs: added extra integer; "
        "nothing of this batch is committed (restart the job from a new snapshot to take "
        "the new columns)"
    )
    later = current_wal_lsn(pg)
    pg.execute("ALTER TABLE accounts ALTER COLUMN balance TYPE numeric(20,2)")
    pg.execute("INSERT INTO accounts VALUES (3, 'c', 3, 7)")
    with pytest.raises(StateError, match=r"balance is now numeric\(20,2\) \(was bigint\)"):
        read(pg, tables, later)


def test_replica_identity_nothing_while_running(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    pg.execute("ALTER TABLE accounts REPLICA IDENTITY NOTHING")
    pg.execute("INSERT INTO accounts VALUES (1, 'a', 1)")
    with pytest.raises(StateError, match=r"replica identity of public\.accounts changed"):
        read(pg, tables, begin)


def test_recreated_table_stops_the_batch(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    pg.execute("DROP TABLE accounts")
    pg.execute(ACCOUNTS)
    with pytest.raises(
        StateError, match=r"public.accounts \(OID \d+\) is no longer in publication"
    ):
        read(pg, tables, begin)


def test_batches_are_disjoint_and_old_commits_are_skipped(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    for i in range(20):
        pg.execute("INSERT INTO accounts VALUES (%s, 'x', %s)", [i, i])
    end = current_wal_lsn(pg)
    seen: list[int] = []
    position = begin
    while position < end:  # small WAL windows: never a transaction split or repeated
        upto = batch_upper(position, end, 300)
        batch = read(pg, tables, position, upto=upto)
        if batch.transactions:
            seen += batch.tables["accounts"].rows["id"].to_pylist()
            assert batch.last_commit_lsn is not None and position <= batch.last_commit_lsn < upto
        position = upto
    assert seen == list(range(20))
    # the slot was never advanced: reading from a later position drops older commits
    whole = read(pg, tables, begin, upto=end)
    assert whole.transactions == 20
    half = read(pg, tables, begin, upto=end)
    assert half.last_commit_lsn is not None
    later = read(pg, tables, half.last_commit_lsn, upto=end)
    assert later.transactions == 1
    assert read(pg, tables, half.last_commit_lsn + 1, upto=end).transactions == 0
    # once advanced, the slot returns only what follows; a start below it is refused
    advance_slot(pg, "deltamv_test", half.last_commit_lsn)
    assert read(pg, tables, half.last_commit_lsn, upto=end).transactions == 1
    with pytest.raises(StateError, match=r"is confirmed at .* past the batch start"):
        read(pg, tables, begin, upto=end)
    with pytest.raises(StateError, match="beyond the WAL PostgreSQL has flushed"):
        read(pg, tables, end, upto=end + 10**9)


def test_other_published_tables_are_ignored(pg: psycopg.Connection, pg_dsn: str) -> None:
    pg.execute(ACCOUNTS + "; CREATE TABLE other (id int PRIMARY KEY)")
    from deltamv.postgres import read_catalog

    both = list(read_catalog(pg, [("accounts", None), ("other", None)]).values())
    from deltamv.postgres import create_slot, ensure_publication

    ensure_publication(pg, "deltamv_test", both)
    with create_slot(pg_dsn, "deltamv_test") as exported:
        begin = exported.consistent_lsn
    pg.execute("INSERT INTO other VALUES (1)")
    pg.execute("INSERT INTO accounts VALUES (1, 'a', 1)")
    batch = read(pg, both[:1], begin)
    assert list(batch.tables) == ["accounts"]
    assert (batch.transactions, batch.changes) == (2, 1)  # read: 2; of the job's tables: 1


TYPED = """
CREATE TABLE every (
    n numeric(12,3), tz timestamptz, raw bytea, ts timestamp, day date, f double precision,
    r real, s text, u uuid, jb jsonb, b boolean, i2 smallint, big bigint, c char(4),
    PRIMARY KEY (n, tz, raw, s, day)
)"""
VALUES = [
    "(12.5, '2024-03-01 12:34:56.789012+05', '\\x00ff10', '1999-12-31 23:59:59.999999',"
    " '2024-02-29', 1.1, 0.1, 'a \"quoted\" \\ text\nline', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',"
    " '{\"k\": [1, 2]}', true, -32768, 9223372036854775807, 'ab')",
    "(-0.001, '1970-01-01 00:00:00+00', '\\x', '2038-01-19 03:14:08', '0001-01-01', 'Infinity',"
    " '-0', 'ünïcødé ✓', '00000000-0000-0000-0000-000000000000', 'null', false, 0, 0, NULL)",
    "(0, '2262-04-11 23:47:16.854775+00', '\\x41', '1900-01-01 00:00:00', '9999-12-31', '-Infinity',"
    " 3.4e38, '', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', '[]', NULL, NULL, NULL, '')",
]


def test_snapshot_rows_and_change_rows_are_typed_and_keyed_alike(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    tables, begin = start(pg, pg_dsn, TYPED, ["every"])
    pg.execute("INSERT INTO every VALUES " + ", ".join(VALUES))
    batch = read(pg, tables, begin)
    changed = batch.tables["every"].rows
    with snapshot_transaction(pg, None):
        copied = [b for b in copy_table(pg, tables[0])]
    import pyarrow as pa

    snap = pa.Table.from_batches(copied)
    assert snap.num_rows == changed.num_rows == 3
    columns = ["_key", *tables[0].schema.names]
    assert (
        changed.select(columns).to_pylist()
        == snap.select(columns).cast(changed.select(columns).schema).to_pylist()
    )
    first = snap.to_pylist()[0]
    assert first["n"] == Decimal("12.500")
    assert first["tz"] == dt.datetime(2024, 3, 1, 7, 34, 56, 789012, tzinfo=dt.UTC)
    assert first["ts"] == dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    assert first["raw"] == b"\x00\xff\x10"
    assert first["s"] == 'a "quoted" \\ text\nline'
    assert first["f"] == 1.1 and first["r"] == pytest.approx(0.1)
    assert first["_key"] == (
        'every/["12.500","2024-03-01T07:34:56.789012Z","00ff10",'
        '"a \\"quoted\\" \\\\ text\\nline","2024-02-29"]'
    )
    assert snap.to_pylist()[1]["c"] is None and snap.to_pylist()[2]["c"] == "    "


def test_values_no_spark_type_holds_stop_with_one_line(pg: psycopg.Connection, pg_dsn: str) -> None:
    from deltamv.errors import ConfigError

    tables, begin = start(pg, pg_dsn, "CREATE TABLE t (id int PRIMARY KEY, at timestamptz)", ["t"])
    pg.execute("INSERT INTO t VALUES (1, 'infinity')")
    with pytest.raises(ConfigError) as err:
        read(pg, tables, begin)
    assert str(err.value) == "tables.t: column public.t.at: value 'infinity' does not fit TIMESTAMP"
