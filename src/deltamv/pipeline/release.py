"""The buffer's release: committed rows at or below the watermark leave, once each.

Committed rows wait in the state's buffer (:class:`~deltamv.state.chunks.Buffer`) until
the global watermark passes their commit ts. A row version is identified by
``(key, start_ts)``: one seen twice (a retransmission, a successor region's re-emission)
is released once. What a batch releases is reduced to each key's *last* change (the one
with the highest commit ts): the outputs are the tables as they stand at the watermark,
so intermediate versions of a row within one batch never reach them. (Within a
transaction each key is written at most once, so a primary-key change is a DELETE of the
old key and a PUT of the new one, two keys: both survive the reduction.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.schema import change_column
from deltamv.state.chunks import Buffer

__all__ = ["Released", "release"]


@dataclass(frozen=True)
class Released:
    """Per table, each released key's last change: ``key, op, commit_ts`` then the
    table's columns (named by ``schema.change_column``) and ``__old_<pk>`` columns.
    ``rows`` counts the row versions released."""

    changes: Mapping[str, pa.Table]
    rows: int


def last_per_key(rows: pa.Table) -> tuple[pa.Table, int]:
    """Each key's last change in ``rows`` (the highest ``commit_ts``, then ``start_ts``;
    of copies of one row version the first that names an old primary key, else the
    first), in key order; and how many distinct row versions ``(key, start_ts)`` ``rows``
    holds.

    One stable sort by ``(key, commit_ts desc, start_ts desc)``: rows of one key are
    adjacent with their last change first, and copies of a version (same key, start_ts
    and commit_ts: a transaction commits at one ts) adjacent in arrival order, those with
    an ``old_value`` first: a successor region's initial scan re-emits a version as
    COMMITTED, perhaps without the ``old_value`` its PREWRITE carried, and a DELETE of a
    snapshot's row is found by it."""
    n = rows.num_rows
    if n == 0:
        return rows.drop_columns(["start_ts"]), 0
    sort_keys = [("key", "ascending"), ("commit_ts", "descending"), ("start_ts", "descending")]
    keys = rows.select(["key", "commit_ts", "start_ts"])
    olds = [c for c in rows.column_names if c.startswith("__old_")]
    if olds:
        named = functools.reduce(pc.or_, [pc.is_valid(rows.column(c)) for c in olds])
        keys = keys.append_column("__named", named)
        sort_keys.append(("__named", "descending"))
    order = pc.sort_indices(keys, sort_keys=sort_keys)
    ranked = rows.select(["key", "commit_ts", "start_ts"]).take(order)
    new_key = _differs(ranked.column("key"))
    new_version = (
        new_key | _differs(ranked.column("start_ts")) | _differs(ranked.column("commit_ts"))
    )
    versions = int(np.count_nonzero(new_version))
    firsts = order.take(pa.array(np.flatnonzero(new_key))).to_numpy()
    if len(firsts) == n and bool(np.all(firsts == np.arange(n))):
        return rows.drop_columns(["start_ts"]), versions  # distinct keys, in order: no copy
    last = rows.take(firsts).drop_columns(["start_ts"])
    return _old_keys_from_first(last, rows, order, new_key, new_version), versions


def _old_keys_from_first(
    last: pa.Table, rows: pa.Table, order: pa.Array, new_key: np.ndarray, new_version: np.ndarray
) -> pa.Table:
    """A key changed more than once in the batch: its last change names, as its old
    primary key (``__old_<pk>``), the one the key's row had before the batch, as its
    first change tells it: that change's ``old_value``, or a PUT's own primary key (a PUT
    replaces the row with its primary key). A snapshot's row, which has no key, is then
    found whatever the changes after the first did to it (a primary key changed under
    the same key, a DELETE naming no ``old_value``). Otherwise the last change's own.
    ``order`` sorts ``rows`` by key, last change first; ``new_key`` and ``new_version``
    mark where a key and a row version start in that order."""
    olds = [c for c in last.column_names if c.startswith("__old_")]
    if not olds:
        return last
    key_starts = np.flatnonzero(new_key)
    key_ends = np.append(key_starts[1:], len(new_key)) - 1
    version_starts = np.flatnonzero(new_version)
    # where each key's first change (the last in this order) starts
    first = version_starts[np.searchsorted(version_starts, key_ends, side="right") - 1]
    several = first != key_starts
    if not several.any():
        return last
    earliest = rows.take(order.take(pa.array(first[several])))
    named = functools.reduce(pc.or_, [pc.is_valid(earliest.column(c)) for c in olds])
    put = pc.equal(earliest.column("op"), "PUT")
    index = np.full(last.num_rows, -1, dtype=np.int64)
    index[np.flatnonzero(several)] = np.arange(earliest.num_rows)
    taken = pa.array(index, mask=index < 0)  # null: a key changed once keeps its own
    use_old = pc.fill_null(named.take(taken), False)
    use_own = pc.fill_null(pc.and_not(put, named).take(taken), False)
    for c in olds:
        own = earliest.column(change_column(c[len("__old_") :])).take(taken)
        told = earliest.column(c).take(taken)
        column = pc.if_else(use_old, told.cast(last.schema.field(c).type), last.column(c))
        column = pc.if_else(use_own, own.cast(last.schema.field(c).type), column)
        last = last.set_column(last.schema.get_field_index(c), c, column)
    return last


def _differs(column: pa.ChunkedArray) -> np.ndarray:
    """Per row of a sorted column: does it differ from the row before (the first: yes)."""
    values = column.combine_chunks()
    head, tail = values.slice(0, len(values) - 1), values.slice(1)
    same = pc.fill_null(pc.equal(tail, head), False)
    same = pc.or_(same, pc.and_(pc.is_null(tail), pc.is_null(head)))
    return np.concatenate([[True], ~same.to_numpy(zero_copy_only=False)])


def release(buffer: Buffer, committed: Mapping[str, pa.Table], *, watermark: int) -> Released:
    """Release every buffered or newly committed row with ``commit_ts <= watermark``; keep
    the others buffered. Runs inside the batch's state transaction."""
    candidates: dict[str, list[pa.Table]] = {t: [rows] for t, rows in committed.items()}
    for table, rows in buffer.take(watermark):
        candidates.setdefault(table, []).append(rows)
    changes: dict[str, pa.Table] = {}
    released_rows = 0
    for table, parts in candidates.items():
        rows = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        due = pc.less_equal(rows.column("commit_ts"), watermark)
        if pc.all(due).as_py():  # the usual case: no copy of what may be a huge table
            out = rows
        else:
            buffer.add(table, rows.filter(pc.invert(due)))
            out = rows.filter(due)
        if out.num_rows == 0:
            continue
        last, versions = last_per_key(out)
        released_rows += versions
        changes[table] = last.select(
            [
                "key",
                "op",
                "commit_ts",
                *[c for c in last.column_names if c not in ("key", "op", "commit_ts")],
            ]
        )
    return Released(changes, released_rows)
