"""A sink fed random Z-sets holds, at every version, what a multiset model holds."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import tempfile
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltamv.delta import Delta, NoChange, Replace, TableSink
from deltamv.delta.layout import dense_ranks

from ._tables import bag, canonical, current_files, read_version

TARGET = 3
_T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 1000, tzinfo=dt.UTC)
LONG = "k" * 40  # longer than the 32-character prefix Delta statistics keep

KEYS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int": (pa.int64(), [None, -5, 0, 1, 2, 3, 10, 2**40]),
    "long-string": (pa.string(), [None, "", "a", f"{LONG}a", f"{LONG}b", f"{LONG}b-", "zz"]),
    # microseconds apart inside one millisecond: Delta statistics cannot tell them apart
    "timestamp": (
        pa.timestamp("us", tz="UTC"),
        [None, *(_T0 + dt.timedelta(microseconds=i) for i in (0, 1, 2, 999)), _T0.replace(year=1)],
    ),
    "double": (pa.float64(), [None, float("nan"), float("-inf"), -0.0, 0.0, 1.5, float("inf")]),
    "decimal": (
        pa.decimal128(12, 2),
        [None, *(decimal.Decimal(x) for x in ("-1.00", "0.00", "0.01", "9999999999.99"))],
    ),
}


def _schema(key: str) -> pa.Schema:
    return pa.schema(
        [
            ("k", KEYS[key][0]),
            ("v", pa.string()),
            ("x", pa.float64()),
            ("d", pa.decimal128(10, 2)),
            ("t", pa.timestamp("us", tz="UTC")),
        ]
    )


def _rows(key: str) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        st.sampled_from(KEYS[key][1]),
        st.sampled_from([None, "a", "b", "c" * 50]),
        st.sampled_from([None, float("nan"), -0.0, 0.0, 2.5]),
        st.sampled_from([None, decimal.Decimal("1.00"), decimal.Decimal("-3.50")]),
        st.sampled_from([None, _T0]),
    )


def _batches(key: str) -> st.SearchStrategy[tuple[list[tuple[Any, ...]], list[Any], bool]]:
    """A pool of 8 rows, then batches of (kind, entries of (pool index, weight)) and restart."""
    entry = st.tuples(st.integers(0, 7), st.integers(-3, 3))
    kind = st.one_of(
        st.tuples(st.just("delta"), st.lists(entry, max_size=12)),
        st.tuples(st.just("none"), st.just([])),
        st.tuples(st.just("replace"), st.lists(st.tuples(st.integers(0, 7), st.just(1)))),
    )
    # restart: a new sink (a job restarted), which learns the ranges from the table
    batch = st.tuples(kind, st.booleans())
    pool = st.lists(_rows(key), min_size=8, max_size=8)
    # stream: rewrite every group of files file by file (the path of large groups)
    return st.tuples(pool, st.lists(batch, min_size=1, max_size=6), st.booleans())


def _table(schema: pa.Schema, rows: list[tuple[Any, ...]], weights: list[int] | None) -> pa.Table:
    columns = {f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)}
    if weights is not None:
        columns["__w"] = pa.array(weights, pa.int64())
    return pa.table(columns)


@pytest.mark.parametrize("key", sorted(KEYS))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_z_sets_match_a_multiset_model_at_every_version(key: str, data: Any) -> None:
    pool, batches, stream = data.draw(_batches(key))
    schema = _schema(key)
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/t"

        def new_sink() -> TableSink:
            sink = TableSink(
                path, schema, layout=["k", "v"], app_id="m", metadata={}, target_file_rows=TARGET
            )
            if stream:
                sink.layout.in_memory_rows = 0
            return sink

        sink = new_sink()
        model: Counter[tuple[object, ...]] = Counter()
        expected: dict[int, Counter[tuple[object, ...]]] = {}
        version: int | None = None
        for batch, ((kind, entries), restart) in enumerate(batches, start=1):
            if restart:
                sink = new_sink()
            change: Delta | Replace | NoChange
            if kind == "none":
                change = NoChange()
            elif kind == "replace":
                rows = [pool[i] for i, _ in entries]
                change = Replace(_table(schema, rows, None))
                model = bag(change.data)  # type: ignore[arg-type]
            else:
                entries = _repaired(pool, entries, model)
                rows = [pool[i] for i, _ in entries]
                change = Delta(_table(schema, rows, [w for _, w in entries]))
                model = Counter(model)  # expected[] keeps the earlier one
                for i, w in entries:
                    model[_canon(pool[i])] += w
                model = +model
            result = sink.commit(batch, change, metadata={}, expected_version=version)
            version = result.version
            expected[version] = model
            assert bag(read_version(path)) == model
            _check_layout(path, schema)
        for v, rows_at_v in expected.items():
            assert bag(read_version(path, v)) == rows_at_v


def _canon(row: tuple[Any, ...]) -> tuple[object, ...]:
    return tuple(canonical(v) for v in row)


def _exact(row: tuple[Any, ...]) -> tuple[object, ...]:
    """A row as the sink consolidates a change: NaN equal to NaN, -0.0 apart from 0.0."""
    return tuple(("zero", math.copysign(1.0, v)) if v == 0.0 and isinstance(v, float)
                 else canonical(v) for v in row)  # fmt: skip


def _repaired(
    pool: list[tuple[Any, ...]], entries: list[tuple[int, int]], model: Counter[tuple[object, ...]]
) -> list[tuple[int, int]]:
    """``entries`` plus inserts where they would remove more copies than the table holds.

    The sink sums a change's weights per row telling -0.0 from 0.0 (a row changed only
    in a zero's sign reaches the table), and matches what is left to remove by equality
    against the rows the table holds: an insert of -0.0 in the same change does not
    cover a removal of 0.0, so each row's removals are covered by copies held before."""
    net: Counter[tuple[object, ...]] = Counter()
    first: dict[tuple[object, ...], int] = {}
    for i, w in entries:
        net[_exact(pool[i])] += w
        first.setdefault(_exact(pool[i]), i)
    held = Counter(model)
    extra = []
    for row, n in net.items():
        if n >= 0:
            continue
        c = _canon(pool[first[row]])
        covered = min(-n, held[c])
        held[c] -= covered
        if -n > covered:
            extra.append((first[row], -n - covered))
    return entries + extra


def _check_layout(path: str, schema: pa.Schema) -> None:
    """Files sorted by (k, v), at most TARGET rows, disjoint k ranges but for long runs."""
    files = [f for f in current_files(path) if f.num_rows]
    for f in files:
        assert f.num_rows <= TARGET
        order = pc.sort_indices(
            f, sort_keys=[("k", "ascending", "at_start"), ("v", "ascending", "at_start")]
        )
        assert order.to_pylist() == list(range(f.num_rows))
    if len(files) < 2:
        return
    keys = pa.concat_arrays([f["k"].combine_chunks() for f in files])
    ranks = dense_ranks(keys)
    counts = Counter(ranks.tolist())
    starts = np.cumsum([0] + [f.num_rows for f in files])
    spans = sorted((ranks[a], ranks[b - 1]) for a, b in itertools.pairwise(starts))
    for (_, high), (low, _) in itertools.pairwise(spans):
        assert high < low or (high == low and counts[high] > TARGET)
