"""Mirrors: each source table kept at the applied watermark, changed key by key.

A mirror (:class:`~deltamv.state.keyed.Mirror`, in the job's state) holds a table's rows
with ``_key``, the change log's row key, which is the row's identity (a DELETE names only
its key). Rows loaded from a snapshot without a key are found by primary key instead: a
PUT replaces the row with its primary key, and a PUT or DELETE with ``old_value`` the row
with the old primary key (for a key changed several times in the batch, the one its
first change named: ``pipeline.release``).

A batch's released changes (each key's last change) turn into the table's change as a
Z-set over its declared columns: the rows they replace with weight -1, the new rows with
weight +1 (an update that changes nothing cancels out). The views are maintained from
these Z-sets; the mirror itself is updated once every view has seen the state before.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.compute import Compute
from deltamv.errors import BadRecordError, DeltaMVError
from deltamv.schema import change_column
from deltamv.state.keyed import KEY, ROWID, Mirror
from deltamv.views.ivm import W, consolidate

__all__ = [
    "BlindDeleteError",
    "DuplicateKeyError",
    "TableChange",
    "apply_change",
    "insert_rows",
    "loading",
    "table_change",
]


@dataclass(frozen=True)
class TableChange:
    """One table's change in a batch."""

    table: str
    delta: pa.Table  # the declared columns + __w; may be empty
    removed: tuple[int, ...]  # mirror rows to delete (rowids)
    inserted: pa.Table  # mirror rows to insert (_key + declared columns)
    cleared: bool = False  # the whole table was emptied first (TRUNCATE)
    # mirror rows rewritten in place (__rowid + the columns to set), one table per set of
    # columns: a PUT of a row the mirror holds under the same primary key and the same key
    # or none (see _in_place)
    updated: tuple[pa.Table, ...] = ()


def table_change(
    compute: Compute, mirror: Mirror, changes: pa.Table, *, truncate: bool = False
) -> TableChange:
    """The change ``changes`` (key, op, then the declared columns and ``__old_<pk>``
    columns; each key once) makes to the mirrored table."""
    names = [f.name for f in mirror.schema if f.name != KEY]
    pk = list(mirror.primary_key)
    if UNCHANGED in changes.column_names:
        changes = _fill_unchanged(compute, mirror, changes, names)
    puts = changes.filter(pc.equal(changes.column("op"), "PUT"))
    puts_by_name = {n: puts.column(change_column(n)) for n in names}
    if truncate:
        old = (
            pa.concat_tables(list(mirror.scan(with_rowid=True))) if not mirror.is_empty() else None
        )
    else:
        old = _replaced_rows(compute, mirror, changes, pa.table({c: puts_by_name[c] for c in pk}))
    inserted = pa.table({KEY: puts.column("key"), **puts_by_name}).cast(mirror.schema)
    parts = []
    if old is not None and old.num_rows:
        minus = old.select(names).append_column(W, pa.array([-1] * old.num_rows, pa.int64()))
        parts.append(minus)
    if inserted.num_rows:
        plus = inserted.select(names).append_column(
            W, pa.array([1] * inserted.num_rows, pa.int64())
        )
        parts.append(plus)
    delta_schema = pa.schema([*(mirror.schema.field(n) for n in names), pa.field(W, pa.int64())])
    delta = (
        pa.concat_tables([p.cast(delta_schema) for p in parts])
        if parts
        else delta_schema.empty_table()
    )
    if len(parts) == 2:  # an update that changes nothing cancels out
        delta = consolidate(compute, delta) or delta_schema.empty_table()
    if old is None or truncate:
        removed = () if old is None else tuple(old.column(ROWID).to_pylist())
        return TableChange(mirror.table, delta, removed, inserted, cleared=truncate)
    removed_rows, updated, inserted = _in_place(old, inserted, pk)
    return TableChange(
        mirror.table, delta, tuple(removed_rows.to_pylist()), inserted, updated=updated
    )


