"""Rows kept by key: lookups through indexes, NULL keys, null-safe lookups, scans."""

from __future__ import annotations

import math
import sqlite3

import pyarrow as pa
import pytest

from deltamv.state import keyed as keyed_module
from deltamv.state.codec import normalise_floats
from deltamv.state.keyed import KEY, ROWID, KeyedTable, Mirror, mirror_schema

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("v", pa.float64())])
ROWS = pa.table(
    {"a": [1, 1, 2, None, None, 3], "b": ["x", "y", "x", "x", None, None],
     "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]},
    schema=SCHEMA,
)  # fmt: skip


@pytest.fixture
def table() -> KeyedTable:
    keyed = KeyedTable(sqlite3.connect(":memory:"), "t", SCHEMA, indexes=[["a", "b"], ["a"]])
    keyed.insert(ROWS)
    return keyed


def keys(**columns: list[object]) -> pa.Table:
    return pa.table({n: pa.array(v, SCHEMA.field(n).type) for n, v in columns.items()})


def values(found: pa.Table) -> list[float]:
    return sorted(found.column("v").to_pylist())


def test_lookup_finds_the_rows_with_equal_keys_once_per_row(table: KeyedTable) -> None:
    found = table.lookup(["a"], keys(a=[1, 1, 2, 7]))  # a key given twice matches once
    assert values(found) == [1.0, 2.0, 3.0]
    assert found.schema.names == [ROWID, *SCHEMA.names]
    assert values(table.lookup(["a", "b"], keys(a=[1, 2], b=["y", "y"]))) == [2.0]


def test_null_keys_match_nothing_unless_null_safe(table: KeyedTable) -> None:
    probe = keys(a=[None, None, 3], b=["x", None, None])
    assert values(table.lookup(["a", "b"], probe)) == []
    assert values(table.lookup(["a", "b"], probe, null_safe=True)) == [4.0, 5.0, 6.0]
    assert values(table.lookup(["a"], keys(a=[None]), null_safe=True)) == [4.0, 5.0]
    assert table.lookup(["a"], keys(a=[])).num_rows == 0


def test_rows_are_deleted_by_the_rowid_a_lookup_gives(table: KeyedTable) -> None:
    found = table.lookup(["a"], keys(a=[1]))
    table.delete(found.column(ROWID).to_pylist())
    assert table.count() == 4
    assert table.lookup(["a"], keys(a=[1])).num_rows == 0


def test_float_keys_are_found_by_their_normalised_bits() -> None:
    schema = pa.schema([("f", pa.float64()), ("n", pa.int64())])
    keyed = KeyedTable(sqlite3.connect(":memory:"), "f", schema, indexes=[["f"]])
    keyed.insert(
        normalise_floats(pa.table({"f": [0.0, math.nan], "n": [1, 2]}, schema=schema), ["f"])
    )
    probe = normalise_floats(pa.table({"f": [-0.0, -math.nan]}), ["f"])
    assert sorted(keyed.lookup(["f"], probe).column("n").to_pylist()) == [1, 2]


def test_counts_are_of_the_keys_a_lookup_finds_rows_for_up_to_a_limit(table: KeyedTable) -> None:
    def counted(columns: list[str], probe: pa.Table, **kwargs: object) -> set[tuple]:
        found = table.counts(columns, probe, **kwargs)  # type: ignore[arg-type]
        rows = [tuple(r.values()) for r in found.to_pylist()]
        assert len(set(rows)) == len(rows)  # distinct
        return set(rows)

    assert counted(["a"], keys(a=[1, 2, 7, 1])) == {(1, 1), (2, 1)}  # one entry a key
    assert counted(["a"], keys(a=[1, 2, 7]), upto=3) == {(1, 2), (2, 1)}
    probe = keys(a=[None, None, 3, 1], b=["x", None, None, "y"])
    assert counted(["a", "b"], probe, upto=9) == {(1, "y", 1)}  # NULL matches nothing
    assert counted(["a", "b"], probe, null_safe=[True, False], upto=9) == {
        (1, "y", 1), (None, "x", 1)}  # fmt: skip
    assert counted(["a", "b"], probe, null_safe=True, upto=9) == {
        (1, "y", 1), (3, None, 1), (None, None, 1), (None, "x", 1)}  # fmt: skip
    assert counted(["a"], keys(a=[None]), null_safe=True, upto=9) == {(None, 2)}
    assert table.counts(["a"], keys(a=[])).schema.names == ["a", "count"]


def test_a_float_keys_zeros_and_nans_are_counted_together() -> None:
    schema = pa.schema([("f", pa.float64()), ("n", pa.int64())])
    keyed = KeyedTable(sqlite3.connect(":memory:"), "f", schema, indexes=[["f"]])
    stored = [0.0, -0.0, -0.0, math.nan, -math.nan, 1.5]  # kept with their own bits
    keyed.insert(pa.table({"f": stored, "n": range(6)}, schema=schema))
    found = keyed.counts(["f"], pa.table({"f": [-0.0, math.nan, 2.5]}), upto=9)
    f, n = found.column("f").to_pylist(), found.column("count").to_pylist()
    counts = {("nan" if math.isnan(v) else v): c for v, c in zip(f, n, strict=True)}
    assert counts == {0.0: 3, "nan": 2}
    assert math.copysign(1.0, found.column("f").to_pylist()[0] or 1.0) == 1.0  # 0.0, not -0.0
    capped = keyed.counts(["f"], pa.table({"f": [0.0]}), upto=2)
    assert 2 <= capped.column("count")[0].as_py() <= 3  # each zero's count is capped apart


def test_scan_reads_every_row_in_bounded_chunks(table: KeyedTable) -> None:
    parts = list(table.scan(batch_rows=4))
    assert [p.num_rows for p in parts] == [4, 2]
    assert pa.concat_tables(parts).equals(ROWS)
    with_ids = pa.concat_tables(table.scan(with_rowid=True))
    assert with_ids.schema.names == [ROWID, *SCHEMA.names]
    table.clear()
    assert list(table.scan()) == []


def test_a_table_and_its_indexes_are_created_once(table: KeyedTable) -> None:
    again = KeyedTable(table.db, "t", SCHEMA, indexes=[["a", "b"], ["b"]])
    assert again.count() == ROWS.num_rows
    again.drop()
    assert KeyedTable(table.db, "t", SCHEMA).count() == 0


def test_a_mirror_is_its_table_with_the_row_key_first_all_nullable() -> None:
    columns = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", columns, ["id"])
    assert mirror.schema == mirror_schema(columns)
    assert mirror.schema.names == [KEY, "id", "name"]
    assert all(f.nullable for f in mirror.schema)
    mirror.insert(pa.table({KEY: ["accounts/1", None], "id": [1, 2], "name": ["a", "b"]}))
    by_key = mirror.lookup([KEY], pa.table({KEY: ["accounts/1"]}))
    by_pk = mirror.lookup(["id"], pa.table({"id": [2]}))  # a snapshot row without a key
    assert by_key.column("name").to_pylist() == ["a"]
    assert by_pk.column("name").to_pylist() == ["b"]


def test_float_keys_are_found_by_sql_equality_whatever_bits_the_rows_hold() -> None:
    """A mirror keeps a row's values as they came (-0.0, a negative NaN); a lookup by a
    join key matches as Spark's join does: -0.0 = 0.0 and NaN = NaN."""
    schema = pa.schema([("f", pa.float64()), ("n", pa.int64())])
    keyed = KeyedTable(sqlite3.connect(":memory:"), "f", schema, indexes=[["f"]])
    negative_nan = -math.nan
    assert math.copysign(1.0, negative_nan) == -1.0
    keyed.insert(pa.table({"f": [0.0, -0.0, math.nan, negative_nan, 1.0, None],
                           "n": [1, 2, 3, 4, 5, 6]}, schema=schema))  # fmt: skip

    def found(*probe: float | None) -> list[int]:
        got = keyed.lookup(["f"], pa.table({"f": pa.array(probe, pa.float64())}))
        return sorted(got.column("n").to_pylist())

    assert found(0.0) == found(-0.0) == [1, 2]
    assert found(math.nan) == found(negative_nan) == [3, 4]
    assert found(-0.0, 0.0, 1.0) == [1, 2, 5]  # each row once
    assert found(None) == []


def _indexes(table: KeyedTable) -> list[tuple[str, str]]:
    return table.db.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? ORDER BY name",
        [table.name],
    ).fetchall()


