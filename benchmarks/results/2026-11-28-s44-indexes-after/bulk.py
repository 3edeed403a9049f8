"""A mirror's first load, its indexes kept up at every insert against built after the rows.

    .venv/bin/python benchmarks/results/2026-11-28-s44-indexes-after/bulk.py ROWS ROUNDS

Loads ROWS accounts (no key, as a snapshot's; primary key ``id``) into a new mirror in a
state file, in parts of 500,000 rows, inside one transaction as the job does, keys in
order and in random order; alternates the two modes ROUNDS times. Prints one JSON line a
run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

from deltamv.state import keyed
from deltamv.views.mirror import insert_rows, loading

COLUMNS = pa.schema([("id", pa.int64()), ("owner", pa.string()), ("balance", pa.decimal128(18, 2))])


def accounts(n: int, order: str) -> pa.Table:
    ids = np.arange(n) if order == "sorted" else np.random.default_rng(1).permutation(n)
    cents = pa.array(ids * 7 % 100_000, pa.int64()).cast(pa.decimal128(38, 2))
    return pa.table({
        keyed.KEY: pa.nulls(n, pa.string()), "id": ids,
        "owner": pa.array([f"o{i % 1000}" for i in ids]),
        "balance": cents.cast(pa.decimal128(18, 2), safe=False),
    })  # fmt: skip


def load(rows: pa.Table, mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as folder:
        db = sqlite3.connect(os.path.join(folder, "state.db"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        mirror = keyed.Mirror(db, "accounts", COLUMNS, ["id"])
        start = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        with loading([mirror]) if mode == "after" else contextlib.nullcontext():
            for offset in range(0, rows.num_rows, 500_000):
                insert_rows(mirror, rows.slice(offset, 500_000))
        loaded = time.perf_counter()
        db.execute("COMMIT")
        end = time.perf_counter()
        db.close()
    return {"load_s": round(loaded - start, 3), "total_s": round(end - start, 3)}


def main() -> None:
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    keyed._INDEXES_AFTER = 1 << 62  # (the "kept" mode: no insert defers its indexes)
    for order in ("sorted", "random"):
        rows = accounts(n, order)
        for r in range(rounds):
            for mode in ("kept", "after") if r % 2 == 0 else ("after", "kept"):
                result = {"rows": n, "order": order, "mode": mode, "round": r,
                          "load1": round(os.getloadavg()[0], 2), **load(rows, mode)}  # fmt: skip
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
