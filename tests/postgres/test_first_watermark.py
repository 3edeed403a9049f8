"""The first versions' watermark is not earlier than any transaction they include.

A new logical slot reaches its consistent point only once every transaction running
when it was asked for has ended, and those transactions are in the exported snapshot.
So the copy (the first versions) can hold transactions that committed well after the
job started. CONTRACT section 6: a version with watermark ``w`` holds every transaction
with ``commit_ts <= w`` and none above; section 7 takes ``commit_ts`` from the commit
time. The first watermark must therefore be at or after the commit time of everything
in the copy (a reader picking versions by time, ``deltamv read --as-of-time``, would
otherwise get rows committed after the time it asked for).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from deltamv import delta, tso
from deltamv.config import load_config
from deltamv.job import ViewJob

from .helpers import one_table_job


def test_first_watermark_covers_a_transaction_the_slot_waited_for(
    spark: Any, pg_dsn: str, tmp_path: Path
) -> None:
    config = one_table_job(pg_dsn, tmp_path, "firstwm", "SELECT COUNT(*) AS n, SUM(v) AS s FROM t")
    job = ViewJob(load_config(config), spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run(once=True)
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(pg_dsn) as open_txn:  # a transaction running when the slot is made
        open_txn.execute("INSERT INTO t VALUES (2, 20)")
        thread = threading.Thread(target=run, name="deltamv-job")
        thread.start()
        end = time.monotonic() + 300
        with psycopg.connect(pg_dsn, autocommit=True) as pg:
            while not pg.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'deltamv_firstwm'"
            ).fetchone():  # the slot is being created: it waits for open_txn
                assert thread.is_alive() and time.monotonic() < end, errors or "no slot"
                time.sleep(0.1)
        time.sleep(1.5)
        before_commit_ms = time.time_ns() // 1_000_000
        open_txn.commit()
    thread.join(timeout=300)
    assert not thread.is_alive() and not errors, errors
    first = delta.versions(str(tmp_path / "all"))[0]
    rows = delta.read_arrow(str(tmp_path / "all"), first.version).to_pylist()
    assert rows == [{"n": 2, "s": 21}]  # the waited-for transaction is in the copy
    assert first.watermark is not None
    physical_ms = tso.physical_ms(first.watermark)
    assert physical_ms >= before_commit_ms, (
        f"the first version includes a transaction committed at or after {before_commit_ms}"
        f" ms but its watermark's time is {physical_ms} ms"
    )
