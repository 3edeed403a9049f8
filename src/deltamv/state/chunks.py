"""Rows that travel whole: open transactions, buffered rows, and staged outputs.

They are stored as typed Arrow chunks (one per table and batch, at most ``CHUNK_ROWS``
rows), so a batch writes and reads them without touching each row in Python:

- **pending**: prewritten rows of transactions not yet committed or rolled back in their
  region, with an index ``(region, start_ts) -> chunk`` so a later COMMIT finds them;
- **done**: ``(region, start_ts)`` finished in a region (commit ts, or NULL for a
  rollback), so a straggling COMMIT is recognised;
- **buffer**: committed rows above the watermark, each chunk tagged with the lowest and
  highest commit ts it holds, so a release reads only the chunks it can release from;
- **outbox**: what each output table must commit for a batch, kept until it has.

All of them are written inside the batch's state transaction (see :mod:`.store`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltamv.state.codec import from_blob, to_blob

__all__ = [
    "CHUNK_ROWS",
    "OUTBOX_KINDS",
    "Buffer",
    "DoneTxns",
    "Outbox",
    "OutboxEntry",
    "PendingTxns",
]

CHUNK_ROWS = 65_536
_TXN_SCHEMA = pa.schema([("region", pa.int64()), ("start_ts", pa.int64())])


def _put_chunks(
    db: sqlite3.Connection, kind: str, table: str, rows: pa.Table, *, ts_column: str | None
) -> list[tuple[int, pa.Table]]:
    """Store ``rows`` in chunks of at most CHUNK_ROWS rows; the ids with their rows."""
    ids = []
    for offset in range(0, rows.num_rows, CHUNK_ROWS):
        part = rows.slice(offset, CHUNK_ROWS)
        lo = hi = None
        if ts_column is not None and part.num_rows:
            bounds = pc.min_max(part.column(ts_column))
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        cursor = db.execute(
            "INSERT INTO chunks (kind, tbl, lo, hi, rows, data) VALUES (?, ?, ?, ?, ?, ?)",
            (kind, table, lo, hi, part.num_rows, to_blob(part)),
        )
        ids.append((int(cursor.lastrowid or 0), part))
    return ids


def rename_chunk_columns(db: sqlite3.Connection, renames: Mapping[str, Mapping[str, str]]) -> int:
    """In the pending and buffered rows of each table (``renames[table]``: a column's old
    name to its new one), rename a column a chunk has under its old name and not under
    its new one: chunks written by an earlier version that named it otherwise. Returns
    how many chunks were rewritten."""
    count = 0
    for table, names in renames.items():
        if not names:
            continue
        found = db.execute(
            "SELECT id, data FROM chunks WHERE kind IN ('pending', 'buffer') AND tbl = ?",
            (table,),
        ).fetchall()
        for chunk, data in found:
            rows = from_blob(data)
            old = rows.column_names
            new = [names[c] if c in names and names[c] not in old else c for c in old]
            if new != old:
                db.execute(
                    "UPDATE chunks SET data = ? WHERE id = ?",
                    (to_blob(rows.rename_columns(new)), chunk),
                )
                count += 1
    return count


def _of_txns(
    db: sqlite3.Connection, table: str, columns: Sequence[str], txns: pa.Table
) -> list[tuple[Any, ...]]:
    """The distinct ``columns`` of the rows of ``table`` (``pending`` or ``done``) whose
    ``(region, start_ts)`` is one of ``txns``.

    A table that holds no more rows than ``txns`` has (the open and the recently finished
    transactions, against a batch's) is read whole and matched here; a larger one is
    joined in SQLite with ``txns`` in a temporary table."""
    held = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    if held == 0 or txns.num_rows == 0:
        return []
    if held <= txns.num_rows:
        names = list(dict.fromkeys(["region", "start_ts", *columns]))
        rows = db.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall()
        everything = pa.Table.from_pylist(
            [dict(zip(names, r, strict=True)) for r in rows], schema=_schema_of(names)
        )
        asked = txns.select(["region", "start_ts"])
        hit = everything.join(asked, ["region", "start_ts"], join_type="left semi")
        return list(dict.fromkeys(zip(*(hit.column(c).to_pylist() for c in columns), strict=True)))
    db.execute("CREATE TEMP TABLE IF NOT EXISTS _txns (region INTEGER, start_ts INTEGER)")
    db.execute("DELETE FROM _txns")
    db.executemany(
        "INSERT INTO _txns VALUES (?, ?)",
        zip(txns.column("region").to_pylist(), txns.column("start_ts").to_pylist(), strict=True),
    )
    picked = ", ".join(f"x.{c}" for c in columns)
    return db.execute(
        f"SELECT DISTINCT {picked} FROM {table} x JOIN _txns t"
        " ON x.region = t.region AND x.start_ts = t.start_ts"
    ).fetchall()


def _schema_of(names: Sequence[str]) -> pa.Schema:
    return pa.schema([(n, pa.int64()) for n in names])  # (every column of pending and done)


class PendingTxns:
    """Prewritten rows of open transactions, by ``(region, start_ts)``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def add(self, table: str, rows: pa.Table) -> None:
        """Store ``rows`` (with ``region`` and ``start_ts`` columns) of ``table``."""
        if rows.num_rows == 0:
            return
        for chunk, part in _put_chunks(self.db, "pending", table, rows, ts_column=None):
            txns = (
                part.select(["region", "start_ts"]).group_by(["region", "start_ts"]).aggregate([])
            )
            self.db.executemany(
                "INSERT OR IGNORE INTO pending (region, start_ts, chunk) VALUES (?, ?, ?)",
                [(r, s, chunk) for r, s in zip(txns.column("region").to_pylist(),
                                               txns.column("start_ts").to_pylist(), strict=True)],
            )  # fmt: skip

    def known(self, txns: pa.Table) -> pa.Table:
        """Which of ``txns`` (region, start_ts) have pending rows."""
        if txns.num_rows == 0:
            return _TXN_SCHEMA.empty_table()
        rows = _of_txns(self.db, "pending", ["region", "start_ts"], txns)
        return pa.Table.from_pylist(
            [{"region": r, "start_ts": s} for r, s in rows], schema=_TXN_SCHEMA
        )

    def take(self, txns: pa.Table) -> dict[str, pa.Table]:
        """Remove the rows of ``txns`` from the pending set and return them, per table."""
        found = _of_txns(self.db, "pending", ["region", "start_ts", "chunk"], txns)
        if not found:
            return {}
        chunks = list(dict.fromkeys(chunk for _, _, chunk in found))
        out: dict[str, list[pa.Table]] = {}
        wanted = txns.select(["region", "start_ts"])
        for chunk in chunks:
            table, data = self.db.execute(
                "SELECT tbl, data FROM chunks WHERE id = ?", (chunk,)
            ).fetchone()
            rows = from_blob(data)
            hit = rows.join(wanted, ["region", "start_ts"], join_type="left semi")
            out.setdefault(table, []).append(hit)
        self._forget(found)
        return {t: pa.concat_tables(parts) for t, parts in out.items()}

    def drop(self, txns: pa.Table) -> None:
        """Forget the rows of ``txns`` (rolled back)."""
        self._forget(_of_txns(self.db, "pending", ["region", "start_ts", "chunk"], txns))

    def drop_region(self, region: int) -> None:
        """Forget every pending row of a retired region (its successors re-emit them)."""
        chunks = [
            r[0]
            for r in self.db.execute(
                "SELECT DISTINCT chunk FROM pending WHERE region = ?", (region,)
            )
        ]
        self.db.execute("DELETE FROM pending WHERE region = ?", (region,))
        self._collect(chunks)

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM pending").fetchone()[0])

    def _forget(self, found: Sequence[tuple[int, int, int]]) -> None:
        """Drop ``found`` (region, start_ts, chunk) from the index, then the chunks no
        open transaction refers to any more."""
        self.db.executemany(
            "DELETE FROM pending WHERE region = ? AND start_ts = ?",
            dict.fromkeys((region, start_ts) for region, start_ts, _ in found),
        )
        self._collect(list(dict.fromkeys(chunk for _, _, chunk in found)))

    def _collect(self, chunks: Sequence[int]) -> None:
        """Delete the chunks no open transaction refers to any more."""
        for chunk in chunks:
            used = self.db.execute(
                "SELECT 1 FROM pending WHERE chunk = ? LIMIT 1", (chunk,)
            ).fetchone()
            if used is None:
                self.db.execute("DELETE FROM chunks WHERE id = ?", (chunk,))


class DoneTxns:
    """Transactions finished in a region: ``commit_ts``, or None for a rollback."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def lookup(self, txns: pa.Table) -> pa.Table:
        """The finished ones among ``txns``: region, start_ts, commit_ts (null: rolled back)."""
        schema = pa.schema([*_TXN_SCHEMA, ("commit_ts", pa.int64())])
        if txns.num_rows == 0:
            return schema.empty_table()
        rows = _of_txns(self.db, "done", ["region", "start_ts", "commit_ts"], txns)
        names = ("region", "start_ts", "commit_ts")
        return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], schema=schema)

    def add(self, finished: pa.Table) -> None:
        """Record ``finished`` (region, start_ts, commit_ts)."""
        self.db.executemany(
            "INSERT OR IGNORE INTO done (region, start_ts, commit_ts) VALUES (?, ?, ?)",
            zip(*(finished.column(c).to_pylist() for c in ("region", "start_ts", "commit_ts")),
                strict=True),
        )  # fmt: skip

    def drop_region(self, region: int) -> None:
        self.db.execute("DELETE FROM done WHERE region = ?", (region,))

    def prune(self, watermark: int) -> None:
        """Transactions at or below the watermark are complete: a later COMMIT of one is a
        straggler recognised by its commit ts alone."""
        self.db.execute("DELETE FROM done WHERE commit_ts IS NULL OR commit_ts <= ?", (watermark,))


class Buffer:
    """Committed rows above the watermark, per table, in chunks tagged by commit ts."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def add(self, table: str, rows: pa.Table) -> None:
        """Keep ``rows`` (with a ``commit_ts`` column) until the watermark passes them."""
        if rows.num_rows:
            _put_chunks(self.db, "buffer", table, rows, ts_column="commit_ts")

    def take(self, watermark: int) -> Iterator[tuple[str, pa.Table]]:
        """Remove and return every chunk holding a row with ``commit_ts <= watermark``
        (the caller keeps the rows above it with :meth:`add`)."""
        found = self.db.execute(
            "SELECT id, tbl FROM chunks WHERE kind = 'buffer' AND lo <= ? ORDER BY id", (watermark,)
        ).fetchall()
        for chunk, table in found:
            data = self.db.execute("SELECT data FROM chunks WHERE id = ?", (chunk,)).fetchone()[0]
            self.db.execute("DELETE FROM chunks WHERE id = ?", (chunk,))
            yield table, from_blob(data)

    def count(self) -> int:
        row = self.db.execute("SELECT SUM(rows) FROM chunks WHERE kind = 'buffer'").fetchone()
        return int(row[0] or 0)


#: What an output table commits for a batch: ``delta`` (a Z-set of changed rows, in the
#: entry's chunks), ``rebuild`` (its whole content, from the state), ``recompute`` (its
#: SQL evaluated by Spark) or ``none`` (no data change: a version at the new watermark).
OUTBOX_KINDS = ("delta", "rebuild", "recompute", "none")


@dataclass(frozen=True)
class OutboxEntry:
    """What one output table commits for a batch (see :data:`OUTBOX_KINDS`)."""

    batch: int
    target: str
    kind: str
    chunks: tuple[int, ...]


class Outbox:
    """The changes each output table has to commit, per batch, until it has."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def put(self, batch: int, target: str, kind: str, parts: Sequence[pa.Table] = ()) -> None:
        if kind not in OUTBOX_KINDS:
            raise ValueError(f"unknown outbox kind {kind!r}")
        old = self.db.execute(
            "SELECT chunks FROM outbox WHERE batch = ? AND target = ?", (batch, target)
        ).fetchone()
        if old is not None:
            self.db.executemany(
                "DELETE FROM chunks WHERE id = ?", [(i,) for i in json.loads(old[0])]
            )
        ids: list[int] = []
        for part in parts:
            ids.extend(i for i, _ in _put_chunks(self.db, "outbox", target, part, ts_column=None))
        self.db.execute(
            "INSERT OR REPLACE INTO outbox (batch, target, kind, chunks) VALUES (?, ?, ?, ?)",
            (batch, target, kind, json.dumps(ids)),
        )

    def entries(self, batch: int) -> dict[str, OutboxEntry]:
        rows = self.db.execute(
            "SELECT target, kind, chunks FROM outbox WHERE batch = ?", (batch,)
        ).fetchall()
        return {t: OutboxEntry(batch, t, k, tuple(json.loads(c))) for t, k, c in rows}

    def read(self, entry: OutboxEntry) -> Iterator[pa.Table]:
        for chunk in entry.chunks:
            row = self.db.execute("SELECT data FROM chunks WHERE id = ?", (chunk,)).fetchone()
            if row is None:
                raise KeyError(f"outbox chunk {chunk} of {entry.target} is missing")
            yield from_blob(row[0])

    def batches(self) -> list[int]:
        return [
            int(r[0]) for r in self.db.execute("SELECT DISTINCT batch FROM outbox ORDER BY batch")
        ]


def chunk_counts(db: sqlite3.Connection) -> Mapping[str, int]:
    """Rows held per chunk kind (for reports)."""
    return {
        str(k): int(n or 0)
        for k, n in db.execute("SELECT kind, SUM(rows) FROM chunks GROUP BY kind").fetchall()
    }
