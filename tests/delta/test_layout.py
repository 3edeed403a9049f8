from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltamv.delta import DeltaTableHandle, KeyRangeLayout, Replace, TableSink
from deltamv.delta import layout as layout_module
from deltamv.delta._zset import consolidate
from deltamv.delta.layout import _cuts, run_starts
from deltamv.errors import DeltaMVError, StateError

from ._tables import current_files

_T0 = dt.datetime(2024, 1, 1, 0, 0, 0, 500, tzinfo=dt.UTC)


def test_cuts_fill_files_or_share_rows_evenly_between_keys() -> None:
    distinct = np.arange(10)
    assert _cuts(distinct, 10, 4, fill=True) == [4, 8, 10]
    assert _cuts(distinct, 10, 4, fill=False) == [4, 7, 10]
    # keys in runs of two: cuts move to the nearest key boundary within the target
    assert _cuts(np.array([0, 2, 4, 6, 8]), 10, 6, fill=True) == [6, 10]
    assert _cuts(np.array([0, 2, 4, 6, 8]), 10, 6, fill=False) == [4, 10]
    assert _cuts(np.array([0, 3, 6, 7]), 10, 5, fill=False) == [3, 7, 10]
    # one key of 9 rows is more than a file holds: it alone is cut at the target
    assert _cuts(np.array([0, 1, 10]), 12, 4, fill=True) == [1, 5, 9, 12]


def test_run_starts_count_nulls_and_nans_as_one_key_each() -> None:
    keys = pa.array([None, None, float("nan"), float("nan"), -0.0, 0.0, 1.0, 1.0])
    assert run_starts(keys).tolist() == [0, 2, 4, 6]
    assert run_starts(pa.array(["a", "a", "b"])).tolist() == [0, 2]
    assert run_starts(pa.array([], pa.int64())).tolist() == []


@pytest.mark.parametrize(
    "key",
    [
        pa.array([3, None, 1, 2, 2, None, 7, 5], pa.int64()),
        pa.array(["b", None, "x" * 40 + "b", "x" * 40 + "a", "", "a", None, "c"]),
        pa.array([float("nan"), None, -1.5, 0.0, -0.0, float("inf"), float("nan"), 2.0]),
        pa.array(
            [_T0 + dt.timedelta(microseconds=i) for i in (5, 1, 0, 3, 3, 2, 9, 7)],
            pa.timestamp("us", tz="UTC"),
        ),
    ],
)
def test_batches_sorted_by_duckdb_give_the_files_an_in_memory_sort_gives(key: pa.Array) -> None:
    rows = pa.table({"k": key, "n": pa.array(np.arange(len(key)))})
    layout = KeyRangeLayout(rows.schema, ["k"], target_file_rows=3)

    in_memory = list(layout.arrange(rows))
    streamed = list(layout.arrange(iter(rows.to_batches(max_chunksize=2))))

    def keys(files: list[pa.Table]) -> list[list[str]]:
        # -0.0 and 0.0 are one key: their order within the run is the sort's to choose
        return [
            [repr(v + 0.0 if isinstance(v, float) else v) for v in f["k"].to_pylist()]
            for f in files
        ]

    def signed(files: list[pa.Table]) -> list[list[str]]:
        return [sorted(repr(v) for v in f["k"].to_pylist()) for f in files]

    assert keys(streamed) == keys(in_memory)
    assert signed(streamed) == signed(in_memory)
    assert sum(f.num_rows for f in streamed) == len(key)
    if key.null_count:
        assert in_memory[0]["k"][0].as_py() is None  # NULLs first


def _table_with_files(path: str, key: pa.Array, target: int = 3) -> KeyRangeLayout:
    rows = pa.table({"k": key})
    sink = TableSink(
        path, rows.schema, layout=["k"], app_id="a", metadata={}, target_file_rows=target
    )
    sink.commit(1, Replace(rows), metadata={}, expected_version=None)
    return sink.layout


def _true_ranges(path: str) -> list[tuple[object, object]]:
    out = []
    for f in current_files(path):
        values = f["k"].to_pylist()
        present = sorted(v for v in values if v is not None)
        out.append((None if None in values else present[0], present[-1] if present else None))
    return sorted(out, key=repr)


def _ranges(layout: KeyRangeLayout, path: str) -> list[tuple[object, object]]:
    fresh = DeltaTableHandle(path)  # nothing cached: as a restarted job
    return sorted(
        (tuple(r.bounds.to_pylist()) for r in layout.file_ranges(fresh)),  # type: ignore[misc]
        key=repr,
    )


def _forbid(monkeypatch, *names: str) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        monkeypatch.setattr(
            layout_module.KeyRangeLayout,
            name,
            lambda *a, _name=name, **k: pytest.fail(f"{_name} was called"),
        )


def test_integer_ranges_come_from_the_statistics_without_reading_files(
    tmp_path, monkeypatch
) -> None:
    path = str(tmp_path / "t")
    layout = _table_with_files(path, pa.array([4, None, 9, 1, 2, 8, 2**40, -3], pa.int64()))
    _forbid(monkeypatch, "_footer_bounds", "_read_bounds")
    assert _ranges(layout, path) == _true_ranges(path)


def test_long_string_ranges_come_from_the_parquet_footers(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "t")
    long = "p" * 40
    layout = _table_with_files(path, pa.array([f"{long}{i}" for i in range(7)] + [None]))
    _forbid(monkeypatch, "_read_bounds")
    assert _ranges(layout, path) == _true_ranges(path)


