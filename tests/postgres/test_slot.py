from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import psycopg
import pytest

from deltamv.errors import ConfigError, StateError
from deltamv.postgres import (
    SlotOrigin,
    advance_slot,
    check_slot,
    create_slot,
    created_as,
    current_wal_lsn,
    drop_publication,
    drop_slot,
    ensure_publication,
    read_catalog,
    slot_origin,
    slot_status,
)

from .helpers import SLOT, read, start
from .server import PgServer

ACCOUNTS = "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint)"


def test_publication_created_then_checked(pg: psycopg.Connection) -> None:
    pg.execute(
        ACCOUNTS
        + "; CREATE TABLE side (id int PRIMARY KEY); CREATE TABLE more (id int PRIMARY KEY)"
    )
    tables = list(read_catalog(pg, [("accounts", None), ("side", None)]).values())
    assert ensure_publication(pg, "pub", tables) is True
    assert ensure_publication(pg, "pub", tables) is False  # exists and covers them
    more = read_catalog(pg, [("more", None)])["more"]
    with pytest.raises(ConfigError) as err:
        ensure_publication(pg, "pub", [*tables, more])
    assert str(err.value) == (
        "source.publication: publication pub does not include table public.more "
        "(ALTER PUBLICATION pub ADD TABLE public.more)"
    )
    pg.execute("CREATE PUBLICATION nodel FOR TABLE accounts WITH (publish = 'insert, update')")
    with pytest.raises(ConfigError, match="does not publish every insert, update, delete"):
        ensure_publication(pg, "nodel", tables[:1])
    pg.execute("CREATE PUBLICATION filtered FOR TABLE accounts WHERE (balance > 0)")
    with pytest.raises(ConfigError, match=r"filters the rows of public\.accounts"):
        ensure_publication(pg, "filtered", tables[:1])
    pg.execute("CREATE PUBLICATION partial FOR TABLE accounts (id, owner)")
    with pytest.raises(ConfigError, match=r"sends only some columns of public\.accounts"):
        ensure_publication(pg, "partial", tables[:1])
    pg.execute("CREATE PUBLICATION everything FOR ALL TABLES")
    assert ensure_publication(pg, "everything", [*tables, more]) is False
    assert drop_publication(pg, "pub") is True
    assert drop_publication(pg, "pub") is False  # idempotent: it says it was gone
    assert pg.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'pub'").fetchone() == (
        0,
    )


def test_slot_status_advance_and_drop(pg: psycopg.Connection, pg_dsn: str) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    status = check_slot(pg, SLOT)
    assert status.confirmed_flush_lsn == begin
    assert status.plugin == "pgoutput" and not status.active and not status.lost
    assert status.wal_status == "reserved"
    pg.execute("INSERT INTO accounts SELECT g, 'x', g FROM generate_series(1, 2000) g")
    status = check_slot(pg, SLOT)
    assert status.restart_lsn is not None
    assert status.retained_bytes == status.current_lsn - status.restart_lsn > 0
    assert status.lag_bytes == status.current_lsn - begin > 50_000
    end = current_wal_lsn(pg)
    assert advance_slot(pg, SLOT, end) == end
    assert advance_slot(pg, SLOT, begin) == end  # never backwards
    after = check_slot(pg, SLOT)
    assert after.confirmed_flush_lsn == end and after.lag_bytes == after.current_lsn - end
    assert read(pg, tables, end).transactions == 0
    with pytest.raises(StateError, match="already exists"), create_slot(pg_dsn, SLOT):
        pass
    assert drop_slot(pg, SLOT) is True
    assert drop_slot(pg, SLOT) is False
    assert slot_status(pg, SLOT) is None
    gone = (
        f"replication slot {SLOT} does not exist at host=.* dbname=.* \\(dropped outside"
        " deltamv\\?\\): the changes since the job's last batch are lost to it; start the job"
        " with a new checkpoint and new output paths"
    )
    with pytest.raises(StateError, match=gone):
        check_slot(pg, SLOT)


def test_a_slot_is_known_by_its_origin_not_its_name(pg: psycopg.Connection, pg_dsn: str) -> None:
    """The origin kept before creating a slot, and with its consistent point after, names
    that slot only: not one made before it, nor one made again under its name, nor it
    once something advanced it."""
    pg.execute(ACCOUNTS)
    before = slot_origin(pg, SLOT)
    assert before.database == pg.info.dbname and before.system_identifier.isdigit()
    assert SlotOrigin.from_json(before.to_json()) == before
    with create_slot(pg_dsn, SLOT) as exported:
        pass
    kept = replace(before, consistent_lsn=exported.consistent_lsn)
    assert SlotOrigin.from_json(kept.to_json()) == kept
    status = check_slot(pg, SLOT)
    assert created_as(pg, status, before)  # the creator died before keeping the position
    assert created_as(pg, status, kept)
    assert not created_as(pg, status, replace(kept, system_identifier="1"))  # another server
    assert not created_as(pg, status, replace(kept, database="other"))
    pg.execute("INSERT INTO accounts VALUES (1, 'x', 1)")
    advance_slot(pg, SLOT, current_wal_lsn(pg))
    assert not created_as(pg, check_slot(pg, SLOT), kept)  # somebody consumed it
    drop_slot(pg, SLOT)
    pg.execute("INSERT INTO accounts VALUES (2, 'x', 1)")
    with create_slot(pg_dsn, SLOT):  # the same name, made by somebody else
        pass
    again = check_slot(pg, SLOT)
    assert not created_as(pg, again, kept)
    drop_slot(pg, SLOT)
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [SLOT])
    later = slot_origin(pg, SLOT)  # kept after that slot was made
    assert not created_as(pg, check_slot(pg, SLOT), later)


@pytest.fixture
def tiny_wal_keep(pg_server: PgServer) -> Iterator[None]:
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")


def test_invalidated_slot_is_refused_with_one_line(
    pg: psycopg.Connection, pg_dsn: str, tiny_wal_keep: None
) -> None:
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    for i in range(6):  # past the 1 MB the slot may keep (1 MB segments)
        pg.execute("INSERT INTO accounts VALUES (%s, 'x', 1)", [i])
        pg.execute("SELECT pg_switch_wal()")
    pg.execute("CHECKPOINT")
    status = slot_status(pg, SLOT)
    assert status is not None and status.lost and status.wal_status == "lost"
    assert status.retained_bytes is None and status.lag_bytes is None
    expected = f"replication slot {SLOT} lost WAL it still needed"
    for attempt in (
        lambda: check_slot(pg, SLOT),
        lambda: read(pg, tables, begin),
        lambda: advance_slot(pg, SLOT, current_wal_lsn(pg)),
    ):
        with pytest.raises(StateError) as err:
            attempt()
        assert str(err.value).startswith(expected)
        assert "\n" not in str(err.value)
        assert "start the job anew from a fresh snapshot" in str(err.value)
