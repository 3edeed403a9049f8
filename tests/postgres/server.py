"""A throw-away PostgreSQL server in a temporary folder (tests and benchmarks).

Unix socket only (``listen_addresses = ''``), ``wal_level = logical``. initdb refuses
to run as root, so under root the server runs as the ``postgres`` OS user: the folder
is chowned to it, and the socket lives inside it, where root reaches anyway.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_SEARCH = ["/usr/lib/postgresql/15/bin", "/usr/local/bin", "/usr/bin"]
PORT = 5433  # names the socket file only: there is no TCP listener

SETTINGS = {
    "listen_addresses": "''",
    "wal_level": "logical",
    "max_replication_slots": "64",
    "max_wal_senders": "16",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "max_wal_size": "1GB",
    "logical_decoding_work_mem": "64MB",
    "log_min_messages": "warning",
}


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl (``DELTAMV_PG_BINDIR`` first), or None."""
    env = os.environ.get("DELTAMV_PG_BINDIR")
    candidates = [env] if env else []
    candidates += _SEARCH
    candidates += sorted((str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")), reverse=True)
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


@dataclass(frozen=True)
class PgServer:
    """A running server: its socket folder, binaries, and a DSN per database."""

    socket_dir: str
    port: int
    bindir: Path

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} port={self.port} dbname={dbname} user=postgres"

    def libpq_env(self) -> dict[str, str]:
        """PGHOST, PGPORT and PGUSER for a client program (pgbench, psql, a job)."""
        return {"PGHOST": self.socket_dir, "PGPORT": str(self.port), "PGUSER": "postgres"}


def _os_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root and there is no `postgres` OS user") from None
    return "postgres"


@contextmanager
def temp_server(bindir: Path, settings: Mapping[str, str] | None = None) -> Iterator[PgServer]:
    """Start a server in a new temporary folder; stop it and remove the folder after."""
    user = _os_user()
    root = Path(tempfile.mkdtemp(prefix="deltamv-pg-"))
    if user:
        pw = pwd.getpwnam(user)
        os.chmod(root, 0o755)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data, log = root / "data", root / "server.log"

    def run(*args: str) -> None:
        subprocess.run(list(args), user=user, check=True, capture_output=True, text=True)

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C", "--wal-segsize=1", "--no-sync")  # fmt: skip
        conf = {**SETTINGS, "unix_socket_directories": f"'{root}'", "port": str(PORT)}
        conf.update(settings or {})
        with open(data / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start")
        yield PgServer(str(root), PORT, bindir)
    finally:
        subprocess.run(
            [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            user=user,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)
