"""One PostgreSQL transaction far larger than ``max_batch_bytes``: how long `deltamv run
--once` takes to apply it, and in how many micro-batches. Prints a table; asserts
nothing but the result.

    .venv/bin/python benchmarks/postgres_large_txn.py [--rows 100000] [--caps 1000,1048576,67108864]
                                                      [--timeout 900] [--json out.json]

For each cap: a fresh database with ``t (id int PRIMARY KEY, v int)`` holding one row, a
job (``[source] kind = "postgres"``, ``max_batch_bytes`` = the cap, one view ``SELECT *
FROM t``) run once for its snapshot; then one transaction inserting ``--rows`` rows and
one small UPDATE after it; then ``deltamv run --once`` as a subprocess, timed (killed
after ``--timeout`` seconds). Reported: the transaction's WAL bytes, the run's seconds,
its micro-batches (Spark's commit log), and whether the view's latest version equals the
table (a FAILED line if not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from _common import PYTHON, ROOT, WORK, say

sys.path.insert(0, str(ROOT))
from tests.postgres.server import find_bindir, temp_server

from deltamv import delta


def run_once(config: Path, timeout: float) -> tuple[float, bool]:
    """`deltamv run --once`, its stderr appended to ``run.log`` beside the config."""
    started = time.monotonic()
    with open(config.parent / "run.log", "a") as log:
        try:
            subprocess.run(
                [PYTHON, "-m", "deltamv.cli", "run", "--once", str(config)],
                check=True, timeout=timeout, stdout=log, stderr=log,
            )  # fmt: skip
            return time.monotonic() - started, True
        except subprocess.TimeoutExpired:
            return time.monotonic() - started, False


def case(server_dsn: str, folder: Path, cap: int, rows: int, timeout: float) -> dict[str, object]:
    db = f"large_{cap}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {db}")
    dsn = server_dsn.replace("dbname=postgres", f"dbname={db}")
    work = folder / str(cap)
    work.mkdir(parents=True)
    config = work / "job.toml"
    config.write_text(
        f'[job]\nname = "large{cap}"\ncheckpoint = "{work}/ck"\n\n'
        f'[source]\nkind = "postgres"\ndsn = "{dsn}"\nmax_batch_bytes = {cap}\n\n'
        f'[tables.t]\n\n[views.all]\nsql = "SELECT * FROM t"\npath = "{work}/all"\n'
    )
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
        run_once(config, timeout)  # the snapshot
        before = pg.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        pg.execute(f"INSERT INTO t SELECT g, g FROM generate_series(2, {rows + 1}) g")
        wal = pg.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), %s)", [before]
        ).fetchone()[0]
        pg.execute("UPDATE t SET v = 0 WHERE id = 1")
        seconds, finished = run_once(config, timeout)
        expected = sorted(pg.execute("SELECT id, v FROM t").fetchall())
    commits = work / "ck" / "spark" / "commits"
    batches = sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0
    got = sorted(tuple(r.values()) for r in delta.read_arrow(str(work / "all")).to_pylist())
    return {
        "cap": cap, "rows": rows, "wal_bytes": int(wal), "seconds": round(seconds, 1),
        "finished": finished, "micro_batches": batches - 1, "equal": got == expected,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--caps", default="1000,1048576,67108864")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bindir = find_bindir()
    if bindir is None:
        sys.exit("no PostgreSQL server binaries: run `make setup`")
    folder = WORK / f"large-txn-{os.getpid()}"
    results = []
    load = os.getloadavg()[0]
    with temp_server(bindir) as server:
        for cap in (int(c) for c in args.caps.split(",")):
            result = case(server.dsn(), folder, cap, args.rows, args.timeout)
            results.append(result)
            say(json.dumps(result))
    print(f"\nload at start {load:.1f}, at end {os.getloadavg()[0]:.1f}")
    print(
        "| max_batch_bytes | rows | WAL bytes | run --once s | micro-batches after the snapshot | view equal |"
    )
    print("|---:|---:|---:|---:|---:|---|")
    for r in results:
        seconds = f"{r['seconds']}" if r["finished"] else f">{r['seconds']} (killed)"
        print(f"| {r['cap']:,} | {r['rows']:,} | {r['wal_bytes']:,} | {seconds} | "
              f"{r['micro_batches']} | {'yes' if r['equal'] else 'FAILED'} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"load": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
