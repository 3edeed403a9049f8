"""Copy tables as they stand in a snapshot, as typed Arrow record batches.

The job copies every table inside the snapshot its slot exported, so the copy plus
the slot's transactions from the consistent point on are exactly the database's
history: no transaction in both, none in neither. A table streams through
``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` into pyarrow's CSV reader: memory stays
bounded by the block size whatever the table's size, and values go through the same
text-to-Arrow conversion as the changes (so both render one row alike).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql

from deltamv.errors import StateError
from deltamv.postgres._convert import typed_column
from deltamv.postgres.catalog import PgTable
from deltamv.postgres.keys import row_keys

__all__ = [
    "TruncatedMeanwhile",
    "copy_table",
    "copy_tables",
    "lock_tables",
    "snapshot_schema",
    "snapshot_transaction",
]

KEY = "_key"
_BLOCK_BYTES = 4 << 20


def snapshot_schema(table: PgTable) -> pa.Schema:
    """The schema of the batches :func:`copy_table` yields: ``_key``, then the table's
    columns as ``table.schema.to_arrow()``."""
    return pa.schema([pa.field(KEY, pa.string(), False), *table.schema.to_arrow()])


@contextmanager
def snapshot_transaction(
    conn: psycopg.Connection[Any], snapshot_name: str | None
) -> Iterator[None]:
    """A REPEATABLE READ, READ ONLY transaction on ``conn`` that sees the exported
    snapshot ``snapshot_name`` (or its own, if None).

    The snapshot is imported by the transaction's first statement: the connection that
    exported it (:func:`deltamv.postgres.slot.create_slot`) may close once this block
    has begun. ``conn`` must be idle and in autocommit mode (as
    :func:`deltamv.postgres.connect.connect` opens it).
    """
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        if snapshot_name is not None:
            conn.execute("SET TRANSACTION SNAPSHOT " + sql.Literal(snapshot_name).as_string(conn))
        yield
    finally:
        if not conn.closed:
            conn.execute("ROLLBACK")  # read only: nothing to commit


class _CopyReader(io.RawIOBase):
    """The rows of a running ``COPY ... TO STDOUT`` as a readable byte stream."""

    def __init__(self, copy: psycopg.Copy) -> None:
        self._copy = copy
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._chunk:
            data = self._copy.read()
            if not data:
                return 0
            self._chunk = memoryview(data)
        n = min(len(buffer), len(self._chunk))
        buffer[:n] = self._chunk[:n]
        self._chunk = self._chunk[n:]
        return n


def copy_table(
    conn: psycopg.Connection[Any], table: PgTable, *, batch_rows: int = 65536
) -> Iterator[pa.RecordBatch]:
    """Stream the rows of ``table`` as record batches of :func:`snapshot_schema`, at
    most ``batch_rows`` rows each (memory: a few MB of CSV plus one batch).

    Run it inside :func:`snapshot_transaction`; it reads whatever snapshot the current
    transaction has. Values are exact: numeric to Decimal, timestamps to UTC
    microseconds, bytea to bytes. A value with no deltamv equivalent (numeric NaN,
    timestamp infinity) raises a one-line ConfigError naming its column. Closing the
    iterator before its end cancels the COPY, which aborts the transaction.
    """
    names = table.schema.names
    # ONLY: inheritance children are other tables (the publication names ONLY too)
    query = sql.SQL("COPY (SELECT {} FROM ONLY {}) TO STDOUT (FORMAT csv)").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in names),
        sql.Identifier(table.namespace, table.relname),
    )
    read_options = pacsv.ReadOptions(column_names=names, block_size=_BLOCK_BYTES, use_threads=False)
    parse_options = pacsv.ParseOptions(newlines_in_values=True, double_quote=True)
    # COPY CSV writes NULL as an unquoted empty field and '' as a quoted one.
    convert_options = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()),
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        null_values=[""],
    )
    schema = snapshot_schema(table)
    with conn.cursor() as cur, cur.copy(query) as copy:
        stream = io.BufferedReader(_CopyReader(copy), buffer_size=1 << 20)
        if not stream.peek(1):  # an empty table: pyarrow refuses an empty CSV stream
            stream.close()
            return
        reader = pacsv.open_csv(stream, read_options, parse_options, convert_options)
        for raw in reader:
            for start in range(0, raw.num_rows, batch_rows):
                yield _typed(table, raw.slice(start, batch_rows), schema)
        stream.close()


def _typed(table: PgTable, raw: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = [
        typed_column(raw.column(c.name), table.pg_column(c.name), c, table)
        for c in table.schema.columns
    ]
    typed = pa.RecordBatch.from_arrays(columns, schema=table.schema.to_arrow())
    keys = row_keys(table.name, table.schema, table.primary_key, typed)
    return pa.RecordBatch.from_arrays([keys, *columns], schema=schema)


def copy_tables(
    conn: psycopg.Connection[Any],
    snapshot_name: str | None,
    tables: Sequence[PgTable],
    *,
    batch_rows: int = 65536,
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``(table name, batch)`` for every table, one table after the other, all read in
    the one snapshot ``snapshot_name`` (see :func:`snapshot_transaction`)."""
    with snapshot_transaction(conn, snapshot_name):
        lock_tables(conn, tables)
        for table in tables:
            for batch in copy_table(conn, table, batch_rows=batch_rows):
                yield table.name, batch


class TruncatedMeanwhile(StateError):
    """A table was truncated (or rewritten) after the snapshot was taken and before the
    copy locked it: in the snapshot it would read as empty. Take a new snapshot."""


def lock_tables(conn: psycopg.Connection[Any], tables: Sequence[PgTable]) -> None:
    """Lock ``tables`` against TRUNCATE for the rest of the snapshot's transaction, and
    check that none was truncated since the snapshot was taken.

    TRUNCATE is not MVCC-safe: a snapshot taken before a TRUNCATE committed sees the
    table as *empty* (its old file is gone), not as it stood. ``ACCESS SHARE`` on every
    table at once (as pg_dump does) keeps a TRUNCATE out until the copy ends; one that
    committed between the snapshot and the lock shows as a new file node
    (``pg_relation_filenode``, the catalog now) differing from the one the snapshot's
    ``pg_class`` row names. Then :class:`TruncatedMeanwhile` is raised.
    """
    if not tables:
        return
    conn.execute(
        sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
            sql.SQL(", ").join(
                sql.SQL("ONLY {}").format(sql.Identifier(t.namespace, t.relname)) for t in tables
            )
        )
    )
    rows = conn.execute(
        "SELECT c.oid::int8, c.relfilenode::int8, pg_relation_filenode(c.oid)::int8"
        " FROM pg_class c WHERE c.oid::int8 = ANY(%s)",
        [[t.oid for t in tables]],
    ).fetchall()
    by_oid = {t.oid: t for t in tables}
    for oid, seen, now in rows:
        if seen != now:
            raise TruncatedMeanwhile(
                f"table {by_oid[oid].qualified} was truncated or rewritten after the snapshot"
                " was taken and before the copy locked it; take a new snapshot"
            )
