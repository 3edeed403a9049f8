"""A real PostgreSQL server for the tests of ``deltamv.postgres``, one per test session.

The server lives in a temporary folder, listens on a unix socket only
(``listen_addresses = ''``), and runs with ``wal_level = logical``. initdb refuses to
run as root, so under root the server runs as the ``postgres`` OS user (the folder is
chowned to it; the socket lives inside the folder, which root reaches anyway).
Tests are skipped, with the reason, only when no PostgreSQL binaries exist at all.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

_SEARCH = ["/usr/lib/postgresql/15/bin", "/usr/local/bin", "/usr/bin"]
_PORT = 5433  # names the socket file only: there is no TCP listener


def _bindir() -> Path | None:
    env = os.environ.get("DELTAMV_PG_BINDIR")
    candidates = [env] if env else []
    candidates += _SEARCH
    candidates += sorted(str(p) for p in Path("/usr/lib/postgresql").glob("*/bin"))[::-1]
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


@dataclass(frozen=True)
class PgServer:
    """A running test server: its socket folder and a DSN per database."""

    socket_dir: str
    port: int

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} port={self.port} dbname={dbname} user=postgres"


def _run_as(user: str | None, args: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(args, user=user, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl); run `make setup`")
    root = Path(tempfile.mkdtemp(prefix="deltamv-pg-"))
    user: str | None = None
    if os.geteuid() == 0:
        user = "postgres"
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            pytest.skip("running as root and there is no `postgres` OS user to run the server")
        os.chmod(root, 0o755)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data = root / "data"
    log = root / "server.log"
    _run_as(
        user,
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "--encoding=UTF8", "--locale=C", "--wal-segsize=1", "--no-sync"],
    )  # fmt: skip
    settings = {
        "listen_addresses": "''",
        "unix_socket_directories": f"'{root}'",
        "port": str(_PORT),
        "wal_level": "logical",
        "max_replication_slots": "64",
        "max_wal_senders": "16",
        "fsync": "off",
        "full_page_writes": "off",
        "shared_buffers": "128MB",
        "max_wal_size": "256MB",
        "logical_decoding_work_mem": "64MB",
        "log_min_messages": "warning",
    }
    with open(data / "postgresql.conf", "a") as conf:
        conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
    _run_as(
        user, [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start"]
    )
    server = PgServer(str(root), _PORT)
    try:
        yield server
    finally:
        subprocess.run(
            [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            user=user,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


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