def _many(n: int, *, above: int = 0, repeat: int | None = None) -> pa.Table:
    """``n`` rows, ``a`` from ``above + n - 1`` down to ``above`` (``repeat``: one ``a``
    held twice)."""
    a = list(range(above + n - 1, above - 1, -1))
    if repeat is not None:
        a[-1] = repeat
    return pa.table({"a": a, "b": [f"b{i % 7}" for i in a], "v": [float(i) for i in a]},
                    schema=SCHEMA)  # fmt: skip


def test_a_large_insert_into_an_empty_table_builds_its_indexes_after_the_rows() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    table = KeyedTable(db, "t", SCHEMA, indexes=[["a", "b"], ["b"]])
    table.ensure_index(["a"], unique=True)
    made = _indexes(table)
    n = keyed_module._INDEXES_AFTER
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    table.insert(_many(n))
    dropped = [s for s in statements if s.startswith("DROP INDEX")]
    created = [s for s in statements if s.startswith("CREATE")]
    assert len(dropped) == len(created) == len(made) == 3
    assert statements.index(created[0]) > max(i for i, s in enumerate(statements) if "INSERT" in s)
    assert _indexes(table) == made
    assert values(table.lookup(["a"], keys(a=[5, n - 1]))) == [5.0, float(n - 1)]
    statements.clear()
    table.insert(_many(n, above=n))  # (not empty: the indexes are kept up)
    assert not [s for s in statements if "INDEX" in s]