def test_timestamp_ranges_come_from_the_parquet_footers(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "t")
    stamps = [_T0 + dt.timedelta(microseconds=i) for i in range(7)]
    layout = _table_with_files(path, pa.array(stamps, pa.timestamp("us", tz="UTC")))
    _forbid(monkeypatch, "_read_bounds")
    assert _ranges(layout, path) == _true_ranges(path)


def test_ranges_without_usable_statistics_are_read_from_the_key_column(tmp_path) -> None:
    path = str(tmp_path / "t")
    huge = "h" * 5000  # Parquet writers keep no statistics for values this long
    layout = _table_with_files(path, pa.array([huge + "b", None, huge + "a", "a", huge]))
    assert _ranges(layout, path) == _true_ranges(path)
    path = str(tmp_path / "d")
    layout = _table_with_files(path, pa.array([float("nan"), 1.0, None, -2.0, 3.0]))
    # in key order: NULL, NaN, -2.0 | 1.0, 3.0 (Parquet statistics would miss the NaN)
    got = _ranges(layout, path)
    assert [tuple(repr(v) for v in r) for r in got] == [("1.0", "3.0"), ("None", "-2.0")]


def test_ranges_of_files_another_engine_wrote(tmp_path) -> None:
    path = str(tmp_path / "t")
    for part in ([5, 1, 9], [None, 4], [7]):
        write_deltalake(path, pa.table({"k": pa.array(part, pa.int64())}), mode="append")
    layout = KeyRangeLayout(pa.schema([("k", pa.int64())]), ["k"])
    assert _ranges(layout, path) == _true_ranges(path)


def test_routing_keys_between_before_and_after_the_ranges(tmp_path) -> None:
    schema = pa.schema([("k", pa.int64())])
    path = str(tmp_path / "t")
    layout = _table_with_files(path, pa.array([10, 11, 12, 20, 21, 22, 30, 31, 32], pa.int64()))
    ranges = layout.file_ranges(DeltaTableHandle(path))
    assert [r.bounds.to_pylist() for r in ranges] == [[10, 12], [20, 22], [30, 32]]

    def targets(keys: list[int], weight: int = 1) -> list[tuple[list[int], list[int]]]:
        rows = pa.table({"k": pa.array(keys, pa.int64()), "__w": [weight] * len(keys)})
        jobs = layout.plan(ranges, consolidate(rows, schema), table="t")
        return [
            ([r.bounds[0].as_py() for r in j.files], sorted(j.change.rows["k"].to_pylist()))
            for j in jobs
        ]

    assert targets([5]) == [([10], [5])]  # below every range: the first file
    assert targets([15, 25]) == [([10], [15]), ([20], [25])]  # a gap: the file before it
    assert targets([40, 41]) == [([30], [40, 41])]  # beyond: the last file
    assert targets([20, 12]) == [([10], [12]), ([20], [20])]
    assert targets([11], -1) == [([10], [11])]
    with pytest.raises(StateError, match=r"\{\"k\": 15\}"):
        targets([15], -1)
    only = layout.plan(
        ranges,
        consolidate(pa.table({"k": pa.array([40], pa.int64()), "__w": [1]}), schema),
        table="t",
    )
    assert only[0].fill  # an append at the end fills files greedily
    middle = layout.plan(
        ranges,
        consolidate(pa.table({"k": pa.array([31], pa.int64()), "__w": [1]}), schema),
        table="t",
    )
    assert not middle[0].fill


def test_a_removed_key_held_by_several_files_rewrites_them_together(tmp_path) -> None:
    schema = pa.schema([("k", pa.int64())])
    path = str(tmp_path / "t")
    layout = _table_with_files(path, pa.array([1, 5, 5, 5, 5, 5, 5, 5, 9], pa.int64()))
    ranges = layout.file_ranges(DeltaTableHandle(path))
    assert [r.bounds.to_pylist() for r in ranges] == [[1, 1], [5, 5], [5, 5], [5, 9]]
    rows = pa.table({"k": pa.array([5], pa.int64()), "__w": [-1]})
    jobs = layout.plan(ranges, consolidate(rows, schema), table="t")
    assert [[r.bounds.to_pylist() for r in j.files] for j in jobs] == [[[5, 5], [5, 5], [5, 9]]]


def test_a_layout_needs_ordered_columns_of_the_schema() -> None:
    schema = pa.schema([("k", pa.int64()), ("l", pa.list_(pa.int64()))])
    with pytest.raises(DeltaMVError, match="not a column"):
        KeyRangeLayout(schema, ["x"])
    with pytest.raises(DeltaMVError, match="has no order"):
        KeyRangeLayout(schema, ["l"])
    with pytest.raises(ValueError, match="non-empty list"):
        KeyRangeLayout(schema, [])
    with pytest.raises(ValueError, match="non-empty list"):
        KeyRangeLayout(schema, "k")
    with pytest.raises(ValueError, match="target_file_rows"):
        KeyRangeLayout(schema, ["k"], target_file_rows=0)


def test_files_are_written_sorted_by_every_layout_column(tmp_path) -> None:
    path = str(tmp_path / "t")
    rows = pa.table({"a": [2, 1, 2, 1, None], "b": ["z", "y", "a", None, "q"]})
    sink = TableSink(path, rows.schema, layout=["a", "b"], app_id="a", metadata={})
    sink.commit(1, Replace(rows), metadata={}, expected_version=None)
    (only,) = current_files(path)
    assert only.to_pylist() == [
        {"a": None, "b": "q"},
        {"a": 1, "b": None},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "a"},
        {"a": 2, "b": "z"},
    ]
