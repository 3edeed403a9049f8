"""Rows kept by key in SQLite: the mirrors of the source tables and views' state.

A :class:`KeyedTable` holds rows of one Arrow schema in a SQLite table with indexes on
the column sets it is looked up by, so that a batch reads and writes only the rows its
changes touch: looking up 1,000 keys in a 10,000,000-row mirror costs about what it
costs in a 10,000-row one. Values are stored as :mod:`.codec` describes.

:class:`Mirror` is a source table at the applied watermark: its declared columns plus
``_key``, the change log's row key (the row's identity; NULL for snapshot rows that came
without one, which are then found by primary key).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.errors import StateError
from deltamv.state.codec import from_rows, normalise_floats, sql_type, to_rows

__all__ = ["KEY", "ROWID", "KeyedTable", "Mirror", "descending", "mirror_schema"]

KEY = "_key"
ROWID = "__rowid"
COUNT = "count"  # of Mirror.counts
_LOOKUP_CHUNK = 50_000
# An insert of this many rows or more into an empty table builds the table's indexes after
# the rows are in (KeyedTable.indexes_after).
_INDEXES_AFTER = 10_000


def quote_name(name: str) -> str:
    """A table or column name quoted for SQLite."""
    return '"' + name.replace('"', '""') + '"'


_DESC = "\0desc"  # (no SQL name holds a NUL)


def descending(column: str) -> str:
    """``column`` as a column of an index in descending order (:meth:`KeyedTable.
    ensure_index`), so that a query ordered by it descending and by the next ascending
    reads the index in one direction."""
    return column + _DESC


def _index_column(column: str) -> str:
    if column.endswith(_DESC):
        return quote_name(column[: -len(_DESC)]) + " DESC"
    return quote_name(column)


class KeyedTable:
    """One SQLite table of typed rows, looked up through indexes (see the module doc)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        name: str,
        schema: pa.Schema,
        *,
        indexes: Sequence[Sequence[str]] = (),
    ) -> None:
        self.db = db
        self.name = name
        self.schema = schema
        self._indexes: list[tuple[tuple[str, ...], bool, bool]] = []
        self._unindexed = False  # inside indexes_after
        self._create()
        for index in indexes:
            self.ensure_index(index)

    def _create(self) -> None:
        columns = ", ".join(f"{quote_name(f.name)} {sql_type(f.type)}" for f in self.schema)
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {quote_name(self.name)} ({columns})")

    def recreate(self) -> None:
        """Empty, with the columns of this table's schema and its indexes: a table kept
        from an earlier schema (a view's state, planned anew) takes the current one."""
        self.db.execute(f"DROP TABLE IF EXISTS {quote_name(self.name)}")
        self._create()
        for columns, non_null, unique in self._indexes:
            self._create_index(columns, non_null, unique)

    def ensure_index(
        self, columns: Sequence[str], *, non_null: bool = False, unique: bool = False
    ) -> None:
        """An index on ``columns`` (created once; building it reads the table once).
        ``non_null``: only of the rows where no column of it is NULL (the index is then
        used for lookups by equality, never for ``IS NULL``). ``unique``: no two rows
        with equal values in all of them (NULLs differ); a write that would make two
        raises ``sqlite3.IntegrityError``."""
        key = (tuple(columns), non_null, unique)
        if not unique and (tuple(columns), non_null, True) in self._indexes:
            return  # (the unique one serves the lookups too)
        if key not in self._indexes:
            self._indexes.append(key)
        self._create_index(columns, non_null, unique)

    def _create_index(self, columns: Sequence[str], non_null: bool, unique: bool) -> None:
        name = self._index_name(columns, non_null, unique)
        self.db.execute(
            f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS {quote_name(name)}"
            f" ON {quote_name(self.name)} ({', '.join(_index_column(c) for c in columns)})"
            + (
                " WHERE " + " AND ".join(f"{quote_name(c)} IS NOT NULL" for c in columns)
                if non_null
                else ""
            )
        )

    def drop_index(
        self, columns: Sequence[str], *, non_null: bool = False, unique: bool = False
    ) -> None:
        key = (tuple(columns), non_null, unique)
        if key in self._indexes:
            self._indexes.remove(key)
        name = self._index_name(columns, non_null, unique)
        self.db.execute(f"DROP INDEX IF EXISTS {quote_name(name)}")

    def _index_name(self, columns: Sequence[str], non_null: bool, unique: bool) -> str:
        text = "\0".join(columns) + ("\0non-null" if non_null else "")
        text += "\0unique" if unique else ""
        return f"{self.name}__{hashlib.blake2b(text.encode(), digest_size=6).hexdigest()}"

    def count(self) -> int:
        return int(self.db.execute(f"SELECT COUNT(*) FROM {quote_name(self.name)}").fetchone()[0])

    def last_rowid(self) -> int:
        """The highest rowid (0 for an empty table): rows inserted later have higher ones."""
        row = self.db.execute(f"SELECT max(rowid) FROM {quote_name(self.name)}").fetchone()
        return int(row[0] or 0)

    def is_empty(self) -> bool:
        """No rows (one step of the table, where ``count`` reads it all)."""
        return self.db.execute(f"SELECT 1 FROM {quote_name(self.name)} LIMIT 1").fetchone() is None

    def insert(self, rows: pa.Table) -> None:
        """Add ``rows``. A unique index that two rows would share raises
        ``sqlite3.IntegrityError`` (at the end, where the indexes are built after)."""
        if rows.num_rows == 0:
            return
        if not self._unindexed and rows.num_rows >= _INDEXES_AFTER and self.is_empty():
            with self.indexes_after():
                self._insert(rows)
        else:
            self._insert(rows)

    @contextlib.contextmanager
    def indexes_after(self) -> Iterator[None]:
        """Rows inserted inside go into the table without its indexes, which are built
        once at the end, all inside the caller's transaction. Building an index from the
        rows at once costs less than keeping it up at every insert: for a million rows
        here, 2.2-2.5x less time with keys in random order, 1.5-1.8x in key order
        (benchmarks/results/2026-11-28-s44-indexes-after/). Nothing may look rows up
        inside. A unique index over two equal values raises ``sqlite3.IntegrityError``
        at the end; after any error the caller's transaction must be rolled back, which
        brings the indexes back."""
        if self._unindexed:  # (inside another: that one builds them)
            yield
            return
        for columns, non_null, unique in self._indexes:
            self.db.execute(
                f"DROP INDEX IF EXISTS {quote_name(self._index_name(columns, non_null, unique))}"
            )
        self._unindexed = True
        try:
            yield
        finally:
            self._unindexed = False
        for columns, non_null, unique in self._indexes:
            self._create_index(columns, non_null, unique)

    def repeated(self, columns: Sequence[str]) -> pa.Table:
        """One row's ``columns`` where another row holds the same values (NULLs never
        equal), or no row: what makes a unique index on ``columns`` impossible."""
        names = ", ".join(quote_name(c) for c in columns)
        valid = " AND ".join(f"{quote_name(c)} IS NOT NULL" for c in columns)
        rows = self.db.execute(
            f"SELECT {names} FROM {quote_name(self.name)} WHERE {valid}"
            f" GROUP BY {names} HAVING count(*) > 1 LIMIT 1"
        ).fetchall()
        return from_rows(rows, pa.schema([self.schema.field(c) for c in columns]))

    def _insert(self, rows: pa.Table) -> None:
        names = self.schema.names
        marks = ", ".join("?" for _ in names)
        cols = ", ".join(quote_name(n) for n in names)
        for offset in range(0, rows.num_rows, _LOOKUP_CHUNK):
            part = rows.slice(offset, _LOOKUP_CHUNK)
            self.db.executemany(
                f"INSERT INTO {quote_name(self.name)} ({cols}) VALUES ({marks})",
                to_rows(part, names),
            )

    def update(self, rows: pa.Table) -> None:
        """Rewrite rows in place: ``rows`` holds ``__rowid`` and the columns to set."""
        columns = [c for c in rows.column_names if c != ROWID]
        if rows.num_rows == 0 or not columns:
            return
        sets = ", ".join(f"{quote_name(c)} = ?" for c in columns)
        for offset in range(0, rows.num_rows, _LOOKUP_CHUNK):
            part = rows.slice(offset, _LOOKUP_CHUNK)
            self.db.executemany(
                f"UPDATE {quote_name(self.name)} SET {sets} WHERE rowid = ?",
                to_rows(part, [*columns, ROWID]),
            )

    def delete(self, rowids: Sequence[int]) -> None:
        self.db.executemany(
            f"DELETE FROM {quote_name(self.name)} WHERE rowid = ?", [(r,) for r in rowids]
        )

    def clear(self) -> None:
        self.db.execute(f"DELETE FROM {quote_name(self.name)}")

    def drop(self) -> None:
        self.db.execute(f"DROP TABLE IF EXISTS {quote_name(self.name)}")

    def lookup(
        self, columns: Sequence[str], keys: pa.Table, *, null_safe: bool | Sequence[bool] = False
    ) -> pa.Table:
        """The rows whose ``columns`` equal one of the rows of ``keys`` (same column names),
        with their ``__rowid``. A NULL in a key column matches nothing unless that column
        is ``null_safe`` (``<=>``; one flag for all columns, or one per column). Floats
        match as SQL compares them: -0.0 = 0.0, and NaN = NaN for the two standard NaNs
        (a NaN with another payload matches only its own bits).
        Uses the index on ``columns`` (create it with :meth:`ensure_index`)."""
        out_schema = pa.schema([(ROWID, pa.int64()), *self.schema])
        parts = list(self._by_nulls(columns, keys, null_safe, self._lookup_exact))
        if not parts:
            return out_schema.empty_table()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def counts(
        self,
        columns: Sequence[str],
        keys: pa.Table,
        *,
        null_safe: bool | Sequence[bool] = False,
        upto: int = 1,
    ) -> pa.Table:
        """For the rows of ``keys`` that :meth:`lookup` would find rows for, how many, up
        to ``upto`` (column ``count``); distinct, with their floats normalised (-0.0 as
        0.0, one NaN). Reads at most ``upto`` entries of the index on ``columns`` a key,
        however many rows hold it."""
        columns = list(columns)
        parts = list(self._by_nulls(columns, keys, null_safe,
                                    functools.partial(self._counts_exact, upto=upto)))  # fmt: skip
        schema = keys.select(columns).schema.append(pa.field(COUNT, pa.int64()))
        if not parts:
            return schema.empty_table()
        found = normalise_floats(pa.concat_tables(parts).cast(schema), columns)
        # a float's two zeros (or NaNs) are counted apart: their sum is at least the
        # smaller of the count and ``upto`` (what a caller may rely on) and at most it
        summed = found.group_by(columns).aggregate([(COUNT, "sum")])
        return summed.rename_columns([*columns, COUNT]).select([*columns, COUNT])

    def _by_nulls(
        self,
        columns: Sequence[str],
        keys: pa.Table,
        null_safe: bool | Sequence[bool],
        exact: Callable[[Sequence[str], Sequence[str], pa.Table], Iterator[pa.Table]],
    ) -> Iterator[pa.Table]:
        """``exact(equal, null, keys)`` for each pattern of NULLs among ``keys``' columns
        that can match: SQLite uses an index for "c = ?" and for "c IS NULL", but not for
        "c IS ?"."""
        columns = list(columns)
        flags = [null_safe] * len(columns) if isinstance(null_safe, bool) else list(null_safe)
        if len(flags) != len(columns):
            raise ValueError(f"{len(flags)} null-safety flags for {len(columns)} key columns")
        safe = dict(zip(columns, flags, strict=True))
        if keys.num_rows == 0 or self.is_empty():  # a first batch looks up into nothing
            return
        keys = normalise_floats(keys.select(columns), columns)
        if keys.num_rows > 1:
            keys = keys.group_by(columns).aggregate([])
        keys = _other_zeros_and_nans(keys, columns)
        for equal, nulls, chosen in _null_patterns(keys, columns):
            if all(safe[c] for c in nulls):
                yield from exact(equal, nulls, chosen)

    def _counts_exact(
        self, equal: Sequence[str], null: Sequence[str], keys: pa.Table, *, upto: int
    ) -> Iterator[pa.Table]:
        where = [f"t.{quote_name(c)} IS NULL" for c in null]
        table = quote_name(self.name)
        schema = keys.schema.append(pa.field(COUNT, pa.int64()))
        if not equal:
            (n,) = self.db.execute(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} t WHERE {' AND '.join(where)}"
                " LIMIT ?)", [upto]).fetchone()  # fmt: skip
            if n:
                yield keys.slice(0, 1).append_column(schema.field(COUNT), pa.array([n], pa.int64()))
            return
        temp, marks = self._key_table(keys, equal)
        on = " AND ".join([*(f"t.{quote_name(c)} = k.k{i}" for i, c in enumerate(equal)), *where])
        names = ", ".join(f"k{i}" for i in range(len(equal)))
        counted = f"(SELECT COUNT(*) FROM (SELECT 1 FROM {table} t WHERE {on} LIMIT ?)) AS n"
        for _ in self._chunks(keys, equal, temp, marks):
            rows = self.db.execute(
                f"SELECT {names}, n FROM (SELECT {names}, {counted} FROM {temp} k) WHERE n > 0",
                [upto],
            ).fetchall()
            found = from_rows(rows, pa.schema([*(keys.schema.field(c) for c in equal),
                                               schema.field(COUNT)]))  # fmt: skip
            for c in null:
                field = keys.schema.field(c)
                found = found.append_column(field, pa.nulls(len(rows), field.type))
            yield found.select(schema.names)

    def _lookup_exact(
        self, equal: Sequence[str], null: Sequence[str], keys: pa.Table
    ) -> Iterator[pa.Table]:
        out_schema = pa.schema([(ROWID, pa.int64()), *self.schema])
        cols = ", ".join(f"t.{quote_name(n)}" for n in self.schema.names)
        where = [f"t.{quote_name(c)} IS NULL" for c in null]
        if not equal:
            sql = (
                f"SELECT t.rowid, {cols} FROM {quote_name(self.name)} t WHERE {' AND '.join(where)}"
            )
            yield from_rows(self.db.execute(sql).fetchall(), out_schema)
            return
        temp, marks = self._key_table(keys, equal)
        on = " AND ".join([*(f"t.{quote_name(c)} = k.k{i}" for i, c in enumerate(equal)), *where])
        for _ in self._chunks(keys, equal, temp, marks):
            rows = self.db.execute(
                f"SELECT t.rowid, {cols} FROM {temp} k CROSS JOIN {quote_name(self.name)} t ON {on}"
            ).fetchall()
            yield from_rows(rows, out_schema)

    def _key_table(self, keys: pa.Table, equal: Sequence[str]) -> tuple[str, str]:
        """A temporary table ``k0, k1, ...`` for keys of ``equal``'s types, and its marks."""
        types = [sql_type(keys.schema.field(c).type) for c in equal]
        temp = "_keys_" + "_".join(t.lower() for t in types)
        defs = ", ".join(f"k{i} {t}" for i, t in enumerate(types))
        self.db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {temp} ({defs})")
        return temp, ", ".join("?" for _ in equal)

    def _chunks(
        self, keys: pa.Table, equal: Sequence[str], temp: str, marks: str
    ) -> Iterator[None]:
        """Fills ``temp`` with ``keys``' ``equal`` columns, a chunk at a time, in the index's
        order: successive probes walk its pages forward instead of jumping between them at
        random (a fifth less time for 10,000 keys of 10M rows)."""
        keys = keys.sort_by([(c, "ascending") for c in equal])
        for offset in range(0, keys.num_rows, _LOOKUP_CHUNK):
            part = keys.slice(offset, _LOOKUP_CHUNK)
            self.db.execute(f"DELETE FROM {temp}")
            self.db.executemany(f"INSERT INTO {temp} VALUES ({marks})", to_rows(part, list(equal)))
            yield

    def first(self, columns: Sequence[str], key: pa.Table, order: str, *, limit: int,
              descending: bool = False) -> pa.Table:  # fmt: skip
        """The first ``limit`` rows by ``order`` (last, if ``descending``) among those
        whose ``columns`` equal ``key``'s one row, NULL matching NULL. Uses the index on
        ``columns`` and ``order`` (create it with :meth:`ensure_index`)."""
        values = to_rows(normalise_floats(key.select(columns), columns))[0] if columns else ()
        where = [f"{quote_name(c)} IS NULL" if v is None else f"{quote_name(c)} = ?"
                 for c, v in zip(columns, values, strict=True)]  # fmt: skip
        cols = ", ".join(quote_name(n) for n in self.schema.names)
        rows = self.db.execute(
            f"SELECT rowid, {cols} FROM {quote_name(self.name)}"
            f"{' WHERE ' + ' AND '.join(where) if where else ''}"
            f" ORDER BY {quote_name(order)}{' DESC' if descending else ''} LIMIT ?",
            [*(v for v in values if v is not None), limit],
        ).fetchall()
        return from_rows(rows, pa.schema([(ROWID, pa.int64()), *self.schema]))

    def top(self, columns: Sequence[str], keys: pa.Table, limits: Sequence[int],
            order: Sequence[tuple[str, bool, bool]], *, ties: bool) -> pa.Table:  # fmt: skip
        """For each row of ``keys``, its first rows by ``order`` (``(column, descending,
        nulls first)`` each) among those whose ``columns`` equal it (NULL matching NULL):
        at least as many as its ``limits`` entry (or all), each with every row ordered
        before it; with ``ties``, also every row tied in ``order`` with the last of them.
        The columns of ``order`` must be stored in their order (integers, dates,
        timestamps, booleans, strings: not decimals or floats). Keys with limits of one
        size go in one query; an index on ``columns`` then ``order``'s columns, each in
        its direction (:func:`descending`), reads only the rows returned."""
        columns = list(columns)
        out_schema = pa.schema([(ROWID, pa.int64()), *self.schema])
        wanted = keys.select(columns).append_column("_limit", pa.array(limits, pa.int64()))
        wanted = wanted.filter(pc.greater(wanted.column("_limit"), 0))
        if wanted.num_rows == 0 or self.is_empty():
            return out_schema.empty_table()
        # keys by the size of their limit (a power of two): each group reads up to its
        # largest limit a key, so one key's large limit does not raise the others'
        sizes = np.frexp(wanted.column("_limit").to_numpy().astype(np.float64))[1]
        parts = []
        for bucket in np.unique(sizes):
            group = wanted.filter(pa.array(sizes == bucket))
            limit = int(pc.max(group.column("_limit")).as_py())
            for equal, nulls, chosen in _null_patterns(group, columns):
                parts.append(self._top_exact(equal, nulls, chosen, limit, order, ties))
        return from_rows([r for part in parts for r in part], out_schema)

    def _top_exact(self, equal: Sequence[str], null: Sequence[str], keys: pa.Table, limit: int,
                   order: Sequence[tuple[str, bool, bool]], ties: bool) -> list[Any]:  # fmt: skip
        """:meth:`top` for keys with no NULL in ``equal`` and only NULLs in ``null``:
        one statement a chunk of keys, a correlated query each (and one more for the
        ties: the rows whose order columns are those of the ``limit``-th row)."""
        cols = ", ".join(f"t.{quote_name(n)}" for n in self.schema.names)
        table = quote_name(self.name)
        by = ", ".join(f"{quote_name(c)} {'DESC' if desc else 'ASC'}"
                       f" NULLS {'FIRST' if first else 'LAST'}" for c, desc, first in order)  # fmt: skip
        inner = " AND ".join([*(f"{quote_name(c)} = k.k{i}" for i, c in enumerate(equal)),
                              *(f"{quote_name(c)} IS NULL" for c in null)]) or "TRUE"  # fmt: skip
        outer = " AND ".join([*(f"t.{quote_name(c)} = k.k{i}" for i, c in enumerate(equal)),
                              *(f"t.{quote_name(c)} IS NULL" for c in null)]) or "TRUE"  # fmt: skip
        statements = [(f"SELECT t.rowid, {cols} FROM {{keys}} k CROSS JOIN {table} t"
                       f" WHERE t.rowid IN (SELECT rowid FROM {table} WHERE {inner}"
                       f" ORDER BY {by} LIMIT ?)", limit)]  # fmt: skip
        if ties and order:
            # (a partition of fewer rows has no limit-th row: what this finds then is of
            # its rows, all found already)
            tuple_of = ", ".join(quote_name(c) for c, _, _ in order)
            statements.append((
                f"SELECT t.rowid, {cols} FROM {{keys}} k CROSS JOIN {table} t WHERE {outer}"
                f" AND ({', '.join(f't.{quote_name(c)}' for c, _, _ in order)}) IS"
                f" (SELECT {tuple_of} FROM {table} WHERE {inner} ORDER BY {by}"
                " LIMIT 1 OFFSET ?)", limit - 1))  # fmt: skip
        rows: list[Any] = []
        if equal:
            temp, marks = self._key_table(keys, equal)
            for _ in self._chunks(keys, equal, temp, marks):
                for sql, arg in statements:
                    rows += self.db.execute(sql.format(keys=temp), [arg]).fetchall()
        else:
            for sql, arg in statements:
                rows += self.db.execute(sql.format(keys="(SELECT 1)"), [arg]).fetchall()
        unique: dict[int, Any] = {}
        for r in rows:
            unique.setdefault(r[0], r)
        return list(unique.values())

    def scan(
        self, *, batch_rows: int = _LOOKUP_CHUNK, with_rowid: bool = False
    ) -> Iterator[pa.Table]:
        """Every row, in chunks (bounded memory)."""
        schema = pa.schema([(ROWID, pa.int64()), *self.schema]) if with_rowid else self.schema
        cols = ", ".join(quote_name(n) for n in self.schema.names)
        prefix = "rowid, " if with_rowid else ""
        cursor = self.db.execute(f"SELECT {prefix}{cols} FROM {quote_name(self.name)}")
        while True:
            rows = cursor.fetchmany(batch_rows)
            if not rows:
                return
            yield from_rows(rows, schema)


