"""The buffer: committed rows above the watermark, released in commit order.

Rows live in the state's ``buffer`` table, keyed by ``(key, start_ts)`` so a row
version seen twice (a retransmission, a successor's re-emission) is kept once. When
the watermark advances to ``w``, every row with ``commit_ts <= w`` is complete and
moves, in one statement, to ``released`` in the order a downstream applier needs:
by commit ts, then transaction, then deletes before puts within a transaction (a
primary-key change is a DELETE of the old key and a PUT of the new one; applied the
other way round the row is lost, reference/ticdc-update-split-issue.txt), then key.
"""

from __future__ import annotations

import sqlite3


def release(db: sqlite3.Connection, *, batch: int, watermark: int) -> int:
    """Move every buffered row with ``commit_ts <= watermark`` to ``released``; count them."""
    moved = db.execute(
        "INSERT INTO released (batch, ord, key, start_ts, commit_ts, tbl, op, value, old_value) "
        "SELECT ?, ROW_NUMBER() OVER (ORDER BY commit_ts, start_ts, op = 'PUT', key), "
        "key, start_ts, commit_ts, tbl, op, value, old_value FROM buffer WHERE commit_ts <= ?",
        (batch, watermark),
    ).rowcount
    db.execute("DELETE FROM buffer WHERE commit_ts <= ?", (watermark,))
    return int(moved)


def buffered(db: sqlite3.Connection) -> int:
    """Rows waiting above the watermark."""
    return int(db.execute("SELECT COUNT(*) FROM buffer").fetchone()[0])
