"""Connections that break under a running job (the server restarted, the backend was
terminated): reopened once, where the job and its streaming source talk to PostgreSQL."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from deltamv.config import load_config
from deltamv.errors import StateError, StorageError, unwire
from deltamv.job.postgres import PostgresUpstream
from deltamv.postgres import Reconnecting, current_wal_lsn, read_changes, slot_status
from deltamv.postgres.changes import peek_messages
from deltamv.postgres.source import PostgresStreamReader, decode_offset

from .helpers import PUB, SLOT, start

ACCOUNTS = "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint)"


def _terminate(pg: psycopg.Connection, pid: int) -> None:
    assert pg.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
    while pg.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
        time.sleep(0.05)


def test_a_terminated_connection_is_opened_again_a_failed_statement_is_not(
    pg: psycopg.Connection, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn = Reconnecting(pg_dsn)

    def pid(c: psycopg.Connection) -> int:
        return int(c.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]

    first = conn.run(pid, "asking")
    _terminate(pg, first)
    with caplog.at_level(logging.WARNING, logger="deltamv.postgres"):
        second = conn.run(pid, "asking")
    assert second != first
    assert "connection to PostgreSQL lost while asking" in caplog.text

    def slow(c: psycopg.Connection) -> None:
        c.execute("SET statement_timeout = 50")
        try:
            c.execute("SELECT pg_sleep(5)")
        finally:
            c.execute("RESET statement_timeout")

    # A statement PostgreSQL refused (an OperationalError, but no break): one line.
    with pytest.raises(StorageError, match=r"failed while waiting: .*statement timeout"):
        conn.run(slow, "waiting")
    assert conn.run(pid, "asking") == second
    conn.close()


def test_the_streaming_source_rides_out_a_terminated_backend(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    """The source's planning and confirming reopen their connection (the job stopped at
    the next trigger after any server restart, with no reason given)."""
    start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    reader = PostgresStreamReader({"dsn": pg_dsn, "slot": SLOT, "publication": PUB})
    begin = reader.initialOffset()
    pg.execute("INSERT INTO accounts VALUES (1, 'ann', 10)")
    assert reader._pg is not None
    _terminate(pg, reader._pg.connection().info.backend_pid)
    end = reader.latestOffset(begin, reader.getDefaultReadLimit())
    assert decode_offset(end) >= current_wal_lsn(pg) - 1024 * 1024
    _terminate(pg, reader._pg.connection().info.backend_pid)
    reader.commit(end)
    status = slot_status(pg, SLOT)
    assert status is not None and status.confirmed_flush_lsn == decode_offset(end)
    reader.stop()


def test_the_jobs_read_of_the_slot_rides_out_a_terminated_backend(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    """The job reads each batch's changes over its own connection: after a server restart
    (here: its backend terminated) the read failed with "lost the connection" and the job
    stopped, since the read turned the broken connection into deltamv's error before
    ``Reconnecting`` could open it again."""
    tables, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    pg.execute("INSERT INTO accounts VALUES (1, 'ann', 10)")
    upto = current_wal_lsn(pg)
    conn = Reconnecting(pg_dsn)

    def read(c: psycopg.Connection) -> Any:
        return read_changes(c, SLOT, PUB, tables, after_lsn=begin, upto_lsn=upto)

    def peek(c: psycopg.Connection) -> list[bytes]:  # the read's own query, broken at once
        return list(peek_messages(c, SLOT, PUB, upto))

    assert conn.run(read, "reading the slot").changes == 1
    _terminate(pg, conn.connection().info.backend_pid)
    assert conn.run(read, "reading the slot").changes == 1
    messages = conn.run(peek, "reading the slot")
    _terminate(pg, conn.connection().info.backend_pid)
    assert conn.run(peek, "reading the slot") == messages
    conn.close()


def test_the_sources_errors_reach_the_job_as_one_line(pg: psycopg.Connection, pg_dsn: str) -> None:
    """A slot dropped while the job runs, or a statement that fails, in the source's
    planning and confirming (a Python worker of Spark's, whose errors reach the job only
    as text): the job stopped with "[STREAM_FAILED] ... Traceback (most recent call
    last):" and no reason."""
    start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    reader = PostgresStreamReader({"dsn": pg_dsn, "slot": SLOT, "publication": PUB})
    begin = reader.initialOffset()
    pg.execute("INSERT INTO accounts VALUES (1, 'ann', 10)")
    end = reader.latestOffset(begin, reader.getDefaultReadLimit())
    partition = reader.partitions(begin, end)[0]
    unpublished = PostgresStreamReader({"dsn": pg_dsn, "slot": SLOT, "publication": "nope"})
    with pytest.raises(StorageError) as failed:
        list(unpublished.read(partition))
    found = unwire(Exception(str(failed.value)))
    assert isinstance(found, StorageError)
    assert "failed while reading the slot: " in str(found)
    assert 'publication "nope" does not exist' in str(found)
    pg.execute("SELECT pg_drop_replication_slot(%s)", [SLOT])

    for call in (lambda: reader.commit(end), reader.initialOffset, lambda: list(reader.read(partition))):  # fmt: skip
        with pytest.raises(StateError) as failed:
            call()
        text = f"[STREAM_FAILED] Traceback (most recent call last):\n{failed.value}"
        found = unwire(Exception(text))
        assert isinstance(found, StateError)
        assert str(found).startswith(f"replication slot {SLOT} does not exist")
    reader.stop()


