"""The PostgreSQL walk-through in one go (README.md next to this file says it step by step).

Creates the bank in database ``deltamv_bank`` (dropped first if it exists), starts
``deltamv run bank.toml`` (continuous, 1-second trigger), waits for its first versions
(the snapshot), writes transfers from several connections for ``--seconds`` while it
runs, stops the writers and the job, lets ``deltamv run --once`` take the rest, and runs
``deltamv check`` over every version of every view and ``deltamv status``.

The server comes from the libpq environment (PGHOST, PGPORT, PGUSER, ...), or, with
``--throwaway-server``, is started in a temporary folder for the run (needs the
PostgreSQL server binaries: ``make postgres``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
DB = "deltamv_bank"
ACCOUNTS, OPENING = 200, 1000
OWNERS = ["ann", "bob", "cyd", "dee", "eve"]


def create_bank(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for (slot,) in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", [DB]
        ).fetchall():
            conn.execute("SELECT pg_drop_replication_slot(%s)", [slot])
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(f"{admin_dsn} dbname={DB}", autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL,"
            " balance bigint NOT NULL);"
            "CREATE TABLE ledger (id bigserial PRIMARY KEY, account_id bigint NOT NULL,"
            " amount bigint NOT NULL, kind text NOT NULL);"
            f"INSERT INTO accounts SELECT g, (ARRAY{OWNERS!r})[1 + g % {len(OWNERS)}], {OPENING}"
            f" FROM generate_series(1, {ACCOUNTS}) g"
        )


def transfer(conn: psycopg.Connection, rng: random.Random) -> None:
    """Move money between two accounts (never below zero), one ledger row per leg."""
    a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
    amount = rng.randint(1, 100)
    with conn.transaction():
        rows = conn.execute(
            "SELECT id, balance FROM accounts WHERE id IN (%s, %s) ORDER BY id FOR UPDATE", [a, b]
        ).fetchall()
        balances: dict[int, int] = {r[0]: r[1] for r in rows}
        if balances[a] < amount:
            return
        conn.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", [amount, a])
        conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", [amount, b])
        conn.execute(
            "INSERT INTO ledger (account_id, amount, kind) VALUES (%s, %s, 'out'), (%s, %s, 'in')",
            [a, -amount, b, amount],
        )


def everyone(conn: psycopg.Connection) -> None:
    """One transaction touching every account: each pays 1 to the next (a ring), one
    ledger row per account whose balance changed."""
    with conn.transaction():
        conn.execute("SELECT id FROM accounts ORDER BY id FOR UPDATE")  # as transfers: id order
        conn.execute(
            "WITH d AS (SELECT a.id, (p.balance > 0)::int - (a.balance > 0)::int AS delta"
            "  FROM accounts a JOIN accounts p"
            f"  ON p.id = 1 + (a.id + {ACCOUNTS - 2}) % {ACCOUNTS}),"
            " u AS (UPDATE accounts SET balance = balance + d.delta FROM d"
            "  WHERE accounts.id = d.id)"
            " INSERT INTO ledger (account_id, amount, kind) SELECT id, delta, 'ring' FROM d"
            " WHERE delta <> 0"
        )


def writers(
    dsn: str, connections: int, stop: threading.Event, counts: list[int]
) -> list[threading.Thread]:
    def write(index: int) -> None:
        rng = random.Random(index)
        last_ring = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                with contextlib.suppress(psycopg.errors.DeadlockDetected):
                    if index == 0 and time.monotonic() - last_ring > 2:
                        last_ring = time.monotonic()
                        everyone(conn)
                    else:
                        transfer(conn, rng)
                    counts[index] += 1

    threads = [threading.Thread(target=write, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    return threads


def deltamv(*args: str) -> subprocess.Popen[bytes]:
    print("$ deltamv", " ".join(args), flush=True)
    return subprocess.Popen([sys.executable, "-m", "deltamv.cli", *args], cwd=HERE)


@contextlib.contextmanager
def server(throwaway: bool) -> Iterator[None]:
    if not throwaway:
        yield
        return
    sys.path.insert(0, str(HERE.parents[1]))
    from tests.postgres.server import find_bindir, temp_server

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl): run `make postgres`")
    with temp_server(bindir) as pg:
        os.environ.update(pg.libpq_env())
        yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the writers run")
    parser.add_argument("--connections", type=int, default=4, help="writer connections")
    parser.add_argument("--throwaway-server", action="store_true",
                        help="start a PostgreSQL server in a temporary folder for the run")  # fmt: skip
    args = parser.parse_args()
    with server(args.throwaway_server):
        shutil.rmtree(HERE / "out", ignore_errors=True)
        create_bank("dbname=postgres")
        job = deltamv("run", "bank.toml")
        first = HERE / "out" / "views" / "total_balance" / "_delta_log"
        while not (first.is_dir() and any(first.glob("*.json"))):  # the snapshot's versions
            if job.poll() is not None:
                return 1
            time.sleep(0.5)
        stop, counts = threading.Event(), [0] * args.connections
        threads = writers(f"dbname={DB}", args.connections, stop, counts)
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join()
        print(f"writers committed {sum(counts)} transactions", flush=True)
        job.send_signal(signal.SIGTERM)  # stops cleanly; a cut batch is replayed next time
        if job.wait(timeout=300) != 0:
            return 1
        if deltamv("run", "bank.toml", "--once").wait() != 0:  # the rest
            return 1
        with psycopg.connect(f"dbname={DB}") as conn:
            total, n = conn.execute("SELECT SUM(balance), COUNT(*) FROM accounts").fetchone()  # type: ignore[misc]
        print(f"PostgreSQL now: total {total} over {n} accounts", flush=True)
        checked = deltamv("check", "bank.toml").wait()
        deltamv("status", "bank.toml").wait()
        return checked


if __name__ == "__main__":
    sys.exit(main())
