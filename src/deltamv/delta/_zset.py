"""Z-sets of rows: consolidation and application to a multiset of rows, columnar.

A Z-set is a table of rows with an int64 weight: +n inserts n copies of the row, -n
removes n copies. Rows are equal when every column is equal, with NULL equal to NULL,
NaN equal to NaN (whatever its bits) and -0.0 equal to 0.0 (Spark's equality for
grouping). Consolidation sums the weights of rows that are the same, -0.0 apart from
0.0 (a row changed from one to the other is changed), and keeps each distinct row once,
with the bits of its first occurrence; rows whose weights sum to 0 disappear. A removal
takes a row equal to the one it names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.delta.files import conform_table
from deltamv.errors import DeltaMVError, StateError

WEIGHT = "__w"
_INDEX = "__i"


@dataclass(frozen=True, eq=False)
class ZSet:
    """Distinct rows (in the table's schema) and their non-zero weights."""

    rows: pa.Table
    weights: np.ndarray

    def __len__(self) -> int:
        return self.rows.num_rows

    def take(self, indices: np.ndarray) -> ZSet:
        return ZSet(self.rows.take(pa.array(indices, pa.int64())), self.weights[indices])

    def expanded(self) -> pa.Table:
        """Each row repeated by its (positive) weight."""
        return self.rows.take(pa.array(np.repeat(np.arange(len(self)), self.weights)))


def empty_zset(schema: pa.Schema) -> ZSet:
    return ZSet(schema.empty_table(), np.zeros(0, np.int64))


def consolidate(rows: pa.Table, schema: pa.Schema) -> ZSet:
    """Sum the weights of equal rows; drop rows whose weights cancel.

    ``rows`` holds the columns of ``schema`` (by name, safely cast) and the int64
    weight column ``__w`` (no NULLs).
    """
    if WEIGHT not in rows.column_names:
        raise DeltaMVError(
            f"a change needs the weight column {WEIGHT!r}; it has {rows.column_names}"
        )
    weights = rows.column(WEIGHT)
    if not pa.types.is_integer(weights.type):
        raise DeltaMVError(f"the weight column {WEIGHT!r} must be int64, not {weights.type}")
    if weights.null_count:
        raise DeltaMVError(f"the weight column {WEIGHT!r} has {weights.null_count} NULLs")
    data = conform_table(rows, schema)
    w = weights.cast(pa.int64()).to_numpy()
    if data.num_rows == 0:
        return empty_zset(schema)
    first, sums = _group(data, w, signed_zeros=True)
    keep = sums != 0
    return ZSet(data.take(pa.array(first[keep])), sums[keep])


def apply(existing: pa.Table, change: ZSet, *, key: str, table: str) -> pa.Table:
    """``existing`` (a multiset of rows) with ``change`` applied; order not kept.

    Rows of ``existing`` that share no ``key`` value with a removed row pass through
    untouched. StateError when a row is removed more often than ``existing`` holds it.
    """
    adds, removes = split(change)
    kept, owed = remove_owed(existing, removes, -removes.weights, key=key)
    check_nothing_owed(removes, owed, table=table)
    return pa.concat_tables([kept, adds.expanded()]) if len(adds) else kept


def split(change: ZSet) -> tuple[ZSet, ZSet]:
    """(the rows added, the rows removed) of a change."""
    negative = change.weights < 0
    return change.take(np.flatnonzero(~negative)), change.take(np.flatnonzero(negative))


def remove_owed(
    existing: pa.Table, removes: ZSet, owed: np.ndarray, *, key: str
) -> tuple[pa.Table, np.ndarray]:
    """Remove from ``existing`` up to ``owed[i]`` copies of each row ``removes.rows[i]``.

    Returns what is left and the copies still owed (held by other files, or by none).
    Rows sharing no ``key`` value with a row still owed pass through untouched.
    """
    live = np.flatnonzero(owed > 0)
    if len(live) == 0:
        return existing, owed
    rows = removes.rows.take(pa.array(live, pa.int64()))
    mask = pc.is_in(
        normalized(existing.column(key)),
        value_set=pc.unique(normalized(rows.column(key))),
        skip_nulls=False,
    )
    candidates = existing.filter(mask)
    held = candidates.num_rows
    both = pa.concat_tables([candidates, rows])
    first, last, net = _group(
        both, np.concatenate([np.ones(held, np.int64), -owed[live]]), last=True
    )
    # A group's last row is its removed row (they come after the candidates), if any.
    removed = last >= held
    still = owed.copy()
    still[live[last[removed] - held]] = np.maximum(-net[removed], 0)
    keep = net > 0
    kept = both.take(pa.array(np.repeat(first[keep], net[keep])))
    return pa.concat_tables([existing.filter(pc.invert(mask)), kept]), still


def check_nothing_owed(removes: ZSet, owed: np.ndarray, *, table: str) -> None:
    """StateError naming a row removed more often than the table held it, if any."""
    if not owed.any():
        return
    bad = int(np.flatnonzero(owed > 0)[0])
    raise StateError(
        f"table {table} does not hold a row the job removes"
        f" ({sample_row(removes.rows, bad)}, {int(owed[bad])} more copies removed than held):"
        " it was changed by something else, or the job's state is damaged"
    )


def sample_row(rows: pa.Table, index: int, limit: int = 300) -> str:
    """One row as compact JSON-ish text for an error message, cut at ``limit``."""
    row = rows.slice(index, 1).to_pylist()[0]
    text = json.dumps(row, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def normalized(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``column`` with every NaN the same NaN and -0.0 as 0.0, for hashing; others as is."""
    if not pa.types.is_floating(column.type):
        return column
    # x + 0.0 is 0.0 for x = -0.0 and leaves every other value alone.
    plus = pc.add(column, pa.scalar(0.0, column.type))
    return pc.if_else(pc.is_nan(plus), pa.scalar(float("nan"), column.type), plus)


def _group(
    rows: pa.Table, weights: np.ndarray, *, last: bool = False, signed_zeros: bool = False
) -> tuple[np.ndarray, ...]:
    """Per group of equal rows (with ``signed_zeros``, -0.0 apart from 0.0): the index of
    its first row (and, with ``last``, of its last row) and the sum of its weights."""
    keys = {
        f"k{i}": _hashable(rows.column(i), signed_zeros=signed_zeros)
        for i in range(rows.num_columns)
    }
    keyed = pa.table(
        {
            **keys,
            _INDEX: pa.array(np.arange(rows.num_rows, dtype=np.int64)),
            WEIGHT: pa.array(weights, pa.int64()),
        }
    )
    aggregates = [(WEIGHT, "sum"), (_INDEX, "min")] + ([(_INDEX, "max")] if last else [])
    grouped = keyed.group_by(list(keys), use_threads=False).aggregate(aggregates)
    first = grouped.column(f"{_INDEX}_min").to_numpy()
    sums = grouped.column(f"{WEIGHT}_sum").to_numpy()
    if last:
        return first, grouped.column(f"{_INDEX}_max").to_numpy(), sums
    return first, sums


def _hashable(column: pa.ChunkedArray, *, signed_zeros: bool) -> pa.ChunkedArray | pa.Array:
    t = column.type
    if pa.types.is_nested(t):
        return _nested_ids(column)
    if signed_zeros and pa.types.is_floating(t):  # every NaN one NaN, each zero its bits
        one_nan = pc.if_else(pc.is_nan(column), pa.scalar(float("nan"), t), column)
        bits = pa.int32() if pa.types.is_float32(t) else pa.int64()
        return pa.chunked_array(one_nan).combine_chunks().view(bits)
    return normalized(column)


def _nested_ids(column: pa.ChunkedArray) -> pa.Array:
    """Equal ids for equal nested values (Arrow cannot group by lists, maps, structs)."""
    import duckdb

    data = pa.table({"v": column, "i": pa.array(np.arange(len(column), dtype=np.int64))})
    con = duckdb.connect()
    try:
        con.register("data", data)
        ranked = con.sql(
            "SELECT dense_rank() OVER (ORDER BY v NULLS FIRST) AS r FROM data ORDER BY i"
        ).to_arrow_table()
    finally:
        con.close()
    return ranked.column("r").combine_chunks().cast(pa.int64())
