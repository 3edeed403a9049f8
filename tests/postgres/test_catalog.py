from __future__ import annotations

import psycopg
import pytest

from deltamv.errors import ConfigError
from deltamv.postgres import check_declared, read_catalog
from deltamv.postgres.catalog import parse_pg_table
from deltamv.schema import TableSchema

ALL_TYPES = """
CREATE TABLE public.every (
    id bigint PRIMARY KEY, s smallint, i integer NOT NULL, n numeric(12,2), r real,
    d double precision, t text, v varchar(10), c char(3), b boolean, day date,
    tz timestamptz, ts timestamp, raw bytea, u uuid, j json, jb jsonb
)"""


def test_every_supported_type_maps(pg: psycopg.Connection) -> None:
    pg.execute(ALL_TYPES)
    table = read_catalog(pg, [("every", None)])["every"]
    assert table.schema.to_ddl() == (
        "`id` BIGINT NOT NULL, `s` SMALLINT, `i` INT NOT NULL, `n` DECIMAL(12,2), `r` FLOAT, "
        "`d` DOUBLE, `t` STRING, `v` STRING, `c` STRING, `b` BOOLEAN, `day` DATE, "
        "`tz` TIMESTAMP, `ts` TIMESTAMP, `raw` BINARY, `u` STRING, `j` STRING, `jb` STRING"
    )
    assert table.primary_key == ("id",)
    assert table.replica_identity == "d"
    assert table.qualified == "public.every"
    oid = pg.execute("SELECT 'public.every'::regclass::oid::int8").fetchone()
    assert oid is not None and table.oid == oid[0]


def test_other_schema_and_composite_key(pg: psycopg.Connection) -> None:
    pg.execute(
        "CREATE SCHEMA sales; CREATE TABLE sales.accounts (a int, b text, x int, PRIMARY KEY (b, a))"
    )
    pg.execute("ALTER TABLE sales.accounts REPLICA IDENTITY FULL")
    table = read_catalog(pg, [("acc", "sales.accounts")])["acc"]
    assert (table.namespace, table.relname, table.name) == ("sales", "accounts", "acc")
    assert table.primary_key == ("b", "a")
    assert table.replica_identity == "f"


def test_pg_table_names() -> None:
    assert parse_pg_table("x", None) == ("public", "x")
    assert parse_pg_table("x", "Sales.Accounts") == ("sales", "accounts")
    assert parse_pg_table("x", '"Sales"."My.Table"') == ("Sales", "My.Table")
    assert parse_pg_table("x", "accounts") == ("public", "accounts")
    with pytest.raises(ConfigError, match=r"tables\.x\.pg_table"):
        parse_pg_table("x", "a.b.c")


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        (
            "CREATE TABLE t (id int PRIMARY KEY, p point)",
            "tables.t: column public.t.p has type point, which deltamv cannot map (supported: ",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY, a int[])",
            "column public.t.a has type integer[], which deltamv cannot map",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY, n numeric)",
            "column public.t.n has type numeric, which deltamv cannot map",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY, n numeric(40,2))",
            "column public.t.n has type numeric(40,2), which deltamv cannot map",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY, i interval)",
            "column public.t.i has type interval",
        ),
        ("CREATE TABLE t (id int, v text)", "table public.t has no primary key"),
        (
            "CREATE TABLE t (id int PRIMARY KEY DEFERRABLE, v text)",
            "the primary key of public.t is DEFERRABLE",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t REPLICA IDENTITY NOTHING",
            "table public.t has REPLICA IDENTITY NOTHING",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY, u int NOT NULL UNIQUE);"
            " ALTER TABLE t REPLICA IDENTITY USING INDEX t_u_key",
            "REPLICA IDENTITY USING INDEX t_u_key on (u), not its primary key (id)",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY, g int GENERATED ALWAYS AS (id * 2) STORED)",
            "column public.t.g is a generated column",
        ),
        ("CREATE VIEW t AS SELECT 1 AS id", "public.t is a view, not a table"),
        (
            'CREATE TABLE t (id int PRIMARY KEY, "_KEY" text)',
            "column public.t._KEY: the job keeps the names _key, __rowid, __w",
        ),
        (
            'CREATE TABLE t (id int PRIMARY KEY, owner text, "Owner" text)',
            "table public.t has columns 'owner' and 'Owner', whose names differ only in case",
        ),
        (
            "CREATE TABLE t (id int PRIMARY KEY) PARTITION BY RANGE (id)",
            "public.t is a partitioned table: logical replication does not send a TRUNCATE",
        ),
        ("SELECT 1", "table public.t does not exist in database t_"),
    ],
)
def test_refusals_name_the_table(pg: psycopg.Connection, ddl: str, message: str) -> None:
    pg.execute(ddl)
    with pytest.raises(ConfigError) as err:
        read_catalog(pg, [("t", None)])
    text = str(err.value)
    assert message in text
    assert "\n" not in text
    assert err.value.key == "tables.t"


