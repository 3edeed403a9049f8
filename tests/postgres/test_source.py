from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from deltamv.postgres import connect, current_wal_lsn, slot_status
from deltamv.postgres.source import SOURCE_NAME, register

from .helpers import PUB, SLOT, start

ACCOUNTS = "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint)"


def _stream(spark: Any, dsn: str, **options: str) -> Any:
    reader = spark.readStream.format(SOURCE_NAME).option("dsn", dsn).option("slot", SLOT)
    reader = reader.option("publication", PUB)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _confirmed(dsn: str) -> int:
    with connect(dsn) as conn:
        status = slot_status(conn, SLOT)
        assert status is not None and status.confirmed_flush_lsn is not None
        return status.confirmed_flush_lsn


def test_slot_advances_only_after_the_batch_completed(
    spark: Any, pg: psycopg.Connection, pg_dsn: str, tmp_path: Path
) -> None:
    """Spark commits a batch's end offset to the source (which advances the slot) when
    it plans the next batch, after the batch completed: never during it, never for a
    batch whose function raised; a failed batch is replayed whole."""
    register(spark)
    _, begin = start(pg, pg_dsn, ACCOUNTS, ["accounts"])
    checkpoint = str(tmp_path / "checkpoint")
    seen: list[tuple[int, list[tuple[str, int]], int]] = []

    def run(fail: bool = False) -> int:
        """One availableNow query; the end offset of its last batch."""

        def batch(df: Any, batch_id: int) -> None:
            rows = [(r.commit_lsn, r.changes) for r in df.orderBy("lsn").collect()]
            seen.append((batch_id, rows, _confirmed(pg_dsn)))
            if fail:
                raise RuntimeError("the sink failed")

        query = (
            _stream(spark, pg_dsn)
            .writeStream.foreachBatch(batch)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        if fail:
            with pytest.raises(Exception, match="the sink failed"):
                query.awaitTermination()
            return -1
        query.awaitTermination()
        return int(json.loads(query.lastProgress["sources"][0]["endOffset"])["lsn"])

    pg.execute("INSERT INTO accounts VALUES (1, 'a', 10)")
    pg.execute("UPDATE accounts SET balance = 5 WHERE id = 1")
    written = current_wal_lsn(pg)
    end0 = run()  # at or past what was written (the server may log more, e.g. its xacts)
    assert end0 >= written
    assert [(b, len(rows), c) for b, rows, c in seen] == [(0, 2, begin)]
    assert [n for _, n in seen[0][1]] == [1, 1]
    assert _confirmed(pg_dsn) == begin  # batch 0 is done, but not yet committed to the source

    pg.execute("INSERT INTO accounts VALUES (2, 'b', 20), (3, 'c', 30)")
    end1 = run()
    assert seen[1][0] == 1 and [n for _, n in seen[1][1]] == [2]
    assert seen[1][2] == end0  # planning batch 1 committed batch 0: the slot moved to its end

    pg.execute("DELETE FROM accounts WHERE id = 2")
    run(fail=True)
    assert seen[2][0] == 2 and [n for _, n in seen[2][1]] == [1] and seen[2][2] == end1
    assert _confirmed(pg_dsn) == end1  # the failed batch 2 never advanced the slot

    run()  # batch 2 again, same offsets, nothing lost
    assert seen[3][0] == 2 and seen[3][1] == seen[2][1] and seen[3][2] == end1


def test_options_are_checked(spark: Any, pg_dsn: str) -> None:
    from deltamv.errors import ConfigError
    from deltamv.postgres.source import PostgresStreamReader

    with pytest.raises(ConfigError, match="slot: the deltamv-postgres source needs"):
        PostgresStreamReader({"dsn": pg_dsn})
    with pytest.raises(ConfigError, match="maxBytesPerTrigger: must be a positive integer"):
        PostgresStreamReader({"dsn": pg_dsn, "slot": "s", "maxBytesPerTrigger": "0"})
    reader = PostgresStreamReader(
        {"dsn": pg_dsn, "slot": "s", "startLsn": "0/10", "maxBytesPerTrigger": "100"}
    )
    assert reader.initialOffset() == {"lsn": 16}
    assert reader.latestOffset({"lsn": 16}, reader.getDefaultReadLimit()) == {"lsn": 116}
    import pickle

    assert pickle.loads(pickle.dumps(reader)).options.slot == "s"  # travels without its connection
