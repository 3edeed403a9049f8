from __future__ import annotations

import threading

import psutil
import psycopg
import pyarrow.compute as pc
import pytest

from .helpers import read, start

ROWS = 1_000_000


@pytest.mark.slow
def test_a_million_row_transaction_decodes_in_bounded_memory(
    pg: psycopg.Connection, pg_dsn: str
) -> None:
    tables, begin = start(
        pg,
        pg_dsn,
        "CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84));"
        f"INSERT INTO accounts SELECT g, g / 100000, 0, '' FROM generate_series(1, {ROWS}) g",
        ["accounts"],
    )
    pg.execute("UPDATE accounts SET abalance = abalance + 1")
    proc = psutil.Process()
    base = peak = proc.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, proc.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        batch = read(pg, tables, begin)
    finally:
        done.set()
        sampler.join()
    rows = batch.tables["accounts"].rows
    assert (batch.transactions, batch.changes, rows.num_rows) == (1, ROWS, ROWS)
    assert pc.all(pc.equal(rows["abalance"], 1)).as_py()
    assert rows["_key"][ROWS - 1].as_py() == f"accounts/[{ROWS}]"
    assert peak - base < 1 << 30, f"RSS grew by {(peak - base) >> 20} MB"