def test_a_unique_index_built_after_the_rows_refuses_a_value_held_twice() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    table = KeyedTable(db, "t", SCHEMA, indexes=[["b"]])
    table.ensure_index(["a"], unique=True)
    made = _indexes(table)
    db.execute("BEGIN")
    with pytest.raises(sqlite3.IntegrityError):
        table.insert(_many(keyed_module._INDEXES_AFTER, repeat=3))
    assert table.repeated(["a"]).to_pylist() == [{"a": 3}]
    db.execute("ROLLBACK")  # (as the batch's transaction is): the indexes are back
    assert _indexes(table) == made and table.is_empty()
    assert table.repeated(["a"]).num_rows == 0


def test_rows_inserted_in_parts_are_indexed_once_at_the_end() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    table = KeyedTable(db, "t", SCHEMA, indexes=[["a"]])
    made = _indexes(table)
    with table.indexes_after():
        table.insert(ROWS.slice(0, 3))
        assert _indexes(table) == []
        table.insert(ROWS.slice(3))
    assert _indexes(table) == made
    assert values(table.lookup(["a"], keys(a=[1]))) == [1.0, 2.0]


def test_top_gives_a_partitions_first_rows_in_order_with_every_row_tied_with_the_last() -> None:
    """The first rows of a partition (NULL matching NULL) in the order asked, through an
    index in that order (a descending column), and every row tied with the last one."""
    schema = pa.schema([("p", pa.string()), ("s", pa.int64()), ("id", pa.int64())])
    keyed = KeyedTable(sqlite3.connect(":memory:"), "t", schema,
                       indexes=[["p", keyed_module.descending("s"), "id"]])  # fmt: skip
    keyed.insert(pa.table(
        {"p": ["a", "a", "a", "a", "a", "b", None, None],
         "s": [5, 9, 5, None, 5, 9, 1, 2],
         "id": [1, 2, 3, 4, 5, 6, 7, 8]}, schema=schema))  # fmt: skip
    plan = keyed.db.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM t WHERE p = 'a' ORDER BY s DESC NULLS LAST, id LIMIT 2"
    ).fetchall()
    assert "TEMP B-TREE" not in str(plan)  # (read from the index, not sorted)

    def top(p: str | None, order: list[tuple[str, bool, bool]], limit: int) -> list[int]:
        key = pa.table({"p": pa.array([p], pa.string())})
        return sorted(keyed.top(["p"], key, [limit], order, ties=True).column("id").to_pylist())

    by_score = [("s", True, False)]  # s DESC NULLS LAST
    assert top("a", by_score, 1) == [2]
    assert top("a", by_score, 2) == [1, 2, 3, 5]  # the three tied at 5
    assert top("a", [*by_score, ("id", False, True)], 2) == [1, 2]  # no tie: two rows
    assert top("a", [("s", False, True)], 1) == [4]  # s ASC NULLS FIRST
    assert top("a", by_score, 9) == [1, 2, 3, 4, 5]  # a limit past its rows: all
    assert top(None, [("s", False, False)], 1) == [7]
    assert top("c", by_score, 3) == []
    assert top("a", by_score, 0) == []
    # several partitions at once, a limit each; without ties, the first rows alone
    several = pa.table({"p": pa.array(["b", "a", None], pa.string())})
    found = keyed.top(["p"], several, [1, 2, 5], [*by_score, ("id", True, False)], ties=False)
    assert sorted(found.column("id").to_pylist()) == [2, 5, 6, 7, 8]
