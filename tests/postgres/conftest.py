"""A real PostgreSQL server for the tests of ``deltamv.postgres``, one per test session.

See :mod:`tests.postgres.server`. Tests are skipped, with the reason, only when no
PostgreSQL binaries exist at all (``make setup`` installs them).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from .server import PgServer, find_bindir, temp_server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl); run `make setup`")
    with temp_server(bindir) as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """A fresh database for one test; its replication slots are dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_server.dsn(name)
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        for (slot,) in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", [name]
        ).fetchall():
            conn.execute("SELECT pg_drop_replication_slot(%s)", [slot])
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def pg(pg_dsn: str) -> Iterator[psycopg.Connection]:
    """A deltamv connection (autocommit, UTC, ...) to a fresh database."""
    from deltamv.postgres import connect

    conn = connect(pg_dsn)
    yield conn
    conn.close()