def _in_place(
    old: pa.Table, inserted: pa.Table, pk: list[str]
) -> tuple[pa.Array, tuple[pa.Table, ...], pa.Table]:
    """Pair each new row with the old row it replaces when both have the same primary
    key and the old row has the same key, or none (a snapshot row): that row is
    rewritten in place, so the mirror's index on the primary key is not touched (nor the
    one on the key, when the key stays), where a delete and an insert would change both at
    a random place each. Returns the rowids left to delete, the rows to update
    (``__rowid`` and the columns to set: the other columns, and ``_key`` for a snapshot
    row) and the rows left to insert."""
    if any(pa.types.is_floating(inserted.schema.field(c).type) for c in pk):
        # -0.0 equals 0.0 but is stored apart: such rows are deleted and inserted
        return old.column(ROWID).combine_chunks(), (), inserted
    values = [c for c in inserted.column_names if c != KEY and c not in pk]
    new_at, old_at = _same_key(old, inserted, pk)
    updated = []
    if len(new_at):
        rows = inserted.take(new_at).select(values)
        updated.append(rows.add_column(0, ROWID, old.column(ROWID).take(old_at)))
    new_nk, old_nk = _keyless_by_pk(old, inserted, pk, taken=new_at)
    if len(new_nk):
        rows = inserted.take(new_nk).select([KEY, *values])
        updated.append(rows.add_column(0, ROWID, old.column(ROWID).take(old_nk)))
    if not updated:
        return old.column(ROWID).combine_chunks(), (), inserted
    kept = np.ones(old.num_rows, dtype=bool)
    kept[old_at] = False
    kept[old_nk] = False
    left = np.ones(inserted.num_rows, dtype=bool)
    left[new_at] = False
    left[new_nk] = False
    removed = old.column(ROWID).combine_chunks().filter(pa.array(kept))
    return removed, tuple(updated), inserted.filter(pa.array(left))


_NONE = np.zeros(0, dtype=np.int64)


