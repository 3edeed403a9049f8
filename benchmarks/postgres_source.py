"""The PostgreSQL source's speed on this machine: snapshot copy, change decoding, and
what the server alone costs, on pgbench's own tables. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/postgres_source.py [--scale 10] [--seconds 20] [--json out.json]

Starts its own throw-away server (as tests/postgres does), initialises pgbench at
``--scale`` (100,000 accounts per unit), then measures:

1. copy: ``pgbench_accounts`` copied in a slot's exported snapshot (rows/s);
2. one big transaction (``UPDATE pgbench_accounts SET abalance = abalance + 1``):
   the server's decoding alone through the SQL peek (``count(*)`` of
   ``pg_logical_slot_peek_binary_changes``), the same through the replication
   protocol (``pg_recvlogical`` to /dev/null, on a second slot), and deltamv's
   ``read_changes`` (decode + net result as Arrow), with its peak RSS;
3. pgbench's TPC-B-like load (4 clients, ``--seconds``) then ``read_changes`` over it.

The load average is printed next to each figure: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.postgres.server import find_bindir, temp_server  # noqa: E402

from deltamv.postgres import (  # noqa: E402
    connect,
    copy_tables,
    create_slot,
    current_wal_lsn,
    ensure_publication,
    read_catalog,
    read_changes,
)
from deltamv.postgres.lsn import format_lsn  # noqa: E402


def load() -> float:
    return round(os.getloadavg()[0], 2)


class PeakRss:
    """The peak RSS of this process while the block runs (sampled every 20 ms)."""

    def __enter__(self) -> PeakRss:
        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def timed(fn: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bindir = find_bindir()
    if bindir is None:
        sys.exit("no PostgreSQL binaries: run `make setup`")
    results: dict[str, Any] = {"scale": args.scale}
    with temp_server(bindir, {"max_wal_size": "4GB", "checkpoint_timeout": "30min"}) as server:
        dsn = server.dsn()
        env = {**os.environ, **server.libpq_env()}
        pgbench = str(bindir / "pgbench")
        _, secs = timed(lambda: subprocess.run(
            [pgbench, "-i", "-q", "-s", str(args.scale), "postgres"], env=env, check=True, capture_output=True))  # fmt: skip
        rows = args.scale * 100_000
        print(f"pgbench -i -s {args.scale}: {rows:,} accounts in {secs:.1f} s")
        conn = connect(dsn)
        names = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers"]
        tables = list(read_catalog(conn, [(n, None) for n in names]).values())
        ensure_publication(conn, "bench", tables)

        # 1. the copy, in the exported snapshot
        with create_slot(dsn, "bench") as exported, connect(dsn) as copier:
            start = exported.consistent_lsn

            def copy() -> int:
                return sum(
                    b.num_rows for _, b in copy_tables(copier, exported.snapshot_name, tables[:1])
                )

            with PeakRss() as mem:
                copied, secs = timed(copy)
        results["copy"] = {"rows": copied, "seconds": secs, "rows_per_s": copied / secs,
                           "peak_rss_mb": mem.peak / 2**20, "load": load()}  # fmt: skip
        print(f"copy: {copied:,} rows in {secs:.1f} s = {copied / secs:,.0f} rows/s "
              f"(peak RSS {mem.peak / 2**20:.0f} MB, load {load()})")  # fmt: skip

        # 2. one transaction updating every account
        with create_slot(dsn, "bench_stream"):
            pass
        _, secs = timed(lambda: conn.execute("UPDATE pgbench_accounts SET abalance = abalance + 1"))
        end = current_wal_lsn(conn)
        print(f"UPDATE of {rows:,} rows in one transaction: {secs:.1f} s, "
              f"{(end - start) / 2**20:.0f} MB of WAL")  # fmt: skip
        peek = ("SELECT count(*) FROM pg_logical_slot_peek_binary_changes('bench', %s::pg_lsn, "
                "NULL, 'proto_version', '1', 'publication_names', 'bench')")  # fmt: skip
        count, secs = timed(lambda: conn.execute(peek, [format_lsn(end)]).fetchone())
        results["server_peek"] = {
            "messages": count[0],
            "seconds": secs,
            "rows_per_s": rows / secs,
            "load": load(),
        }
        print(
            f"server decoding alone, SQL peek: {secs:.1f} s = {rows / secs:,.0f} rows/s (load {load()})"
        )
        recv = [str(bindir / "pg_recvlogical"), "-d", dsn, "-S", "bench_stream", "--start",
                "-E", format_lsn(end), "-o", "proto_version=1", "-o", "publication_names=bench",
                "-f", "/dev/null", "--no-loop"]  # fmt: skip
        _, secs = timed(lambda: subprocess.run(recv, check=True, capture_output=True))
        results["server_stream"] = {"seconds": secs, "rows_per_s": rows / secs, "load": load()}
        print(f"server decoding alone, replication protocol (pg_recvlogical): {secs:.1f} s = "
              f"{rows / secs:,.0f} rows/s (load {load()})")  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with PeakRss() as mem:
            batch, secs = timed(lambda: read_changes(
                conn, "bench", "bench", tables, after_lsn=start, upto_lsn=end))  # fmt: skip
        net = batch.tables["pgbench_accounts"].rows.num_rows
        results["decode_big_txn"] = {
            "changes": batch.changes, "net_rows": net, "seconds": secs,
            "rows_per_s": batch.changes / secs, "peak_rss_mb": mem.peak / 2**20,
            "rss_growth_mb": (mem.peak - mem.base) / 2**20, "load": load(),
        }  # fmt: skip
        print(f"read_changes, one {batch.changes:,}-row transaction: {secs:.1f} s = "
              f"{batch.changes / secs:,.0f} change rows/s; peak RSS {mem.peak / 2**20:.0f} MB "
              f"(+{(mem.peak - mem.base) / 2**20:.0f} MB; ru_maxrss before {before / 1024:.0f} MB) "
              f"(load {load()})")  # fmt: skip
        del batch
        advance = "SELECT pg_replication_slot_advance('bench', %s::pg_lsn)"
        _, secs = timed(lambda: conn.execute(advance, [format_lsn(end)]))
        results["advance"] = {"seconds": secs, "load": load()}
        print(f"pg_replication_slot_advance over it (the server decodes it again): {secs:.1f} s")

        # 3. pgbench's TPC-B-like transactions from 4 clients
        out = subprocess.run([pgbench, "-n", "-c", "4", "-j", "2", "-T", str(args.seconds), "postgres"],
                             env=env, check=True, capture_output=True, text=True).stdout  # fmt: skip
        tps = next((line for line in out.splitlines() if line.startswith("tps")), "")
        end2 = current_wal_lsn(conn)
        with PeakRss() as mem:
            batch, secs = timed(lambda: read_changes(
                conn, "bench", "bench", tables, after_lsn=end, upto_lsn=end2))  # fmt: skip
        results["decode_pgbench"] = {
            "pgbench": tps, "transactions": batch.transactions, "changes": batch.changes,
            "seconds": secs, "txn_per_s": batch.transactions / secs,
            "rows_per_s": batch.changes / secs, "peak_rss_mb": mem.peak / 2**20, "load": load(),
        }  # fmt: skip
        print(f"pgbench {args.seconds} s ({tps.strip()}): read_changes of {batch.transactions:,} "
              f"transactions, {batch.changes:,} change rows in {secs:.1f} s = "
              f"{batch.transactions / secs:,.0f} txn/s, {batch.changes / secs:,.0f} change rows/s "
              f"(load {load()})")  # fmt: skip
        conn.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
