"""Commit times of PostgreSQL transactions as deltamv TSO values (docs/postgres.md).

PostgreSQL stamps each commit with its wall-clock time, which is not monotone in
commit (LSN) order: the time is taken before the commit record is inserted, and
clocks step. deltamv needs timestamps that strictly increase in commit order, so a
transaction's TSO is ``max(commit_ms << 18, previous + 1)``: the physical part is the
commit time in milliseconds whenever that moves forward, and otherwise the previous
value's with the logical part counting up (a carry into the physical part when 2**18
transactions share a millisecond).
"""

from __future__ import annotations

from typing import Any

from deltamv import tso

__all__ = ["PG_EPOCH_US", "commit_tso", "pg_time_to_unix_us", "server_time_us"]

PG_EPOCH_US = 946_684_800_000_000
"""Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00 UTC)."""


def pg_time_to_unix_us(pg_us: int) -> int:
    """A PostgreSQL timestamp (µs since 2000-01-01 UTC) as µs since the Unix epoch."""
    return pg_us + PG_EPOCH_US


def commit_tso(commit_time_us: int, previous: int) -> int:
    """The TSO of a transaction committed at ``commit_time_us`` (µs since the Unix
    epoch), strictly greater than ``previous`` (the TSO of the transaction before it in
    commit order, 0 for none).

    Deterministic: the same commit times in the same order always give the same values,
    so a batch that is read again after a crash gets the timestamps it had.
    """
    if previous < 0:
        raise ValueError(f"previous TSO must be >= 0, got {previous}")
    candidate = tso.compose(max(commit_time_us, 0) // 1000, 0)
    return max(candidate, previous + 1)


def server_time_us(conn: Any) -> int:
    """The server's clock now (µs since the Unix epoch): the clock its commit times come
    from (on a primary)."""
    row = conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8").fetchone()
    return int(row[0])