def _same_key(old: pa.Table, inserted: pa.Table, pk: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Positions (new, old) of rows with the same key and an equal primary key."""
    keys = old.column(KEY).combine_chunks()
    at = pc.index_in(inserted.column(KEY), value_set=keys, skip_nulls=True)  # NULL: no match
    found = pc.is_valid(at)
    if not pc.any(found).as_py():
        return _NONE, _NONE
    taken = old.take(pc.fill_null(at, 0))
    for c in pk:  # a primary key equal in both (NULL is equal to nothing here)
        found = pc.and_(found, pc.fill_null(pc.equal(inserted.column(c), taken.column(c)), False))
    new_at = np.flatnonzero(found.to_numpy(zero_copy_only=False))
    return new_at, pc.filter(at, found).to_numpy(zero_copy_only=False).astype(np.int64)


def _keyless_by_pk(
    old: pa.Table, inserted: pa.Table, pk: list[str], *, taken: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Positions (new, old) of new rows not in ``taken`` and old rows without a key that
    have the same primary key (no NULL in it); a row that would pair twice pairs not at
    all (it is deleted and inserted)."""
    keyless = pc.is_null(old.column(KEY))
    if not pc.any(keyless).as_py():
        return _NONE, _NONE
    free = np.ones(inserted.num_rows, dtype=bool)
    free[taken] = False
    keys = [f"k{i}" for i in range(len(pk))]  # (a key column may be named like __i)
    new = inserted.select(pk).rename_columns(keys)
    new = new.append_column("__i", pa.array(np.arange(inserted.num_rows))).filter(pa.array(free))
    olds = (
        old.select(pk).rename_columns(keys).append_column("__j", pa.array(np.arange(old.num_rows)))
    )
    olds = olds.filter(keyless)
    for c in keys:
        new = new.filter(pc.is_valid(new.column(c)))
        olds = olds.filter(pc.is_valid(olds.column(c)))
    if new.num_rows == 0 or olds.num_rows == 0:
        return _NONE, _NONE
    pairs = new.join(olds, keys, join_type="inner")
    i = pairs.column("__i").to_numpy()
    j = pairs.column("__j").to_numpy()
    once = _counts(i) == 1
    once &= _counts(j) == 1
    return i[once].astype(np.int64), j[once].astype(np.int64)


def _counts(a: np.ndarray) -> np.ndarray:
    """How often each element of ``a`` occurs in ``a``."""
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    return counts[inverse]


def _replaced_rows(
    compute: Compute, mirror: Mirror, changes: pa.Table, by_pk: pa.Table
) -> pa.Table | None:
    """The mirror rows the changes replace: by key, and by primary key for rows that
    came without a key (the PUTs' own, ``by_pk``, and the old one a change names: its
    ``old_value``'s, or for a key changed several times in the batch, the one its first
    change named, see ``pipeline.release``)."""
    pk = by_pk.column_names
    found = [mirror.lookup([KEY], pa.table({KEY: changes.column("key")}))]
    deletes = changes.filter(pc.equal(changes.column("op"), "DELETE"))
    old_cols = [f"__old_{c}" for c in pk]
    if all(c in changes.column_names for c in old_cols):
        named = functools.reduce(pc.or_, [pc.is_valid(changes.column(c)) for c in old_cols])
        old_pk = changes.filter(named).select(old_cols).rename_columns(pk)
        by_pk = pa.concat_tables([by_pk, old_pk.cast(by_pk.schema)])
    _check_blind_deletes(mirror, deletes, old_cols, found[0])
    # Once no row without a key is left, every row is found by its key: a lookup by
    # primary key, as costly, would find no other (unless the upstream's primary key
    # were not unique).
    if by_pk.num_rows and mirror.has_keyless_rows():
        found.append(mirror.lookup(pk, by_pk))
    rows = pa.concat_tables(found)
    if rows.num_rows == 0:
        return None
    # A row found both ways counts once.
    if len(pc.unique(rows.column(ROWID))) == rows.num_rows:
        return rows
    numbered = pa.table(
        {ROWID: rows.column(ROWID), "_n": pa.array(range(rows.num_rows), pa.int64())}
    )
    keep = compute.query(f'SELECT min(_n) AS _n FROM r GROUP BY "{ROWID}" ORDER BY 1', r=numbered)
    return rows.take(keep.column("_n"))


def _check_blind_deletes(
    mirror: Mirror, deletes: pa.Table, old_cols: list[str], by_key: pa.Table
) -> None:
    """A DELETE that names only its key (no whole old primary key: a column of it left
    out counts as none) of a key the mirror does not hold deletes nothing, unless the
    row came from a snapshot without keys: then the job cannot tell which row it
    deletes, and stops rather than keep the row."""
    if deletes.num_rows == 0:
        return
    blind = pc.invert(pc.is_in(deletes.column("key"), value_set=by_key.column(KEY)))
    if all(c in deletes.column_names for c in old_cols):
        partial = functools.reduce(pc.or_, [pc.is_null(deletes.column(c)) for c in old_cols])
        blind = pc.and_(blind, partial)
    unknown = deletes.filter(blind)
    if unknown.num_rows == 0 or not mirror.has_keyless_rows():
        return
    first = unknown.slice(0, 1).to_pylist()[0]
    raise BlindDeleteError(mirror.table, first["key"], first.get("commit_ts"))


class BlindDeleteError(DeltaMVError):
    """A DELETE that names only its key, of a key no row holds, while rows of a snapshot
    without keys are left (:func:`_check_blind_deletes`). :meth:`at` names the record."""

    def __init__(self, table: str, key: str, commit_ts: int | None) -> None:
        self.key = key
        self.commit_ts = commit_ts
        ts = "" if commit_ts is None else f" (commit_ts {commit_ts})"
        self.reason = (
            f"a DELETE of key {key!r}{ts} names no whole old primary key (old_value), and no"
            f" row of table {table} holds that key: the row may have come from the snapshot,"
            " whose rows have no keys, so the job cannot tell which row to delete. Give"
            " DELETEs of snapshot rows their old_value (at least the primary key), or start"
            " the job without a snapshot"
        )
        super().__init__(self.reason)

    def at(self, file: str, line: int) -> BadRecordError:
        """The error at the record that carries the DELETE."""
        return BadRecordError(file, line, self.reason)


UNCHANGED = "_unchanged"  # columns a PostgreSQL update left out (unchanged TOAST values)
PREV_KEY = "_prev_key"  # the key of the row they keep their value from


def _fill_unchanged(
    compute: Compute, mirror: Mirror, changes: pa.Table, names: list[str]
) -> pa.Table:
    """Give the columns an update left out the value of the row it changed (the mirror's
    row with key ``_prev_key``, before the batch)."""
    lengths = pc.list_value_length(changes.column(UNCHANGED))
    if not pc.any(pc.greater(pc.fill_null(lengths, 0), 0)).as_py():
        return changes
    prev = changes.column(PREV_KEY)
    old = mirror.lookup([KEY], pa.table({KEY: pc.drop_null(prev)})).drop_columns([ROWID])
    # r: the changes, o: the old rows, their columns numbered (o0 the key): DuckDB matches
    # names ignoring case, so a column "Key" would meet the change's own key
    old = old.rename_columns([f"o{i}" for i in range(old.num_columns)])
    at = {change_column(n): i + 1 for i, n in enumerate(names)}  # o's position by r's name
    named = {change_column(n): n for n in names}
    given = changes.column_names
    r = changes.rename_columns([f"r{i}" for i in range(len(given))])
    r = r.append_column("rn", pa.array(range(changes.num_rows), pa.int64()))
    unchanged, prev_key, key = (f"r{given.index(c)}" for c in (UNCHANGED, PREV_KEY, "key"))
    select = []
    for i, c in enumerate(given):
        if c not in named:
            select.append(f"r.r{i} AS c{i}")
            continue
        text = named[c].replace("'", "''")
        select.append(
            f"CASE WHEN list_contains(r.{unchanged}, '{text}') THEN o.o{at[c]}"
            f" ELSE r.r{i} END AS c{i}"
        )
    out = compute.query(
        f"SELECT {', '.join(select)} FROM r LEFT JOIN o ON o.o0 = r.{prev_key} ORDER BY r.rn",
        r=r, o=old,
    ).rename_columns(given)  # fmt: skip
    missing = compute.query(
        f"SELECT r.{key} FROM r LEFT JOIN o ON o.o0 = r.{prev_key}"
        f" WHERE len(r.{unchanged}) > 0 AND o.o0 IS NULL LIMIT 1",
        r=r, o=old,
    )  # fmt: skip
    if missing.num_rows:
        from deltamv.errors import StateError

        raise StateError(
            f"table {mirror.table}: an update of key {missing.column(0)[0].as_py()} left columns"
            " unchanged, but the job holds no earlier version of that row"
        )
    return out.cast(changes.schema)


def apply_change(mirror: Mirror, change: TableChange) -> None:
    """Bring the mirror to the state after ``change`` (inside the batch's transaction).
    Raises DuplicateKeyError where a new row's primary key is another row's (the rows
    replaced are gone first, and a row rewritten in place keeps its primary key: so only
    a row inserted can meet one)."""
    if change.cleared:
        mirror.clear()
    else:
        mirror.delete(change.removed)
    for rows in change.updated:
        mirror.update(rows)
    insert_rows(mirror, change.inserted)


def insert_rows(mirror: Mirror, rows: pa.Table) -> None:
    """Insert ``rows``; where one's primary key is held by another row of the mirror or of
    ``rows`` (the mirror's index on it is unique), raise DuplicateKeyError naming both."""
    before = mirror.last_rowid()
    try:
        mirror.insert(rows)
    except sqlite3.IntegrityError:
        raise _duplicate(mirror, rows, before) from None


@contextlib.contextmanager
def loading(mirrors: Iterable[Mirror]) -> Iterator[None]:
    """A first load of ``mirrors`` (a snapshot's rows, inserted in parts with
    :func:`insert_rows`): each builds its indexes once, at the end (``indexes_after``).
    Where two rows hold one primary key, raises DuplicateKeyError naming it, at the end."""
    mirrors = list(mirrors)
    try:
        with contextlib.ExitStack() as stack:
            for mirror in mirrors:
                stack.enter_context(mirror.indexes_after())
            yield
    except sqlite3.IntegrityError:
        for mirror in mirrors:
            twice = mirror.repeated(mirror.primary_key).to_pylist()
            if twice:
                raise DuplicateKeyError(mirror.table, None, None, twice[0]) from None
        raise


def _duplicate(mirror: Mirror, rows: pa.Table, before: int) -> DuplicateKeyError:
    """The rows that share a primary key: two of ``rows``, or one of them and a row the
    mirror held before the insert (rowid up to ``before``; the insert stopped part way,
    inside the batch's transaction, which is rolled back)."""
    pk = list(mirror.primary_key)
    new = rows.select([KEY, *pk]).append_column("__i", pa.array(np.arange(rows.num_rows)))
    for c in pk:  # (NULLs are never equal)
        new = new.filter(pc.is_valid(new.column(c)))
    groups = new.group_by(pk).aggregate([("__i", "min"), ("__i", "max"), ("__i", "count")])
    twice = groups.filter(pc.greater(groups.column("__i_count"), 1))
    if twice.num_rows:
        first, second = (twice.column(f"__i_{f}")[0].as_py() for f in ("min", "max"))
        return DuplicateKeyError(
            mirror.table, rows.column(KEY)[second].as_py(), rows.column(KEY)[first].as_py(),
            {c: rows.column(c)[second].as_py() for c in pk},
        )  # fmt: skip
    held = mirror.lookup(pk, new.select(pk))
    held = held.filter(pc.less_equal(held.column(ROWID), before)).select([KEY, *pk])
    pairs = new.join(held.rename_columns(["__held", *pk]), pk, join_type="inner")
    if pairs.num_rows == 0:  # (not found again: named by its table alone)
        return DuplicateKeyError(mirror.table, None, None, {})
    row = pairs.slice(0, 1).to_pylist()[0]
    return DuplicateKeyError(mirror.table, row[KEY], row["__held"], {c: row[c] for c in pk})


class DuplicateKeyError(DeltaMVError):
    """A row put under one key with the primary key of a row another key holds (or,
    from a snapshot, a second row with one primary key): the upstream's table has one
    row per primary key. :meth:`at` names the record."""

    def __init__(
        self, table: str, key: str | None, other: str | None, primary_key: dict[str, Any]
    ) -> None:
        self.table = table
        self.key = key
        shown = ", ".join(f"{c}={v!r}" for c, v in primary_key.items())
        if key is None and other is None and primary_key:
            self.reason = f"table {table} holds two rows with primary key ({shown})"
        elif key is None and other is None:
            self.reason = f"table {table} holds two rows with one primary key"
        else:
            holder = "a row of the snapshot" if other is None else f"key {other!r}"
            self.reason = (
                f"key {key!r} puts a row of table {table} with primary key ({shown}), which"
                f" {holder} holds: a table has one row per primary key (is a DELETE of the"
                f" other row missing, or tables.{table}.primary_key not the table's?)"
            )
        super().__init__(self.reason)

    def at(self, file: str, line: int | None) -> BadRecordError:
        """The error at the record that carries the change (or the snapshot's file)."""
        return BadRecordError(file, line, self.reason)