def _null_patterns(
    keys: pa.Table, columns: Sequence[str]
) -> Iterator[tuple[list[str], list[str], pa.Table]]:
    """``keys`` split by which of ``columns`` hold NULL: per pattern, the columns holding
    values, those holding NULLs, and its rows (all of ``keys``' columns). SQLite uses an
    index for "c = ?" and for "c IS NULL", but not for "c IS ?"."""
    masks = pa.table({c: pc.is_null(keys.column(c)) for c in columns})
    for pattern in masks.group_by(list(columns)).aggregate([]).to_pylist():
        chosen = keys
        for c in columns:
            test = pc.is_null(chosen.column(c)) if pattern[c] else pc.is_valid(chosen.column(c))
            chosen = chosen.filter(test)
        yield [c for c in columns if not pattern[c]], [c for c in columns if pattern[c]], chosen


_NEGATIVE_NAN = pa.array([-0x0008000000000000], pa.int64()).view(pa.float64())[0]


def _other_zeros_and_nans(keys: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Normalised ``keys`` plus, for each floating-point column, the same keys with -0.0
    for 0.0 and the negative NaN for NaN. Floats are stored by their bits (``codec``),
    while a lookup is by SQL equality, Spark's for join keys: -0.0 = 0.0, NaN = NaN."""
    for name in columns:
        column = keys.column(name)
        if not pa.types.is_floating(column.type):
            continue
        index = keys.schema.get_field_index(name)
        zeros = keys.filter(pc.equal(column, pa.scalar(0.0, column.type)))
        nans = keys.filter(pc.is_nan(column))
        others = [
            part.set_column(index, name, pa.array([value] * part.num_rows, column.type))
            for part, value in ((zeros, -0.0), (nans, _NEGATIVE_NAN.as_py()))
            if part.num_rows
        ]
        if others:
            keys = pa.concat_tables([keys, *others])
    return keys


def mirror_schema(columns: pa.Schema) -> pa.Schema:
    """A mirror's columns: ``_key`` then the table's declared columns (all nullable)."""
    return pa.schema([pa.field(KEY, pa.string()), *(f.with_nullable(True) for f in columns)])


def mirror_table(table: str) -> str:
    """The name of ``table``'s mirror in the state file."""
    return f"m_{table}"


class Mirror(KeyedTable):
    """A source table at the applied watermark (see the module doc).

    The index on ``_key`` holds only rows with a key: a snapshot's rows (none) stay out of
    it until a change gives them one, so loading a snapshot builds one index, not two."""

    def __init__(
        self, db: sqlite3.Connection, table: str, columns: pa.Schema, primary_key: Sequence[str]
    ) -> None:
        super().__init__(db, mirror_table(table), mirror_schema(columns))
        self.table = table
        self.primary_key = tuple(primary_key)
        self.drop_index(primary_key)  # a state written before the index was unique
        try:
            self.ensure_index(primary_key, unique=True)
        except sqlite3.IntegrityError:
            raise StateError(
                f"table {table}: the job's state holds two rows with one primary key (written"
                " before deltamv refused such changes); start the job with a new checkpoint"
                " and new output paths"
            ) from None
        self.drop_index([KEY])  # a state written before the index left the NULLs out
        self.ensure_index([KEY], non_null=True)
        self._keyless_left = True  # False once no keyless row is left: none comes back

    def all_keyed(self) -> None:
        """Every row has a key, now and later (no snapshot without keys is loaded)."""
        self._keyless_left = False

    def has_keyless_rows(self) -> bool:
        """Whether some row has no key (a snapshot's row no change has touched yet). Only
        a snapshot's load adds such rows, so once none is left the answer is kept (the
        question reads the table until it finds one)."""
        if self._keyless_left:
            sql = f"SELECT 1 FROM {quote_name(self.name)} WHERE {quote_name(KEY)} IS NULL LIMIT 1"
            self._keyless_left = self.db.execute(sql).fetchone() is not None
        return self._keyless_left