def test_a_run_ending_while_its_source_holds_the_slot_leaves_the_confirming_to_the_next(
    pg: psycopg.Connection,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stop ends the streaming query without waiting for its source, which may still be
    confirming the last batch: the run's own confirming waits for the slot, a few
    seconds at most, then leaves it (it stopped with "slot in use by another connection")."""
    import deltamv.job.postgres as job_postgres

    _, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    (tmp_path / "job.toml").write_text(
        f'[job]\nname = "r"\ncheckpoint = "{tmp_path}/ck"\n\n[source]\nkind = "postgres"\n'
        f'dsn = "{pg_dsn}"\nslot = "{SLOT}"\npublication = "{PUB}"\n\n[tables.accounts]\n\n'
        f'[views.n]\nsql = "SELECT COUNT(*) AS n FROM accounts"\npath = "{tmp_path}/n"\n'
    )
    upstream = PostgresUpstream(load_config(tmp_path / "job.toml"), tmp_path / "spark")
    pg.execute("INSERT INTO accounts VALUES (1, 'ann', 10)")
    target = current_wal_lsn(pg)
    holder: Any = psycopg.connect(pg_dsn, autocommit=True, replication="database")
    try:
        holder.pgconn.send_query(
            f"START_REPLICATION SLOT {SLOT} LOGICAL 0/0"
            f" (proto_version '1', publication_names '{PUB}')".encode()
        )
        while not (slot_status(pg, SLOT) or _never()).active:
            time.sleep(0.05)
        monkeypatch.setattr(job_postgres, "_CONFIRM_WAIT_S", 1.0)
        with caplog.at_level(logging.INFO, logger="deltamv"):
            upstream._confirm(target)
        assert "is busy; the next start confirms" in caplog.text
        status = slot_status(pg, SLOT)
        assert status is not None and (status.confirmed_flush_lsn or 0) < target
    finally:
        holder.close()
        while (slot_status(pg, SLOT) or _never()).active:
            pg.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                " WHERE slot_name = %s AND active",
                [SLOT],
            )
            time.sleep(0.05)
    upstream._confirm(target)
    status = slot_status(pg, SLOT)
    assert status is not None and status.confirmed_flush_lsn == target
    assert begin < target
    upstream._pg.close()


def _never() -> Any:
    raise AssertionError("the slot is gone")