def test_identity_index_on_the_primary_key_is_fine(pg: psycopg.Connection) -> None:
    pg.execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text); ALTER TABLE t REPLICA IDENTITY USING INDEX t_pkey"
    )
    assert read_catalog(pg, [("t", None)])["t"].replica_identity == "i"


def test_declared_schema_checked_against_the_catalog(pg: psycopg.Connection) -> None:
    pg.execute("CREATE TABLE t (id int PRIMARY KEY, n numeric(10,2), f real, s text, free numeric)")
    with pytest.raises(ConfigError, match="cannot map"):
        read_catalog(pg, [("t", None)])
    pg.execute("ALTER TABLE t DROP COLUMN free")
    table = read_catalog(pg, [("t", None)])["t"]
    wider = TableSchema.from_ddl("s STRING, id BIGINT NOT NULL, n DECIMAL(14,3), f DOUBLE")
    checked = check_declared(table, wider, ["id"])
    assert checked.schema == wider
    bad = {
        "id INT, n DECIMAL(10,2), f FLOAT": "public.t also has s",
        "id INT, n DECIMAL(10,2), f FLOAT, s STRING, z INT": "public.t has no column z",
        "id SMALLINT, n DECIMAL(10,2), f FLOAT, s STRING": "column id is declared SMALLINT but public.t.id is integer: it reads into INT or BIGINT",
        "id INT, n DECIMAL(10,1), f FLOAT, s STRING": "DECIMAL(10,1) cannot hold every numeric(10,2)",
        "id INT, n DECIMAL(10,2), f FLOAT, s STRING NOT NULL": "declared NOT NULL but PostgreSQL allows NULL",
        "id INT, n DECIMAL(10,2), f FLOAT, s INT": "column s is declared INT but public.t.s is text",
    }
    for ddl, message in bad.items():
        with pytest.raises(ConfigError) as err:
            check_declared(table, TableSchema.from_ddl(ddl), None)
        assert message in str(err.value)
        assert err.value.key == "tables.t.schema"
    with pytest.raises(
        ConfigError,
        match=r"tables\.t\.primary_key: declared \[s\] but the primary key of public.t is \(id\)",
    ):
        check_declared(table, None, ["s"])


def test_unconstrained_numeric_accepted_when_declared(pg: psycopg.Connection) -> None:
    pg.execute("CREATE TABLE t (id int PRIMARY KEY, n numeric)")
    with pytest.raises(ConfigError, match="numeric without precision"):
        read_catalog(pg, [("t", None)])
    schema = TableSchema.from_ddl("id INT NOT NULL, n DECIMAL(20,4)")
    table = read_catalog(pg, [("t", None)], declared={"t": (schema, None)})["t"]
    assert table.schema == schema
    with pytest.raises(ConfigError, match=r"n is declared STRING but public\.t\.n is numeric"):
        read_catalog(
            pg, [("t", None)], declared={"t": (TableSchema.from_ddl("id INT, n STRING"), None)}
        )


def test_unreadable_table_and_no_replication_right(pg: psycopg.Connection, pg_dsn: str) -> None:
    from deltamv.errors import StateError, StorageError
    from deltamv.postgres import connect, create_slot

    pg.execute("CREATE TABLE t (id int PRIMARY KEY); CREATE ROLE reader LOGIN")
    dsn = pg_dsn.replace("user=postgres", "user=reader")
    with connect(dsn) as conn, pytest.raises(ConfigError) as err:
        read_catalog(conn, [("t", None)])
    assert str(err.value) == "tables.t: user reader may not read table public.t (GRANT SELECT)"
    with pytest.raises(StorageError) as slot_err, create_slot(dsn, "s", timeout_s=30):
        pass  # no REPLICATION attribute: refused at once, not retried for 30 s
    assert "must be superuser or replication role" in str(slot_err.value)
    pg.execute("ALTER ROLE reader REPLICATION")
    with pytest.raises(StateError) as full, create_slot(dsn, "bad name"):
        pass
    assert str(full.value).startswith("cannot create replication slot bad name: ")
