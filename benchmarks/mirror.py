"""Mirror micro-benchmark: what a batch of random changes costs a large mirror.

Builds a job state (``StateStore``, the job's own SQLite settings) holding a mirror of
``--rows`` accounts (``id``, ``owner``, ``balance``), loaded like a snapshot's rows
(no change-log key) or, with ``--keyed``, with a key each. Then runs ``--batches``
batches, each changing ``--changes`` distinct random accounts (a PUT of a new balance),
through the path a job's batch takes: the change against the mirror
(``views.mirror.table_change``: the lookups of the rows replaced), the mirror's update
(``apply_change``) and the state's ``COMMIT``, inside one ``StateStore.transaction``.
Prints per batch the three phases, the bytes the batch wrote to the write-ahead log, and
the checkpoint that copies them into the file (a thread of its own in a job, timed here
after the batch, which then empties the log);
then the medians, with the load average. Never asserts a time.

``--page-size`` creates the state file with another SQLite page size first (the job
uses SQLite's default, 4096 bytes).

    .venv/bin/python benchmarks/mirror.py [--rows 10000000] [--changes 10000] [--batches 6]
        [--keyed] [--page-size 4096]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import WORK, say

from deltamv.compute import Compute
from deltamv.state.keyed import Mirror
from deltamv.state.store import StateStore
from deltamv.views.mirror import apply_change, table_change

COLUMNS = pa.schema([("id", pa.int64()), ("owner", pa.string()), ("balance", pa.int64())])
LOAD_ROWS = 500_000


def owners(ids: np.ndarray) -> pa.Array:
    return pa.array([f"owner-{i % 1000}" for i in ids.tolist()], pa.string())


def keys(ids: np.ndarray) -> pa.Array:
    return pa.array([f"t_accounts_r{i}" for i in ids.tolist()], pa.string())


def build(base: Path, rows: int, *, keyed: bool, page_size: int) -> None:
    """The state file with the loaded mirror, once per (rows, keyed, page size)."""
    if (base / "done").exists():
        return
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    path = base / "state.db"
    if page_size != 4096:
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA page_size={page_size}")
        db.execute("VACUUM")  # writes the empty file's header with that page size
        db.close()
    store = StateStore(path, job="bench", start_ts=1)
    mirror = Mirror(store.db, "accounts", COLUMNS, ["id"])
    started = time.perf_counter()
    with store.transaction():
        for offset in range(0, rows, LOAD_ROWS):
            ids = np.arange(offset, min(rows, offset + LOAD_ROWS), dtype=np.int64)
            key = keys(ids) if keyed else pa.nulls(len(ids), pa.string())
            table = pa.table({"_key": key, "id": ids, "owner": owners(ids),
                              "balance": np.full(len(ids), 1000, dtype=np.int64)})  # fmt: skip
            mirror.insert(table.cast(mirror.schema))
    store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    got = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    say(f"built {rows:,} rows (keyed: {keyed}, page size {got}) in "
        f"{time.perf_counter() - started:.1f} s: {path.stat().st_size / 1e6:.0f} MB")  # fmt: skip
    (base / "done").touch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--page-size", type=int, default=4096)
    args = parser.parse_args()

    name = f"mirror-{args.rows}-{'keyed' if args.keyed else 'snapshot'}-{args.page_size}"
    base = WORK / name
    build(base, args.rows, keyed=args.keyed, page_size=args.page_size)
    work = WORK / f"{name}-run"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    path = work / "state.db"
    store = StateStore(path, job="bench", start_ts=1)
    mirror = Mirror(store.db, "accounts", COLUMNS, ["id"])
    compute = Compute()
    rng = np.random.default_rng(7)
    phases: dict[str, list[float]] = {"lookup": [], "apply": [], "commit": [], "checkpoint": []}
    wal: list[float] = []
    say(f"{args.batches} batches of {args.changes:,} changed accounts; load "
        f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    for batch in range(args.batches):
        ids = rng.choice(args.rows, args.changes, replace=False).astype(np.int64)
        changes = pa.table({"key": keys(ids), "op": pa.array(["PUT"] * len(ids)), "id": ids,
                            "owner": owners(ids),
                            "balance": rng.integers(0, 2000, len(ids))})  # fmt: skip
        began = time.perf_counter()
        with store.transaction():
            change = table_change(compute, mirror, changes)
            looked = time.perf_counter()
            apply_change(mirror, change)
            applied = time.perf_counter()
        committed = time.perf_counter()
        wal_bytes = path.with_name(path.name + "-wal").stat().st_size
        store._checkpointer.wait()  # the job's checkpoint thread, waited for here
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the next batch's log from 0
        done = time.perf_counter()
        times = {"lookup": looked - began, "apply": applied - looked,
                 "commit": committed - applied, "checkpoint": done - committed}  # fmt: skip
        for phase, seconds in times.items():
            phases[phase].append(seconds * 1000)
        wal.append(wal_bytes / 1e6)
        say(f"batch {batch}: " + ", ".join(f"{p} {s * 1000:.0f} ms" for p, s in times.items())
            + f"; log {wal_bytes / 1e6:.1f} MB")  # fmt: skip
    store.close()
    later = {p: v[1:] or v for p, v in phases.items()}  # the first batch warms the cache
    print(f"\nmedian over batches 2-{args.batches} ({args.rows:,} rows, {args.changes:,} changes"
          f", keyed {args.keyed}, page size {args.page_size}, load {os.getloadavg()[0]:.1f}): "
          + ", ".join(f"{p} {statistics.median(v):.0f} ms" for p, v in later.items())
          + f"; log {statistics.median(wal[1:] or wal):.1f} MB a batch")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
